// Eager mode's fused batch_norm (forward and backward, batch or running
// statistics) and ReLU gradient (runtime/src/ops/fused_composites.cpp) against
// their primitive-op forms (set_eager_fusion(false)): values, gradients of x,
// weight and bias, running-stat updates, special values, odd sizes,
// non-contiguous inputs, gradcheck and double backward, and the fallbacks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "test_util.h"

using namespace kiln;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct FusionScope {
  bool prev = eager_fusion_enabled();
  explicit FusionScope(bool on) { set_eager_fusion(on); }
  ~FusionScope() { set_eager_fusion(prev); }
};

// Equal within tol relative to max(1, |want|); inf and NaN where the reference has them.
void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  std::vector<double> g = cast(got, DType::f64).contiguous().to_vector<double>();
  std::vector<double> w = cast(want, DType::f64).contiguous().to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i]) || std::isinf(w[i]))
      EXPECT_TRUE(std::isnan(w[i]) ? std::isnan(g[i]) : g[i] == w[i])
          << what << " element " << i << ": got " << g[i] << ", want " << w[i];
    else
      EXPECT_NEAR(g[i], w[i], tol * std::max(1.0, std::abs(w[i]))) << what << " element " << i;
  }
}

double tol_of(DType dt) {
  return dt == DType::f32 ? 1e-4 : 1e-11;
}

// One batch_norm call, fused or not, from fresh copies of everything: the
// output, the gradients of x, weight and bias, and the running statistics after.
struct BnRun {
  Tensor y, gx, gw, gb, rm, rv;
};
BnRun run_bn(bool fused, const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& gy,
             bool training, bool grads) {
  FusionScope s(fused);
  BnRun r;
  Tensor x = x0.detach().clone().requires_grad_(grads);
  Tensor w = w0.defined() ? w0.detach().clone().requires_grad_(grads) : Tensor();
  Tensor b = b0.defined() ? b0.detach().clone().requires_grad_(grads) : Tensor();
  // Running statistics: the same fixed values in every run.
  const int64_t C = x0.size(1);
  r.rm = cast(arange(0, C) * 0.25 - 0.5, x0.dtype());
  r.rv = cast(arange(0, C) * 0.5 + 0.75, x0.dtype());
  r.y = nn::functional::batch_norm(x, r.rm, r.rv, w, b, training, 0.1, 1e-5);
  if (grads) {
    r.y.backward(gy);
    r.gx = x.grad(), r.gw = w.defined() ? w.grad() : Tensor(),
    r.gb = b.defined() ? b.grad() : Tensor();
  }
  return r;
}

void expect_same(const BnRun& f, const BnRun& p, double tol, const std::string& what) {
  expect_close(f.y, p.y, tol, what + " y");
  expect_close(f.rm, p.rm, tol, what + " running_mean");
  expect_close(f.rv, p.rv, tol, what + " running_var");
  for (auto [a, b, n] :
       {std::tuple{f.gx, p.gx, "gx"}, std::tuple{f.gw, p.gw, "gw"}, std::tuple{f.gb, p.gb, "gb"}}) {
    ASSERT_EQ(a.defined(), b.defined()) << what << " " << n;
    if (a.defined()) expect_close(a, b, tol, what + " " + n);
  }
}

TEST(EagerFusionBatchNorm, MatchesThePrimitiveOps) {
  manual_seed(21);
  for (DType dt : {DType::f32, DType::f64}) {
    // 2-D, 3-D, 4-D; spatial sizes around the lane width; a channel-last view.
    std::vector<Tensor> xs = {cast(randn({9, 5}) * 3.0, dt), cast(randn({4, 3, 17}), dt),
                              cast(randn({3, 6, 5, 7}) + 2.0, dt),
                              cast(randn({2, 4, 4, 3}), dt).permute({0, 3, 1, 2})};
    for (size_t k = 0; k < xs.size(); ++k) {
      const Tensor& x = xs[k];
      const int64_t C = x.size(1);
      Tensor w = cast(randn({C}), dt), b = cast(randn({C}), dt), gy = cast(randn(x.shape()), dt);
      for (bool training : {true, false})
        for (int affine = 0; affine < 4; ++affine) {
          const Tensor wa = affine & 1 ? w : Tensor(), ba = affine & 2 ? b : Tensor();
          const std::string what =
              str("x", k, training ? " train" : " eval", " affine ", affine, " ", dt);
          expect_same(run_bn(true, x, wa, ba, gy, training, true),
                      run_bn(false, x, wa, ba, gy, training, true), tol_of(dt), what);
          expect_same(run_bn(true, x, wa, ba, gy, training, false),
                      run_bn(false, x, wa, ba, gy, training, false), tol_of(dt), what + " nograd");
        }
    }
  }
}

