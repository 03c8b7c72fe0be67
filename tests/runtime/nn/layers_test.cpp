// Basic layers: Linear, Conv2d, pooling, Flatten, activations, Dropout,
// Embedding and the loss modules, against hand-computed references.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "nn_test_util.h"

using namespace kiln;
using namespace kiln::nn_test;

// Linear computes x W^T + b (checked with explicit loops), on a batched 3-D input.
TEST(LayerLinear, MatchesHandComputation) {
  manual_seed(0);
  auto lin = std::make_shared<nn::Linear>(4, 3);
  lin->to(DType::f64);
  Tensor x = randn({2, 5, 4}, DType::f64);
  Tensor y = lin->forward(x);
  ASSERT_EQ(y.shape(), (Dims{2, 5, 3}));
  V xv = vals(x), w = vals(lin->weight), b = vals(lin->bias), yv = vals(y);
  for (size_t r = 0; r < 10; ++r)
    for (size_t o = 0; o < 3; ++o) {
      double s = b[o];
      for (size_t k = 0; k < 4; ++k) s += xv[r * 4 + k] * w[o * 4 + k];
      EXPECT_NEAR(yv[r * 3 + o], s, 1e-12);
    }
  auto nobias = std::make_shared<nn::Linear>(4, 3, false);
  nobias->to(DType::f64);
  expect_close(nobias->forward(x), matmul(x, nobias->weight.t()));
  expect_error(
      [&] {
        lin->forward(ones({2, 5}, DType::f64));
      },
      {"[Linear]", "[2, 5]", "in_features = 4", "[3, 4]"});
}

// Linear's init: weight and bias in U(-1/sqrt(in), 1/sqrt(in)) with the uniform's moments.
TEST(LayerLinear, DefaultInitStatistics) {
  manual_seed(1);
  nn::Linear lin(1000, 500);
  const double bound = 1.0 / std::sqrt(1000.0);
  EXPECT_LE(lin.weight.abs().max().item<double>(), bound);
  EXPECT_LE(lin.bias.abs().max().item<double>(), bound);
  auto [m, v] = moments(lin.weight);
  EXPECT_NEAR(m, 0.0, 0.01 * bound);
  EXPECT_NEAR(v, bound * bound / 3.0, 0.01 * bound * bound);
  EXPECT_GT(lin.bias.abs().max().item<double>(), 0.9 * bound);
  EXPECT_EQ(lin.extra_repr(), "in_features=1000, out_features=500, bias=True");
}

// Conv2d equals kiln::conv2d with its own weights for stride/padding/dilation/groups,
// prints like PyTorch and checks channels.
TEST(LayerConv2d, MatchesFunctional) {
  manual_seed(2);
  nn::Conv2d conv(4, 6, {3, 2}, {.stride = 2, .padding = {1, 0}, .dilation = {1, 2}, .groups = 2});
  EXPECT_EQ(conv.weight.shape(), (Dims{6, 2, 3, 2}));
  Tensor x = randn({2, 4, 9, 8});
  Tensor y = conv.forward(x);
  Conv2dFuncOptions o{.stride = {2, 2}, .padding = {1, 0}, .dilation = {1, 2}, .groups = 2};
  expect_equal(y, conv2d(x, conv.weight, conv.bias, o));
  EXPECT_EQ(y.shape(), (Dims{2, 6, 5, 3}));
  EXPECT_EQ(conv.forward(randn({4, 9, 8})).shape(), (Dims{6, 5, 3}));  // unbatched
  EXPECT_EQ(conv.extra_repr(),
            "4, 6, kernel_size=(3, 2), stride=(2, 2), padding=(1, 0), dilation=(1, 2), groups=2");
  nn::Conv2d plain(1, 2, 3, {.bias = false});
  EXPECT_EQ(plain.repr(), "Conv2d(1, 2, kernel_size=(3, 3), stride=(1, 1), bias=False)");
  EXPECT_FALSE(plain.bias.defined());
  expect_error(
      [&] {
        conv.forward(randn({2, 3, 9, 8}));
      },
      {"[Conv2d]", "[2, 3, 9, 8]", "in_channels = 4"});
  expect_error([] { nn::Conv2d(3, 4, 3, {.groups = 2}); }, {"[Conv2d] in_channels (3)"});
}

