// DistributedSampler: one permutation per (seed, epoch), padded or truncated,
// then strided by rank.
#include "kiln/distributed/sampler.h"

#include "kiln/error.h"

namespace kiln::dist {

DistributedSampler::DistributedSampler(int64_t dataset_size, int num_replicas, int rank,
                                       DistributedSamplerOptions opts)
    : dataset_size_(dataset_size), num_replicas_(num_replicas), rank_(rank), opts_(opts) {
  KILN_CHECK(dataset_size >= 0, "[DistributedSampler] dataset size must be >= 0, got ",
             dataset_size);
  KILN_CHECK(num_replicas >= 1, "[DistributedSampler] num_replicas must be >= 1, got ",
             num_replicas);
  KILN_CHECK(rank >= 0 && rank < num_replicas, "[DistributedSampler] rank ", rank,
             " is not in [0, ", num_replicas, ")");
  const int64_t r = num_replicas;
  // drop_last: every rank gets floor(n / r) distinct indices; else ceil(n / r),
  // the last ones repeated from the start of the epoch's order.
  num_samples_ = opts.drop_last ? dataset_size / r : (dataset_size + r - 1) / r;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order;
  if (opts_.shuffle) {
    order = data::random_permutation(dataset_size_, opts_.seed, epoch_);
  } else {
    order.resize(static_cast<size_t>(dataset_size_));
    for (int64_t i = 0; i < dataset_size_; ++i) order[static_cast<size_t>(i)] = i;
  }
  const auto total = static_cast<size_t>(total_size());
  if (order.size() > total) {
    order.resize(total);
  } else if (!order.empty()) {
    // Pad by wrapping around (repeatedly when the dataset is smaller than the padding).
    const size_t n = order.size();
    for (size_t i = n; i < total; ++i) order.push_back(order[i % n]);
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (size_t i = static_cast<size_t>(rank_); i < order.size();
       i += static_cast<size_t>(num_replicas_))
    mine.push_back(order[i]);
  return mine;
}

}  // namespace kiln::dist
