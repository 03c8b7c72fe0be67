// TensorDataset, Subset, and the samplers.
#include "kiln/data/dataset.h"

#include "kiln/data/sampler.h"
#include "kiln/error.h"
#include "kiln/random.h"

namespace kiln::data {

TensorDataset::TensorDataset(std::vector<Tensor> tensors) : tensors_(std::move(tensors)) {
  KILN_CHECK(!tensors_.empty(), "[TensorDataset] needs at least one tensor");
  for (size_t i = 0; i < tensors_.size(); ++i) {
    KILN_CHECK(tensors_[i].defined(), "[TensorDataset] tensor ", i, " is undefined");
    KILN_CHECK(tensors_[i].dim() >= 1, "[TensorDataset] tensor ", i,
               " is 0-d; every tensor needs a first (example) dimension");
  }
  size_ = tensors_[0].size(0);
  for (size_t i = 1; i < tensors_.size(); ++i) {
    if (tensors_[i].size(0) == size_) continue;
    std::vector<std::string> shapes;
    for (const Tensor& t : tensors_) shapes.push_back(str(t.shape()));
    throw_error(
        str("[TensorDataset] all tensors must have the same first dimension; got shapes ", shapes));
  }
}

Example TensorDataset::get(int64_t index) const {
  KILN_CHECK(index >= 0 && index < size_, "[TensorDataset] index ", index,
             " is out of range for a dataset of size ", size_);
  Example ex;
  ex.reserve(tensors_.size());
  for (const Tensor& t : tensors_) ex.push_back(t.select(0, index));
  return ex;
}

Subset::Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices)
    : dataset_(std::move(dataset)), indices_(std::move(indices)) {
  KILN_CHECK(dataset_ != nullptr, "[Subset] dataset is null");
  int64_t n = dataset_->size();
  for (size_t i = 0; i < indices_.size(); ++i)
    KILN_CHECK(indices_[i] >= 0 && indices_[i] < n, "[Subset] index ", indices_[i], " (position ",
               i, ") is out of range for a dataset of size ", n);
}

Example Subset::get(int64_t index) const {
  KILN_CHECK(index >= 0 && index < size(), "[Subset] index ", index,
             " is out of range for a subset of size ", size());
  return dataset_->get(indices_[static_cast<size_t>(index)]);
}

// ---------------- samplers ----------------

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  KILN_CHECK(n >= 0, "[SequentialSampler] size must be >= 0, got ", n);
}

std::vector<int64_t> SequentialSampler::indices() const {
  std::vector<int64_t> out(static_cast<size_t>(n_));
  for (int64_t i = 0; i < n_; ++i) out[static_cast<size_t>(i)] = i;
  return out;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  KILN_CHECK(n >= 0, "[RandomSampler] size must be >= 0, got ", n);
}

std::vector<int64_t> RandomSampler::indices() const {
  return random_permutation(n_, seed_, epoch_);
}

std::vector<int64_t> random_permutation(int64_t n, uint64_t seed, uint64_t epoch) {
  KILN_CHECK(n >= 0, "[random_permutation] size must be >= 0, got ", n);
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = i;
  // Fisher-Yates; step i draws 64 bits from Philox counter (i, epoch) so the
  // permutation is a pure function of (seed, epoch, n).
  for (int64_t i = n - 1; i > 0; --i) {
    auto r = philox4x32(static_cast<uint64_t>(i), epoch, seed);
    uint64_t bits = (static_cast<uint64_t>(r[0]) << 32) | r[1];
    // Multiply-shift maps 64 bits onto [0, i]; the bias (< i / 2^64) is negligible.
    auto j = static_cast<int64_t>(
        (static_cast<unsigned __int128>(bits) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(j)]);
  }
  return p;
}

}  // namespace kiln::data
