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
};

/// Multi-head scaled dot-product attention with PyTorch's packed projection:
/// in_proj_weight [3E, E] (xavier_uniform_), in_proj_bias [3E] (zeros) and
/// out_proj (Linear, bias zeroed), so state_dict keys match PyTorch's.
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
  void reset_parameters();
  std::shared_ptr<Module> clone() const override;

  int64_t embed_dim() const { return embed_dim_; }
  int64_t num_heads() const { return num_heads_; }
  const MultiheadAttentionOptions& options() const { return opts_; }
  Tensor in_proj_weight;  ///< [3E, E]: query, key and value projections stacked
  Tensor in_proj_bias;    ///< [3E], undefined without bias
  std::shared_ptr<Linear> out_proj;

 private:
  int64_t embed_dim_, num_heads_;
  MultiheadAttentionOptions opts_;
};

}  // namespace kiln::nn
