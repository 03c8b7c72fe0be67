// Verifies the reduce family (sum, amax, amin, argmax, argmin, sum_to) against
// naive loops on many layouts, its gradients (first and second order) and its errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/kiln.h"
#include "test_util.h"

using namespace kiln;

namespace {

using V = std::vector<double>;
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Normal values; `ties` rounds them to few integers so ties are common.
Tensor randn64(const Dims& shape, uint64_t seed, DType dt = DType::f64, bool ties = false) {
  manual_seed(seed);
  Tensor r = randn(shape, DType::f64);
  if (ties) r = cast(cast(r * 2.0, DType::i64), DType::f64);
  return cast(r, dt);
}

// Memory layouts a test input can have; all give the same logical shape.
enum class Layout { kContiguous, kPermuted, kSliced, kExpanded, kSwapped };
const Layout kLayouts[] = {Layout::kContiguous, Layout::kPermuted, Layout::kSliced,
                           Layout::kExpanded, Layout::kSwapped};

Tensor make(const Dims& shape, Layout l, uint64_t seed, DType dt = DType::f64, bool ties = false) {
  const int64_t r = static_cast<int64_t>(shape.size());
  switch (l) {
    case Layout::kPermuted: {  // reversed dims in memory
      Dims rev, perm;
      for (int64_t i = r - 1; i >= 0; --i) {
        rev.push_back(shape[static_cast<size_t>(i)]);
        perm.push_back(i);
      }
      return permute(randn64(rev, seed, dt, ties), perm);
    }
    case Layout::kSliced: {  // every other element along the last dim
      Dims big = shape;
      big.back() *= 2;
      return slice(randn64(big, seed, dt, ties), -1, 0, big.back(), 2);
    }
    case Layout::kExpanded: {  // dim 0 broadcast with stride 0
      Dims one = shape;
      one[0] = 1;
      return expand(randn64(one, seed, dt, ties), shape);
    }
    case Layout::kSwapped: {  // first two dims swapped in memory
      Dims sw = shape;
      std::swap(sw[0], sw[1]);
      return transpose(randn64(sw, seed, dt, ties), 0, 1);
    }
    default:
      return randn64(shape, seed, dt, ties);
  }
}

enum class Red { kSum, kMax, kMin };

// Naive reduction of row-major values `v` of `shape` over `dims` (empty = all).
V ref_reduce(const V& v, const Dims& shape, Dims dims, Red op) {
  const int64_t r = static_cast<int64_t>(shape.size());
  std::vector<bool> red(static_cast<size_t>(r), dims.empty());
  for (int64_t d : dims) red[static_cast<size_t>(d < 0 ? d + r : d)] = true;
  Dims out;
  for (int64_t i = 0; i < r; ++i)
    if (!red[static_cast<size_t>(i)]) out.push_back(shape[i]);
  double init = op == Red::kSum   ? 0.0
                : op == Red::kMax ? -std::numeric_limits<double>::infinity()
                                  : std::numeric_limits<double>::infinity();
  V acc(static_cast<size_t>(numel_of(out)), init);
  for (int64_t i = 0; i < numel_of(shape); ++i) {
    int64_t rem = i, o = 0, mul = 1;
    for (int64_t d = r - 1; d >= 0; --d) {
      int64_t k = rem % shape[d];
      rem /= shape[d];
      if (!red[static_cast<size_t>(d)]) {
        o += k * mul;
        mul *= shape[d];
      }
    }
    double& a = acc[static_cast<size_t>(o)];
    double x = v[static_cast<size_t>(i)];
    if (op == Red::kSum)
      a += x;
    else if (std::isnan(x) || std::isnan(a))
      a = kNaN;
    else
      a = op == Red::kMax ? std::max(a, x) : std::min(a, x);
  }
  return acc;
}

void expect_near(const V& got, const V& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " at " << i;
      continue;
    }
    EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << " at " << i;
  }
}

using kiln::testing::expect_error;

Tensor leaf(const Tensor& t) {
  return t.detach().clone().requires_grad_();
}

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Wraps fn so gradcheck differentiates its gradient (with a fixed projection w).
Fn grad_of(const std::function<Tensor(const Tensor&)>& f, const Tensor& w) {
  return [f, w](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    GradModeGuard on(true);
    Tensor y = f(in[0]);
    return grad({y}, {in[0]}, {w}, {.create_graph = true});
  };
}