// Conv2d's init bound uses fan_in = in/groups * kH * kW.
TEST(LayerConv2d, DefaultInitBound) {
  manual_seed(3);
  nn::Conv2d conv(16, 64, 3, {.groups = 2});
  const double bound = 1.0 / std::sqrt(8.0 * 9.0);
  EXPECT_LE(conv.weight.abs().max().item<double>(), bound);
  EXPECT_GT(conv.weight.abs().max().item<double>(), 0.95 * bound);
  EXPECT_LE(conv.bias.abs().max().item<double>(), bound);
  EXPECT_NEAR(moments(conv.weight).second, bound * bound / 3.0, 0.05 * bound * bound);
}

// Pooling layers call the functional ops with stride defaulting to the kernel.
TEST(LayerPool, MaxAndAvg) {
  Tensor x = randn({2, 3, 6, 6});
  nn::MaxPool2d mp(2);
  expect_equal(mp.forward(x), max_pool2d(x, {.kernel_size = {2, 2}, .stride = {2, 2}}));
  EXPECT_EQ(mp.repr(),
            "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)");
  nn::MaxPool2d mp2({3, 2}, {.stride = 1, .padding = 1});
  expect_equal(mp2.forward(x),
               max_pool2d(x, {.kernel_size = {3, 2}, .stride = {1, 1}, .padding = {1, 1}}));
  nn::AvgPool2d ap(3, {.stride = 2, .padding = 1, .count_include_pad = false});
  expect_equal(ap.forward(x), avg_pool2d(x, {.kernel_size = {3, 3},
                                             .stride = {2, 2},
                                             .padding = {1, 1},
                                             .count_include_pad = false}));
  EXPECT_EQ(ap.forward(x).shape(), (Dims{2, 3, 3, 3}));
  EXPECT_EQ(ap.repr(), "AvgPool2d(kernel_size=3, stride=2, padding=1)");
}

// Flatten keeps the batch dim by default and honours start/end dims.
TEST(LayerFlatten, Shapes) {
  Tensor x = zeros({2, 3, 4, 5});
  EXPECT_EQ(nn::Flatten().forward(x).shape(), (Dims{2, 60}));
  EXPECT_EQ(nn::Flatten(1, 2).forward(x).shape(), (Dims{2, 12, 5}));
  EXPECT_EQ(nn::Flatten(0, -2).forward(x).shape(), (Dims{24, 5}));
  EXPECT_EQ(nn::Flatten().repr(), "Flatten(start_dim=1, end_dim=-1)");
  EXPECT_EQ(nn::Identity().forward(x).shape(), x.shape());
}

// Activation layers compute their textbook formulas elementwise.
TEST(LayerActivation, Formulas) {
  V xv{-3.0, -1.0, -0.25, 0.0, 0.5, 2.0};
  Tensor x = from_vector<double>(xv);
  auto check = [&](nn::Module& m, double (*f)(double)) {
    V y = vals(m.forward(x));
    for (size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(y[i], f(xv[i]), 1e-12) << m.name();
  };
  nn::ReLU relu_m;
  check(relu_m, [](double v) { return v > 0 ? v : 0.0; });
  nn::GELU gelu_m;
  check(gelu_m, [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::numbers::sqrt2)); });
  nn::GELU gelu_t("tanh");
  check(gelu_t, [](double v) {
    return 0.5 * v *
           (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (v + 0.044715 * v * v * v)));
  });
  nn::SiLU silu_m;
  check(silu_m, [](double v) { return v / (1.0 + std::exp(-v)); });
  nn::Tanh tanh_m;
  check(tanh_m, [](double v) { return std::tanh(v); });
  nn::Sigmoid sig_m;
  check(sig_m, [](double v) { return 1.0 / (1.0 + std::exp(-v)); });
  nn::Softmax sm(0);
  EXPECT_NEAR(sm.forward(x).sum().item<double>(), 1.0, 1e-12);
  expect_close(nn::LogSoftmax(0).forward(x), log(sm.forward(x)));
  EXPECT_EQ(gelu_m.repr(), "GELU(approximate='none')");
  EXPECT_EQ(sm.repr(), "Softmax(dim=0)");
  expect_error([] { nn::GELU("fast"); }, {"[GELU]", "\"fast\""});
}

