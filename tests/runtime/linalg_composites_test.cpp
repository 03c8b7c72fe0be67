// Verifies the linear-algebra composites (ops/linalg_composites.cpp): bmm,
// baddbmm, outer, the einsum subset (against naive index loops), the norms,
// normalize and cosine_similarity, with gradchecks and error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>

#include "kiln/kiln.h"
#include "test_util.h"
#include "value_util.h"

using namespace kiln;

namespace {

using V = std::vector<double>;
using kiln::testing::expect_error;
using kiln::testing::randv;
using kiln::testing::vals;
constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor rnd(const Dims& shape, uint32_t seed) {
  return from_vector<double>(randv(static_cast<size_t>(numel_of(shape)), seed), shape);
}
// A gradcheck input: random f64 values that require grad.
Tensor leaf(const Dims& shape, uint32_t seed) {
  return rnd(shape, seed).requires_grad_();
}
void expect_near(const Tensor& got, const Tensor& want, double tol = 1e-10) {
  ASSERT_EQ(got.shape(), want.shape());
  V g = vals(got), w = vals(want);
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], w[i], tol) << "element " << i;
}

// Naive einsum: loops over every assignment of the labels (sizes from the operands).
Tensor naive_einsum(const std::string& in_terms, const std::string& out,
                    const std::vector<Tensor>& ops) {
  std::vector<std::string> terms(1);
  for (char c : in_terms) {
    if (c == ',')
      terms.emplace_back();
    else
      terms.back().push_back(c);
  }
  std::map<char, int64_t> size;
  for (size_t i = 0; i < terms.size(); ++i)
    for (size_t k = 0; k < terms[i].size(); ++k) size[terms[i][k]] = ops[i].size(k);
  std::string labels;
  for (auto& [c, n] : size) labels += c;
  Dims oshape;
  for (char c : out) oshape.push_back(size[c]);
  V result(static_cast<size_t>(numel_of(oshape)), 0.0);
  std::vector<V> data;
  for (const Tensor& t : ops) data.push_back(vals(t));
  std::map<char, int64_t> at;
  for (char c : labels) at[c] = 0;
  int64_t total = 1;
  for (char c : labels) total *= size[c];
  for (int64_t it = 0; it < total; ++it) {
    int64_t r = it;
    for (size_t k = labels.size(); k-- > 0;) {
      at[labels[k]] = r % size[labels[k]];
      r /= size[labels[k]];
    }
    double prod = 1;
    for (size_t i = 0; i < terms.size(); ++i) {
      int64_t off = 0;
      for (size_t k = 0; k < terms[i].size(); ++k) off = off * ops[i].size(k) + at[terms[i][k]];
      prod *= data[i][static_cast<size_t>(off)];
    }
    int64_t o = 0;
    for (char c : out) o = o * size[c] + at[c];
    result[static_cast<size_t>(o)] += prod;
  }
  return from_vector<double>(result).reshape(oshape);
}

// Verifies bmm, baddbmm (beta/alpha, beta = 0 ignores NaN input) and outer.
TEST(LinalgComposites, BmmBaddbmmOuter) {
  Tensor a = rnd({2, 3, 4}, 1), b = rnd({2, 4, 5}, 2);
  expect_near(bmm(a, b), naive_einsum("bij,bjk", "bik", {a, b}));
  Tensor in = rnd({3, 5}, 3);
  expect_near(baddbmm(in, a, b, 0.5, 2.0), in * 0.5 + bmm(a, b) * 2.0);
  Tensor nan_in = full({2, 3, 5}, std::numeric_limits<double>::quiet_NaN(), DType::f64);
  expect_near(nan_in.baddbmm(a, b, 0.0), bmm(a, b));
  Tensor u = rnd({3}, 4), v = rnd({4}, 5);
  expect_near(outer(u, v), naive_einsum("i,j", "ij", {u, v}));
  expect_error([&] { bmm(a, a); }, {"[bmm]", "[2, 3, 4]"});
  expect_error([&] { bmm(rnd({3, 4}, 6), b); }, {"[bmm]", "3-D"});
  expect_error([&] { baddbmm(rnd({4, 5}, 7), a, b); }, {"[baddbmm]", "[4, 5]"});
  expect_error([&] { outer(a, v); }, {"[outer]", "1-D"});
  EXPECT_EQ(gradcheck(
                [](const std::vector<Tensor>& in) {
                  return std::vector<Tensor>{baddbmm(in[0], in[1], in[2], 0.5, 1.5)};
                },
                {leaf({2, 1, 3}, 8), leaf({2, 2, 4}, 9), leaf({2, 4, 3}, 10)}),
            "");
}