struct Case {
  Dims shape;
  Dims dims;
  bool keepdim;
};
const Case kCases[] = {
    {{3, 4, 5}, {}, false},        {{3, 4, 5}, {2}, false},         {{3, 4, 5}, {0}, true},
    {{3, 4, 5}, {1}, false},       {{3, 4, 5}, {0, 2}, true},       {{3, 4, 5}, {-1, -2}, false},
    {{2, 3, 4, 5}, {1, 3}, false}, {{2, 3, 4, 5}, {0, 1, 2}, true}, {{6, 1, 7}, {1}, false},
    {{300, 3}, {0}, false},        {{3, 600}, {1}, true},           {{5, 700}, {0}, false},
};

}  // namespace

// sum/amax/amin equal a naive loop for every layout and many dim choices.
TEST(Reduce, ValuesMatchReferenceOnLayouts) {
  uint64_t seed = 1;
  for (const Case& c : kCases) {
    for (Layout l : kLayouts) {
      Tensor x = make(c.shape, l, seed++);
      V xv = x.to_vector<double>();
      std::string what = str("shape ", c.shape, " dims ", c.dims, " layout ", int(l));
      Tensor s = sum(x, c.dims, c.keepdim), mx = amax(x, c.dims, c.keepdim),
             mn = amin(x, c.dims, c.keepdim);
      EXPECT_EQ(s.dtype(), DType::f64);
      expect_near(s.to_vector<double>(), ref_reduce(xv, c.shape, c.dims, Red::kSum), 1e-12, what);
      expect_near(mx.to_vector<double>(), ref_reduce(xv, c.shape, c.dims, Red::kMax), 0, what);
      expect_near(mn.to_vector<double>(), ref_reduce(xv, c.shape, c.dims, Red::kMin), 0, what);
      if (c.keepdim) {
        EXPECT_EQ(s.dim(), x.dim()) << what;
      }
    }
  }
}

// Large inputs take the parallel row, column and split paths and stay exact-ish.
TEST(Reduce, LargeInputsUseAllPaths) {
  const std::vector<std::pair<Dims, Dims>> cases = {
      {{200000}, {}},
      {{4, 100000}, {1}},
      {{100000, 4}, {0}},
      {{3000, 700}, {0}},
      {{700, 3000}, {1}},
      {{50, 40, 60}, {1}},
      {{2, 70000, 2}, {1}},
      {{100000, 20}, {0}},
      // whole-row column path: a bias gradient, and kept dims on both sides
      {{16, 128, 1024}, {0, 1}},
      {{8, 500, 300}, {1}},
      {{40, 3, 9000}, {0}}};
  uint64_t seed = 100;
  for (const auto& [shape, dims] : cases) {
    for (Layout l : {Layout::kContiguous, Layout::kPermuted}) {
      Tensor x = make(shape, l, seed++, DType::f32);
      V xv = x.to_vector<double>();
      std::string what = str("shape ", shape, " dims ", dims, " layout ", int(l));
      expect_near(sum(x, dims).to_vector<double>(), ref_reduce(xv, shape, dims, Red::kSum), 1e-5,
                  what);
      expect_near(amax(x, dims).to_vector<double>(), ref_reduce(xv, shape, dims, Red::kMax), 0,
                  what);
    }
  }
}

// A column sum below the split size adds each column's rows in order, in
// double: bit for bit the sequential sum, whatever the row count (the fold
// takes rows four at a time, then the rest one by one) and with several
// reduced dims.
TEST(Reduce, ColumnSumsAddRowsInOrder) {
  uint64_t seed = 300;
  for (int64_t rows : {1, 2, 3, 4, 5, 7, 8, 9, 31}) {
    for (int64_t cols : {1, 33, 1024}) {
      Tensor x = make({rows, cols}, Layout::kContiguous, seed++, DType::f32);
      const std::vector<float> xv = x.to_vector<float>();
      std::vector<float> want(static_cast<size_t>(cols));
      for (int64_t j = 0; j < cols; ++j) {
        double acc = 0;
        for (int64_t r = 0; r < rows; ++r) acc += xv[static_cast<size_t>(r * cols + j)];
        want[static_cast<size_t>(j)] = static_cast<float>(acc);
      }
      EXPECT_EQ(sum(x, {0}).to_vector<float>(), want) << rows << " x " << cols;
    }
  }
  Tensor x = make({3, 5, 64}, Layout::kContiguous, seed, DType::f32);
  const std::vector<float> xv = x.to_vector<float>();
  std::vector<float> want(64);
  for (int64_t j = 0; j < 64; ++j) {
    double acc = 0;
    for (int64_t r = 0; r < 15; ++r) acc += xv[static_cast<size_t>(r * 64 + j)];
    want[static_cast<size_t>(j)] = static_cast<float>(acc);
  }
  EXPECT_EQ(sum(x, {0, 1}).to_vector<float>(), want);
}

