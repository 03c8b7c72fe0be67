// Channel sums (passes/src/fuse_split.cpp) compiled against eager: BatchNorm's
// per-channel statistics over N, H, W, forward and backward, on odd sizes,
// N = 1 and H * W = 1, in f32 and f64; raw sums over a leading and trailing
// dims; and the row sum fused with its producer (the square is never stored).
#include <gtest/gtest.h>

#include "compare.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"

namespace kiln {
namespace {

double tol(DType dt) {
  return dt == DType::f64 ? 1e-10 : 1e-4;  // reordered sums; BN's gradient cancels
}

void expect_close(const Tensor& eager, const Tensor& compiled, const std::string& what) {
  EXPECT_EQ(testing::diff_values(eager, compiled, tol(eager.dtype())), "") << what;
}

const std::vector<Dims> kShapes = {
    {4, 3, 5, 7}, {1, 3, 5, 7}, {6, 5, 1, 1}, {3, 2, 1, 9}, {2, 4, 3, 1}};

// A compiled differentiable BatchNorm2d forward (train mode) and the backward
// through it: outputs, input and parameter gradients, running statistics.
TEST(ChannelSums, BatchNormForwardAndBackwardMatchEager) {
  for (DType dt : {DType::f32, DType::f64}) {
    for (const Dims& shape : kShapes) {
      const std::string what = str(dt, shape);
      manual_seed(11);
      auto be = std::make_shared<nn::BatchNorm2d>(shape[1]);
      auto bc = std::make_shared<nn::BatchNorm2d>(shape[1]);
      be->to(dt);
      bc->to(dt);
      for (auto* b : {be.get(), bc.get()}) {
        NoGradGuard ng;
        b->weight.copy_(arange(0, shape[1]).to(dt) * 0.3 + 0.7);
        b->bias.copy_(arange(0, shape[1]).to(dt) * -0.2);
      }
      auto f = compile([&](const Tensor& x) { return bc->forward(x); }, {.warmup = 0});
      for (int call = 0; call < 3; ++call) {
        Tensor x = (randn(shape) * 3.0 + 1.5).to(dt);
        Tensor w = randn(shape).to(dt);
        Tensor xe = x.detach().requires_grad_(), xc = x.detach().requires_grad_();
        Tensor ye = be->forward(xe), yc = f(xc);
        expect_close(ye, yc, str(what, " output, call ", call));
        sum(ye * w).backward();
        sum(yc * w).backward();
        expect_close(xe.grad(), xc.grad(), str(what, " input gradient, call ", call));
        expect_close(be->weight.grad(), bc->weight.grad(), str(what, " weight gradient"));
        expect_close(be->bias.grad(), bc->bias.grad(), str(what, " bias gradient"));
        be->zero_grad();
        bc->zero_grad();
      }
      expect_close(be->buffers()[0], bc->buffers()[0], str(what, " running mean"));
      expect_close(be->buffers()[1], bc->buffers()[1], str(what, " running var"));
      EXPECT_EQ(f.stats().traces, 1) << what;
    }
  }
}

// A dynamic batch: the row sums' shape [s0, C, 1, 1] is symbolic, one plan
// serves every batch size.
TEST(ChannelSums, DynamicBatchMatchesEager) {
  NoGradGuard ng;
  auto fn = [](const Tensor& x) {
    Tensor m = sum(x, {0, 2, 3}, true) * 0.01;  // no size-dependent constant
    return sum((x - m) * (x - m), {0, 2, 3}, true);
  };
  auto f = compile(fn, {.dynamic = {{0, 0}}, .warmup = 0});
  for (int64_t n : {4, 6, 1, 9}) {
    Tensor x = randn({n, 3, 5, 4}) * 2.0 + 1.0;
    expect_close(fn(x), f(x), str("batch ", n));
  }
  EXPECT_LE(f.stats().traces, 2) << "one symbolic plan after the second trace";
}

// A whole training step with the backward inside the compiled function (one
// graph): conv, BatchNorm, ReLU, SGD with momentum.
TEST(ChannelSums, ConvBatchNormTrainingStepMatchesEager) {
  for (DType dt : {DType::f32, DType::f64}) {
    auto make = [dt] {
      manual_seed(12);
      auto m = std::make_shared<nn::Sequential>();
      m->push_back(std::make_shared<nn::Conv2d>(3, 4, nn::Size2{3, 3},
                                                nn::Conv2dOptions{.padding = 1, .bias = false}));
      m->push_back(std::make_shared<nn::BatchNorm2d>(4));
      m->push_back(std::make_shared<nn::ReLU>());
      m->to(dt);
      return m;
    };
    auto me = make(), mc = make();
    optim::SGD oe(me->parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    optim::SGD oc(mc->parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    auto step = [](nn::Module& m, optim::Optimizer& o, const Tensor& x) {
      o.zero_grad();
      Tensor loss = sum(m.forward(x) * m.forward(x));
      loss.backward();
      o.step();
      return loss.detach();
    };
    auto f = compile([&](const Tensor& x) { return step(*mc, oc, x); }, {.warmup = 0});
    manual_seed(13);
    for (int s = 0; s < 4; ++s) {
      Tensor x = randn({3, 3, 5, 6}).to(dt);
      const double le = step(*me, oe, x).item<double>();
      const double lc = f(x).item<double>();
      EXPECT_NEAR(le, lc, tol(dt) * (1 + std::abs(le))) << dt << " step " << s;
    }
    auto pe = me->parameters(), pc = mc->parameters();
    for (size_t i = 0; i < pe.size(); ++i) expect_close(pe[i], pc[i], str(dt, " parameter ", i));
    EXPECT_EQ(f.stats().traces, 2) << "the first step, then with momentum buffers";
  }
}

// Raw sums over leading and trailing dims, with and without keepdim, and the
// row sum of a square fused into its producer: the square is never stored, so
// the call's peak stays below the square's size.
TEST(ChannelSums, RawSumsMatchEagerAndFuseTheirProducer) {
  NoGradGuard ng;
  for (DType dt : {DType::f32, DType::f64}) {
    auto fn = [](const Tensor& x) {
      return std::vector<Tensor>{sum(x * x, {0, 2, 3}, true), sum(exp(x * 0.1), {0, -1}, false)};
    };
    auto f = compile(fn, {.warmup = 0});
    for (const Dims& shape : kShapes) {
      Tensor x = randn(shape).to(dt);
      auto e = fn(x), c = f(x);
      for (size_t k = 0; k < e.size(); ++k) expect_close(e[k], c[k], str(dt, shape, " sum ", k));
    }
    auto sq = compile([](const Tensor& x) { return sum(x * x, {0, 2, 3}, true); }, {.warmup = 0});
    Tensor x = randn({8, 4, 16, 16}).to(dt);
    expect_close(sum(x * x, {0, 2, 3}, true), sq(x), str(dt, " square"));
    EXPECT_LT(sq.stats().last_peak_bytes, x.numel() * static_cast<int64_t>(dtype_size(dt)))
        << "the square was stored";
  }
}

}  // namespace
}  // namespace kiln
