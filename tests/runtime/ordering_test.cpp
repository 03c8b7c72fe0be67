// Verifies the public scans, ordering and sampling API (scan.cpp, sort.cpp):
// sort/argsort/topk values and indices against naive references, stability,
// gradients scattered through the indices, cumsum/cumprod gradients (zeros
// included), and multinomial's draws, determinism and bad-input errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "kiln/kiln.h"
#include "kiln/random.h"
#include "test_util.h"
#include "value_util.h"

using namespace kiln;

namespace {

using V = std::vector<double>;
using kiln::testing::expect_error;
using kiln::testing::f64;
using kiln::testing::ints;
using kiln::testing::randv;
using kiln::testing::vals;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string check1(const std::function<Tensor(const Tensor&)>& f, const Tensor& x) {
  return gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in[0])}; },
                   {x.detach().requires_grad_()});
}

// Verifies sort returns ascending/descending values with their indices (rows of [3, 5]).
TEST(Sort, ValuesAndIndicesMatchANaiveSort) {
  V v = randv(15, 1);
  Tensor x = f64(v, {3, 5});
  for (bool desc : {false, true}) {
    auto [values, idx] = sort(x, -1, desc);
    ASSERT_EQ(idx.dtype(), DType::i64);
    for (size_t r = 0; r < 3; ++r) {
      std::vector<int64_t> p(5);
      std::iota(p.begin(), p.end(), 0);
      std::stable_sort(p.begin(), p.end(), [&](int64_t a, int64_t b) {
        return desc ? v[r * 5 + a] > v[r * 5 + b] : v[r * 5 + a] < v[r * 5 + b];
      });
      for (size_t j = 0; j < 5; ++j) {
        EXPECT_EQ(ints(idx)[r * 5 + j], p[j]);
        EXPECT_EQ(vals(values)[r * 5 + j], v[r * 5 + static_cast<size_t>(p[j])]);
      }
    }
  }
  EXPECT_EQ(ints(argsort(x, 0, true)), ints(std::get<1>(sort(x, 0, true))));
}

// Verifies ties keep their input order with stable=true (and stable=false, which
// is documented to give the same order), ascending and descending; NaN sorts last.
TEST(Sort, TiesKeepInputOrderAndNaNIsLargest) {
  Tensor x = from_vector<double>({2, 1, 2, kNaN, 1, 2, -1});
  for (bool stable : {true, false}) {
    EXPECT_EQ(ints(argsort(x, 0, false, stable)), (std::vector<int64_t>{6, 1, 4, 0, 2, 5, 3}));
    EXPECT_EQ(ints(argsort(x, 0, true, stable)), (std::vector<int64_t>{3, 0, 2, 5, 1, 4, 6}));
  }
  auto [v, i] = topk(x, 2);
  EXPECT_TRUE(std::isnan(vals(v)[0]));
  EXPECT_EQ(ints(i), (std::vector<int64_t>{3, 0}));
}

// Verifies topk against a naive selection (largest and smallest, along dim 0).
TEST(Sort, TopkMatchesNaiveSelection) {
  V v = randv(24, 2);
  Tensor x = f64(v, {6, 4});
  auto [big, bi] = topk(x, 3, 0);
  auto [small, si] = x.topk(2, 0, false);
  EXPECT_EQ(big.shape(), (Dims{3, 4}));
  EXPECT_EQ(small.shape(), (Dims{2, 4}));
  for (size_t c = 0; c < 4; ++c) {
    V col;
    for (size_t r = 0; r < 6; ++r) col.push_back(v[r * 4 + c]);
    V sorted = col;
    std::sort(sorted.begin(), sorted.end());
    for (size_t j = 0; j < 3; ++j) EXPECT_EQ(vals(big)[j * 4 + c], sorted[5 - j]);
    for (size_t j = 0; j < 2; ++j) EXPECT_EQ(vals(small)[j * 4 + c], sorted[j]);
    EXPECT_EQ(col[static_cast<size_t>(ints(bi)[c])], sorted[5]);
  }
  expect_error([&] { topk(x, 7, 0); }, {"[topk]", "k = 7", "size 6"});
  expect_error([&] { topk(x, -1); }, {"[topk]", "-1"});
  expect_error([&] { sort(x, 2); }, {"[argsort]", "dimension 2"});
}

// Verifies sort/topk gradients scatter back through the indices (gradcheck, and
// exact values: each input gets the gradient of the output position it went to).
TEST(Sort, GradientsFlowThroughTheIndices) {
  Tensor x = f64(randv(12, 3), {3, 4});
  EXPECT_EQ(check1([](const Tensor& t) { return std::get<0>(sort(t, 1, true)); }, x), "");
  EXPECT_EQ(check1([](const Tensor& t) { return std::get<0>(topk(t, 2, 0)); }, x), "");
  Tensor l = from_vector<double>({3, 1, 2}).requires_grad_();
  auto [v, i] = topk(l, 2);
  (v * from_vector<double>({10, 100})).sum().backward();
  EXPECT_EQ(vals(l.grad()), (V{10, 0, 100}));
  EXPECT_FALSE(i.requires_grad());
}

