// MultiheadAttention, following torch.nn.functional.multi_head_attention_forward.
#include "kiln/nn/attention.h"

#include <cmath>
#include <limits>

#include "kiln/autograd.h"
#include "kiln/functional.h"
#include "kiln/nn/init.h"

namespace kiln::nn {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A bool mask (true = masked) as an additive float mask of `dtype`.
Tensor additive(const Tensor& mask, DType dtype) {
  if (mask.dtype() == DType::b8)
    return masked_fill(zeros(mask.shape(), dtype, mask.device()), mask, -kInf);
  KILN_CHECK(is_floating(mask.dtype()), "[MultiheadAttention] masks must be bool or floating, got ",
             mask.dtype());
  return cast(mask, dtype);
}

}  // namespace

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads,
                                       MultiheadAttentionOptions options)
    : embed_dim_(embed_dim),
      num_heads_(num_heads),
      kdim_(options.kdim == 0 ? embed_dim : options.kdim),
      vdim_(options.vdim == 0 ? embed_dim : options.vdim),
      opts_(options) {
  KILN_CHECK(embed_dim > 0 && num_heads > 0,
             "[MultiheadAttention] embed_dim and num_heads must be positive, got ", embed_dim,
             " and ", num_heads);
  KILN_CHECK(embed_dim % num_heads == 0, "[MultiheadAttention] embed_dim (", embed_dim,
             ") must be divisible by num_heads (", num_heads, ")");
  KILN_CHECK(opts_.dropout >= 0.0 && opts_.dropout <= 1.0,
             "[MultiheadAttention] dropout must be in [0, 1], got ", opts_.dropout);
  KILN_CHECK(opts_.kdim >= 0 && opts_.vdim >= 0,
             "[MultiheadAttention] kdim and vdim must be positive (or 0: embed_dim), got ",
             opts_.kdim, " and ", opts_.vdim);
  const int64_t E = embed_dim;
  // PyTorch's registration order, hence its state_dict order.
  if (opts_.separate_projections || kdim_ != E || vdim_ != E) {
    register_parameter("q_proj_weight", q_proj_weight, empty({E, E}));
    register_parameter("k_proj_weight", k_proj_weight, empty({E, kdim_}));
    register_parameter("v_proj_weight", v_proj_weight, empty({E, vdim_}));
  } else {
    register_parameter("in_proj_weight", in_proj_weight, empty({3 * E, E}));
  }
  register_parameter("in_proj_bias", in_proj_bias, opts_.bias ? empty({3 * E}) : Tensor());
  out_proj = register_module("out_proj", std::make_shared<Linear>(E, E, opts_.bias));
  reset_parameters();
}

void MultiheadAttention::reset_parameters() {
  for (Tensor* w : {&in_proj_weight, &q_proj_weight, &k_proj_weight, &v_proj_weight})
    if (w->defined()) init::xavier_uniform_(*w);
  if (in_proj_bias.defined()) init::zeros_(in_proj_bias);
  if (out_proj->bias.defined()) init::zeros_(out_proj->bias);
}

Tensor MultiheadAttention::forward(const Tensor& x) {
  return std::get<0>(forward(x, x, x));
}

Tensor MultiheadAttention::forward_args(const std::vector<Tensor>& args) {
  KILN_CHECK(args.size() == 1 || (args.size() >= 3 && args.size() <= 5),
             "[MultiheadAttention] forward_args takes (x) or (query, key, value[, attn_mask[, "
             "key_padding_mask]]), got ",
             args.size(), " tensors");
  if (args.size() == 1) return forward(args[0]);
  const Tensor none;
  return std::get<0>(forward(args[0], args[1], args[2], args.size() > 3 ? args[3] : none,
                             args.size() > 4 ? args[4] : none));
}

Tensor MultiheadAttention::proj_weight(int64_t i) const {
  if (separate_projections())
    return i == 0 ? q_proj_weight : i == 1 ? k_proj_weight : v_proj_weight;
  return narrow(in_proj_weight, 0, i * embed_dim_, embed_dim_);
}

void MultiheadAttention::load_projections(const Tensor& q_weight, const Tensor& k_weight,
                                          const Tensor& v_weight, const Tensor& q_bias,
                                          const Tensor& k_bias, const Tensor& v_bias) {
  const char* op = "[MultiheadAttention] load_projections:";
  const int64_t E = embed_dim_;
  const Tensor* w[3] = {&q_weight, &k_weight, &v_weight};
  const Tensor* b[3] = {&q_bias, &k_bias, &v_bias};
  const int64_t in[3] = {E, kdim_, vdim_};
  const char* names[3] = {"q", "k", "v"};
  const bool biases = q_bias.defined() || k_bias.defined() || v_bias.defined();
  for (int i = 0; i < 3; ++i) {
    KILN_CHECK(w[i]->defined() && w[i]->shape() == Dims({E, in[i]}), op, " the ", names[i],
               " weight must have shape ", Dims({E, in[i]}), ", got ",
               w[i]->defined() ? w[i]->shape() : Dims{});
    if (!biases) continue;
    KILN_CHECK(b[i]->defined() && b[i]->shape() == Dims({E}), op, " the ", names[i],
               " bias must have shape ", Dims({E}), " (biases are all given or none), got ",
               b[i]->defined() ? b[i]->shape() : Dims{});
  }
  KILN_CHECK(!biases || in_proj_bias.defined(), op,
             " biases given but the module was built with bias = false");
  NoGradGuard ng;  // views of the parameters: copy_ writes them in place
  for (int i = 0; i < 3; ++i) {
    proj_weight(i).copy_(*w[i]);
    if (biases) narrow(in_proj_bias, 0, i * E, E).copy_(*b[i]);
  }
}

