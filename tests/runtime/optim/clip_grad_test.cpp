// Verifies clip_grad_norm_ (value, effect, inf and 1-norms, non-finite handling)
// and clip_grad_value_.
#include <cmath>
#include <limits>

#include "optim_test_util.h"

using namespace kiln;
using namespace kiln::optim;
using namespace kiln::optim::testing;

namespace {
Tensor param_with_grad(std::vector<double> grad) {
  Tensor p = zeros({static_cast<int64_t>(grad.size())}, DType::f64).requires_grad_();
  p.set_grad(from_vector<double>(grad));
  return p;
}
}  // namespace

// The 2-norm over all grads is returned and every grad is scaled by max_norm / (norm + 1e-6).
TEST(ClipGradNorm, ScalesToMaxNorm) {
  Tensor a = param_with_grad({3.0, 4.0}), b = param_with_grad({12.0});
  Tensor none = zeros({2}, DType::f64).requires_grad_();  // no grad: skipped
  Tensor total = clip_grad_norm_({a, b, none}, 6.5);
  EXPECT_EQ(total.dim(), 0);
  EXPECT_DOUBLE_EQ(total.item<double>(), 13.0);
  double coef = 6.5 / (13.0 + 1e-6);
  auto ga = a.grad().to_vector<double>(), gb = b.grad().to_vector<double>();
  EXPECT_DOUBLE_EQ(ga[0], 3.0 * coef);
  EXPECT_DOUBLE_EQ(ga[1], 4.0 * coef);
  EXPECT_DOUBLE_EQ(gb[0], 12.0 * coef);
  EXPECT_FALSE(none.grad().defined());
  // The clipped norm is max_norm (up to the 1e-6 guard).
  EXPECT_NEAR(clip_grad_norm_({a, b}, 100.0).item<double>(), 6.5, 1e-6);
}

// Grads already within max_norm are left unchanged (the factor is clamped at 1).
TEST(ClipGradNorm, NoScaleUp) {
  Tensor a = param_with_grad({0.3, -0.4});
  EXPECT_DOUBLE_EQ(clip_grad_norm_({a}, 1.0).item<double>(), 0.5);
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{0.3, -0.4}));
}

// norm_type = inf uses the largest |g|; norm_type = 1 sums |g|; other p use (sum |g|^p)^(1/p).
TEST(ClipGradNorm, OtherNorms) {
  double inf = std::numeric_limits<double>::infinity();
  Tensor a = param_with_grad({1.0, -5.0}), b = param_with_grad({2.0});
  EXPECT_DOUBLE_EQ(clip_grad_norm_({a, b}, 1.0, inf).item<double>(), 5.0);
  EXPECT_DOUBLE_EQ(a.grad().to_vector<double>()[1], -5.0 * (1.0 / (5.0 + 1e-6)));
  Tensor c = param_with_grad({1.0, -5.0}), d = param_with_grad({2.0});
  EXPECT_DOUBLE_EQ(clip_grad_norm_({c, d}, 100.0, 1.0).item<double>(), 8.0);
  Tensor e = param_with_grad({1.0, -2.0}), f = param_with_grad({2.0});
  EXPECT_NEAR(clip_grad_norm_({e, f}, 100.0, 3.0).item<double>(), std::cbrt(17.0), 1e-14);
}

// A non-finite total norm errors when asked to; otherwise it is returned.
TEST(ClipGradNorm, NonFinite) {
  double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  Tensor a = param_with_grad({1.0, inf});
  expect_error([&] { clip_grad_norm_({a}, 1.0, 2.0, true); },
               {"[clip_grad_norm_]", "non-finite", "error_if_nonfinite"});
  EXPECT_EQ(a.grad().to_vector<double>()[0], 1.0);  // untouched by the failed call
  Tensor b = param_with_grad({nan, 1.0});
  expect_error([&] { clip_grad_norm_({b}, 1.0, inf, true); }, {"non-finite"});
  EXPECT_TRUE(std::isinf(clip_grad_norm_({a}, 1.0).item<double>()));
}

// No grads at all: a zero norm and nothing to do; bad arguments are errors.
TEST(ClipGradNorm, EdgeCasesAndErrors) {
  Tensor p = zeros({2}, DType::f64).requires_grad_();
  EXPECT_EQ(clip_grad_norm_({p}, 1.0).item<double>(), 0.0);
  EXPECT_EQ(clip_grad_norm_({}, 1.0).item<double>(), 0.0);
  Tensor a = param_with_grad({1.0});
  expect_error([&] { clip_grad_norm_({a}, -1.0); }, {"[clip_grad_norm_]", "max_norm", "-1"});
  expect_error([&] { clip_grad_norm_({a}, 1.0, 0.0); }, {"[clip_grad_norm_]", "norm_type"});
  expect_error([&] { clip_grad_norm_({Tensor()}, 1.0); }, {"[clip_grad_norm_]", "undefined"});
}

// f32 grads are clipped in f32 and the norm is f32.
TEST(ClipGradNorm, Float32) {
  Tensor p = zeros({2}).requires_grad_();
  p.set_grad(from_vector<float>({3.0f, 4.0f}));
  Tensor total = clip_grad_norm_({p}, 1.0);
  EXPECT_EQ(total.dtype(), DType::f32);
  EXPECT_EQ(p.grad().dtype(), DType::f32);
  EXPECT_NEAR(p.grad().to_vector<double>()[1], 0.8, 1e-6);
}

// clip_grad_value_ clamps every grad into [-clip, clip] in place.
TEST(ClipGradValue, Clamps) {
  Tensor a = param_with_grad({-3.0, 0.5, 2.0});
  Tensor g = a.grad();
  clip_grad_value_({a}, 1.0);
  EXPECT_TRUE(a.grad().is_same(g));
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{-1.0, 0.5, 1.0}));
  expect_error([&] { clip_grad_value_({a}, -1.0); }, {"[clip_grad_value_]", "-1"});
}