// Verifies cumsum/cumprod values, integer promotion, methods and gradients.
TEST(Scan, CumsumAndCumprodMatchRunningLoops) {
  Tensor x = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(vals(cumsum(x, 1)), (V{1, 3, 6, 4, 9, 15}));
  EXPECT_EQ(vals(x.cumsum(0)), (V{1, 2, 3, 5, 7, 9}));
  EXPECT_EQ(vals(cumprod(x, -1)), (V{1, 2, 6, 4, 20, 120}));
  Tensor b = from_vector<bool>({true, false, true});
  EXPECT_EQ(cumsum(b, 0).dtype(), DType::i64);
  EXPECT_EQ(ints(cumsum(b, 0)), (std::vector<int64_t>{1, 1, 2}));
  EXPECT_EQ(ints(cumprod(from_vector<int32_t>({2, -3, 4}), 0)), (std::vector<int64_t>{2, -6, -24}));
  expect_error([&] { cumsum(x, 2); }, {"[cumsum]", "dimension 2"});
  EXPECT_EQ(check1([](const Tensor& t) { return cumsum(t, 0); }, f64(randv(12, 4), {4, 3})), "");
  EXPECT_EQ(check1([](const Tensor& t) { return cumprod(t, 1); }, f64(randv(12, 5), {4, 3})), "");
}

// Verifies cumprod's gradient at exact zeros equals the naive derivative
// sum_{k>=i} g_k prod_{j<=k, j!=i} x_j (one zero, two zeros, a zero first).
TEST(Scan, CumprodGradientIsExactAtZeros) {
  for (V v : {V{2, 0, 3, 4}, V{0, 2, 0, 5}, V{1.5, -2, 0, 0}, V{3, 2, 1, 0}}) {
    Tensor x = f64(v, {4}).requires_grad_();
    V g{0.5, -1, 2, 0.25};
    (cumprod(x, 0) * f64(g, {4})).sum().backward();
    V want(4, 0.0);
    for (size_t i = 0; i < 4; ++i)
      for (size_t k = i; k < 4; ++k) {
        double p = g[k];
        for (size_t j = 0; j <= k; ++j)
          if (j != i) p *= v[j];
        want[i] += p;
      }
    EXPECT_EQ(vals(x.grad()), want);
  }
}

// Verifies multinomial's draws follow the weights (frequencies over many draws),
// never pick zero weights, are permutations without replacement, and are the
// same numbers for the same seed (and for an explicit generator of that seed).
TEST(Multinomial, DrawsFollowTheWeights) {
  manual_seed(7);
  Tensor p = from_vector<double>({0.1, 0, 0.6, 0.3});
  Tensor s = multinomial(p, 20000, true);
  ASSERT_EQ(s.shape(), (Dims{20000}));
  std::vector<int64_t> counts(4, 0);
  for (int64_t c : ints(s)) ++counts[static_cast<size_t>(c)];
  EXPECT_EQ(counts[1], 0);
  EXPECT_NEAR(counts[0] / 20000.0, 0.1, 0.01);
  EXPECT_NEAR(counts[2] / 20000.0, 0.6, 0.015);
  // Without replacement: distinct, and the heaviest weight usually comes first.
  Tensor w = from_vector<float>({1, 2, 3, 0, 50, 4}, {1, 6});
  int heavy_first = 0;
  for (int t = 0; t < 200; ++t) {
    std::vector<int64_t> d = ints(w.multinomial(5));
    std::vector<int64_t> sorted = d;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (std::vector<int64_t>{0, 1, 2, 4, 5}));
    heavy_first += d[0] == 4;
  }
  EXPECT_GT(heavy_first, 160);
  manual_seed(11);
  Tensor a = multinomial(w.repeat({3, 1}), 4, true);
  manual_seed(11);
  Tensor b = multinomial(w.repeat({3, 1}), 4, true);
  EXPECT_EQ(ints(a), ints(b));
  Generator g;
  g.seed = 11;
  EXPECT_EQ(ints(multinomial(w.repeat({3, 1}), 4, true, &g)), ints(a));
  EXPECT_EQ(g.offset, 3u * 4u * 2u);
}

// Verifies bad weights and arguments raise kiln::Error naming the values.
TEST(Multinomial, BadInputsAreErrors) {
  expect_error(
      [] {
        multinomial(from_vector<double>({0.5, -0.1, 1}), 1);
      },
      {"[multinomial]", "-0.1", "category 1"});
  expect_error(
      [] {
        multinomial(from_vector<double>({1, 1, 0, 0}, {2, 2}), 1, true);
      },
      {"[multinomial]", "row 1", "sum to 0"});
  expect_error([] { multinomial(from_vector<double>({1, kNaN}), 1); }, {"[multinomial]", "nan"});
  expect_error(
      [] {
        multinomial(from_vector<double>({1, 2}), 3);
      },
      {"[multinomial]", "3 samples without replacement from 2 categories"});
  expect_error(
      [] {
        multinomial(from_vector<double>({1, 0, 0}), 2);
      },
      {"[multinomial]", "only 1 categories have nonzero probability"});
  expect_error([] { multinomial(from_vector<int64_t>({1, 2}), 1); }, {"[multinomial]", "i64"});
  expect_error([] { multinomial(ones({2, 2, 2}), 1); }, {"[multinomial]", "1-D or 2-D"});
  expect_error([] { multinomial(ones({2}), 0); }, {"[multinomial]", "positive"});
}

}  // namespace
