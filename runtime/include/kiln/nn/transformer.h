// Transformer encoder: TransformerEncoderLayer and TransformerEncoder, with
// PyTorch's submodule names so state_dict keys match.
#pragma once

#include <functional>
#include <string>

#include "kiln/nn/activation.h"
#include "kiln/nn/attention.h"
#include "kiln/nn/container.h"
#include "kiln/nn/linear.h"
#include "kiln/nn/norm.h"

namespace kiln::nn {

/// TransformerEncoderLayer hyper-parameters besides d_model and nhead.
struct TransformerEncoderLayerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  std::string activation = "relu";  ///< "relu" or "gelu"
  double layer_norm_eps = 1e-5;
  bool batch_first = true;
  bool norm_first = false;  ///< pre-norm (x + f(norm(x))) instead of post-norm
  bool bias = true;         ///< biases of the linear layers, attention and norms
};

/// Self-attention then a feed-forward block, each with a residual connection:
/// post-norm x = norm1(x + sa(x)); x = norm2(x + ff(x)), or pre-norm
/// x = x + sa(norm1(x)); x = x + ff(norm2(x)), with
/// ff(x) = dropout2(linear2(dropout(act(linear1(x))))) and sa = dropout1(self_attn).
class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead,
                          TransformerEncoderLayerOptions options = {});
  Tensor forward(const Tensor& src) override;
  /// src [B, L, d_model]; masks as MultiheadAttention's attn_mask / key_padding_mask.
  Tensor forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false);
  /// forward_args({src[, src_mask[, src_key_padding_mask]]}).
  Tensor forward_args(const std::vector<Tensor>& args) override;
  std::shared_ptr<Module> clone() const override;

  int64_t d_model() const { return d_model_; }
  int64_t nhead() const { return nhead_; }
  const TransformerEncoderLayerOptions& options() const { return opts_; }
  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1;
  std::shared_ptr<Dropout> dropout;
  std::shared_ptr<Linear> linear2;
  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<Dropout> dropout1, dropout2;

 private:
  Tensor sa_block(const Tensor& x, const Tensor& mask, const Tensor& kpm, bool is_causal);
  Tensor ff_block(const Tensor& x);

  int64_t d_model_, nhead_;
  TransformerEncoderLayerOptions opts_;
};

/// A stack of encoder layers ("layers.0", "layers.1", ...) and an optional
/// final "norm".
class TransformerEncoder : public Module {
 public:
  /// num_layers deep copies of `encoder_layer` (identical initial values, as
  /// PyTorch's deepcopy).
  TransformerEncoder(const std::shared_ptr<TransformerEncoderLayer>& encoder_layer,
                     int64_t num_layers, std::shared_ptr<Module> norm = nullptr);
  /// num_layers layers, each made by `make_layer` (independent initial values).
  TransformerEncoder(const std::function<std::shared_ptr<Module>()>& make_layer, int64_t num_layers,
                     std::shared_ptr<Module> norm = nullptr);
  Tensor forward(const Tensor& src) override;
  /// Runs every layer with the same masks, then the final norm. Layers of
  /// other types get the masks through forward_args({x, mask, padding_mask}).
  Tensor forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false);
  /// forward_args({src[, mask[, src_key_padding_mask]]}).
  Tensor forward_args(const std::vector<Tensor>& args) override;
  std::shared_ptr<Module> clone() const override;

  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<Module> norm;  ///< null without a final norm

 private:
  TransformerEncoder() = default;
};

}  // namespace kiln::nn
