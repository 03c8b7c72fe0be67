// LayerNorm and BatchNorm1d/2d against hand computations, including running
// statistics over two training steps and eval mode.
#include <gtest/gtest.h>

#include <cmath>

#include "nn_test_util.h"

using namespace kiln;
using namespace kiln::nn_test;

// LayerNorm normalises each row with the biased variance, then applies weight and bias.
TEST(LayerNormTest, MatchesHandComputation) {
  manual_seed(0);
  nn::LayerNorm ln({2, 3}, 1e-3);
  ln.to(DType::f64);
  EXPECT_EQ(vals(ln.weight), V(6, 1.0));
  EXPECT_EQ(vals(ln.bias), V(6, 0.0));
  nn::init::normal_(ln.weight);
  nn::init::normal_(ln.bias);
  Tensor x = randn({4, 2, 3}, DType::f64) * 3.0 + 1.0;
  V xv = vals(x), w = vals(ln.weight), b = vals(ln.bias), y = vals(ln.forward(x));
  for (size_t r = 0; r < 4; ++r) {
    double m = 0, v = 0;
    for (size_t i = 0; i < 6; ++i) m += xv[r * 6 + i] / 6.0;
    for (size_t i = 0; i < 6; ++i) v += (xv[r * 6 + i] - m) * (xv[r * 6 + i] - m) / 6.0;
    for (size_t i = 0; i < 6; ++i)
      EXPECT_NEAR(y[r * 6 + i], (xv[r * 6 + i] - m) / std::sqrt(v + 1e-3) * w[i] + b[i], 1e-12);
  }
  EXPECT_EQ(ln.repr(), "LayerNorm((2, 3), eps=0.001, elementwise_affine=True)");
  nn::LayerNorm plain(3, 1e-5, false);
  EXPECT_TRUE(plain.parameters().empty());
  expect_close(plain.forward(x), layer_norm(x, {3}));
  expect_error(
      [&] {
        ln.forward(ones({4, 3, 2}, DType::f64));
      },
      {"[LayerNorm]", "[4, 3, 2]", "[2, 3]"});
}

namespace {

// Per-channel mean and biased variance of x [N, C, H, W] (row-major values).
void channel_stats(const V& x, size_t N, size_t C, size_t HW, V& mean, V& var) {
  mean.assign(C, 0.0);
  var.assign(C, 0.0);
  const double n = static_cast<double>(N * HW);
  for (size_t i = 0; i < N; ++i)
    for (size_t c = 0; c < C; ++c)
      for (size_t k = 0; k < HW; ++k) mean[c] += x[(i * C + c) * HW + k] / n;
  for (size_t i = 0; i < N; ++i)
    for (size_t c = 0; c < C; ++c)
      for (size_t k = 0; k < HW; ++k) {
        double d = x[(i * C + c) * HW + k] - mean[c];
        var[c] += d * d / n;
      }
}

}  // namespace