// Verifies the einsum subset against naive loops (matmul, batched, outer,
// transpose, reductions, three operands, implicit output) and gradients.
TEST(LinalgComposites, EinsumMatchesNaiveLoops) {
  Tensor m = rnd({3, 4}, 11), n = rnd({4, 5}, 12), q = rnd({2, 2, 3, 4}, 13),
         k = rnd({2, 2, 6, 4}, 14), v = rnd({4}, 15), w = rnd({5, 2}, 16);
  expect_near(einsum("ij,jk->ik", {m, n}), naive_einsum("ij,jk", "ik", {m, n}));
  expect_near(einsum("bhld,bhsd->bhls", {q, k}), naive_einsum("bhld,bhsd", "bhls", {q, k}));
  expect_near(einsum("i,j->ij", {v, v}), naive_einsum("i,j", "ij", {v, v}));
  expect_near(einsum("ij->ji", {m}), naive_einsum("ij", "ji", {m}));
  expect_near(einsum("ij->i", {m}), naive_einsum("ij", "i", {m}));
  expect_near(einsum("ij,ij->", {m, m}), naive_einsum("ij,ij", "", {m, m}));
  expect_near(einsum("ij,jk,kl->il", {m, n, w}), naive_einsum("ij,jk,kl", "il", {m, n, w}));
  expect_near(einsum("ij,j", {m, v}), naive_einsum("ij,j", "i", {m, v}));  // implicit: "i"
  expect_near(einsum("ba,ac", {n.t(), n}), naive_einsum("ba,ac", "bc", {n.t(), n}));
  expect_near(einsum("bij, bjk -> bki", {rnd({2, 3, 4}, 17), rnd({2, 4, 5}, 18)}),
              naive_einsum("bij,bjk", "bki", {rnd({2, 3, 4}, 17), rnd({2, 4, 5}, 18)}));
  EXPECT_EQ(gradcheck(
                [](const std::vector<Tensor>& in) {
                  return std::vector<Tensor>{einsum("bij,bkj->bik", in)};
                },
                {leaf({2, 3, 4}, 19), leaf({2, 5, 4}, 20)}),
            "");
  expect_error([&] { einsum("ii->i", {rnd({3, 3}, 21)}); }, {"[einsum]", "repeats"});
  expect_error([&] { einsum("...ij->ij", {m}); }, {"[einsum]", "'.'"});
  expect_error([&] { einsum("ij,jk->ik", {m, m}); }, {"[einsum]", "label 'j'", "sizes 4 and 3"});
  expect_error([&] { einsum("ij->k", {m}); }, {"[einsum]", "'k'"});
  expect_error([&] { einsum("ij,jk->ik", {m}); }, {"[einsum]", "2 operand terms but 1"});
  expect_error([&] { einsum("ijk->ij", {m}); }, {"[einsum]", "2 dims"});
}

