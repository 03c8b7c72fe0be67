// Verifies the loss functions (losses.cpp) against naive loop references of
// PyTorch's formulas, plus gradients, double backward and error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "kiln/kiln.h"
#include "symbolic_recorder.h"
#include "test_util.h"

using namespace kiln;

namespace {

using V = std::vector<double>;
using I = std::vector<int64_t>;

V randv(size_t n, uint32_t seed, double lo = -2.0, double hi = 2.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  V v(n);
  for (double& x : v) x = d(gen);
  return v;
}
Tensor f64(const V& v, const Dims& shape) {
  return from_vector<double>(v, shape);
}
Tensor i64(const I& v, const Dims& shape) {
  return from_vector<int64_t>(v, shape);
}
V vals(const Tensor& t) {
  return t.to_vector<double>();
}
double val(const Tensor& t) {
  return t.to_vector<double>().at(0);
}
void expect_near(const V& got, const V& want, double tol = 1e-12) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << "element " << i;
}
using kiln::testing::expect_error;
Tensor leaf(const V& v, const Dims& shape) {
  return f64(v, shape).requires_grad_();
}
double sum_of(const V& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

// log_softmax over classes of logits [N, C, D] (row-major), as lp[(n * D + j) * C + c].
V log_probs(const V& x, size_t N, size_t C, size_t D) {
  V lp(N * C * D);
  for (size_t n = 0; n < N; ++n)
    for (size_t j = 0; j < D; ++j) {
      double m = -std::numeric_limits<double>::infinity(), s = 0;
      for (size_t c = 0; c < C; ++c) m = std::max(m, x[(n * C + c) * D + j]);
      for (size_t c = 0; c < C; ++c) s += std::exp(x[(n * C + c) * D + j] - m);
      for (size_t c = 0; c < C; ++c)
        lp[(n * D + j) * C + c] = x[(n * C + c) * D + j] - m - std::log(s);
    }
  return lp;
}

// PyTorch's per-position cross entropy with class indices (0 where ignored); `kept`
// receives the number of non-ignored targets.
V ce_ref(const V& x, const I& t, size_t N, size_t C, size_t D, int64_t ignore, double eps,
         double& kept) {
  V lp = log_probs(x, N, C, D), out(N * D, 0.0);
  kept = 0;
  for (size_t p = 0; p < N * D; ++p) {
    if (t[p] == ignore) continue;
    kept += 1;
    double smooth = 0;
    for (size_t c = 0; c < C; ++c) smooth -= lp[p * C + c];
    out[p] = (1 - eps) * -lp[p * C + static_cast<size_t>(t[p])] + eps / double(C) * smooth;
  }
  return out;
}

// Cross entropy with class probabilities t [N, C, D] (same layout as the logits).
V ce_prob_ref(const V& x, const V& t, size_t N, size_t C, size_t D, double eps) {
  V lp = log_probs(x, N, C, D), out(N * D, 0.0);
  for (size_t n = 0; n < N; ++n)
    for (size_t j = 0; j < D; ++j)
      for (size_t c = 0; c < C; ++c) {
        double tc = t[(n * C + c) * D + j] * (1 - eps) + eps / double(C);
        out[n * D + j] -= lp[(n * D + j) * C + c] * tc;
      }
  return out;
}

CrossEntropyOptions opts(Reduction r, int64_t ignore = -100, double eps = 0.0) {
  CrossEntropyOptions o;
  o.reduction = r;
  o.ignore_index = ignore;
  o.label_smoothing = eps;
  return o;
}

std::string check_double(const std::function<Tensor(const Tensor&)>& f, const Tensor& x) {
  Tensor w = rand(f(x).shape(), DType::f64) - 0.5;
  return gradcheck(
      [&](const std::vector<Tensor>& in) {
        GradModeGuard on(true);  // gradcheck evaluates without grad; this needs the graph
        return grad({f(in[0])}, {in[0]}, {w}, {.retain_graph = true, .create_graph = true});
      },
      {x});
}

}  // namespace