// Results do not depend on the thread count (block splits are fixed by the shape).
TEST(Reduce, ThreadCountIndependent) {
  const int before = num_threads();
  Tensor x = make({300000, 20}, Layout::kContiguous, 5, DType::f32);
  std::vector<std::vector<float>> runs;
  for (int n : {1, 2, 3}) {
    set_num_threads(n);
    for (const Dims& d : {Dims{}, Dims{0}, Dims{1}}) runs.push_back(sum(x, d).to_vector<float>());
  }
  Tensor tall = make({2048, 768}, Layout::kContiguous, 7, DType::f32);
  Tensor mid = make({8, 500, 300}, Layout::kContiguous, 8, DType::f32);
  std::vector<std::vector<float>> cols;
  for (int n : {1, 2, 3}) {
    set_num_threads(n);
    cols.push_back(sum(tall, {0}).to_vector<float>());
    cols.push_back(sum(mid, {1}).to_vector<float>());
  }
  set_num_threads(before);
  for (size_t i = 3; i < runs.size(); ++i) EXPECT_EQ(runs[i], runs[i % 3]) << i;
  for (size_t i = 2; i < cols.size(); ++i) EXPECT_EQ(cols[i], cols[i % 2]) << "column sum " << i;
  Tensor b = gt(make({100000, 20}, Layout::kContiguous, 6), 3.5);
  V want = ref_reduce(b.to_vector<double>(), {100000, 20}, {0}, Red::kMax);
  EXPECT_EQ(amax(b, {0}).to_vector<double>(), want);
  EXPECT_EQ(sum(b, {0}).dtype(), DType::i64);
}

// f32 sums accumulate in double: a million 0.1f add up to 1e5 within f32 rounding.
TEST(Reduce, SumF32IsAccurate) {
  Tensor x = full({1000000}, 0.1, DType::f32);
  double want = 1e6 * static_cast<double>(0.1f);
  EXPECT_NEAR(sum(x).item<double>(), want, want * 1e-7);
  Tensor cols = full({100000, 3}, 0.1, DType::f32);
  for (double v : sum(cols, {0}).to_vector<double>()) EXPECT_NEAR(v, want / 10, want * 1e-8);
}

// Integer and bool sums give i64; f16/bf16 keep their dtype; max/min keep dtype.
TEST(Reduce, Dtypes) {
  Tensor i = from_vector<int32_t>({1, 2, 3, 2147483647}, {2, 2});
  Tensor si = sum(i);
  EXPECT_EQ(si.dtype(), DType::i64);
  EXPECT_EQ(si.item<int64_t>(), 2147483653LL);
  EXPECT_EQ(sum(i, {0}).to_vector<int64_t>(), (std::vector<int64_t>{4, 2147483649LL}));
  Tensor b = from_vector<bool>({true, false, true, true}, {4});
  EXPECT_EQ(sum(b).dtype(), DType::i64);
  EXPECT_EQ(sum(b).item<int64_t>(), 3);
  EXPECT_EQ(amax(b).dtype(), DType::b8);
  EXPECT_TRUE(amax(b).item<bool>());
  EXPECT_FALSE(amin(b).item<bool>());
  Tensor u = from_vector<uint8_t>({200, 100, 7}, {3});
  EXPECT_EQ(sum(u).item<int64_t>(), 307);
  EXPECT_EQ(amax(u).dtype(), DType::u8);
  EXPECT_EQ(amax(u).item<int64_t>(), 200);
  EXPECT_EQ(amin(i).item<int64_t>(), 1);
  for (DType dt : {DType::f16, DType::bf16}) {
    Tensor h = cast(full({4096}, 0.5, DType::f32), dt);
    Tensor s = sum(h);
    EXPECT_EQ(s.dtype(), dt);
    EXPECT_EQ(s.item<double>(), 2048.0);  // float accumulation: exact
    EXPECT_EQ(amax(cast(arange(0, 100, 1, DType::f32), dt)).item<double>(), 99.0);
  }
}

