// MultiheadAttention (torch.nn.MultiheadAttention, same parameter names).
#pragma once

#include <tuple>

#include "kiln/nn/linear.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

/// MultiheadAttention hyper-parameters besides embed_dim and num_heads.
struct MultiheadAttentionOptions {
  double dropout = 0.0;     ///< on the attention weights, while training
  bool bias = true;         ///< in_proj_bias and out_proj.bias
  bool batch_first = true;  ///< inputs [B, L, E] (else [L, B, E])
  int64_t kdim = 0;         ///< key features (0: embed_dim)
  int64_t vdim = 0;         ///< value features (0: embed_dim)
  /// q_proj_weight [E, E], k_proj_weight [E, kdim], v_proj_weight [E, vdim]
  /// instead of in_proj_weight: PyTorch's layout when kdim or vdim differs from
  /// embed_dim (then always used), and the state_dict keys it saves.
  bool separate_projections = false;
};

/// Multi-head scaled dot-product attention with PyTorch's parameters, so
/// state_dict keys match PyTorch's: the packed projection in_proj_weight [3E, E]
/// (or the separate q/k/v_proj_weight, see the options; xavier_uniform_),
/// in_proj_bias [3E] (zeros) and out_proj (Linear, bias zeroed).
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options = {});
  /// Self-attention: the output of forward(x, x, x).
  Tensor forward(const Tensor& x) override;
  /// Attention of `query` [B, L, E] over `key`/`value` [B, S, E] (or unbatched
  /// [L, E]). Masks follow PyTorch: attn_mask [L, S] or [B * num_heads, L, S],
  /// bool (true = not allowed) or additive float; key_padding_mask [B, S], bool
  /// (true = ignore) or additive float. is_causal without attn_mask masks the
  /// future. Returns (output [B, L, E], weights): weights are defined only with
  /// need_weights, averaged over heads [B, L, S] or per head [B, H, L, S].
  std::tuple<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                     const Tensor& attn_mask = {},
                                     const Tensor& key_padding_mask = {}, bool need_weights = false,
                                     bool average_attn_weights = true, bool is_causal = false);
  using Module::operator();
  std::tuple<Tensor, Tensor> operator()(const Tensor& query, const Tensor& key, const Tensor& value,
                                        const Tensor& attn_mask = {},
                                        const Tensor& key_padding_mask = {},
                                        bool need_weights = false) {
    return forward(query, key, value, attn_mask, key_padding_mask, need_weights);
  }
  /// forward_args({query, key, value[, attn_mask[, key_padding_mask]]}) or
  /// ({x}): the attention output only, for callers holding a Module pointer.
  Tensor forward_args(const std::vector<Tensor>& args) override;
  /// Copies separately stored projections (Hugging Face checkpoints keep
  /// query/key/value apart: q [E, E], k [E, kdim], v [E, vdim], biases [E])
  /// into this module's layout, packed or separate. Biases are all given or
  /// none (then in_proj_bias is left as is). kiln::Error on shape mismatches.
  void load_projections(const Tensor& q_weight, const Tensor& k_weight, const Tensor& v_weight,
                        const Tensor& q_bias = {}, const Tensor& k_bias = {},
                        const Tensor& v_bias = {});
  void reset_parameters();
  std::shared_ptr<Module> clone() const override;

  /// True when the projections are q/k/v_proj_weight (in_proj_weight undefined).
  bool separate_projections() const { return !in_proj_weight.defined(); }
  int64_t embed_dim() const { return embed_dim_; }
  int64_t num_heads() const { return num_heads_; }
  const MultiheadAttentionOptions& options() const { return opts_; }
  Tensor in_proj_weight;  ///< [3E, E]: query, key and value projections stacked
  Tensor q_proj_weight;   ///< [E, E] in the separate layout (else undefined)
  Tensor k_proj_weight;   ///< [E, kdim] in the separate layout
  Tensor v_proj_weight;   ///< [E, vdim] in the separate layout
  Tensor in_proj_bias;    ///< [3E], undefined without bias
  std::shared_ptr<Linear> out_proj;

 private:
  Tensor proj_weight(int64_t i) const;  // the q (0), k (1) or v (2) projection

  int64_t embed_dim_, num_heads_, kdim_, vdim_;
  MultiheadAttentionOptions opts_;
};

}  // namespace kiln::nn
