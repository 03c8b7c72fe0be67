// The direct (unit-stride) convolution kernel of ops/conv_direct.cpp, through
// conv2d and its gradients: against naive loops on many shapes (odd sizes,
// channel counts that fill no whole register tile or vector, padding,
// dilation, groups, batches of 1), thread-count independence, and gradcheck.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kiln/kiln.h"
#include "ops/conv_direct.h"
#include "test_util.h"

using namespace kiln;

namespace {

using V = std::vector<double>;

struct Case {
  int64_t N, C, H, W, O, kH, kW, p, d, groups, stride;
};

Conv2dFuncOptions options(const Case& c) {
  Conv2dFuncOptions o;
  o.stride = {c.stride, c.stride};
  o.padding = {c.p, c.p};
  o.dilation = {c.d, c.d};
  o.groups = c.groups;
  return o;
}

int64_t out_size(int64_t n, int64_t k, const Case& c) {
  return (n + 2 * c.p - c.d * (k - 1) - 1) / c.stride + 1;
}

ops::DirectConvShape shape_of(const Case& c) {
  return {c.N,
          c.C,
          c.H,
          c.W,
          c.O,
          c.kH,
          c.kW,
          out_size(c.H, c.kH, c),
          out_size(c.W, c.kW, c),
          c.stride,
          c.stride,
          c.p,
          c.p,
          c.d,
          c.d,
          c.groups};
}

// y = conv(x, w) and, for the output gradient gy, gx and gw, by direct loops;
// with each result's sum of |terms|, which bounds its rounding error.
struct Ref {
  V y, gx, gw, ya, gxa, gwa;
};
Ref reference(const Case& c, const V& x, const V& w, const V& gy) {
  const int64_t Ho = out_size(c.H, c.kH, c), Wo = out_size(c.W, c.kW, c);
  const int64_t Cg = c.C / c.groups, Og = c.O / c.groups;
  const V ys(static_cast<size_t>(c.N * c.O * Ho * Wo));
  Ref r{ys, V(x.size()), V(w.size()), ys, V(x.size()), V(w.size())};
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t o = 0; o < c.O; ++o)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const size_t yi = static_cast<size_t>(((n * c.O + o) * Ho + oh) * Wo + ow);
          for (int64_t ci = 0; ci < Cg; ++ci)
            for (int64_t i = 0; i < c.kH; ++i)
              for (int64_t j = 0; j < c.kW; ++j) {
                const int64_t ih = oh * c.stride - c.p + i * c.d;
                const int64_t iw = ow * c.stride - c.p + j * c.d;
                if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
                const int64_t ch = o / Og * Cg + ci;
                const size_t xi = static_cast<size_t>(((n * c.C + ch) * c.H + ih) * c.W + iw);
                const size_t wi = static_cast<size_t>(((o * Cg + ci) * c.kH + i) * c.kW + j);
                r.y[yi] += x[xi] * w[wi];
                r.gx[xi] += gy[yi] * w[wi];
                r.gw[wi] += gy[yi] * x[xi];
                r.ya[yi] += std::abs(x[xi] * w[wi]);
                r.gxa[xi] += std::abs(gy[yi] * w[wi]);
                r.gwa[wi] += std::abs(gy[yi] * x[xi]);
              }
        }
  return r;
}

// |got - want| <= tol * (sum of |terms| + 1): a wrong or missing term is far outside.
void expect_near(const V& got, const V& want, const V& mag, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + mag[i])) << what << " at " << i;
}

Tensor random(const Dims& shape, uint64_t seed, DType dt) {
  manual_seed(seed);
  return cast(randn(shape, DType::f64), dt);
}

// Runs conv2d forward and backward on case c and compares all three results.
void check_case(const Case& c, DType dt, uint64_t seed) {
  const std::string what = str("N", c.N, " C", c.C, " ", c.H, "x", c.W, " O", c.O, " k", c.kH, "x",
                               c.kW, " p", c.p, " d", c.d, " g", c.groups, " s", c.stride, " ", dt);
  Tensor x = random({c.N, c.C, c.H, c.W}, seed, dt).requires_grad_();
  Tensor w = random({c.O, c.C / c.groups, c.kH, c.kW}, seed + 1, dt).requires_grad_();
  Tensor y = conv2d(x, w, {}, options(c));
  Tensor gy = random(y.shape(), seed + 2, dt);
  y.backward(gy);
  const Ref r = reference(c, x.to_vector<double>(), w.to_vector<double>(), gy.to_vector<double>());
  const double tol = dt == DType::f32 ? 2e-6 : 1e-14;
  expect_near(y.to_vector<double>(), r.y, r.ya, tol, what + " forward");
  expect_near(x.grad().to_vector<double>(), r.gx, r.gxa, tol, what + " grad input");
  expect_near(w.grad().to_vector<double>(), r.gw, r.gwa, tol, what + " grad weight");
}

}  // namespace

