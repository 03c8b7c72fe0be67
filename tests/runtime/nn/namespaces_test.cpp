// Verifies kiln's namespaces can all be opened at once, as PyTorch users write
// `using namespace torch;`: every option struct and layer name stays unambiguous
// (kiln::Conv2dOptions and kiln::nn::Conv2dOptions once were two types).
#include <gtest/gtest.h>

#include "kiln/kiln.h"

using namespace kiln;
using namespace kiln::nn;
using namespace kiln::optim;
using namespace kiln::data;

namespace {

// Compiles only if each unqualified name names exactly one declaration.
TEST(Namespaces, OptionStructsAreUnambiguous) {
  Conv2dOptions conv{.padding = 1, .bias = false};
  Conv2dFuncOptions fconv{.padding = {1, 1}};
  Pool2dOptions pool{.kernel_size = {2, 2}};
  MaxPool2dOptions maxpool{.stride = Size2(1)};
  AvgPool2dOptions avgpool;
  avgpool.count_include_pad = false;
  BatchNormOptions bn{};
  MultiheadAttentionOptions mha{.batch_first = true};
  TransformerEncoderLayerOptions enc{};
  CrossEntropyOptions ce{.label_smoothing = 0.1};
  SGDOptions sgd{.lr = 0.1};
  AdamOptions adam{};
  AdamWOptions adamw{};
  RMSpropOptions rms{};
  DataLoaderOptions dl{.batch_size = 4};
  Conv2d layer(1, 2, 3, conv);
  Tensor y = conv2d(ones({1, 1, 4, 4}), layer.weight, {}, fconv);
  EXPECT_EQ(y.shape(), (Dims{1, 2, 4, 4}));
  EXPECT_EQ(max_pool2d(y, pool).shape(), (Dims{1, 2, 2, 2}));
  EXPECT_FALSE(conv.bias);
  EXPECT_TRUE(maxpool.stride.has_value());
  EXPECT_FALSE(avgpool.count_include_pad);
  EXPECT_TRUE(mha.batch_first);
  EXPECT_EQ(dl.batch_size, 4);
  EXPECT_DOUBLE_EQ(ce.label_smoothing, 0.1);
  EXPECT_DOUBLE_EQ(sgd.lr, 0.1);
  (void)bn, (void)enc, (void)adam, (void)adamw, (void)rms;
}

// Issue 22's state and data names, with every namespace open.
TEST(Namespaces, StateAndDataNamesAreUnambiguous) {
  Tensor state = get_rng_state();
  {
    RngStateGuard fork;
    InferenceMode no_tape;
    (void)rand({2});
  }
  set_rng_state(state);
  Batch batch{ones({2}), zeros({2})};
  auto& [x, y] = batch;
  EXPECT_EQ(x.size(0), y.size(0));
  EXPECT_TRUE(equal(get_rng_state(), state));
}

}  // namespace
