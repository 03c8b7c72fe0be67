// Samplers: the order in which a DataLoader visits dataset indices, one list
// per epoch (torch.utils.data.Sampler). A distributed sampler implements the
// same interface (shard by rank, set_epoch before each epoch).
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::data {

/// Produces the dataset indices of one epoch.
class Sampler {
 public:
  virtual ~Sampler() = default;
  /// Selects the epoch whose order indices() returns (DataLoader calls it before each pass).
  virtual void set_epoch(uint64_t epoch) { epoch_ = epoch; }
  /// The epoch last given to set_epoch (0 initially).
  uint64_t epoch() const { return epoch_; }
  /// The indices of the current epoch, in visiting order.
  virtual std::vector<int64_t> indices() const = 0;
  /// Number of indices per epoch.
  virtual int64_t size() const = 0;

 protected:
  uint64_t epoch_ = 0;
};

/// 0, 1, ..., n-1 every epoch.
class SequentialSampler : public Sampler {
 public:
  /// Raises kiln::Error if n < 0.
  explicit SequentialSampler(int64_t n);
  std::vector<int64_t> indices() const override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};

/// A permutation of 0..n-1 that is a pure function of (seed, epoch): reproducible,
/// independent of the global RNG (manual_seed), different for each epoch.
class RandomSampler : public Sampler {
 public:
  /// Raises kiln::Error if n < 0.
  explicit RandomSampler(int64_t n, uint64_t seed = 0);
  std::vector<int64_t> indices() const override;
  int64_t size() const override { return n_; }
  uint64_t seed() const { return seed_; }

 private:
  int64_t n_;
  uint64_t seed_;
};

/// Fisher-Yates permutation of 0..n-1 driven by Philox keyed by seed, with the
/// epoch in the counter (shared by RandomSampler and the distributed sampler).
std::vector<int64_t> random_permutation(int64_t n, uint64_t seed, uint64_t epoch);

}  // namespace kiln::data
