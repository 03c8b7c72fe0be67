// Verifies TensorDataset, Subset and the samplers.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "kiln/data/data.h"
#include "kiln/kiln.h"

using namespace kiln;
using namespace kiln::data;

namespace {
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no kiln::Error)";
}
}  // namespace

// get(i) returns the i-th row of every tensor, as views.
TEST(DataTensorDataset, GetSelectsRows) {
  Tensor x = arange(0, 12, 1, DType::f32).reshape({4, 3});
  Tensor y = arange(4);
  TensorDataset ds({x, y});
  EXPECT_EQ(ds.size(), 4);
  Example e = ds.get(2);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].to_vector<float>(), (std::vector<float>{6, 7, 8}));
  EXPECT_EQ(e[1].dim(), 0);
  EXPECT_EQ(e[1].item<int64_t>(), 2);
}

// Mismatched first dims, 0-d or no tensors, and bad indices raise kiln::Error with details.
TEST(DataTensorDataset, Errors) {
  std::string msg = error_of([] { TensorDataset({zeros({4, 3}), zeros({5})}); });
  EXPECT_NE(msg.find("[TensorDataset]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4, 3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[5]"), std::string::npos) << msg;
  EXPECT_THROW(TensorDataset({}), Error);
  EXPECT_THROW(TensorDataset({zeros({})}), Error);
  EXPECT_THROW(TensorDataset({Tensor()}), Error);
  TensorDataset ds({zeros({3})});
  msg = error_of([&] { ds.get(3); });
  EXPECT_NE(msg.find("index 3"), std::string::npos) << msg;
  EXPECT_THROW(ds.get(-1), Error);
}

// Subset maps its indices onto the underlying dataset and validates them.
TEST(DataSubset, MapsIndices) {
  auto base = std::make_shared<TensorDataset>(std::vector<Tensor>{arange(10)});
  Subset s(base, {7, 2, 5});
  EXPECT_EQ(s.size(), 3);
  EXPECT_EQ(s.get(0)[0].item<int64_t>(), 7);
  EXPECT_EQ(s.get(2)[0].item<int64_t>(), 5);
  EXPECT_THROW(s.get(3), Error);
  EXPECT_THROW(Subset(base, {10}), Error);
  EXPECT_THROW(Subset(nullptr, {}), Error);
}

// SequentialSampler yields 0..n-1 whatever the epoch.
TEST(DataSampler, SequentialOrder) {
  SequentialSampler s(5);
  EXPECT_EQ(s.size(), 5);
  EXPECT_EQ(s.indices(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  s.set_epoch(3);
  EXPECT_EQ(s.indices(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_THROW(SequentialSampler(-1), Error);
}

// RandomSampler gives a permutation that depends only on (seed, epoch), not on manual_seed.
TEST(DataSampler, RandomIsReproduciblePermutation) {
  RandomSampler a(100, 42), b(100, 42), c(100, 43);
  manual_seed(1);
  auto pa = a.indices();
  manual_seed(2);
  (void)rand({10});
  EXPECT_EQ(pa, b.indices());
  EXPECT_NE(pa, c.indices());
  auto sorted = pa;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(100);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(sorted, iota);
  EXPECT_NE(pa, iota);
  EXPECT_TRUE(RandomSampler(0).indices().empty());
  EXPECT_EQ(RandomSampler(1).indices(), std::vector<int64_t>{0});
}

// Each epoch gives a different permutation; returning to an epoch repeats it.
TEST(DataSampler, RandomDiffersPerEpoch) {
  RandomSampler s(50, 7);
  std::set<std::vector<int64_t>> seen;
  for (uint64_t e = 0; e < 5; ++e) {
    s.set_epoch(e);
    seen.insert(s.indices());
  }
  EXPECT_EQ(seen.size(), 5u);
  s.set_epoch(2);
  EXPECT_EQ(s.indices(), random_permutation(50, 7, 2));
}

// Every position is roughly equally likely to hold a given element (no gross bias).
TEST(DataSampler, RandomIsRoughlyUniform) {
  constexpr int kN = 4, kTrials = 4000;
  int counts[kN][kN] = {};
  for (uint64_t e = 0; e < kTrials; ++e) {
    auto p = random_permutation(kN, 123, e);
    for (int i = 0; i < kN; ++i) counts[i][p[static_cast<size_t>(i)]]++;
  }
  for (auto& row : counts)
    for (int c : row) EXPECT_NEAR(c, kTrials / kN, kTrials / kN / 5);
}
