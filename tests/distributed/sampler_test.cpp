// DistributedSampler: PyTorch's sharding (pad by wrapping, or drop the tail),
// the same shuffle on every rank, reshuffling with set_epoch, the DataLoader
// integration, and argument errors.
#include "kiln/distributed/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "kiln/data/data.h"
#include "kiln/kiln.h"
#include "runtime/test_util.h"

namespace kiln {
namespace {

using dist::DistributedSampler;
using Idx = std::vector<int64_t>;

std::vector<Idx> shares(int64_t n, int replicas, dist::DistributedSamplerOptions o,
                        uint64_t epoch = 0) {
  std::vector<Idx> out;
  for (int r = 0; r < replicas; ++r) {
    DistributedSampler s(n, replicas, r, o);
    s.set_epoch(epoch);
    out.push_back(s.indices());
    EXPECT_EQ(static_cast<int64_t>(out.back().size()), s.size());
  }
  return out;
}

// Without shuffling: rank r takes r, r+R, ...; the tail is padded from the start.
TEST(DistributedSampler, PadsByWrappingLikePyTorch) {
  auto s = shares(10, 3, {.shuffle = false});
  EXPECT_EQ(s[0], (Idx{0, 3, 6, 9}));
  EXPECT_EQ(s[1], (Idx{1, 4, 7, 0}));
  EXPECT_EQ(s[2], (Idx{2, 5, 8, 1}));
  EXPECT_EQ(DistributedSampler(10, 3, 0, {.shuffle = false}).total_size(), 12);
  // A dataset smaller than the padding wraps around more than once.
  auto tiny = shares(2, 5, {.shuffle = false});
  for (int r = 0; r < 5; ++r) EXPECT_EQ(tiny[r], (Idx{r % 2})) << r;
  // Empty dataset: nothing to visit.
  EXPECT_TRUE(DistributedSampler(0, 2, 1).indices().empty());
}

// drop_last: every rank gets floor(n / R) distinct indices; the tail is dropped.
TEST(DistributedSampler, DropLastTruncates) {
  auto s = shares(10, 3, {.shuffle = false, .drop_last = true});
  EXPECT_EQ(s[0], (Idx{0, 3, 6}));
  EXPECT_EQ(s[1], (Idx{1, 4, 7}));
  EXPECT_EQ(s[2], (Idx{2, 5, 8}));
}

// Shuffled shares are disjoint and cover the dataset; set_epoch reshuffles
// reproducibly; the seed changes the order.
TEST(DistributedSampler, ShufflesTheSameOnEveryRankPerEpoch) {
  auto e0 = shares(12, 3, {.seed = 5}, 0);
  std::set<int64_t> all;
  for (auto& s : e0) all.insert(s.begin(), s.end());
  EXPECT_EQ(all.size(), 12u);
  Idx ordered;
  for (auto& s : e0) ordered.insert(ordered.end(), s.begin(), s.end());
  Idx sorted = ordered;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(ordered, sorted);  // really shuffled
  EXPECT_EQ(shares(12, 3, {.seed = 5}, 0), e0);
  EXPECT_NE(shares(12, 3, {.seed = 5}, 1), e0);
  EXPECT_NE(shares(12, 3, {.seed = 6}, 0), e0);
  // Padding repeats indices from the start of the shuffled order.
  auto padded = shares(10, 4, {.seed = 1}, 2);
  std::set<int64_t> cover;
  for (auto& s : padded) cover.insert(s.begin(), s.end());
  EXPECT_EQ(cover.size(), 10u);
}

// As a DataLoader's sampler: each rank's loader yields its share, and the
// loader's epochs reshuffle it.
TEST(DistributedSampler, DrivesADataLoader) {
  auto ds = std::make_shared<data::TensorDataset>(std::vector<Tensor>{arange(0, 8, 1, DType::i64)});
  std::vector<std::vector<Idx>> seen(2);  // [rank][epoch]
  for (int r = 0; r < 2; ++r) {
    auto sampler =
        std::make_shared<DistributedSampler>(8, 2, r, dist::DistributedSamplerOptions{.seed = 3});
    data::DataLoader loader(ds, {.batch_size = 2, .sampler = sampler});
    EXPECT_EQ(loader.size(), 2);
    for (int epoch = 0; epoch < 2; ++epoch) {
      Idx got;
      for (auto& batch : loader) {
        auto v = batch[0].to_vector<int64_t>();
        got.insert(got.end(), v.begin(), v.end());
      }
      EXPECT_EQ(sampler->epoch(), static_cast<uint64_t>(epoch));
      EXPECT_EQ(got, sampler->indices());
      seen[r].push_back(got);
    }
  }
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::set<int64_t> both(seen[0][epoch].begin(), seen[0][epoch].end());
    both.insert(seen[1][epoch].begin(), seen[1][epoch].end());
    EXPECT_EQ(both.size(), 8u) << "epoch " << epoch;
  }
  EXPECT_NE(seen[0][0], seen[0][1]);
}

TEST(DistributedSampler, RejectsBadArguments) {
  using testing::expect_error;
  expect_error([] { DistributedSampler(10, 2, 2); },
               "[DistributedSampler] rank 2 is not in [0, 2)");
  expect_error([] { DistributedSampler(10, 2, -1); }, "rank -1 is not in [0, 2)");
  expect_error([] { DistributedSampler(10, 0, 0); }, "num_replicas must be >= 1, got 0");
  expect_error([] { DistributedSampler(-1, 2, 0); }, "dataset size must be >= 0, got -1");
}

}  // namespace
}  // namespace kiln