// Reductions over empty dims: sum gives zeros of the right shape, amax/amin error.
TEST(Reduce, ZeroSize) {
  Tensor x = zeros({2, 0, 3}, DType::f32);
  Tensor s = sum(x, {1});
  EXPECT_EQ(s.shape(), (Dims{2, 3}));
  EXPECT_EQ(s.to_vector<double>(), V(6, 0.0));
  EXPECT_EQ(sum(x).item<double>(), 0.0);
  EXPECT_EQ(sum(x, {1}, true).shape(), (Dims{2, 1, 3}));
  EXPECT_EQ(sum(x, {0}).shape(), (Dims{0, 3}));
  EXPECT_EQ(amax(x, {0}).shape(), (Dims{0, 3}));  // reducing a non-empty dim is fine
  EXPECT_EQ(sum(zeros({0}, DType::i32)).item<int64_t>(), 0);
  expect_error([&] { amax(x, {1}); }, {"[amax]", "zero-size", "[2, 0, 3]"});
  expect_error([&] { amin(x); }, {"[amin]", "zero-size", "[2, 0, 3]"});
  expect_error([&] { argmax(x, 1); }, {"[argmax]", "[2, 0, 3]"});
  expect_error([&] { argmin(x); }, {"[argmin]", "empty", "[2, 0, 3]"});
}

// 0-d tensors reduce to themselves.
TEST(Reduce, ZeroDim) {
  Tensor x = scalar_tensor(3.5, DType::f64);
  EXPECT_EQ(sum(x).item<double>(), 3.5);
  EXPECT_EQ(sum(x, {0}).item<double>(), 3.5);
  EXPECT_EQ(amax(x, {-1}, true).shape(), (Dims{}));
  EXPECT_EQ(argmax(x).item<int64_t>(), 0);
  EXPECT_EQ(argmin(x, 0).item<int64_t>(), 0);
}

// NaN propagates through amax/amin (also from strided inputs and the split path).
TEST(Reduce, NaNPropagates) {
  Tensor x = from_vector<double>({1, kNaN, 3, 4, 5, 6}, {2, 3});
  V mx = amax(x, {1}).to_vector<double>();
  EXPECT_TRUE(std::isnan(mx[0]));
  EXPECT_EQ(mx[1], 6);
  V mn = amin(transpose(x, 0, 1), {1}).to_vector<double>();
  EXPECT_EQ(mn[0], 1);
  EXPECT_TRUE(std::isnan(mn[1]));
  Tensor big = zeros({100000}, DType::f32);
  big.select(0, 77777).fill_(std::nan(""));
  EXPECT_TRUE(std::isnan(amax(big).item<double>()));
  EXPECT_TRUE(std::isnan(sum(big).item<double>()));
}

