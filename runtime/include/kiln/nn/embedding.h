// Embedding: a lookup table of learned vectors.
#pragma once

#include <optional>

#include "kiln/nn/module.h"

namespace kiln::nn {

/// Rows of weight [num_embeddings, embedding_dim] picked by integer indices of
/// any shape; weight ~ N(0, 1). The row `padding_idx` (negative counts from the
/// end) starts at zero and receives no gradient.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim,
            std::optional<int64_t> padding_idx = std::nullopt);
  Tensor forward(const Tensor& indices) override;
  void reset_parameters();
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;

  /// The normalised (non-negative) padding index, if any.
  std::optional<int64_t> padding_idx() const { return padding_idx_; }
  Tensor weight;  ///< [num_embeddings, embedding_dim]

 private:
  int64_t num_, dim_;
  std::optional<int64_t> padding_idx_;
};

}  // namespace kiln::nn
