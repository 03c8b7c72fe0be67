// Datasets, like torch.utils.data.Dataset: an indexable collection of
// examples, each a small vector of tensors such as {input, target}.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::data {

/// One sample: a list of tensors, e.g. {input, target}.
using Example = std::vector<Tensor>;

/// An indexable dataset. get() must be safe to call from several threads at
/// once (DataLoader workers call it concurrently).
class Dataset {
 public:
  virtual ~Dataset() = default;
  /// Number of examples.
  virtual int64_t size() const = 0;
  /// Example `index` in [0, size()); out-of-range indices raise kiln::Error.
  virtual Example get(int64_t index) const = 0;
};

/// Wraps tensors sharing their first dimension; example i is {t.select(0, i)...}.
class TensorDataset : public Dataset {
 public:
  /// Raises kiln::Error if `tensors` is empty, holds an undefined or 0-d tensor,
  /// or the first dimensions differ.
  explicit TensorDataset(std::vector<Tensor> tensors);
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;
  /// The wrapped tensors.
  const std::vector<Tensor>& tensors() const { return tensors_; }

 private:
  std::vector<Tensor> tensors_;
  int64_t size_ = 0;
};

/// The examples of `dataset` at `indices`, in that order (torch.utils.data.Subset).
class Subset : public Dataset {
 public:
  /// Raises kiln::Error if the dataset is null or an index is out of its range.
  Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices);
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  Example get(int64_t index) const override;
  /// The indices into the underlying dataset.
  const std::vector<int64_t>& indices() const { return indices_; }

 private:
  std::shared_ptr<const Dataset> dataset_;
  std::vector<int64_t> indices_;
};

}  // namespace kiln::data
