// Spellings the held-out examples (examples/gpt, examples/resnet) needed and
// kiln lacked: Sequential / ModuleList from modules passed as arguments
// (libtorch's Sequential(Linear(...), ReLU())), and slice's default end
// (x[:, -n:] is x.slice(1, -n)).
#include <gtest/gtest.h>

#include "nn_test_util.h"

using namespace kiln;
using namespace kiln::nn_test;

TEST(ExampleGaps, SequentialAndModuleListTakeModulesAsArguments) {
  manual_seed(0);
  auto seq = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 8),
                                              std::make_shared<nn::ReLU>(),
                                              std::make_shared<nn::Linear>(8, 2));
  ASSERT_EQ(seq->size(), 3u);
  EXPECT_EQ(seq->named_parameters().front().first, "0.weight");
  Tensor x = randn({3, 4});
  Tensor want = seq->at<nn::Linear>(2)->forward(seq->at<nn::Linear>(0)->forward(x).relu());
  expect_close(seq->forward(x), want, 0.0);
  nn::Sequential one(std::make_shared<nn::Tanh>());
  EXPECT_EQ(one.size(), 1u);
  auto list = std::make_shared<nn::ModuleList>(std::make_shared<nn::Linear>(2, 2),
                                               std::make_shared<nn::Linear>(2, 3));
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ(list->at<nn::Linear>(1)->out_features(), 3);
}

TEST(ExampleGaps, SliceRunsToTheEndByDefault) {
  Tensor x = arange(10).reshape({2, 5});
  EXPECT_EQ(x.slice(1, -2).to_vector<int64_t>(), (std::vector<int64_t>{3, 4, 8, 9}));
  EXPECT_EQ(x.slice(1, 3).shape(), (Dims{2, 2}));
  EXPECT_EQ(slice(x, 1, -7).shape(), (Dims{2, 5}));  // clamped, as Python's x[:, -7:]
  EXPECT_EQ(x.slice(0).shape(), (Dims{2, 5}));
}