TEST(EagerFusionBatchNorm, SpecialValuesAndOneNode) {
  FusionScope on(true);
  // A channel holding inf / NaN is NaN throughout, like the composite; others unaffected.
  Tensor x = from_vector(std::vector<double>{1.0, kInf, 2.0, 3.0, -0.0, 0.0, kNaN, 1.0}, {4, 2});
  Tensor fused = nn::functional::batch_norm(x, {}, {}, {}, {}, true, 0.1, 1e-5);
  Tensor plain;
  {
    FusionScope off(false);
    plain = nn::functional::batch_norm(x, {}, {}, {}, {}, true, 0.1, 1e-5);
  }
  expect_close(fused, plain, 1e-6, "special");
  Tensor xr = randn({4, 3, 2}).requires_grad_();
  EXPECT_EQ(nn::functional::batch_norm(xr, {}, {}, {}, {}, true, 0.1, 1e-5).grad_fn()->name(),
            "BatchNormBackward");
  // A module in training and eval mode: the same values as unfused.
  nn::BatchNorm2d bn(3), bn_plain(3);
  Tensor img = randn({2, 3, 5, 5});
  for (bool train : {true, false}) {
    bn.train(train), bn_plain.train(train);
    Tensor a = bn.forward(img), c;
    {
      FusionScope off(false);
      c = bn_plain.forward(img);
    }
    expect_close(a, c, 1e-5, train ? "module train" : "module eval");
    expect_close(bn.running_var, bn_plain.running_var, 1e-6, "module running_var");
  }
}

TEST(EagerFusionBatchNorm, GradcheckAndDoubleBackward) {
  manual_seed(22);
  FusionScope on(true);
  for (bool training : {true, false}) {
    Tensor rm = rand({3}, DType::f64), rv = rand({3}, DType::f64) + 0.5;
    auto f = [&](const std::vector<Tensor>& in) {
      // Fresh running buffers per call: training updates them.
      return std::vector<Tensor>{nn::functional::batch_norm(in[0], rm.clone(), rv.clone(), in[1],
                                                            in[2], training, 0.1, 1e-5)};
    };
    Tensor x = randn({4, 3, 2}, DType::f64).requires_grad_();
    Tensor w = randn({3}, DType::f64).requires_grad_(), b = randn({3}, DType::f64).requires_grad_();
    EXPECT_EQ(gradcheck(f, {x, w, b}), "") << training;
    Tensor gy = randn({4, 3, 2}, DType::f64);
    EXPECT_EQ(gradcheck(
                  [&](const std::vector<Tensor>& in) {
                    GradModeGuard g(true);
                    return grad({f(in)[0]}, {in[0], in[1]}, {gy},
                                {.retain_graph = true, .create_graph = true});
                  },
                  {x, w, b}),
              "")
        << training << " (double backward)";
  }
}

TEST(EagerFusionBatchNorm, OtherCallsRunThePrimitiveOps) {
  FusionScope on(true);
  Tensor x = randn({4, 3}).requires_grad_();
  auto node = [](const Tensor& y) { return y.grad_fn()->name(); };
  // A weight of another dtype, half precision, fusion off.
  EXPECT_NE(node(nn::functional::batch_norm(x, {}, {}, ones({3}, DType::f64), {}, true, 0.1, 1e-5)),
            "BatchNormBackward");
  EXPECT_NE(node(nn::functional::batch_norm(cast(x, DType::bf16), {}, {}, {}, {}, true, 0.1, 1e-5)),
            "BatchNormBackward");
  FusionScope off(false);
  EXPECT_NE(node(nn::functional::batch_norm(x, {}, {}, {}, {}, true, 0.1, 1e-5)),
            "BatchNormBackward");
}

TEST(EagerFusionRelu, GradientMatchesWhere) {
  manual_seed(23);
  for (DType dt : {DType::f32, DType::f64}) {
    // Sizes around the vector width and the pool's grain; zeros, -0, inf, NaN.
    for (int64_t n : {1, 7, 8, 33, 100003}) {
      Tensor x0 = cast(randn({n}), dt);
      if (n == 33) {
        Tensor s = from_vector(std::vector<double>{0.0, -0.0, kInf, -kInf, kNaN, 1e-40}, {6});
        x0.slice(0, 0, 6).copy_(cast(s, dt));
      }
      Tensor gy = cast(randn({n}), dt);
      auto run = [&](bool on) {
        FusionScope s(on);
        Tensor x = x0.detach().requires_grad_();
        relu(x).backward(gy);
        return x.grad();
      };
      Tensor f = run(true), p = run(false);
      EXPECT_TRUE(equal(f, p)) << n << " " << dt;
    }
    // A non-contiguous gradient (expanded) reaches the fused kernel densely.
    Tensor x = cast(randn({3, 4}), dt).requires_grad_();
    Tensor g = cast(randn({4}), dt).expand({3, 4});
    relu(x).backward(g);
    Tensor want = where(gt(relu(x.detach()), 0.0), g, 0.0);
    EXPECT_TRUE(equal(x.grad(), want));
  }
}

TEST(EagerFusionRelu, DoubleBackwardStillBuildsTheGraph) {
  FusionScope on(true);
  Tensor x = randn({5}, DType::f64).requires_grad_();
  EXPECT_EQ(gradcheck(
                [](const std::vector<Tensor>& in) {
                  GradModeGuard g(true);
                  Tensor y = relu(in[0]) * in[0];
                  return grad({y}, {in[0]}, {ones({5}, DType::f64)},
                              {.retain_graph = true, .create_graph = true});
                },
                {x}),
            "");
}

}  // namespace