// cross_entropy on [N, C] logits: all reductions, a transposed input, and a known value.
TEST(LossCrossEntropy, ClassIndices2D) {
  const size_t N = 4, C = 5;
  V x = randv(N * C, 1, -3, 3);
  I t = {0, 4, 2, 2};
  double kept;
  V want = ce_ref(x, t, N, C, 1, -100, 0.0, kept);
  Tensor logits = f64(x, {4, 5}), target = i64(t, {4});
  expect_near(vals(cross_entropy(logits, target, opts(Reduction::kNone))), want);
  EXPECT_NEAR(val(cross_entropy(logits, target)), sum_of(want) / 4.0, 1e-12);
  EXPECT_NEAR(val(cross_entropy(logits, target, opts(Reduction::kSum))), sum_of(want), 1e-12);
  EXPECT_EQ(cross_entropy(logits, target).shape(), Dims{});
  // Logits given as the transpose of a [C, N] buffer.
  V xt(N * C);
  for (size_t n = 0; n < N; ++n)
    for (size_t c = 0; c < C; ++c) xt[c * N + n] = x[n * C + c];
  Tensor nc = f64(xt, {5, 4}).transpose(0, 1);
  expect_near(vals(cross_entropy(nc, target, opts(Reduction::kNone))), want);
  // PyTorch: F.cross_entropy(torch.tensor([[1., 2., 3.]]), torch.tensor([0])) = 2.4076.
  Tensor l = cross_entropy(from_vector<float>({1, 2, 3}, {1, 3}), i64({0}, {1}));
  EXPECT_EQ(l.dtype(), DType::f32);
  EXPECT_NEAR(val(l), 2.4076059644443806, 1e-6);
  // Unbatched [C] logits with a 0-d target.
  EXPECT_NEAR(val(cross_entropy(from_vector<double>({1, 2, 3}), i64({0}, {1}).reshape({}))),
              2.4076059644443806, 1e-12);
}

// cross_entropy on [N, C, d1, d2] logits with [N, d1, d2] targets.
TEST(LossCrossEntropy, ClassIndicesSpatial) {
  const size_t N = 2, C = 3, D = 6;
  V x = randv(N * C * D, 2, -3, 3);
  I t = {0, 1, 2, 2, 1, 0, 1, 1, 0, 2, 2, 2};
  double kept;
  V want = ce_ref(x, t, N, C, D, -100, 0.0, kept);
  Tensor logits = f64(x, {2, 3, 2, 3}), target = i64(t, {2, 2, 3});
  Tensor none = cross_entropy(logits, target, opts(Reduction::kNone));
  EXPECT_EQ(none.shape(), (Dims{2, 2, 3}));
  expect_near(vals(none), want);
  EXPECT_NEAR(val(cross_entropy(logits, target)), sum_of(want) / 12.0, 1e-12);
}

// ignore_index zeroes positions and Mean divides by the non-ignored count (NaN if none).
TEST(LossCrossEntropy, IgnoreIndex) {
  const size_t N = 5, C = 3;
  V x = randv(N * C, 3);
  I t = {1, -100, 0, 2, -100};
  double kept;
  V want = ce_ref(x, t, N, C, 1, -100, 0.0, kept);
  EXPECT_EQ(kept, 3.0);
  Tensor logits = f64(x, {5, 3}), target = i64(t, {5});
  expect_near(vals(cross_entropy(logits, target, opts(Reduction::kNone))), want);
  EXPECT_NEAR(val(cross_entropy(logits, target)), sum_of(want) / 3.0, 1e-12);
  EXPECT_NEAR(val(cross_entropy(logits, target, opts(Reduction::kSum))), sum_of(want), 1e-12);
  // A custom ignore_index that is also a valid class.
  I t2 = {1, 2, 0, 2, 1};
  V want2 = ce_ref(x, t2, N, C, 1, 2, 0.0, kept);
  EXPECT_NEAR(val(cross_entropy(logits, i64(t2, {5}), opts(Reduction::kMean, 2))),
              sum_of(want2) / kept, 1e-12);
  EXPECT_TRUE(std::isnan(val(cross_entropy(logits, i64({-100, -100, -100, -100, -100}, {5})))));
  // Ignored positions get no gradient.
  Tensor g = leaf(x, {5, 3});
  cross_entropy(g, target).backward();
  V gv = vals(g.grad());
  for (size_t c = 0; c < C; ++c) {
    EXPECT_EQ(gv[1 * C + c], 0.0);
    EXPECT_EQ(gv[4 * C + c], 0.0);
  }
}

