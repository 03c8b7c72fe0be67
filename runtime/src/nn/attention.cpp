// MultiheadAttention, following torch.nn.functional.multi_head_attention_forward.
#include "kiln/nn/attention.h"

#include <cmath>
#include <limits>

#include "kiln/functional.h"
#include "kiln/nn/init.h"

namespace kiln::nn {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A bool mask (true = masked) as an additive float mask of `dtype`.
Tensor additive(const Tensor& mask, DType dtype) {
  if (mask.dtype() == DType::b8) return masked_fill(zeros(mask.shape(), dtype), mask, -kInf);
  KILN_CHECK(is_floating(mask.dtype()), "[MultiheadAttention] masks must be bool or floating, got ",
             mask.dtype());
  return cast(mask, dtype);
}

}  // namespace

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads,
                                       MultiheadAttentionOptions options)
    : embed_dim_(embed_dim), num_heads_(num_heads), opts_(options) {
  KILN_CHECK(embed_dim > 0 && num_heads > 0,
             "[MultiheadAttention] embed_dim and num_heads must be positive, got ", embed_dim,
             " and ", num_heads);
  KILN_CHECK(embed_dim % num_heads == 0, "[MultiheadAttention] embed_dim (", embed_dim,
             ") must be divisible by num_heads (", num_heads, ")");
  KILN_CHECK(opts_.dropout >= 0.0 && opts_.dropout <= 1.0,
             "[MultiheadAttention] dropout must be in [0, 1], got ", opts_.dropout);
  const int64_t E = embed_dim;
  in_proj_weight = register_parameter("in_proj_weight", empty({3 * E, E}));
  in_proj_bias = register_parameter("in_proj_bias", opts_.bias ? empty({3 * E}) : Tensor());
  out_proj = register_module("out_proj", std::make_shared<Linear>(E, E, opts_.bias));
  reset_parameters();
}

void MultiheadAttention::reset_parameters() {
  init::xavier_uniform_(in_proj_weight);
  if (in_proj_bias.defined()) init::zeros_(in_proj_bias);
  if (out_proj->bias.defined()) init::zeros_(out_proj->bias);
}

Tensor MultiheadAttention::forward(const Tensor& x) {
  return std::get<0>(forward(x, x, x));
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
  KILN_CHECK(query.size(-1) == E && key.size(-1) == E && value.size(-1) == E, op,
             " query, key and value must end with embed_dim = ", E, ", got shapes ", query.shape(),
             ", ", key.shape(), " and ", value.shape());
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
  if (query.is_same(key) && key.is_same(value)) {
    Tensor qkv = linear(q_in, in_proj_weight, b);
    q = narrow(qkv, -1, 0, E), k = narrow(qkv, -1, E, E), v = narrow(qkv, -1, 2 * E, E);
  } else {
    auto w = [&](int64_t i) { return narrow(in_proj_weight, 0, i * E, E); };
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
    mask = additive(triu(ones({L, S}, DType::b8), 1), dt);
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