// Verifies vector_norm/norm for p = 2, 1, inf, -inf, 0 and 3 against loops, the
// zero gradient at a zero norm, normalize and cosine_similarity.
TEST(LinalgComposites, NormsNormalizeCosine) {
  Tensor x = rnd({3, 4}, 22);
  V xv = vals(x);
  auto naive = [&](double p, size_t row) {
    double acc = p == kInf ? 0 : (p == -kInf ? kInf : 0);
    for (size_t j = 0; j < 4; ++j) {
      double a = std::abs(xv[row * 4 + j]);
      if (p == kInf)
        acc = std::max(acc, a);
      else if (p == -kInf)
        acc = std::min(acc, a);
      else if (p == 0)
        acc += a != 0;
      else
        acc += std::pow(a, p);
    }
    return std::isinf(p) || p == 0 ? acc : std::pow(acc, 1 / p);
  };
  for (double p : {2.0, 1.0, kInf, -kInf, 0.0, 3.0}) {
    V got = vals(vector_norm(x, p, {1}));
    for (size_t r = 0; r < 3; ++r) EXPECT_NEAR(got[r], naive(p, r), 1e-12) << "p = " << p;
  }
  EXPECT_NEAR(norm(x).item<double>(), std::sqrt(vals((x * x).sum())[0]), 1e-12);
  EXPECT_NEAR(x.norm(1.0, {0, 1}).item<double>(), vals(abs(x).sum())[0], 1e-12);
  Tensor z = zeros({3}, DType::f64).requires_grad_();
  vector_norm(z).backward();
  EXPECT_EQ(vals(z.grad()), (V{0, 0, 0}));
  Tensor z3 = zeros({3}, DType::f64).requires_grad_();
  vector_norm(z3, 3.0).backward();
  EXPECT_EQ(vals(z3.grad()), (V{0, 0, 0}));
  for (double p : {2.0, 1.0, 3.0, kInf})
    EXPECT_EQ(gradcheck(
                  [p](const std::vector<Tensor>& in) {
                    return std::vector<Tensor>{vector_norm(in[0], p, {1}, true)};
                  },
                  {leaf({3, 4}, 23)}),
              "")
        << "p = " << p;
  Tensor nx = normalize(x);  // dim 1
  V nv = vals(vector_norm(nx, 2.0, {1}));
  for (double e : nv) EXPECT_NEAR(e, 1.0, 1e-12);
  expect_near(normalize(zeros({2, 2}, DType::f64)), zeros({2, 2}, DType::f64));
  Tensor y = rnd({3, 4}, 24);
  Tensor cs = cosine_similarity(x, y);
  V yv = vals(y);
  for (size_t r = 0; r < 3; ++r) {
    double dot = 0, nxr = 0, nyr = 0;
    for (size_t j = 0; j < 4; ++j) {
      dot += xv[r * 4 + j] * yv[r * 4 + j];
      nxr += xv[r * 4 + j] * xv[r * 4 + j];
      nyr += yv[r * 4 + j] * yv[r * 4 + j];
    }
    EXPECT_NEAR(vals(cs)[r], dot / std::sqrt(nxr * nyr), 1e-12);
  }
  EXPECT_EQ(cosine_similarity(x, rnd({4}, 25), 1).shape(), (Dims{3}));  // broadcast
  EXPECT_EQ(gradcheck(
                [](const std::vector<Tensor>& in) {
                  return std::vector<Tensor>{cosine_similarity(in[0], in[1], 0)};
                },
                {leaf({3, 2}, 26), leaf({3, 2}, 27)}),
            "");
  expect_error([] { vector_norm(from_vector<int64_t>({1, 2})); }, {"[vector_norm]", "i64"});
}

// Verifies gradcheck on bmm, outer and normalize (p = 2 and p = 1).
TEST(LinalgComposites, GradchecksOfTheRest) {
  EXPECT_EQ(
      gradcheck(
          [](const std::vector<Tensor>& in) { return std::vector<Tensor>{bmm(in[0], in[1])}; },
          {leaf({2, 3, 4}, 30), leaf({2, 4, 2}, 31)}),
      "");
  EXPECT_EQ(
      gradcheck(
          [](const std::vector<Tensor>& in) { return std::vector<Tensor>{outer(in[0], in[1])}; },
          {leaf({3}, 32), leaf({4}, 33)}),
      "");
  for (double p : {2.0, 1.0})
    EXPECT_EQ(gradcheck(
                  [p](const std::vector<Tensor>& in) {
                    return std::vector<Tensor>{normalize(in[0], p, 0)};
                  },
                  {leaf({3, 4}, 34)}),
              "")
        << "p = " << p;
}

}  // namespace