// label_smoothing follows PyTorch's formula, including with ignored targets.
TEST(LossCrossEntropy, LabelSmoothing) {
  const size_t N = 4, C = 6;
  V x = randv(N * C, 4, -3, 3);
  I t = {5, 0, -100, 3};
  for (double eps : {0.1, 0.5, 1.0}) {
    double kept;
    V want = ce_ref(x, t, N, C, 1, -100, eps, kept);
    Tensor logits = f64(x, {4, 6}), target = i64(t, {4});
    expect_near(vals(cross_entropy(logits, target, opts(Reduction::kNone, -100, eps))), want);
    EXPECT_NEAR(val(cross_entropy(logits, target, opts(Reduction::kMean, -100, eps))),
                sum_of(want) / kept, 1e-12);
    EXPECT_NEAR(val(cross_entropy(logits, target, opts(Reduction::kSum, -100, eps))), sum_of(want),
                1e-12);
  }
  // By hand: logits [1, 2, 3], target 0, eps 0.1: 0.9 * 2.4076 + 0.1 / 3 * 4.2228.
  double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  double want = 0.9 * (lse - 1) + 0.1 / 3 * (3 * lse - 6);
  EXPECT_NEAR(val(cross_entropy(from_vector<double>({1, 2, 3}, {1, 3}), i64({0}, {1}),
                                opts(Reduction::kMean, -100, 0.1))),
              want, 1e-12);
}

// Class-probability targets (same shape as logits), with smoothing and all reductions.
TEST(LossCrossEntropy, ProbabilityTargets) {
  const size_t N = 3, C = 4, D = 2;
  V x = randv(N * C * D, 5), tv = randv(N * C * D, 6, 0, 1);
  Tensor logits = f64(x, {3, 4, 2}), target = f64(tv, {3, 4, 2});
  for (double eps : {0.0, 0.2}) {
    V want = ce_prob_ref(x, tv, N, C, D, eps);
    expect_near(vals(cross_entropy(logits, target, opts(Reduction::kNone, -100, eps))), want);
    EXPECT_NEAR(val(cross_entropy(logits, target, opts(Reduction::kMean, -100, eps))),
                sum_of(want) / double(N * D), 1e-12);
    EXPECT_NEAR(val(cross_entropy(logits, target, opts(Reduction::kSum, -100, eps))), sum_of(want),
                1e-12);
  }
  // One-hot probabilities equal class indices.
  Tensor l2 = f64(randv(6, 7), {2, 3});
  Tensor onehot = f64({0, 0, 1, 1, 0, 0}, {2, 3});
  EXPECT_NEAR(val(cross_entropy(l2, onehot)), val(cross_entropy(l2, i64({2, 0}, {2}))), 1e-12);
  // Gradients w.r.t. both logits and probabilities.
  EXPECT_EQ(gradcheck(
                [](const std::vector<Tensor>& in) {
                  return std::vector<Tensor>{
                      cross_entropy(in[0], in[1], opts(Reduction::kMean, -100, 0.1))};
                },
                {leaf(x, {3, 4, 2}), leaf(tv, {3, 4, 2})}),
            "");
}

