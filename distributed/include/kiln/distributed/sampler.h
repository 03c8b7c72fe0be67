// DistributedSampler: the share of a dataset that one rank visits each epoch
// (torch.utils.data.distributed.DistributedSampler). Every rank draws the same
// permutation of (seed, epoch), pads it by wrapping around (or drops the tail)
// to a multiple of the number of replicas, and takes every num_replicas-th
// index starting at its rank, so the ranks' shares are disjoint (up to the
// padding) and equally long. Pass it as DataLoaderOptions::sampler; the
// DataLoader calls set_epoch before each epoch, which reshuffles.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/data/sampler.h"

namespace kiln::dist {

/// Options of DistributedSampler (PyTorch's names and defaults).
struct DistributedSamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;       ///< must be the same on every rank
  bool drop_last = false;  ///< drop the tail instead of padding by wrapping
};

/// Shards the indices 0..dataset_size-1 across `num_replicas` ranks.
class DistributedSampler : public data::Sampler {
 public:
  /// Raises kiln::Error if dataset_size < 0, num_replicas < 1 or rank is not in
  /// [0, num_replicas).
  DistributedSampler(int64_t dataset_size, int num_replicas, int rank,
                     DistributedSamplerOptions opts = {});
  /// This rank's indices for the current epoch.
  std::vector<int64_t> indices() const override;
  /// Indices per rank and epoch: ceil(n / replicas), or floor with drop_last.
  int64_t size() const override { return num_samples_; }
  /// num_samples * num_replicas: the padded (or truncated) epoch length.
  int64_t total_size() const { return num_samples_ * num_replicas_; }
  int num_replicas() const { return num_replicas_; }
  int rank() const { return rank_; }

 private:
  int64_t dataset_size_;
  int num_replicas_;
  int rank_;
  DistributedSamplerOptions opts_;
  int64_t num_samples_;
};

}  // namespace kiln::dist