// Dropout zeroes about p of the elements and scales the rest while training;
// it is the identity in eval mode.
TEST(LayerDropout, TrainAndEval) {
  manual_seed(4);
  nn::Dropout drop(0.3);
  Tensor x = ones({100000});
  V y = vals(drop.forward(x));
  size_t zeros_n = 0;
  for (double v : y) {
    if (v == 0.0)
      ++zeros_n;
    else
      EXPECT_NEAR(v, 1.0 / 0.7, 1e-6);
  }
  EXPECT_NEAR(static_cast<double>(zeros_n) / 1e5, 0.3, 0.01);
  drop.eval();
  EXPECT_TRUE(drop.forward(x).is_same(x));
  EXPECT_EQ(drop.repr(), "Dropout(p=0.3, inplace=False)");
  expect_error([] { nn::Dropout(1.5); }, {"[Dropout]", "1.5"});
}

// Embedding looks rows up, starts N(0, 1), zeroes the padding row and masks its gradient.
TEST(LayerEmbedding, LookupPaddingAndGradient) {
  manual_seed(5);
  nn::Embedding big(2000, 100);
  auto [m, v] = moments(big.weight);
  EXPECT_NEAR(m, 0.0, 0.01);
  EXPECT_NEAR(v, 1.0, 0.02);

  nn::Embedding emb(5, 3, -1);  // padding_idx 4
  EXPECT_EQ(*emb.padding_idx(), 4);
  EXPECT_EQ(vals(emb.weight[4]), V(3, 0.0));
  Tensor idx = from_vector<int64_t>({1, 4, 1, 0, 4, 2}, {2, 3});
  Tensor out = emb.forward(idx);
  ASSERT_EQ(out.shape(), (Dims{2, 3, 3}));
  expect_equal(out[0][0], emb.weight[1].detach());
  expect_equal(out[1][2], emb.weight[2].detach());
  {
    NoGradGuard ng;
    emb.weight[4].fill_(9.0);  // a non-zero padding row is read as is
  }
  out = emb.forward(idx);
  EXPECT_EQ(vals(out[0][1]), V(3, 9.0));
  out.sum().backward();
  V g = vals(emb.weight.grad());
  V want{1, 1, 1, 2, 2, 2, 1, 1, 1, 0, 0, 0, 0, 0, 0};  // counts per row, padding row 0
  EXPECT_EQ(g, want);
  EXPECT_EQ(emb.repr(), "Embedding(5, 3, padding_idx=4)");
  expect_error([&] { emb.forward(from_vector<int64_t>({5})); },
               {"[Embedding] index out of range", "num_embeddings = 5"});
  expect_error([&] { emb.forward(zeros({2})); }, {"[Embedding]", "integer"});
  expect_error([] { nn::Embedding(5, 3, 5); }, {"[Embedding] padding_idx 5"});
}

// Loss modules equal the functional losses with the same options.
TEST(LayerLoss, ModulesMatchFunctional) {
  manual_seed(6);
  Tensor a = randn({4, 3}), b = randn({4, 3}), p = rand({4, 3}), t = rand({4, 3});
  Tensor cls = from_vector<int64_t>({0, 2, 1, 2});
  expect_equal(nn::MSELoss()(a, b), mse_loss(a, b));
  expect_equal(nn::MSELoss(Reduction::kSum)(a, b), mse_loss(a, b, Reduction::kSum));
  expect_equal(nn::BCELoss()(p, t), binary_cross_entropy(p, t));
  expect_equal(nn::BCEWithLogitsLoss(Reduction::kNone)(a, t),
               binary_cross_entropy_with_logits(a, t, Reduction::kNone));
  CrossEntropyOptions o{.ignore_index = 1, .label_smoothing = 0.1};
  expect_equal(nn::CrossEntropyLoss(o)(a, cls), cross_entropy(a, cls, o));
  expect_equal(nn::NLLLoss()(log_softmax(a, 1), cls), nll_loss(log_softmax(a, 1), cls));
  nn::CrossEntropyLoss ce;
  EXPECT_EQ(ce.repr(), "CrossEntropyLoss()");
  expect_error([&] { ce.forward(a); }, {"CrossEntropyLoss does not implement forward"});
  EXPECT_EQ(nn::functional::cross_entropy(a, cls).item<float>(), ce(a, cls).item<float>());
}
