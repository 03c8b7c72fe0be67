// DataLoader batches unpack like PyTorch's `for x, y in loader`, and still
// behave as the std::vector<Tensor> they were.
#include <gtest/gtest.h>

#include "kiln/data/data.h"
#include "kiln/kiln.h"
#include "runtime/test_util.h"

using namespace kiln;
using namespace kiln::data;
using kiln::testing::expect_error;

TEST(Batch, TwoFieldBatchesUnpackIntoTheirTensors) {
  auto ds = std::make_shared<TensorDataset>(
      std::vector<Tensor>{arange(0, 6, 1, DType::f32), arange(10, 16, 1, DType::i64)});
  DataLoader loader(ds, {.batch_size = 4});
  std::vector<float> xs;
  std::vector<int64_t> ys;
  for (auto& [x, y] : loader) {
    for (float v : x.to_vector<float>()) xs.push_back(v);
    for (int64_t v : y.to_vector<int64_t>()) ys.push_back(v);
  }
  EXPECT_EQ(xs, (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(ys, (std::vector<int64_t>{10, 11, 12, 13, 14, 15}));
  for (const auto& [x, y] : loader) EXPECT_EQ(x.size(0), y.size(0));
  // The vector interface is unchanged.
  for (Example& batch : loader) EXPECT_EQ(batch.size(), 2u);
  auto it = loader.begin();
  std::vector<Tensor> copy = *it;
  auto [x, y] = *it;  // a copy of the batch, unpacked
  EXPECT_TRUE(x.is_same(copy[0]));
  EXPECT_TRUE(y.is_same((*it)[1]));
}

TEST(Batch, UnpackingOtherFieldCountsIsAnError) {
  auto ds =
      std::make_shared<TensorDataset>(std::vector<Tensor>{zeros({4, 2}), zeros({4}), zeros({4})});
  DataLoader loader(ds, {.batch_size = 2});
  expect_error(
      [&] {
        for (auto& [x, y] : loader) (void)x, (void)y;
      },
      {"unpacks two fields", "has 3", "batch[0]"});
  for (auto& batch : loader) EXPECT_EQ(batch[2].size(0), 2);  // indexing always works
}