// cross_entropy gradients (ignore_index, smoothing, spatial) and double backward.
TEST(LossCrossEntropy, Gradients) {
  V x = randv(2 * 3 * 4, 8);
  Tensor t = i64({0, 2, -100, 1, 1, 1, 0, -100}, {2, 4});
  for (Reduction r : {Reduction::kNone, Reduction::kMean, Reduction::kSum}) {
    EXPECT_EQ(gradcheck(
                  [&](const std::vector<Tensor>& in) {
                    return std::vector<Tensor>{cross_entropy(in[0], t, opts(r, -100, 0.2))};
                  },
                  {leaf(x, {2, 3, 4})}),
              "");
  }
  Tensor t2 = i64({0, 2, 1, 1}, {4});
  EXPECT_EQ(check_double([&](const Tensor& l) { return cross_entropy(l, t2); },
                         leaf(randv(12, 9), {4, 3})),
            "");
  EXPECT_EQ(
      check_double(
          [&](const Tensor& l) { return cross_entropy(l, t, opts(Reduction::kMean, -100, 0.3)); },
          leaf(x, {2, 3, 4})),
      "");
}

// cross_entropy reports shape, dtype and option errors with its name.
TEST(LossCrossEntropy, Errors) {
  Tensor logits = f64(randv(40, 10), {4, 10});
  expect_error(
      [&] {
        cross_entropy(logits, i64({1, 2, 3}, {3}));
      },
      "[cross_entropy] target shape [3] does not match logits shape [4, 10]");
  expect_error([&] { cross_entropy(logits, f64({1, 2, 3, 4}, {4})); }, "[cross_entropy]");
  expect_error([&] { cross_entropy(logits, cast(zeros({4, 10}), DType::i64)); }, "[cross_entropy]");
  expect_error(
      [&] {
        cross_entropy(logits, zeros({4, 10}, DType::f64), opts(Reduction::kMean, 3));
      },
      "[cross_entropy] ignore_index");
  expect_error(
      [&] {
        cross_entropy(logits, i64({1, 2, 3, 4}, {4}), opts(Reduction::kMean, -100, 1.5));
      },
      "[cross_entropy] label_smoothing");
  expect_error([&] { cross_entropy(f64({1}, {1}).reshape({}), i64({0}, {1}).reshape({})); },
               "[cross_entropy] expected logits");
  expect_error(
      [&] {
        cross_entropy(cast(logits, DType::i64), i64({1, 2, 3, 4}, {4}));
      },
      "[cross_entropy]");
  // Out-of-range classes are caught by gather's bounds check.
  EXPECT_THROW(cross_entropy(logits, i64({1, 2, 10, 4}, {4})), Error);
}

// nll_loss on log-probabilities equals cross_entropy on the logits; ignore_index works.
TEST(LossNll, ValuesGradientsErrors) {
  const size_t N = 4, C = 3;
  V x = randv(N * C, 11);
  I t = {2, -100, 0, 1};
  double kept;
  V want = ce_ref(x, t, N, C, 1, -100, 0.0, kept);
  Tensor lp = log_softmax(f64(x, {4, 3}), 1), target = i64(t, {4});
  expect_near(vals(nll_loss(lp, target, opts(Reduction::kNone))), want);
  EXPECT_NEAR(val(nll_loss(lp, target)), sum_of(want) / kept, 1e-12);
  EXPECT_NEAR(val(nll_loss(lp, target, opts(Reduction::kSum))), sum_of(want), 1e-12);
  // nll_loss just picks -input[target]: it does not normalize.
  expect_near(vals(nll_loss(f64({1, 2, 3, 4}, {2, 2}), i64({1, 0}, {2}), opts(Reduction::kNone))),
              {-2, -3});
  EXPECT_EQ(gradcheck(
                [&](const std::vector<Tensor>& in) {
                  return std::vector<Tensor>{nll_loss(in[0], target)};
                },
                {leaf(x, {4, 3})}),
            "");
  expect_error([&] { nll_loss(lp, i64({1, 2}, {2})); }, "[nll_loss] target shape [2]");
  expect_error([&] { nll_loss(lp, target, opts(Reduction::kMean, -100, 0.1)); }, "[nll_loss]");
  expect_error([&] { nll_loss(lp, f64({0, 1, 2, 0}, {4})); }, "[nll_loss]");
}