// Hand-picked shapes at the kernel's edges: output channels 1..9 (partial
// register tiles), a single output column's worth of positions, positions
// spanning several chunks (many channels on a 41x40 image), 1x1 with padding,
// dilation, groups, and the harness's ResNet and CNN layers (batch cut to 2).
TEST(ConvDirect, MatchesReferenceAtTheEdges) {
  const Case cases[] = {
      {1, 1, 5, 5, 1, 3, 3, 1, 1, 1, 1},     {2, 3, 7, 6, 2, 3, 3, 1, 1, 1, 1},
      {1, 2, 9, 11, 3, 3, 3, 1, 1, 1, 1},    {1, 5, 6, 9, 5, 3, 3, 0, 1, 1, 1},
      {3, 4, 8, 8, 6, 3, 3, 1, 1, 1, 1},     {1, 3, 13, 7, 7, 5, 3, 2, 1, 1, 1},
      {2, 6, 10, 10, 9, 3, 3, 2, 2, 1, 1},   {1, 4, 6, 6, 8, 1, 1, 1, 1, 1, 1},
      {2, 6, 9, 8, 6, 3, 3, 1, 1, 2, 1},     {1, 6, 7, 7, 9, 3, 3, 1, 1, 3, 1},
      {1, 70, 41, 40, 5, 3, 3, 1, 1, 1, 1},  {2, 32, 32, 32, 32, 3, 3, 1, 1, 1, 1},
      {2, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1}, {2, 1, 28, 28, 32, 3, 3, 1, 1, 1, 1},
      {1, 3, 4, 4, 2, 2, 2, 1, 1, 1, 1},     {2, 8, 7, 9, 6, 3, 3, 1, 1, 2, 1},
      {1, 9, 5, 11, 19, 3, 3, 1, 1, 1, 1},
  };
  int grad_weight = 0;
  uint64_t seed = 1;
  for (const Case& c : cases) {
    ASSERT_TRUE(ops::direct_conv_applies(shape_of(c))) << c.C << " " << c.H << "x" << c.W;
    grad_weight += ops::direct_conv_grad_weight_applies(shape_of(c));
    for (DType dt : {DType::f32, DType::f64}) {
      check_case(c, dt, seed);
      seed += 3;
    }
  }
  EXPECT_GE(grad_weight, 9);  // the weight-gradient kernel, beside the forward one
}

// Random shapes, unit stride and stride 2 (the general path) alike.
TEST(ConvDirect, MatchesReferenceOnRandomShapes) {
  std::mt19937_64 rng(7);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int direct = 0;
  for (int i = 0; i < 40; ++i) {
    Case c{pick(1, 3),
           0,
           pick(3, 17),
           pick(3, 17),
           0,
           pick(1, 5),
           pick(1, 5),
           pick(0, 2),
           pick(1, 2),
           pick(1, 2),
           pick(1, 4) == 4 ? 2 : 1};
    c.C = c.groups * pick(1, 9);
    c.O = c.groups * pick(1, 11);
    if (out_size(c.H, c.kH, c) < 1 || out_size(c.W, c.kW, c) < 1) continue;
    direct += ops::direct_conv_applies(shape_of(c));
    check_case(c, i % 2 ? DType::f64 : DType::f32, 100 + 3 * static_cast<uint64_t>(i));
  }
  EXPECT_GE(direct, 15);  // the draw covers the direct kernel, not just the general path
}

// A batch of one splits each image's channel blocks over the pool: 1, 2 and 3
// threads give the same bits, forward and both gradients.
TEST(ConvDirect, ThreadCountDoesNotChangeResults) {
  const Case c{1, 8, 12, 12, 21, 3, 3, 1, 1, 1, 1};
  Tensor x0 = random({1, 8, 12, 12}, 5, DType::f32), w0 = random({21, 8, 3, 3}, 6, DType::f32);
  Tensor gy = random({1, 21, 12, 12}, 7, DType::f32);
  const int before = num_threads();
  std::vector<V> runs;
  for (int n : {1, 2, 3}) {
    set_num_threads(n);
    Tensor x = x0.detach().requires_grad_(), w = w0.detach().requires_grad_();
    Tensor y = conv2d(x, w, {}, options(c));
    y.backward(gy);
    for (const Tensor& t : {y, x.grad(), w.grad()}) runs.push_back(t.to_vector<double>());
  }
  set_num_threads(before);
  for (size_t i = 3; i < runs.size(); ++i) EXPECT_EQ(runs[i], runs[i % 3]) << i;
}

// First and second derivatives through autograd on unit-stride convolutions
// (the first case's weight gradient runs the direct kernel too).
TEST(ConvDirect, Gradcheck) {
  const Case cases[] = {{2, 4, 5, 6, 5, 3, 3, 1, 1, 1, 1}, {1, 4, 6, 5, 6, 3, 2, 2, 2, 2, 1}};
  ASSERT_TRUE(ops::direct_conv_grad_weight_applies(shape_of(cases[0])));
  uint64_t seed = 40;
  for (const Case& c : cases) {
    ASSERT_TRUE(ops::direct_conv_applies(shape_of(c)));
    Tensor x = random({c.N, c.C, c.H, c.W}, seed++, DType::f64).requires_grad_();
    Tensor w = random({c.O, c.C / c.groups, c.kH, c.kW}, seed++, DType::f64).requires_grad_();
    const Conv2dFuncOptions o = options(c);
    EXPECT_EQ(gradcheck([o](const std::vector<Tensor>& in)
                            -> std::vector<Tensor> { return {conv2d(in[0], in[1], {}, o)}; },
                        {x, w}),
              "");
    Tensor gy = random(conv2d(x, w, {}, o).shape(), seed++, DType::f64).requires_grad_();
    EXPECT_EQ(gradcheck(
                  [o](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                    GradModeGuard on(true);
                    Tensor y = conv2d(in[0], in[1], {}, o);
                    return grad({y}, {in[0], in[1]}, {in[2]}, {.create_graph = true});
                  },
                  {x, w, gy}),
              "");
  }
}
