// Verifies conv2d (and its two gradient primitives), max_pool2d and
// avg_pool2d against naive loops, their gradients (first and second order)
// and their errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/kiln.h"
#include "test_util.h"

using namespace kiln;

namespace {

using V = std::vector<double>;

Tensor randn_t(const Dims& shape, uint64_t seed, DType dt = DType::f64) {
  manual_seed(seed);
  return cast(randn(shape, DType::f64), dt);
}

Tensor leaf(const Tensor& t) {
  return t.detach().clone().requires_grad_();
}

void expect_near(const V& got, const V& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << " at " << i;
}

using kiln::testing::expect_error;

// One convolution configuration.
struct ConvCase {
  Dims x, w;
  Conv2dFuncOptions o;
};

int64_t out_size(int64_t n, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (n + 2 * p - d * (k - 1) - 1) / s + 1;
}

// Naive conv2d forward and (given gy) both gradients, on row-major values.
struct ConvRef {
  Dims ys;
  V y, gx, gw;
};
ConvRef ref_conv(const ConvCase& c, const V& x, const V& w, const V* gy) {
  const int64_t N = c.x[0], C = c.x[1], H = c.x[2], W = c.x[3];
  const int64_t O = c.w[0], Cg = c.w[1], kH = c.w[2], kW = c.w[3], G = c.o.groups, Og = O / G;
  const int64_t Ho = out_size(H, kH, c.o.stride[0], c.o.padding[0], c.o.dilation[0]);
  const int64_t Wo = out_size(W, kW, c.o.stride[1], c.o.padding[1], c.o.dilation[1]);
  ConvRef r;
  r.ys = {N, O, Ho, Wo};
  r.y.assign(static_cast<size_t>(N * O * Ho * Wo), 0.0);
  r.gx.assign(x.size(), 0.0);
  r.gw.assign(w.size(), 0.0);
  auto X = [&](int64_t n, int64_t ch, int64_t h, int64_t ww) {
    return ((n * C + ch) * H + h) * W + ww;
  };
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const size_t yi = static_cast<size_t>(((n * O + o) * Ho + oh) * Wo + ow);
          for (int64_t c2 = 0; c2 < Cg; ++c2)
            for (int64_t ki = 0; ki < kH; ++ki)
              for (int64_t kj = 0; kj < kW; ++kj) {
                int64_t ih = oh * c.o.stride[0] - c.o.padding[0] + ki * c.o.dilation[0];
                int64_t iw = ow * c.o.stride[1] - c.o.padding[1] + kj * c.o.dilation[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                size_t xi = static_cast<size_t>(X(n, (o / Og) * Cg + c2, ih, iw));
                size_t wi = static_cast<size_t>(((o * Cg + c2) * kH + ki) * kW + kj);
                r.y[yi] += x[xi] * w[wi];
                if (gy) {
                  r.gx[xi] += (*gy)[yi] * w[wi];
                  r.gw[wi] += (*gy)[yi] * x[xi];
                }
              }
        }
  return r;
}

ConvCase conv_case(Dims x, Dims w, Dims s, Dims p, Dims d, int64_t g) {
  ConvCase c{x, w, {}};
  c.o.stride = s;
  c.o.padding = p;
  c.o.dilation = d;
  c.o.groups = g;
  return c;
}

const ConvCase kConvCases[] = {
    conv_case({2, 3, 7, 6}, {4, 3, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1),
    conv_case({1, 4, 8, 9}, {6, 2, 3, 2}, {2, 1}, {1, 2}, {1, 1}, 2),
    conv_case({2, 6, 9, 9}, {6, 2, 3, 3}, {2, 2}, {2, 1}, {2, 1}, 3),
    conv_case({3, 4, 5, 5}, {8, 4, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1),  // 1x1: no im2col
    conv_case({2, 4, 5, 5}, {4, 1, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 4),  // depthwise 1x1
    conv_case({1, 2, 5, 7}, {3, 2, 5, 3}, {3, 2}, {2, 1}, {1, 2}, 1),
    conv_case({1, 1, 3, 3}, {2, 1, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1),  // 1x1 output
    conv_case({2, 3, 6, 6}, {2, 3, 1, 1}, {2, 2}, {0, 0}, {1, 1}, 1),  // strided 1x1
};

// Tensors of a case with a layout: 0 contiguous, 1 channels-last input and transposed weight.
std::pair<Tensor, Tensor> conv_inputs(const ConvCase& c, int layout, uint64_t seed, DType dt) {
  if (layout == 0) return {randn_t(c.x, seed, dt), randn_t(c.w, seed + 1, dt)};
  Tensor x = permute(randn_t({c.x[0], c.x[2], c.x[3], c.x[1]}, seed, dt), {0, 3, 1, 2});
  Tensor w = transpose(randn_t({c.w[1], c.w[0], c.w[2], c.w[3]}, seed + 1, dt), 0, 1);
  return {x, w};
}

}  // namespace

// conv2d and both of its gradients equal the naive loops for many geometries and layouts.
TEST(Conv, MatchesReference) {
  uint64_t seed = 1;
  for (const ConvCase& c : kConvCases) {
    for (int layout = 0; layout < 2; ++layout) {
      for (DType dt : {DType::f32, DType::f64}) {
        auto [x0, w0] = conv_inputs(c, layout, seed, dt);
        seed += 2;
        std::string what = str("x ", c.x, " w ", c.w, " layout ", layout, " ", dt);
        Tensor x = x0.detach().requires_grad_(), w = w0.detach().requires_grad_();
        Tensor y = conv2d(x, w, {}, c.o);
        V xv = x.to_vector<double>(), wv = w.to_vector<double>();
        Tensor gy = randn_t(y.shape(), seed++, dt);
        V gyv = gy.to_vector<double>();
        ConvRef r = ref_conv(c, xv, wv, &gyv);
        ASSERT_EQ(y.shape(), r.ys) << what;
        const double tol = dt == DType::f32 ? 1e-5 : 1e-12;
        expect_near(y.to_vector<double>(), r.y, tol, what + " forward");
        y.backward(gy);
        expect_near(x.grad().to_vector<double>(), r.gx, tol, what + " grad input");
        expect_near(w.grad().to_vector<double>(), r.gw, tol, what + " grad weight");
      }
    }
  }
}

// Images run in parallel and weight gradients sum in fixed blocks of images:
// a batch of 37 (uneven blocks, grouped, padded) matches the naive loops, and
// 1, 2 or 3 threads give the same bits.
TEST(Conv, BatchesRunInParallelDeterministically) {
  const ConvCase c = conv_case({37, 4, 9, 8}, {6, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 2);
  auto [x0, w0] = conv_inputs(c, 0, 91, DType::f32);
  const V xv = x0.to_vector<double>(), wv = w0.to_vector<double>();
  const int before = num_threads();
  std::vector<V> runs;
  for (int n : {1, 2, 3}) {
    set_num_threads(n);
    Tensor x = x0.detach().requires_grad_(), w = w0.detach().requires_grad_();
    Tensor y = conv2d(x, w, {}, c.o);
    Tensor gy = randn_t(y.shape(), 92, DType::f32);
    y.backward(gy);
    if (runs.empty()) {
      const V gyv = gy.to_vector<double>();
      ConvRef r = ref_conv(c, xv, wv, &gyv);
      expect_near(y.to_vector<double>(), r.y, 1e-5, "forward");
      expect_near(x.grad().to_vector<double>(), r.gx, 1e-5, "grad input");
      expect_near(w.grad().to_vector<double>(), r.gw, 1e-5, "grad weight");
    }
    for (const Tensor& t : {y, x.grad(), w.grad()}) runs.push_back(t.to_vector<double>());
  }
  set_num_threads(before);
  for (size_t i = 3; i < runs.size(); ++i) EXPECT_EQ(runs[i], runs[i % 3]) << i;
}

// Bias, unbatched [C, H, W] input, f16/bf16 and an empty batch.
TEST(Conv, BiasUnbatchedDtypesAndEmptyBatch) {
  const ConvCase& c = kConvCases[1];
  Tensor x = randn_t(c.x, 1), w = randn_t(c.w, 2), b = randn_t({c.w[0]}, 3);
  ConvRef r = ref_conv(c, x.to_vector<double>(), w.to_vector<double>(), nullptr);
  V want = r.y, bv = b.to_vector<double>();
  const int64_t plane = r.ys[2] * r.ys[3];
  for (size_t i = 0; i < want.size(); ++i) want[i] += bv[(i / static_cast<size_t>(plane)) % 6];
  expect_near(conv2d(x, w, b, c.o).to_vector<double>(), want, 1e-12, "bias");
  Tensor y3 = conv2d(x.select(0, 0), w, b, c.o);
  EXPECT_EQ(y3.shape(), (Dims{r.ys[1], r.ys[2], r.ys[3]}));
  expect_near(y3.to_vector<double>(), want, 1e-12, "unbatched");
  for (DType dt : {DType::f16, DType::bf16}) {
    Tensor yh = conv2d(cast(x, dt), cast(w, dt), {}, c.o);
    EXPECT_EQ(yh.dtype(), dt);
    expect_near(yh.to_vector<double>(), r.y, 5e-2, str(dt));
  }
  Tensor e = leaf(zeros({0, c.x[1], c.x[2], c.x[3]}, DType::f64)), we = leaf(w);
  Tensor ye = conv2d(e, we, {}, c.o);
  EXPECT_EQ(ye.shape(), (Dims{0, r.ys[1], r.ys[2], r.ys[3]}));
  ye.sum().backward();
  EXPECT_EQ(e.grad().shape(), e.shape());
  EXPECT_EQ(we.grad().to_vector<double>(), V(static_cast<size_t>(we.numel()), 0.0));
}

// conv2d gradients (input, weight, bias) pass gradcheck, with groups/stride/padding/dilation.
TEST(Conv, Gradcheck) {
  const ConvCase cases[] = {
      conv_case({2, 2, 5, 4}, {3, 2, 3, 2}, {1, 1}, {1, 0}, {1, 1}, 1),
      conv_case({1, 4, 6, 5}, {2, 2, 2, 3}, {2, 1}, {1, 1}, {2, 1}, 2),
      conv_case({1, 2, 3, 3}, {2, 2, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1),
  };
  uint64_t seed = 1;
  for (const ConvCase& c : cases) {
    Tensor x = leaf(randn_t(c.x, seed++)), w = leaf(randn_t(c.w, seed++));
    Tensor b = leaf(randn_t({c.w[0]}, seed++));
    Conv2dFuncOptions o = c.o;
    EXPECT_EQ(gradcheck([o](const std::vector<Tensor>& in)
                            -> std::vector<Tensor> { return {conv2d(in[0], in[1], in[2], o)}; },
                        {x, w, b}),
              "")
        << c.x << " " << c.w;
  }
}

// Second order: the rules of conv2d_grad_input/_weight, via gradients w.r.t. x, w and grad.
TEST(Conv, DoubleBackward) {
  const ConvCase c = conv_case({1, 4, 5, 5}, {2, 2, 3, 2}, {2, 1}, {1, 1}, {1, 2}, 2);
  Tensor x = leaf(randn_t(c.x, 1)), w = leaf(randn_t(c.w, 2));
  Tensor gy;
  {
    NoGradGuard ng;
    gy = leaf(randn_t(conv2d(x, w, {}, c.o).shape(), 3));
  }
  Conv2dFuncOptions o = c.o;
  EXPECT_EQ(gradcheck(
                [o](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                  GradModeGuard on(true);
                  Tensor y = conv2d(in[0], in[1], {}, o);
                  return grad({y}, {in[0], in[1]}, {in[2]}, {.create_graph = true});
                },
                {x, w, gy}),
            "");
}

// The gradient primitives called directly: their own rules pass gradcheck.
TEST(Conv, GradPrimitivesGradcheck) {
  Attrs at;
  at.set("stride", Dims{2, 1}).set("padding", Dims{1, 0}).set("dilation", Dims{1, 1});
  at.set("groups", AttrValue(int64_t{2}));
  Attrs gi = at, gw = at;
  gi.set("input_shape", Dims{1, 4, 5, 4});
  gw.set("weight_shape", Dims{4, 2, 2, 2});
  Tensor g = leaf(randn_t({1, 4, 3, 3}, 1)), w = leaf(randn_t({4, 2, 2, 2}, 2));
  Tensor x = leaf(randn_t({1, 4, 5, 4}, 3));
  EXPECT_EQ(gradcheck(
                [gi](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                  return {dispatch1(OpId::conv2d_grad_input, {in[0], in[1]}, gi)};
                },
                {g, w}),
            "");
  EXPECT_EQ(gradcheck(
                [gw](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                  return {dispatch1(OpId::conv2d_grad_weight, {in[0], in[1]}, gw)};
                },
                {x, g}),
            "");
  expect_error(
      [&] {
        dispatch1(OpId::conv2d_grad_input, {zeros({1, 4, 2, 3}, DType::f64), w}, gi);
      },
      {"[conv2d_grad_input]", "[1, 4, 2, 3]", "[1, 4, 3, 3]", "[4, 2, 2, 2]"});
  expect_error(
      [&] {
        dispatch1(OpId::conv2d_grad_weight, {x, zeros({1, 4, 3, 2}, DType::f64)}, gw);
      },
      {"[conv2d_grad_weight]", "[1, 4, 3, 2]", "[1, 4, 5, 4]"});
}

// Invalid convolutions raise kiln::Error naming conv2d and the shapes.
TEST(Conv, Errors) {
  Tensor w = zeros({4, 3, 3, 3});
  expect_error([&] { conv2d(zeros({3, 4}), w); }, {"[conv2d]", "4-D", "[3, 4]"});
  expect_error([&] { conv2d(zeros({1, 3, 5, 5}), zeros({4, 3, 3})); }, {"[conv2d]", "[4, 3, 3]"});
  expect_error(
      [&] {
        conv2d(zeros({1, 2, 5, 5}), w);
      },
      {"[conv2d]", "[1, 2, 5, 5]", "[4, 3, 3, 3]", "channels"});
  Conv2dFuncOptions g2;
  g2.groups = 2;
  expect_error(
      [&] {
        conv2d(zeros({1, 2, 5, 5}), zeros({3, 1, 3, 3}), {}, g2);
      },
      {"[conv2d]", "[3, 1, 3, 3]", "groups=2"});
  expect_error(
      [&] {
        conv2d(zeros({1, 3, 2, 2}), w);
      },
      {"[conv2d]", "[1, 3, 2, 2]", "[4, 3, 3, 3]", "smaller"});
  expect_error(
      [&] {
        conv2d(zeros({1, 3, 5, 5}, DType::f64), w);
      },
      {"[conv2d]", "same dtype", "f64", "f32"});
  expect_error(
      [&] {
        conv2d(zeros({1, 3, 5, 5}, DType::i64), zeros({4, 3, 3, 3}, DType::i64));
      },
      {"[conv2d]", "floating", "i64"});
  expect_error(
      [&] {
        conv2d(zeros({1, 3, 5, 5}), w, zeros({3}));
      },
      {"[conv2d]", "bias", "[3]", "[4, 3, 3, 3]"});
  Conv2dFuncOptions bad;
  bad.stride = {0, 1};
  expect_error([&] { conv2d(zeros({1, 3, 5, 5}), w, {}, bad); }, {"[conv2d]", "stride"});
  Conv2dFuncOptions bad_pad;
  bad_pad.padding = {1, 2, 3};
  expect_error([&] { conv2d(zeros({1, 3, 5, 5}), w, {}, bad_pad); }, {"[conv2d]", "padding"});
}

// ---------------- pooling ----------------
namespace {

struct PoolCase {
  Dims x;
  Pool2dOptions o;
};
PoolCase pool_case(Dims x, Dims k, Dims s, Dims p, Dims d, bool cip = true) {
  PoolCase c{x, {}};
  c.o.kernel_size = k;
  c.o.stride = s;
  c.o.padding = p;
  c.o.dilation = d;
  c.o.count_include_pad = cip;
  return c;
}
const PoolCase kPoolCases[] = {
    pool_case({2, 3, 6, 7}, {2, 2}, {}, {0, 0}, {1, 1}),
    pool_case({1, 2, 7, 7}, {3, 3}, {2, 2}, {1, 1}, {1, 1}),
    pool_case({1, 2, 9, 8}, {3, 2}, {1, 2}, {1, 1}, {2, 1}, false),
    pool_case({3, 5, 5}, {2, 3}, {1, 1}, {1, 1}, {1, 1}, false),
    pool_case({2, 1, 4, 4}, {4, 4}, {}, {2, 1}, {1, 1}),
};

// Naive max pool (values, flat indices) and avg pool of one case.
void ref_pool(const PoolCase& c, const V& x, V* mx, std::vector<int64_t>* idx, V* avg,
              bool with_dilation) {
  const bool b = c.x.size() == 4;
  const int64_t P = b ? c.x[0] * c.x[1] : c.x[0], H = c.x[b ? 2 : 1], W = c.x[b ? 3 : 2];
  const Dims& k = c.o.kernel_size;
  const Dims s = c.o.stride.empty() ? k : c.o.stride;
  const Dims& p = c.o.padding;
  const Dims d = with_dilation ? c.o.dilation : Dims{1, 1};
  const int64_t Ho = out_size(H, k[0], s[0], p[0], d[0]), Wo = out_size(W, k[1], s[1], p[1], d[1]);
  for (int64_t pl = 0; pl < P; ++pl)
    for (int64_t oh = 0; oh < Ho; ++oh)
      for (int64_t ow = 0; ow < Wo; ++ow) {
        double best = -INFINITY, sum = 0;
        int64_t bi = -1, cnt = 0;
        for (int64_t i = 0; i < k[0]; ++i)
          for (int64_t j = 0; j < k[1]; ++j) {
            int64_t ih = oh * s[0] - p[0] + i * d[0], iw = ow * s[1] - p[1] + j * d[1];
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
            double v = x[static_cast<size_t>((pl * H + ih) * W + iw)];
            if (bi < 0 || v > best) {
              best = v;
              bi = ih * W + iw;
            }
            sum += v;
            ++cnt;
          }
        const int64_t ph = std::min(oh * s[0] - p[0] + k[0], H + p[0]) - (oh * s[0] - p[0]);
        const int64_t pw = std::min(ow * s[1] - p[1] + k[1], W + p[1]) - (ow * s[1] - p[1]);
        if (mx) mx->push_back(best);
        if (idx) idx->push_back(bi);
        if (avg) avg->push_back(sum / double(c.o.count_include_pad ? ph * pw : cnt));
      }
}

}  // namespace

// max_pool2d values and indices equal the naive loop (3-D/4-D, strided, dilated, padded).
TEST(Pool, MaxMatchesReference) {
  uint64_t seed = 1;
  for (const PoolCase& c : kPoolCases) {
    for (int layout = 0; layout < 2; ++layout) {
      for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
        Tensor x = randn_t(c.x, seed++, dt);
        if (layout == 1) x = transpose(transpose(x, -1, -2).contiguous(), -1, -2);
        V mx;
        std::vector<int64_t> idx;
        ref_pool(c, x.to_vector<double>(), &mx, &idx, nullptr, true);
        auto [y, i] = max_pool2d_with_indices(x, c.o);
        std::string what = str("x ", c.x, " layout ", layout, " ", dt);
        EXPECT_EQ(y.dtype(), dt);
        EXPECT_EQ(i.dtype(), DType::i64);
        EXPECT_EQ(y.shape(), i.shape());
        expect_near(y.to_vector<double>(), mx, 0, what);
        EXPECT_EQ(i.to_vector<int64_t>(), idx) << what;
        expect_near(max_pool2d(x, c.o).to_vector<double>(), mx, 0, what);
      }
    }
  }
  Tensor xi = cast(reshape(arange(0, 16, 1, DType::i64), {1, 4, 4}), DType::i32);
  EXPECT_EQ(max_pool2d(xi).to_vector<int64_t>(), (std::vector<int64_t>{5, 7, 13, 15}));
}

// Ties pick the first maximum; NaN propagates.
TEST(Pool, MaxTiesAndNaN) {
  auto [y, i] = max_pool2d_with_indices(ones({1, 1, 4, 4}));
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{0, 2, 8, 10}));
  Tensor x = zeros({1, 1, 2, 2});
  x.select(2, 1).select(2, 0).fill_(std::nan(""));
  auto [yn, in] = max_pool2d_with_indices(x);
  EXPECT_TRUE(std::isnan(yn.item<double>()));
  EXPECT_EQ(in.item<int64_t>(), 2);
  // Every pattern of NaNs in a 2x2 window (f32 and f64, contiguous and not):
  // the first NaN in row-major order wins, else the first maximum.
  for (DType dt : {DType::f32, DType::f64}) {
    for (int mask = 0; mask < 16; ++mask) {
      const double vals[4] = {1.0, 3.0, 3.0, -2.0};
      std::vector<double> v(vals, vals + 4);
      int64_t want = 1;  // the first 3.0
      for (int k = 3; k >= 0; --k)
        if (mask & (1 << k)) {
          v[static_cast<size_t>(k)] = std::nan("");
          want = k;
        }
      const int64_t flat = want < 2 ? want : 2 + want;  // window index -> plane index (W = 4)
      Tensor w = cast(from_vector(v, {1, 1, 2, 2}), dt);
      Tensor plane = zeros({1, 1, 2, 4}, dt);
      plane.slice(3, 0, 2).copy_(w);
      for (const Tensor& in4 : {plane, transpose(transpose(plane, 2, 3).contiguous(), 2, 3)}) {
        auto [y2, i2] = max_pool2d_with_indices(in4);
        EXPECT_EQ(i2.to_vector<int64_t>()[0], flat) << "mask " << mask << " " << dt;
        EXPECT_EQ(std::isnan(y2.to_vector<double>()[0]), mask != 0) << "mask " << mask;
      }
    }
  }
}

// avg_pool2d equals the naive loop, with and without counting the padding.
TEST(Pool, AvgMatchesReference) {
  uint64_t seed = 50;
  for (const PoolCase& c0 : kPoolCases) {
    for (bool cip : {true, false}) {
      PoolCase c = c0;
      c.o.count_include_pad = cip;
      c.o.dilation = {1, 1};
      for (DType dt : {DType::f32, DType::f64}) {
        Tensor x = randn_t(c.x, seed++, dt);
        if (c.x.size() == 4) x = permute(permute(x, {0, 2, 3, 1}).contiguous(), {0, 3, 1, 2});
        V avg;
        ref_pool(c, x.to_vector<double>(), nullptr, nullptr, &avg, false);
        Tensor y = avg_pool2d(x, c.o);
        EXPECT_EQ(y.dtype(), dt);
        expect_near(y.to_vector<double>(), avg, dt == DType::f32 ? 1e-6 : 1e-12,
                    str("x ", c.x, " cip ", cip));
      }
    }
  }
}

// A wide window sums its f32 terms in double, in any lane order: 2^24 and 31
// ones (an f32 running sum would drop every one of them), a 32-wide row.
TEST(Pool, AvgWideWindowSumsInDouble) {
  std::vector<float> v(32, 1.0f);
  v[0] = 16777216.0f;
  Pool2dOptions o;
  o.kernel_size = {1, 32};
  Tensor y = avg_pool2d(from_vector(v, {1, 1, 1, 32}), o);
  EXPECT_EQ(y.item<float>(), static_cast<float>((16777216.0 + 31.0) / 32.0));
  o.kernel_size = {4, 8};  // the same terms as four rows of eight
  EXPECT_EQ(avg_pool2d(from_vector(v, {1, 1, 4, 8}), o).item<float>(),
            static_cast<float>((16777216.0 + 31.0) / 32.0));
}

// Pooling gradients pass gradcheck; the second-order rules too.
TEST(Pool, Gradcheck) {
  uint64_t seed = 100;
  for (const PoolCase& c : kPoolCases) {
    Tensor x = leaf(randn_t(c.x, seed++));
    Pool2dOptions o = c.o;
    EXPECT_EQ(gradcheck([o](const std::vector<Tensor>& in)
                            -> std::vector<Tensor> { return {max_pool2d(in[0], o)}; },
                        {x}),
              "")
        << "max " << c.x;
    o.dilation = {1, 1};
    EXPECT_EQ(gradcheck([o](const std::vector<Tensor>& in)
                            -> std::vector<Tensor> { return {avg_pool2d(in[0], o)}; },
                        {x}),
              "")
        << "avg " << c.x;
  }
  // Second order: differentiate the gradients w.r.t. the incoming gradient (and x).
  const PoolCase& c = kPoolCases[1];
  Tensor x = leaf(randn_t(c.x, 7));
  Tensor g = leaf(randn_t({1, 2, 4, 4}, 8));
  Pool2dOptions o = c.o;
  EXPECT_EQ(gradcheck(
                [o](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                  GradModeGuard on(true);
                  Tensor y = max_pool2d(in[0] * in[0], o);
                  return grad({y}, {in[0]}, {in[1]}, {.create_graph = true});
                },
                {x, g}),
            "");
  EXPECT_EQ(gradcheck(
                [o](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                  GradModeGuard on(true);
                  Tensor y = avg_pool2d(in[0] * in[0], o);
                  return grad({y}, {in[0]}, {in[1]}, {.create_graph = true});
                },
                {x, g}),
            "");
}

// Invalid pooling raises kiln::Error naming the op and the shape.
TEST(Pool, Errors) {
  Pool2dOptions o;
  expect_error([&] { max_pool2d(zeros({4, 4}), o); }, {"[max_pool2d]", "[4, 4]"});
  expect_error([&] { avg_pool2d(zeros({1, 1, 1, 4, 4}), o); }, {"[avg_pool2d]", "[1, 1, 1, 4, 4]"});
  Pool2dOptions big;
  big.kernel_size = {3, 3};
  expect_error(
      [&] {
        max_pool2d(zeros({1, 1, 2, 2}), big);
      },
      {"[max_pool2d]", "[1, 1, 2, 2]", "too small"});
  expect_error([&] { avg_pool2d(zeros({1, 2, 2}), big); }, {"[avg_pool2d]", "[1, 2, 2]"});
  Pool2dOptions pad = o;
  pad.padding = {2, 0};
  expect_error([&] { max_pool2d(zeros({1, 1, 8, 8}), pad); }, {"[max_pool2d]", "padding"});
  Pool2dOptions zero = o;
  zero.stride = {0, 1};
  expect_error([&] { avg_pool2d(zeros({1, 1, 8, 8}), zero); }, {"[avg_pool2d]", "stride"});
  zero = o;
  zero.kernel_size = {0, 2};
  expect_error([&] { max_pool2d(zeros({1, 1, 8, 8}), zero); }, {"[max_pool2d]", "kernel_size"});
  expect_error(
      [&] {
        avg_pool2d(zeros({1, 1, 4, 4}, DType::i64), o);
      },
      {"[avg_pool2d]", "floating", "[1, 1, 4, 4]"});
  expect_error([&] { max_pool2d(zeros({1, 1, 4, 4}, DType::b8), o); }, {"[max_pool2d]", "bool"});
  expect_error([&] { max_pool2d(zeros({1, 0, 4, 4}), o); }, {"[max_pool2d]", "[1, 0, 4, 4]"});
  // An empty batch is fine.
  EXPECT_EQ(max_pool2d(zeros({0, 2, 4, 4}), o).shape(), (Dims{0, 2, 2, 2}));
  EXPECT_EQ(avg_pool2d(zeros({0, 2, 4, 4}), o).shape(), (Dims{0, 2, 2, 2}));
}
