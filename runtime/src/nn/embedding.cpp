// Embedding.
#include "kiln/nn/embedding.h"

#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/functional.h"
#include "kiln/nn/init.h"

namespace kiln::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim,
                     std::optional<int64_t> padding_idx)
    : num_(num_embeddings), dim_(embedding_dim), padding_idx_(padding_idx) {
  KILN_CHECK(num_embeddings > 0 && embedding_dim >= 0,
             "[Embedding] num_embeddings must be positive and embedding_dim non-negative, got ",
             num_embeddings, " and ", embedding_dim);
  if (padding_idx_) {
    int64_t p = *padding_idx_;
    KILN_CHECK(p >= -num_embeddings && p < num_embeddings, "[Embedding] padding_idx ", p,
               " must be within num_embeddings = ", num_embeddings);
    if (p < 0) padding_idx_ = p + num_embeddings;
  }
  register_parameter("weight", weight, empty({num_embeddings, embedding_dim}));
  reset_parameters();
}

void Embedding::reset_parameters() {
  init::normal_(weight);
  if (padding_idx_) {
    NoGradGuard ng;
    weight.select(0, *padding_idx_).zero_();
  }
}

Tensor Embedding::forward(const Tensor& indices) {
  KILN_CHECK(is_integral(indices.dtype()), "[Embedding] indices must be an integer tensor, got ",
             indices.dtype());
  // Checked here to name the layer. While tracing there are no values to read
  // (symbolic indices, or captured ones whose reads would be traced): the
  // lookup's own kernel checks them when the compiled function runs.
  if (indices.numel() > 0 && !indices.is_symbolic() && !current_recorder()) {
    Tensor i64 = cast(indices, DType::i64);
    int64_t lo = amin(i64).item<int64_t>(), hi = amax(i64).item<int64_t>();
    KILN_CHECK(lo >= 0 && hi < num_, "[Embedding] index out of range: indices span [", lo, ", ", hi,
               "] but num_embeddings = ", num_, " (weight shape ", weight.shape(), ")");
  }
  Tensor out = embedding(indices, weight);
  if (!padding_idx_) return out;
  // Lookups of the padding row take the detached value: the same numbers, no
  // gradient into that row (PyTorch's embedding_backward skips it).
  Tensor pad = unsqueeze(eq(indices, *padding_idx_), -1);
  return where(pad, out.detach(), out);
}

std::string Embedding::extra_repr() const {
  std::string s = str(num_, ", ", dim_);
  if (padding_idx_) s += str(", padding_idx=", *padding_idx_);
  return s;
}

std::shared_ptr<Module> Embedding::clone() const {
  auto m = std::make_shared<Embedding>(num_, dim_, padding_idx_);
  m->copy_state_from(*this);
  return m;
}

}  // namespace kiln::nn