// mse_loss: all reductions on a transposed input, gradients, shape errors.
TEST(LossMse, ValuesGradientsErrors) {
  V a = randv(6, 12), b = randv(6, 13);
  Tensor x = f64(a, {3, 2}).transpose(0, 1);  // [2, 3]: x[i][j] = a[j * 2 + i]
  Tensor y = f64(b, {2, 3});
  V want(6);
  for (size_t i = 0; i < 2; ++i)
    for (size_t j = 0; j < 3; ++j) {
      double d = a[j * 2 + i] - b[i * 3 + j];
      want[i * 3 + j] = d * d;
    }
  expect_near(vals(mse_loss(x, y, Reduction::kNone)), want);
  EXPECT_NEAR(val(mse_loss(x, y)), sum_of(want) / 6.0, 1e-12);
  EXPECT_NEAR(val(mse_loss(x, y, Reduction::kSum)), sum_of(want), 1e-12);
  EXPECT_EQ(
      gradcheck(
          [](const std::vector<Tensor>& in) { return std::vector<Tensor>{mse_loss(in[0], in[1])}; },
          {leaf(a, {6}), leaf(b, {6})}),
      "");
  expect_error([&] { mse_loss(x, f64(b, {6})); }, "[mse_loss] target shape [6]");
  expect_error([&] { mse_loss(x, f64(b, {6})); }, "input shape [2, 3]");
  expect_error([&] { mse_loss(i64({1}, {1}), f64({1}, {1})); }, "[mse_loss]");
}

// binary_cross_entropy: PyTorch's formula, log clamped at -100, finite gradients at 0/1.
TEST(LossBce, ValuesGradientsErrors) {
  V p = randv(8, 14, 0.02, 0.98), t = randv(8, 15, 0, 1);
  V want(8);
  for (size_t i = 0; i < 8; ++i)
    want[i] = -(t[i] * std::log(p[i]) + (1 - t[i]) * std::log(1 - p[i]));
  Tensor x = f64(p, {2, 4}), y = f64(t, {2, 4});
  expect_near(vals(binary_cross_entropy(x, y, Reduction::kNone)), want);
  EXPECT_NEAR(val(binary_cross_entropy(x, y)), sum_of(want) / 8.0, 1e-12);
  EXPECT_NEAR(val(binary_cross_entropy(x, y, Reduction::kSum)), sum_of(want), 1e-12);
  // PyTorch: F.binary_cross_entropy([0, 1, 0, 1], [1, 0, 0, 1], 'none') = [100, 100, 0, 0].
  Tensor edge = f64({0, 1, 0, 1}, {4}).requires_grad_();
  Tensor le = binary_cross_entropy(edge, f64({1, 0, 0, 1}, {4}), Reduction::kNone);
  expect_near(vals(le), {100, 100, 0, 0});
  le.sum().backward();
  for (double g : vals(edge.grad())) EXPECT_TRUE(std::isfinite(g));
  EXPECT_EQ(binary_cross_entropy(from_vector<float>({0.5f}), from_vector<float>({1.0f})).dtype(),
            DType::f32);
  EXPECT_EQ(gradcheck(
                [](const std::vector<Tensor>& in) {
                  return std::vector<Tensor>{binary_cross_entropy(in[0], in[1], Reduction::kSum)};
                },
                {leaf(p, {8}), leaf(t, {8})}),
            "");
  expect_error([&] { binary_cross_entropy(x, f64(t, {8})); },
               "[binary_cross_entropy] target shape [8] does not match input shape [2, 4]");
  expect_error(
      [&] {
        binary_cross_entropy(x, i64({0, 1, 0, 1, 0, 1, 0, 1}, {2, 4}));
      },
      "[binary_cross_entropy]");
}