std::tuple<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query, const Tensor& key,
                                                       const Tensor& value, const Tensor& attn_mask,
                                                       const Tensor& key_padding_mask,
                                                       bool need_weights, bool average_attn_weights,
                                                       bool is_causal) {
  const char* op = "[MultiheadAttention]";
  const int64_t E = embed_dim_, H = num_heads_, D = E / H;
  KILN_CHECK((query.dim() == 3 || query.dim() == 2) && key.dim() == query.dim() &&
                 value.dim() == query.dim(),
             op, " query, key and value must all be 3-D (batched) or 2-D (unbatched), got shapes ",
             query.shape(), ", ", key.shape(), " and ", value.shape());
  KILN_CHECK(query.size(-1) == E && key.size(-1) == kdim_ && value.size(-1) == vdim_, op,
             " query, key and value must end with embed_dim = ", E, ", kdim = ", kdim_,
             " and vdim = ", vdim_, ", got shapes ", query.shape(), ", ", key.shape(), " and ",
             value.shape());
  KILN_CHECK(is_floating(query.dtype()), op, " expected a floating query, got ", query.dtype());
  const bool batched = query.dim() == 3;
  // Work in [B, L, E].
  auto to_blE = [&](const Tensor& t) {
    if (!batched) return unsqueeze(t, 0);
    return opts_.batch_first ? t : transpose(t, 0, 1);
  };
  Tensor q_in = to_blE(query), k_in = to_blE(key), v_in = to_blE(value);
  const int64_t B = q_in.size(0), L = q_in.size(1), S = k_in.size(1);
  KILN_CHECK(k_in.size(0) == B && v_in.size(0) == B, op,
             " query, key and value must have the same batch size, got shapes ", query.shape(),
             ", ", key.shape(), " and ", value.shape());
  KILN_CHECK(v_in.size(1) == S, op, " key shape ", key.shape(), " and value shape ", value.shape(),
             " must have the same sequence length");

  // Projections; one GEMM for self-attention (the same tensor three times).
  Tensor q, k, v;
  const Tensor& b = in_proj_bias;
  if (query.is_same(key) && key.is_same(value) && !separate_projections()) {
    Tensor qkv = linear(q_in, in_proj_weight, b);
    q = narrow(qkv, -1, 0, E), k = narrow(qkv, -1, E, E), v = narrow(qkv, -1, 2 * E, E);
  } else {
    auto w = [&](int64_t i) { return proj_weight(i); };
    auto bb = [&](int64_t i) { return b.defined() ? narrow(b, 0, i * E, E) : Tensor(); };
    q = linear(q_in, w(0), bb(0)), k = linear(k_in, w(1), bb(1)), v = linear(v_in, w(2), bb(2));
  }
  auto heads = [&](const Tensor& t, int64_t len) {
    return transpose(reshape(t, {B, len, H, D}), 1, 2);  // [B, H, len, D]
  };
  q = heads(q, L), k = heads(k, S), v = heads(v, S);

  // One additive mask broadcastable to [B, H, L, S].
  const DType dt = q.dtype();
  Tensor mask;
  if (attn_mask.defined()) {
    KILN_CHECK((attn_mask.dim() == 2 && attn_mask.shape() == Dims{L, S}) ||
                   (attn_mask.dim() == 3 && attn_mask.shape() == Dims{B * H, L, S}),
               op, " attn_mask must have shape ", Dims{L, S}, " or ", Dims{B * H, L, S}, ", got ",
               attn_mask.shape());
    mask = additive(attn_mask, dt);
    if (mask.dim() == 3) mask = reshape(mask, {B, H, L, S});
  } else if (is_causal) {
    mask = additive(triu(ones({L, S}, DType::b8, q.device()), 1), dt);
  }
  if (key_padding_mask.defined()) {
    Dims want = batched ? Dims{B, S} : Dims{S};
    KILN_CHECK(key_padding_mask.shape() == want, op, " key_padding_mask must have shape ", want,
               ", got ", key_padding_mask.shape());
    Tensor kpm = reshape(additive(key_padding_mask, dt), {B, 1, 1, S});
    mask = mask.defined() ? mask + kpm : kpm;
  }

  const double p = is_training() ? opts_.dropout : 0.0;
  Tensor out, weights;
  if (need_weights || p > 0.0) {
    Tensor scores = matmul(q, transpose(k, -2, -1)) * (1.0 / std::sqrt(static_cast<double>(D)));
    if (mask.defined()) scores = scores + mask;
    weights = softmax(scores, -1);
    if (p > 0.0) weights = dropout(weights, p, true);
    out = matmul(weights, v);
  } else {
    out = scaled_dot_product_attention(q, k, v, mask);
  }
  out = reshape(transpose(out, 1, 2), {B, L, E});
  out = out_proj->forward(out);
  if (!batched)
    out = squeeze(out, 0);
  else if (!opts_.batch_first)
    out = transpose(out, 0, 1);
  if (need_weights) {
    if (average_attn_weights) weights = mean(weights, {1});
    if (!batched) weights = squeeze(weights, 0);
  } else {
    weights = Tensor();
  }
  return {out, weights};
}

std::shared_ptr<Module> MultiheadAttention::clone() const {
  auto m = std::make_shared<MultiheadAttention>(embed_dim_, num_heads_, opts_);
  m->copy_state_from(*this);
  return m;
}

}  // namespace kiln::nn
