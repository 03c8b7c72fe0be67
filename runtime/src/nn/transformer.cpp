// TransformerEncoderLayer and TransformerEncoder.
#include "kiln/nn/transformer.h"

#include <array>

#include "kiln/functional.h"

namespace kiln::nn {

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead,
                                                 TransformerEncoderLayerOptions options)
    : d_model_(d_model), nhead_(nhead), opts_(std::move(options)) {
  KILN_CHECK(opts_.activation == "relu" || opts_.activation == "gelu",
             "[TransformerEncoderLayer] activation should be \"relu\" or \"gelu\", got \"",
             opts_.activation, "\"");
  KILN_CHECK(opts_.dim_feedforward > 0,
             "[TransformerEncoderLayer] dim_feedforward must be positive, got ",
             opts_.dim_feedforward);
  // Registration order = PyTorch's, so state_dict() lists keys in the same order.
  self_attn = register_module(
      "self_attn",
      std::make_shared<MultiheadAttention>(
          d_model, nhead,
          MultiheadAttentionOptions{
              .dropout = opts_.dropout, .bias = opts_.bias, .batch_first = opts_.batch_first}));
  linear1 = register_module("linear1",
                            std::make_shared<Linear>(d_model, opts_.dim_feedforward, opts_.bias));
  dropout = register_module("dropout", std::make_shared<Dropout>(opts_.dropout));
  linear2 = register_module("linear2",
                            std::make_shared<Linear>(opts_.dim_feedforward, d_model, opts_.bias));
  norm1 = register_module(
      "norm1", std::make_shared<LayerNorm>(Dims{d_model}, opts_.layer_norm_eps, true, opts_.bias));
  norm2 = register_module(
      "norm2", std::make_shared<LayerNorm>(Dims{d_model}, opts_.layer_norm_eps, true, opts_.bias));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(opts_.dropout));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(opts_.dropout));
}

Tensor TransformerEncoderLayer::sa_block(const Tensor& x, const Tensor& mask, const Tensor& kpm,
                                         bool is_causal) {
  Tensor y = std::get<0>(self_attn->forward(x, x, x, mask, kpm, false, true, is_causal));
  return dropout1->forward(y);
}

Tensor TransformerEncoderLayer::ff_block(const Tensor& x) {
  Tensor h = linear1->forward(x);
  h = opts_.activation == "gelu" ? gelu(h) : relu(h);
  return dropout2->forward(linear2->forward(dropout->forward(h)));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src) {
  return forward(src, Tensor());
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask,
                                        const Tensor& src_key_padding_mask, bool is_causal) {
  Tensor x = src;
  if (opts_.norm_first) {
    x = x + sa_block(norm1->forward(x), src_mask, src_key_padding_mask, is_causal);
    x = x + ff_block(norm2->forward(x));
  } else {
    x = norm1->forward(x + sa_block(x, src_mask, src_key_padding_mask, is_causal));
    x = norm2->forward(x + ff_block(x));
  }
  return x;
}

std::shared_ptr<Module> TransformerEncoderLayer::clone() const {
  auto m = std::make_shared<TransformerEncoderLayer>(d_model_, nhead_, opts_);
  m->copy_state_from(*this);
  return m;
}

TransformerEncoder::TransformerEncoder(
    const std::shared_ptr<TransformerEncoderLayer>& encoder_layer, int64_t num_layers,
    std::shared_ptr<Module> final_norm) {
  KILN_CHECK(encoder_layer != nullptr, "[TransformerEncoder] encoder_layer is null");
  KILN_CHECK(num_layers >= 0, "[TransformerEncoder] num_layers must be non-negative, got ",
             num_layers);
  layers = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < num_layers; ++i) layers->push_back(encoder_layer->clone());
  if (final_norm) norm = register_module("norm", std::move(final_norm));
}

TransformerEncoder::TransformerEncoder(const std::function<std::shared_ptr<Module>()>& make_layer,
                                       int64_t num_layers, std::shared_ptr<Module> final_norm) {
  KILN_CHECK(num_layers >= 0, "[TransformerEncoder] num_layers must be non-negative, got ",
             num_layers);
  layers = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < num_layers; ++i) {
    std::shared_ptr<Module> l = make_layer();
    KILN_CHECK(l != nullptr, "[TransformerEncoder] the layer factory returned null");
    layers->push_back(l);
  }
  if (final_norm) norm = register_module("norm", std::move(final_norm));
}

Tensor TransformerEncoder::forward(const Tensor& src) {
  return forward(src, Tensor());
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask,
                                   const Tensor& src_key_padding_mask, bool is_causal) {
  Tensor x = src;
  for (const auto& l : *layers) {
    // Layers of another type (from a factory) get the plain forward when no mask is used.
    if (auto enc = std::dynamic_pointer_cast<TransformerEncoderLayer>(l)) {
      x = enc->forward(x, mask, src_key_padding_mask, is_causal);
    } else {
      KILN_CHECK(!is_causal, "[TransformerEncoder] is_causal needs TransformerEncoderLayer ",
                 "layers, got a ", l->name(), " (pass a causal mask instead)");
      x = l->forward_args({x, mask, src_key_padding_mask});
    }
  }
  return norm ? norm->forward(x) : x;
}

namespace {
// (src[, mask[, padding_mask]]) for the forward_args of the encoder and its layer.
std::array<Tensor, 3> encoder_args(const std::vector<Tensor>& args, const std::string& who) {
  KILN_CHECK(args.size() >= 1 && args.size() <= 3, "[", who,
             "] forward_args takes (src[, src_mask[, src_key_padding_mask]]), got ", args.size(),
             " tensors");
  std::array<Tensor, 3> out;
  for (size_t i = 0; i < args.size(); ++i) out[i] = args[i];
  return out;
}
}  // namespace

Tensor TransformerEncoderLayer::forward_args(const std::vector<Tensor>& args) {
  auto [src, mask, kpm] = encoder_args(args, name());
  return forward(src, mask, kpm);
}

Tensor TransformerEncoder::forward_args(const std::vector<Tensor>& args) {
  auto [src, mask, kpm] = encoder_args(args, name());
  return forward(src, mask, kpm);
}

std::shared_ptr<Module> TransformerEncoder::clone() const {
  std::shared_ptr<TransformerEncoder> m(new TransformerEncoder());
  m->train(is_training());
  m->layers = m->register_module("layers", std::static_pointer_cast<ModuleList>(layers->clone()));
  if (norm) m->norm = m->register_module("norm", norm->clone());
  return m;
}

}  // namespace kiln::nn