// binary_cross_entropy_with_logits: matches the naive formula, stays finite for |x| = 100.
TEST(LossBceWithLogits, ValuesGradientsErrors) {
  V x = randv(10, 16, -5, 5), t = randv(10, 17, 0, 1);
  V want(10);
  for (size_t i = 0; i < 10; ++i) {
    double s = 1 / (1 + std::exp(-x[i]));
    want[i] = -(t[i] * std::log(s) + (1 - t[i]) * std::log(1 - s));
  }
  Tensor lx = f64(x, {5, 2}).transpose(0, 1), ty = f64(t, {5, 2}).transpose(0, 1);
  V wt(10);
  for (size_t i = 0; i < 2; ++i)
    for (size_t j = 0; j < 5; ++j) wt[i * 5 + j] = want[j * 2 + i];
  expect_near(vals(binary_cross_entropy_with_logits(lx, ty, Reduction::kNone)), wt, 1e-10);
  EXPECT_NEAR(val(binary_cross_entropy_with_logits(lx, ty)), sum_of(want) / 10, 1e-10);
  // Naive log(sigmoid(x)) gives inf here; the stable form gives the exact values.
  Tensor big = f64({100, -100, 100, -100, 0}, {5});
  expect_near(
      vals(binary_cross_entropy_with_logits(big, f64({0, 1, 1, 0, 1}, {5}), Reduction::kNone)),
      {100, 100, std::log1p(std::exp(-100.0)), std::log1p(std::exp(-100.0)), std::log(2.0)});
  // At x = 0 the gradient is sigmoid(0) - t exactly.
  Tensor z = f64({0.0, 0.0}, {2}).requires_grad_();
  binary_cross_entropy_with_logits(z, f64({1.0, 0.25}, {2}), Reduction::kSum).backward();
  expect_near(vals(z.grad()), {-0.5, 0.25});
  EXPECT_EQ(gradcheck(
                [](const std::vector<Tensor>& in) {
                  return std::vector<Tensor>{binary_cross_entropy_with_logits(in[0], in[1])};
                },
                {leaf(x, {10}), leaf(t, {10})}),
            "");
  expect_error(
      [&] {
        binary_cross_entropy_with_logits(f64(x, {10}), f64(t, {2, 5}));
      },
      "[binary_cross_entropy_with_logits] target shape [2, 5]");
}

// Every loss runs on symbolic tensors (no data reads) with the right shapes.
TEST(LossTracing, RunsWithoutData) {
  kiln::testing::SymbolicRecorder rec;
  Recorder* prev = set_recorder(&rec);
  try {
    Tensor logits = zeros({4, 5, 3}), t = zeros({4, 3}, DType::i64);
    EXPECT_TRUE(cross_entropy(logits, t, opts(Reduction::kMean, -100, 0.1)).is_symbolic());
    EXPECT_EQ(cross_entropy(logits, t, opts(Reduction::kNone)).shape(), (Dims{4, 3}));
    EXPECT_EQ(cross_entropy(logits, zeros({4, 5, 3})).shape(), Dims{});
    EXPECT_EQ(nll_loss(logits, t, opts(Reduction::kSum)).shape(), Dims{});
    Tensor p = zeros({6}), y = zeros({6});
    EXPECT_EQ(mse_loss(p, y, Reduction::kNone).shape(), (Dims{6}));
    EXPECT_TRUE(binary_cross_entropy(p, y).is_symbolic());
    EXPECT_TRUE(binary_cross_entropy_with_logits(p, y, Reduction::kSum).is_symbolic());
  } catch (...) {
    set_recorder(prev);
    throw;
  }
  set_recorder(prev);
}