// argmax/argmin: first occurrence of ties, NaN counts as the maximum, flat and keepdim.
TEST(Reduce, ArgmaxArgmin) {
  Tensor x = from_vector<double>({1, 5, 5, 0, 0, 2, 2, 2, 9}, {3, 3});
  EXPECT_EQ(argmax(x, 1).to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 2}));
  EXPECT_EQ(argmin(x, 1).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(argmax(x, 0).to_vector<int64_t>(), (std::vector<int64_t>{2, 0, 2}));
  EXPECT_EQ(argmin(x, -2).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(argmax(x).item<int64_t>(), 8);
  EXPECT_EQ(argmin(x).item<int64_t>(), 3);
  EXPECT_EQ(argmax(x).dtype(), DType::i64);
  EXPECT_EQ(argmax(x, 1, true).shape(), (Dims{3, 1}));
  EXPECT_EQ(argmax(x, std::nullopt, true).shape(), (Dims{1, 1}));
  EXPECT_EQ(argmax(transpose(x, 0, 1)).item<int64_t>(), 8);
  EXPECT_EQ(argmax(transpose(x, 0, 1), 1).to_vector<int64_t>(), (std::vector<int64_t>{2, 0, 2}));
  Tensor n = from_vector<double>({1, kNaN, 7, kNaN}, {4});
  EXPECT_EQ(argmax(n).item<int64_t>(), 1);
  EXPECT_EQ(argmin(n).item<int64_t>(), 1);
  Tensor i = from_vector<int64_t>({3, -1, 3, -1}, {2, 2});
  EXPECT_EQ(argmax(i, 1).to_vector<int64_t>(), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(argmin(i).item<int64_t>(), 1);
}

// argmax/argmin equal a first-occurrence loop on tie-heavy, NaN-dotted data in every layout.
TEST(Reduce, ArgMatchesReference) {
  const std::vector<Dims> shapes = {{7, 40}, {40, 7}, {3, 50, 20}, {64, 33}};
  uint64_t seed = 300;
  for (const Dims& shape : shapes) {
    for (Layout l : kLayouts) {
      Tensor x = make(shape, l, seed++, DType::f64, true);
      if (seed % 2 && l != Layout::kExpanded) x.select(0, 1).select(0, 3).fill_(std::nan(""));
      EXPECT_EQ(x.is_contiguous(), l == Layout::kContiguous);
      const V xv = x.to_vector<double>();
      const int64_t r = x.dim();
      for (int64_t d = 0; d < r; ++d) {
        // Reference: scan dim d of every output position.
        const int64_t K = shape[d];
        Dims os;
        for (int64_t i = 0; i < r; ++i)
          if (i != d) os.push_back(shape[i]);
        std::vector<int64_t> want_max, want_min;
        for (int64_t o = 0; o < numel_of(os); ++o) {
          std::vector<int64_t> idx(static_cast<size_t>(r));
          int64_t rem = o;
          for (int64_t i = r - 1; i >= 0; --i) {
            if (i == d) continue;
            idx[static_cast<size_t>(i)] = rem % shape[i];
            rem /= shape[i];
          }
          int64_t bmax = 0, bmin = 0;
          double vmax = 0, vmin = 0;
          for (int64_t k = 0; k < K; ++k) {
            idx[static_cast<size_t>(d)] = k;
            int64_t lin = 0;
            for (int64_t i = 0; i < r; ++i) lin = lin * shape[i] + idx[static_cast<size_t>(i)];
            double v = xv[static_cast<size_t>(lin)];
            if (k == 0 || (!std::isnan(vmax) && (v > vmax || std::isnan(v)))) {
              vmax = v;
              bmax = k;
            }
            if (k == 0 || (!std::isnan(vmin) && (v < vmin || std::isnan(v)))) {
              vmin = v;
              bmin = k;
            }
          }
          want_max.push_back(bmax);
          want_min.push_back(bmin);
        }
        std::string what = str("shape ", shape, " layout ", int(l), " dim ", d);
        EXPECT_EQ(argmax(x, d).to_vector<int64_t>(), want_max) << what;
        EXPECT_EQ(argmin(x, d).to_vector<int64_t>(), want_min) << what;
      }
    }
  }
}

// argmax over long rows (split path) keeps the first of tied maxima across blocks.
TEST(Reduce, ArgmaxLargeFirstOccurrence) {
  Tensor x = zeros({3, 200000}, DType::f32);
  x.select(0, 0).select(0, 150000).fill_(5.0);
  x.select(0, 0).select(0, 190000).fill_(5.0);
  x.select(0, 1).select(0, 40000).fill_(-1.0);
  x.select(0, 2).select(0, 199999).fill_(std::nan(""));
  x.select(0, 2).select(0, 100).fill_(100.0);
  EXPECT_EQ(argmax(x, 1).to_vector<int64_t>(), (std::vector<int64_t>{150000, 0, 199999}));
  EXPECT_EQ(argmin(x, 1).to_vector<int64_t>(), (std::vector<int64_t>{0, 40000, 199999}));
  EXPECT_EQ(argmax(x.select(0, 0)).item<int64_t>(), 150000);
  Tensor p = permute(make({2, 3, 4}, Layout::kContiguous, 9), {2, 0, 1});
  V pv = p.to_vector<double>();
  std::vector<int64_t> want;
  for (int r = 0; r < 4; ++r) {
    int best = 0;
    for (int k = 1; k < 6; ++k)
      if (pv[r * 6 + k] > pv[r * 6 + best]) best = k;
    want.push_back(best);
  }
  EXPECT_EQ(argmax(reshape(p, {4, 6}), 1).to_vector<int64_t>(), want);
}

// Gradients of sum/amax/amin pass gradcheck for every dims/keepdim case.
TEST(Reduce, Gradcheck) {
  for (const Case& c : kCases) {
    if (numel_of(c.shape) > 200) continue;
    Tensor x = leaf(make(c.shape, Layout::kContiguous, 7));
    const Dims dims = c.dims;
    const bool kd = c.keepdim;
    EXPECT_EQ(gradcheck([&](const std::vector<Tensor>& in)
                            -> std::vector<Tensor> { return {sum(in[0], dims, kd)}; },
                        {x}),
              "")
        << c.shape << " " << dims;
    EXPECT_EQ(gradcheck(
                  [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                    return {amax(in[0], dims, kd), amin(in[0], dims, kd)};
                  },
                  {x}),
              "")
        << c.shape << " " << dims;
  }
}

// Tied maxima share the gradient evenly (like torch.amax).
TEST(Reduce, AmaxTiesSplitGradient) {
  Tensor x = from_vector<double>({1, 3, 3, 2, 2, 2}, {2, 3}).requires_grad_();
  amax(x, {1}).sum().backward();
  expect_near(x.grad().to_vector<double>(), {0, 0.5, 0.5, 1.0 / 3, 1.0 / 3, 1.0 / 3}, 1e-15,
              "amax ties");
  Tensor y = from_vector<double>({4, 1, 1}, {3}).requires_grad_();
  (amin(y) * 6.0).backward();
  expect_near(y.grad().to_vector<double>(), {0, 3, 3}, 1e-15, "amin ties");
}

// Second derivatives through the sum and amax rules (create_graph) are right.
TEST(Reduce, DoubleBackward) {
  Tensor x = leaf(randn64({3, 4}, 21));
  Tensor w = randn64({3}, 22);
  // f(x) = sum(x^3, dim 1): the gradient 3x^2 w depends on x, so its gradient checks the rules.
  auto f = [](const Tensor& t) { return sum(t * t * t, {1}); };
  EXPECT_EQ(gradcheck(grad_of(f, w), {x}), "");
  auto g = [](const Tensor& t) { return amax(t * t, {0}, true); };
  EXPECT_EQ(gradcheck(grad_of(g, randn64({1, 4}, 23)), {x}), "");
}

// sum_to reverses broadcasting (the autograd engine relies on it).
TEST(Reduce, SumTo) {
  Tensor g = reshape(arange(0, 24, 1, DType::f64), {2, 3, 4});
  EXPECT_EQ(sum_to(g, {2, 3, 4}).data_ptr(), g.data_ptr());
  Tensor a = sum_to(g, {3, 1});
  EXPECT_EQ(a.shape(), (Dims{3, 1}));
  expect_near(a.to_vector<double>(),
              ref_reduce(g.to_vector<double>(), {2, 3, 4}, {0, 2}, Red::kSum), 0, "sum_to [3, 1]");
  Tensor b = sum_to(g, {1, 1, 4});
  expect_near(b.to_vector<double>(),
              ref_reduce(g.to_vector<double>(), {2, 3, 4}, {0, 1}, Red::kSum), 0,
              "sum_to [1, 1, 4]");
  Tensor c = sum_to(g, {});
  EXPECT_EQ(c.shape(), (Dims{}));
  EXPECT_EQ(c.item<double>(), 276);
  EXPECT_EQ(sum_to(g, {4}).shape(), (Dims{4}));
  EXPECT_EQ(sum_to(zeros({0, 3}), {1, 3}).to_vector<double>(), V(3, 0.0));
  expect_error([&] { sum_to(g, {5}); }, {"[sum_to]", "[2, 3, 4]", "[5]"});
  expect_error([&] { sum_to(g, {1, 2, 3, 4}); }, {"[sum_to]", "[2, 3, 4]"});
  // Broadcast inputs of a binary op get their gradients summed back.
  Tensor p = leaf(randn64({3, 1}, 3)), q = leaf(randn64({4}, 4));
  EXPECT_EQ(
      gradcheck(
          [](const std::vector<Tensor>& in) -> std::vector<Tensor> { return {in[0] * in[1]}; },
          {p, q}),
      "");
}

// Bad dims raise kiln::Error naming the op and the rank (errors_test pins the exact wording).
TEST(Reduce, Errors) {
  Tensor x = zeros({2, 3});
  expect_error([&] { sum(x, {2}); }, {"[sum] dimension 2 is out of range", "rank 2"});
  expect_error([&] { amax(x, {-3}); }, {"[amax]", "-3", "rank 2"});
  expect_error([&] { amin(x, {1, -1}); }, {"[amin]", "twice"});
  expect_error([&] { argmax(x, 5); }, {"[argmax]", "5", "rank 2"});
  expect_error([&] { argmin(x, -3, true); }, {"[argmin]", "rank 2"});
  expect_error([&] { sum(scalar_tensor(1.0, DType::f32), {1}); }, {"[sum]", "0-d"});
}
