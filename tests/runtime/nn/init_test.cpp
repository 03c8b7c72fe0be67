// nn::init: gains, fans, distributions of every initialiser, reproducibility
// under manual_seed, no autograd recording, and errors.
#include <gtest/gtest.h>

#include <cmath>

#include "nn_test_util.h"

using namespace kiln;
using namespace kiln::nn_test;
namespace init = kiln::nn::init;
using init::FanMode;
using init::Nonlinearity;

// calculate_gain returns PyTorch's constants.
TEST(InitGain, MatchesPyTorch) {
  EXPECT_DOUBLE_EQ(init::calculate_gain(Nonlinearity::kLinear), 1.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain(Nonlinearity::kConv2d), 1.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain(Nonlinearity::kSigmoid), 1.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain(Nonlinearity::kTanh), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain(Nonlinearity::kReLU), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(init::calculate_gain(Nonlinearity::kLeakyReLU), std::sqrt(2.0 / 1.0001));
  EXPECT_DOUBLE_EQ(init::calculate_gain(Nonlinearity::kLeakyReLU, std::sqrt(5.0)),
                   std::sqrt(1.0 / 3.0));
  EXPECT_DOUBLE_EQ(init::calculate_gain(Nonlinearity::kSELU), 0.75);
}

// Fans of linear and conv weights; fewer than 2 dims is an error.
TEST(InitFan, LinearAndConvShapes) {
  EXPECT_EQ(init::calculate_fan_in_and_fan_out(empty({5, 7})), (std::pair<int64_t, int64_t>{7, 5}));
  EXPECT_EQ(init::calculate_fan_in_and_fan_out(empty({8, 3, 3, 2})),
            (std::pair<int64_t, int64_t>{18, 48}));
  expect_error([] { init::calculate_fan_in_and_fan_out(empty({5})); },
               {"fewer than 2 dimensions", "[5]"});
  expect_error([] { init::xavier_uniform_(empty({5})); }, {"fewer than 2 dimensions"});
}

// uniform_/normal_/constant_/zeros_/ones_/eye_ fill with the right distribution or values.
TEST(InitBasic, Distributions) {
  manual_seed(0);
  Tensor t = empty({200, 500});
  init::uniform_(t, -2.0, 3.0);
  EXPECT_GE(t.min().item<double>(), -2.0);
  EXPECT_LT(t.max().item<double>(), 3.0);
  auto [m, v] = moments(t);
  EXPECT_NEAR(m, 0.5, 0.02);
  EXPECT_NEAR(v, 25.0 / 12.0, 0.03);
  init::normal_(t, 1.0, 0.5);
  std::tie(m, v) = moments(t);
  EXPECT_NEAR(m, 1.0, 0.005);
  EXPECT_NEAR(std::sqrt(v), 0.5, 0.005);
  init::constant_(t, 0.25);
  EXPECT_EQ(vals(t.flatten()), V(100000, 0.25));
  init::zeros_(t);
  EXPECT_EQ(t.abs().sum().item<double>(), 0.0);
  init::ones_(t);
  EXPECT_EQ(t.sum().item<double>(), 100000.0);
  Tensor e = empty({2, 3}, DType::f64);
  init::eye_(e);
  EXPECT_EQ(vals(e), (V{1, 0, 0, 0, 1, 0}));
  Tensor i = zeros({3}, DType::i64);
  init::constant_(i, 4);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{4, 4, 4}));
}

// xavier_* and kaiming_* reach their target standard deviations.
TEST(InitScaled, XavierAndKaimingStd) {
  manual_seed(1);
  Tensor t = empty({400, 300, 2});  // fan_in 600, fan_out 800
  auto std_of = [&] { return std::sqrt(moments(t).second); };
  init::xavier_uniform_(t, 2.0);
  double b = 2.0 * std::sqrt(6.0 / 1400.0);
  EXPECT_LE(t.abs().max().item<double>(), b);
  EXPECT_NEAR(std_of(), b / std::sqrt(3.0), 0.01 * b);
  init::xavier_normal_(t);
  EXPECT_NEAR(std_of(), std::sqrt(2.0 / 1400.0), 0.01 * std::sqrt(2.0 / 1400.0));
  init::kaiming_uniform_(t, 0.0, FanMode::kFanIn, Nonlinearity::kReLU);
  double want = std::sqrt(2.0) / std::sqrt(600.0);
  EXPECT_LE(t.abs().max().item<double>(), want * std::sqrt(3.0));
  EXPECT_NEAR(std_of(), want, 0.01 * want);
  init::kaiming_normal_(t, 0.0, FanMode::kFanOut, Nonlinearity::kReLU);
  want = std::sqrt(2.0) / std::sqrt(800.0);
  EXPECT_NEAR(std_of(), want, 0.01 * want);
  // Default kaiming_uniform_ is leaky_relu with a = 0: gain sqrt(2).
  init::kaiming_uniform_(t, std::sqrt(5.0));
  EXPECT_LE(t.abs().max().item<double>(), 1.0 / std::sqrt(600.0));
}

// The same seed gives the same values, in f32 and f64; parameters stay leaves
// without history and their requires_grad is kept.
TEST(InitSeed, ReproducibleAndNoGraph) {
  Tensor p = empty({30, 20}).requires_grad_();
  manual_seed(42);
  init::kaiming_uniform_(p);
  V first = vals(p);
  manual_seed(42);
  init::kaiming_uniform_(p);
  EXPECT_EQ(vals(p), first);
  EXPECT_TRUE(p.is_leaf());
  EXPECT_TRUE(p.requires_grad());
  EXPECT_EQ(p.grad_fn(), nullptr);
  Tensor d = empty({30, 20}, DType::f64);
  manual_seed(42);
  init::normal_(d);
  EXPECT_EQ(d.dtype(), DType::f64);
  EXPECT_NE(vals(d), first);
  manual_seed(7);
  init::uniform_(d);
  V again = vals(d);
  manual_seed(7);
  init::uniform_(d);
  EXPECT_EQ(vals(d), again);
}

// Random initialisers refuse integer tensors and bad arguments with kiln::Error.
TEST(InitErrors, BadArguments) {
  expect_error(
      [] {
        init::normal_(zeros({2, 2}, DType::i64));
      },
      {"[init.normal_]", "floating", "i64"});
  expect_error([] { init::uniform_(zeros({2}), 1.0, 0.0); }, {"a <= b"});
  expect_error([] { init::normal_(zeros({2}), 0.0, -1.0); }, {"std >= 0"});
  expect_error([] { init::eye_(zeros({2, 2, 2})); }, {"[init.eye_]", "2-D"});
  expect_error([] { init::kaiming_normal_(zeros({3, 0})); }, {"zero-element"});
  expect_error([] { init::uniform_(Tensor()); }, {"undefined"});
}