// BatchNorm2d: training normalises with batch stats (biased var) and updates the
// running stats (unbiased var, momentum 0.1) in place; after two steps, eval uses them.
TEST(LayerBatchNorm, TwoTrainingStepsThenEval) {
  manual_seed(1);
  nn::BatchNorm2d bn(3);
  bn.to(DType::f64);
  EXPECT_EQ(bn.state_dict().keys(),
            (std::vector<std::string>{"weight", "bias", "running_mean", "running_var",
                                      "num_batches_tracked"}));
  nn::init::uniform_(bn.weight, 0.5, 1.5);
  nn::init::uniform_(bn.bias, -0.5, 0.5);
  Tensor rm = bn.running_mean;
  const size_t N = 2, C = 3, HW = 4 * 5;
  const double n = static_cast<double>(N * HW);
  V run_m(C, 0.0), run_v(C, 1.0);
  V w = vals(bn.weight), b = vals(bn.bias);
  for (int step = 0; step < 2; ++step) {
    Tensor x = randn({2, 3, 4, 5}, DType::f64) * (step + 1.0) + step;
    V xv = vals(x), y = vals(bn.forward(x)), mean, var;
    channel_stats(xv, N, C, HW, mean, var);
    for (size_t i = 0; i < N; ++i)
      for (size_t c = 0; c < C; ++c)
        for (size_t k = 0; k < HW; ++k) {
          size_t e = (i * C + c) * HW + k;
          EXPECT_NEAR(y[e], (xv[e] - mean[c]) / std::sqrt(var[c] + 1e-5) * w[c] + b[c], 1e-12);
        }
    for (size_t c = 0; c < C; ++c) {
      run_m[c] = 0.9 * run_m[c] + 0.1 * mean[c];
      run_v[c] = 0.9 * run_v[c] + 0.1 * var[c] * n / (n - 1.0);
    }
  }
  EXPECT_TRUE(rm.is_same(bn.running_mean));
  for (size_t c = 0; c < C; ++c) {
    EXPECT_NEAR(vals(bn.running_mean)[c], run_m[c], 1e-12);
    EXPECT_NEAR(vals(bn.running_var)[c], run_v[c], 1e-12);
  }
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 2);
  EXPECT_EQ(bn.num_batches_tracked.dtype(), DType::i64);
  EXPECT_FALSE(bn.running_mean.requires_grad());

  bn.eval();
  Tensor x = randn({2, 3, 4, 5}, DType::f64);
  V xv = vals(x), y = vals(bn.forward(x));
  for (size_t i = 0; i < N; ++i)
    for (size_t c = 0; c < C; ++c)
      for (size_t k = 0; k < HW; ++k) {
        size_t e = (i * C + c) * HW + k;
        EXPECT_NEAR(y[e], (xv[e] - run_m[c]) / std::sqrt(run_v[c] + 1e-5) * w[c] + b[c], 1e-12);
      }
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 2);  // eval does not count
  EXPECT_EQ(bn.repr(),
            "BatchNorm2d(3, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)");
}

// momentum = nullopt keeps a cumulative average; no running stats means batch stats always.
TEST(LayerBatchNorm, CumulativeAverageAndNoTracking) {
  manual_seed(2);
  nn::BatchNorm1d bn(2, {.momentum = std::nullopt, .affine = false});
  EXPECT_TRUE(bn.parameters().empty());
  Tensor x1 = randn({8, 2}), x2 = randn({8, 2}) + 3.0;
  bn.forward(x1);
  bn.forward(x2);
  expect_close(bn.running_mean, (mean(x1, {0}) + mean(x2, {0})) * 0.5, 1e-6);
  expect_close(bn.running_var, (var(x1, {0}) + var(x2, {0})) * 0.5, 1e-6);
  EXPECT_EQ(bn.repr(),
            "BatchNorm1d(2, eps=1e-05, momentum=None, affine=False, track_running_stats=True)");

  nn::BatchNorm1d untracked(2, {.track_running_stats = false});
  EXPECT_TRUE(untracked.buffers().empty());
  untracked.eval();
  Tensor x = randn({5, 2, 3});
  Tensor m = mean(x, {0, 2}, true), v = mean(square(x - m), {0, 2}, true);
  expect_close(untracked.forward(x), (x - m) / sqrt(v + 1e-5), 1e-5);
}

// BatchNorm errors name the layer and the offending shape.
TEST(LayerBatchNorm, Errors) {
  nn::BatchNorm2d bn(3);
  expect_error(
      [&] {
        bn.forward(randn({2, 4, 2, 2}));
      },
      {"[BatchNorm2d]", "[2, 4, 2, 2]", "num_features = 3"});
  expect_error([&] { bn.forward(randn({2, 3, 2})); }, {"[BatchNorm2d] expected a 4-D"});
  expect_error([&] { bn.forward(randn({1, 3, 1, 1})); }, {"more than 1 value per channel"});
  expect_error([] { nn::BatchNorm1d(0); }, {"[BatchNorm1d] num_features must be positive"});
  bn.eval();
  EXPECT_EQ(bn.forward(randn({1, 3, 1, 1})).shape(), (Dims{1, 3, 1, 1}));
}
