// Verifies the composite ops (composites.cpp, attention.cpp) against naive
// loop references, plus gradients, double backward and error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <numbers>
#include <random>
#include <set>

#include "kiln/kiln.h"
#include "symbolic_recorder.h"
#include "test_util.h"
#include "value_util.h"

using namespace kiln;

namespace {

using V = std::vector<double>;
using kiln::testing::f64;
using kiln::testing::randv;
using kiln::testing::vals;
constexpr double kInf = std::numeric_limits<double>::infinity();

// Row-major [r, c] values -> row-major values of the [c, r] transpose.
V transposed(const V& v, size_t r, size_t c) {
  V out(v.size());
  for (size_t i = 0; i < r; ++i)
    for (size_t j = 0; j < c; ++j) out[j * r + i] = v[i * c + j];
  return out;
}
void expect_near(const V& got, const V& want, double tol = 1e-12) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) || std::isinf(want[i])) {
      EXPECT_TRUE(std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i])
          << "element " << i << ": got " << got[i] << ", want " << want[i];
    } else {
      EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << "element " << i;
    }
  }
}
using kiln::testing::expect_error;
Tensor leaf(const V& v, const Dims& shape) {
  return f64(v, shape).requires_grad_();
}

// gradcheck of a one-input function.
std::string check1(const std::function<Tensor(const Tensor&)>& f, const Tensor& x) {
  return gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in[0])}; },
                   {x});
}
// gradcheck of x -> d/dx sum(f(x) * w): checks the double backward of f.
std::string check_double(const std::function<Tensor(const Tensor&)>& f, const Tensor& x) {
  Tensor w = rand(f(x).shape(), DType::f64) - 0.5;
  return gradcheck(
      [&](const std::vector<Tensor>& in) {
        GradModeGuard on(true);  // gradcheck evaluates without grad; this needs the graph
        return grad({f(in[0])}, {in[0]}, {w}, {.retain_graph = true, .create_graph = true});
      },
      {x});
}

// Element i of a row-major tensor -> its group id when `red` dims are reduced.
std::vector<size_t> group_ids(const Dims& shape, const std::set<int64_t>& red, size_t& ngroups) {
  size_t n = static_cast<size_t>(numel_of(shape));
  std::vector<size_t> ids(n);
  ngroups = 1;
  for (size_t d = 0; d < shape.size(); ++d)
    if (!red.count(static_cast<int64_t>(d))) ngroups *= static_cast<size_t>(shape[d]);
  for (size_t i = 0; i < n; ++i) {
    size_t rest = i, id = 0, mult = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      size_t idx = rest % static_cast<size_t>(shape[d]);
      rest /= static_cast<size_t>(shape[d]);
      if (!red.count(static_cast<int64_t>(d))) {
        id += idx * mult;
        mult *= static_cast<size_t>(shape[d]);
      }
    }
    ids[i] = id;
  }
  return ids;
}
// Values of each group when reducing `red` dims.
std::vector<V> groups(const V& v, const Dims& shape, const std::set<int64_t>& red) {
  size_t ng;
  auto ids = group_ids(shape, red, ng);
  std::vector<V> g(ng);
  for (size_t i = 0; i < v.size(); ++i) g[ids[i]].push_back(v[i]);
  return g;
}
double mean_of(const V& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}
double var_of(const V& v, int64_t correction) {
  double m = mean_of(v), s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / static_cast<double>(static_cast<int64_t>(v.size()) - correction);
}
// Naive softmax (log = false) or log_softmax of v along `dim`.
V softmax_ref(const V& v, const Dims& shape, int64_t dim, bool log_out) {
  size_t ng;
  auto ids = group_ids(shape, {dim}, ng);
  V mx(ng, -kInf), s(ng, 0.0), out(v.size());
  for (size_t i = 0; i < v.size(); ++i) mx[ids[i]] = std::max(mx[ids[i]], v[i]);
  for (size_t i = 0; i < v.size(); ++i) s[ids[i]] += std::exp(v[i] - mx[ids[i]]);
  for (size_t i = 0; i < v.size(); ++i) {
    double l = v[i] - mx[ids[i]] - std::log(s[ids[i]]);
    out[i] = log_out ? l : std::exp(l);
  }
  return out;
}

}  // namespace

// square and reciprocal match x*x and 1/x, also on a transposed input, and keep f32.
TEST(CompositeElementwise, SquareAndReciprocal) {
  V v = randv(12, 1, 0.5, 3.0);
  Tensor x = f64(v, {3, 4}).transpose(0, 1);
  V xt = transposed(v, 3, 4), sq(12), rc(12);
  for (size_t i = 0; i < 12; ++i) {
    sq[i] = xt[i] * xt[i];
    rc[i] = 1.0 / xt[i];
  }
  expect_near(vals(square(x)), sq);
  expect_near(vals(reciprocal(x)), rc);
  Tensor xf = from_vector<float>({2.0f, 4.0f});
  EXPECT_EQ(reciprocal(xf).dtype(), DType::f32);
  EXPECT_EQ(square(from_vector<int64_t>({3})).dtype(), DType::i64);
  EXPECT_EQ(check1([](const Tensor& t) { return square(t); }, leaf(v, {12})), "");
  EXPECT_EQ(check1([](const Tensor& t) { return reciprocal(t); }, leaf(v, {12})), "");
}

// clamp/clamp_min/clamp_max: values, NaN propagation, lo > hi gives hi, dtype kept.
TEST(CompositeElementwise, ClampValues) {
  V v = {-3.0, -1.0, 0.25, 0.5, 2.0, std::nan("")};
  Tensor x = f64(v, {6});
  expect_near(vals(clamp(x, -1.5, 1.0)), {-1.5, -1.0, 0.25, 0.5, 1.0, std::nan("")});
  expect_near(vals(clamp_min(x, 0.0)), {0.0, 0.0, 0.25, 0.5, 2.0, std::nan("")});
  expect_near(vals(clamp_max(x, 0.0)), {-3.0, -1.0, 0.0, 0.0, 0.0, std::nan("")});
  // torch.clamp(x, min=1, max=0) is 0 everywhere (except NaN).
  expect_near(vals(clamp(x, 1.0, 0.0)), {0, 0, 0, 0, 0, std::nan("")});
  EXPECT_EQ(clamp(from_vector<float>({1.0f}), 0.0, 0.5).dtype(), DType::f32);
  Tensor xi = from_vector<int64_t>({-5, 0, 7});
  Tensor ci = clamp(xi, -2, 3);
  EXPECT_EQ(ci.dtype(), DType::i64);
  EXPECT_EQ(ci.to_vector<int64_t>(), (std::vector<int64_t>{-2, 0, 3}));
  // Away from the bounds the gradient is 1 inside and 0 outside.
  Tensor g = leaf({-3.0, 0.1, 0.7, 5.0}, {4});
  EXPECT_EQ(check1([](const Tensor& t) { return clamp(t, -1.0, 1.0); }, g), "");
  EXPECT_EQ(check1([](const Tensor& t) { return clamp_min(t, 0.5); }, g), "");
  EXPECT_EQ(check1([](const Tensor& t) { return clamp_max(t, 0.5); }, g), "");
  clamp(g, -1.0, 1.0).sum().backward();
  expect_near(vals(g.grad()), {0, 1, 1, 0});
}

// masked_fill: broadcast mask, dtype of x kept, gradient zero where filled, bool check.
TEST(CompositeElementwise, MaskedFill) {
  V v = randv(6, 2);
  Tensor x = f64(v, {2, 3});
  Tensor mask = ne(from_vector<int64_t>({1, 0, 1}), 0);  // broadcast over rows
  V want = v;
  for (size_t r = 0; r < 2; ++r) want[r * 3] = want[r * 3 + 2] = -7.5;
  expect_near(vals(masked_fill(x, mask, -7.5)), want);
  Tensor xi = from_vector<int64_t>({1, 2, 3});
  Tensor fi = masked_fill(xi, mask, 2.9);  // PyTorch casts the value to x's dtype
  EXPECT_EQ(fi.dtype(), DType::i64);
  EXPECT_EQ(fi.to_vector<int64_t>(), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(masked_fill(from_vector<float>({1.0f}), mask, 1.0).dtype(), DType::f32);
  Tensor g = leaf(v, {2, 3});
  masked_fill(g, mask, 0.0).sum().backward();
  expect_near(vals(g.grad()), {0, 1, 0, 0, 1, 0});
  EXPECT_EQ(check1([&](const Tensor& t) { return masked_fill(t, mask, 3.0); }, leaf(v, {2, 3})),
            "");
  expect_error([&] { masked_fill(x, from_vector<int64_t>({1, 0, 1}), 0.0); }, "[masked_fill]");
  expect_error([&] { masked_fill(x, ne(from_vector<int64_t>({1, 0}), 0), 0.0); }, "masked_fill");
}

// mean/var/std over single dims, several dims, all dims and keepdim, with corrections.
TEST(CompositeReduction, MeanVarStdValues) {
  Dims shape{2, 3, 4};
  V v = randv(24, 3);
  Tensor x = f64(v, shape);
  for (std::set<int64_t> red : std::vector<std::set<int64_t>>{{0}, {1}, {2}, {0, 2}, {0, 1, 2}}) {
    Dims dims(red.begin(), red.end());
    auto gs = groups(v, shape, red);
    V m, v0, v1, s1;
    for (const V& g : gs) {
      m.push_back(mean_of(g));
      v0.push_back(var_of(g, 0));
      v1.push_back(var_of(g, 1));
      s1.push_back(std::sqrt(var_of(g, 1)));
    }
    expect_near(vals(mean(x, dims)), m);
    expect_near(vals(var(x, dims, 0)), v0);
    expect_near(vals(var(x, dims)), v1);
    expect_near(vals(kiln::std(x, dims)), s1);
    Dims kshape = shape;
    for (int64_t d : red) kshape[static_cast<size_t>(d)] = 1;
    EXPECT_EQ(mean(x, dims, true).shape(), kshape);
    EXPECT_EQ(var(x, dims, 1, true).shape(), kshape);
  }
  // Empty dims reduce everything; negative dims wrap.
  expect_near(vals(mean(x)), {mean_of(v)});
  expect_near(vals(var(x, {-1}, 2)), [&] {
    V r;
    for (const V& g : groups(v, shape, {2})) r.push_back(var_of(g, 2));
    return r;
  }());
  // A transposed input: mean over dim 0 of x^T is the row mean of x.
  Tensor t = f64(v, {4, 6}).transpose(0, 1);
  V rows;
  for (size_t r = 0; r < 4; ++r)
    rows.push_back(
        mean_of(V(v.begin() + static_cast<long>(r * 6), v.begin() + static_cast<long>(r * 6 + 6))));
  expect_near(vals(mean(t, {0})), rows);
  // One element with correction 1: 0/0 = NaN, as torch.var.
  EXPECT_TRUE(std::isnan(vals(var(f64({1.0}, {1})))[0]));
  EXPECT_EQ(mean(from_vector<float>({1.0f, 2.0f})).dtype(), DType::f32);
}

// mean/var/std gradients, and integer inputs are errors naming the op.
TEST(CompositeReduction, MeanVarStdGradsAndErrors) {
  V v = randv(12, 4);
  EXPECT_EQ(check1([](const Tensor& t) { return mean(t, {1}); }, leaf(v, {3, 4})), "");
  EXPECT_EQ(check1([](const Tensor& t) { return var(t, {0}, 1, true); }, leaf(v, {3, 4})), "");
  EXPECT_EQ(check1([](const Tensor& t) { return kiln::std(t); }, leaf(v, {3, 4})), "");
  EXPECT_EQ(check_double([](const Tensor& t) { return var(t, {1}); }, leaf(v, {3, 4})), "");
  Tensor xi = from_vector<int64_t>({1, 2});
  expect_error([&] { mean(xi); }, "[mean]");
  expect_error([&] { mean(xi); }, "expected a floating dtype");
  expect_error([&] { var(xi); }, "[var]");
  expect_error([&] { kiln::std(xi); }, "[std]");
  expect_error([&] { mean(f64(v, {3, 4}), {2}); }, "mean");
}

// logsumexp: values, large inputs stay finite, -inf rows give -inf, +inf gives +inf.
TEST(CompositeReduction, Logsumexp) {
  Dims shape{3, 4};
  V v = randv(12, 5, -3, 3);
  v[5] = 800.0;  // exp(800) overflows without the shift
  Tensor x = f64(v, shape);
  for (int64_t d : {0, 1}) {
    V want;
    for (const V& g : groups(v, shape, {d})) {
      double m = *std::max_element(g.begin(), g.end()), s = 0;
      for (double e : g) s += std::exp(e - m);
      want.push_back(m + std::log(s));
    }
    expect_near(vals(logsumexp(x, {d})), want);
    EXPECT_EQ(logsumexp(x, {d}, true).shape(), d == 0 ? (Dims{1, 4}) : (Dims{3, 1}));
  }
  Tensor special = f64({-kInf, -kInf, 1.0, kInf, 0.0, 1.0}, {3, 2});
  expect_near(vals(logsumexp(special, {1})), {-kInf, kInf, 1.0 + std::log1p(std::exp(-1.0))});
  // Integer input is promoted to the default float, as in PyTorch.
  Tensor li = logsumexp(from_vector<int64_t>({0, 0}), {0});
  EXPECT_EQ(li.dtype(), DType::f32);
  EXPECT_NEAR(vals(li)[0], std::log(2.0), 1e-6);
  EXPECT_EQ(check1([](const Tensor& t) { return logsumexp(t, {1}); }, leaf(randv(12, 6), shape)),
            "");
  expect_error([&] { logsumexp(x, {2}); }, "[logsumexp]");
}

// softmax/log_softmax match the naive reference along every dim, on transposed input too.
TEST(CompositeSoftmax, Values) {
  Dims shape{2, 3, 4};
  V v = randv(24, 7, -4, 4);
  v[3] = 1000.0;  // overflow without the max shift
  Tensor x = f64(v, shape);
  for (int64_t d : {0, 1, 2, -1}) {
    int64_t w = d < 0 ? d + 3 : d;
    expect_near(vals(softmax(x, d)), softmax_ref(v, shape, w, false));
    expect_near(vals(log_softmax(x, d)), softmax_ref(v, shape, w, true));
  }
  Tensor xt = f64(v, {4, 6}).transpose(0, 1);
  V vt = transposed(v, 4, 6);
  expect_near(vals(softmax(xt, 1)), softmax_ref(vt, {6, 4}, 1, false));
  expect_near(vals(log_softmax(xt, 0)), softmax_ref(vt, {6, 4}, 0, true));
  // Partly -inf rows give exact zeros; an all -inf row is NaN (as torch.softmax).
  Tensor m = f64({-kInf, 0.0, -kInf, -kInf}, {2, 2});
  expect_near(vals(softmax(m, 1)), {0.0, 1.0, std::nan(""), std::nan("")});
  // PyTorch: torch.softmax(torch.tensor([1., 2., 3.]), 0) = [0.0900, 0.2447, 0.6652].
  expect_near(vals(softmax(from_vector<float>({1, 2, 3}), 0)),
              {0.09003057317038046, 0.24472847105479767, 0.6652409557748219}, 1e-6);
  EXPECT_EQ(softmax(from_vector<float>({1, 2}), 0).dtype(), DType::f32);
  expect_error([] { softmax(from_vector<int64_t>({1, 2}), 0); }, "[softmax]");
  expect_error([] { log_softmax(from_vector<double>({1, 2}), 1); }, "[log_softmax]");
}

// softmax/log_softmax gradients (non-contiguous leaf too) and double backward.
TEST(CompositeSoftmax, Gradients) {
  V v = randv(12, 8);
  EXPECT_EQ(check1([](const Tensor& t) { return softmax(t, 1); }, leaf(v, {3, 4})), "");
  EXPECT_EQ(check1([](const Tensor& t) { return log_softmax(t, 0); }, leaf(v, {3, 4})), "");
  Tensor xt = f64(v, {4, 3}).transpose(0, 1).requires_grad_();
  EXPECT_EQ(check1([](const Tensor& t) { return softmax(t, -1); }, xt), "");
  EXPECT_EQ(check_double([](const Tensor& t) { return softmax(t, 1); }, leaf(v, {3, 4})), "");
  EXPECT_EQ(check_double([](const Tensor& t) { return log_softmax(t, 1); }, leaf(v, {3, 4})), "");
}

// gelu (erf and tanh forms) and silu match their formulas; gelu rejects other modes.
TEST(CompositeActivation, GeluSiluValues) {
  V v = randv(15, 9, -5, 5);
  v[0] = 0.0;
  Tensor x = f64(v, {3, 5}).transpose(0, 1);
  V xt = transposed(v, 3, 5), ge, gt, si;
  const double k = std::sqrt(2.0 / std::numbers::pi);
  for (double a : xt) {
    ge.push_back(0.5 * a * (1.0 + std::erf(a / std::sqrt(2.0))));
    gt.push_back(0.5 * a * (1.0 + std::tanh(k * (a + 0.044715 * a * a * a))));
    si.push_back(a / (1.0 + std::exp(-a)));
  }
  expect_near(vals(gelu(x)), ge);
  expect_near(vals(gelu(x, "tanh")), gt);
  expect_near(vals(silu(x)), si);
  // PyTorch: F.gelu(torch.tensor(1.)) = 0.8413447, approximate='tanh' gives 0.8411920.
  EXPECT_NEAR(vals(gelu(from_vector<float>({1.0f})))[0], 0.8413447460685429, 1e-6);
  EXPECT_NEAR(vals(gelu(from_vector<float>({1.0f}), "tanh"))[0], 0.8411919906082768, 1e-6);
  expect_error([&] { gelu(x, "fast"); }, "[gelu]");
  expect_error([] { silu(from_vector<int64_t>({1})); }, "[silu]");
}

// gelu/silu gradients and gelu double backward for both forms.
TEST(CompositeActivation, GeluSiluGradients) {
  V v = randv(10, 10, -3, 3);
  EXPECT_EQ(check1([](const Tensor& t) { return gelu(t); }, leaf(v, {10})), "");
  EXPECT_EQ(check1([](const Tensor& t) { return gelu(t, "tanh"); }, leaf(v, {10})), "");
  EXPECT_EQ(check1([](const Tensor& t) { return silu(t); }, leaf(v, {10})), "");
  EXPECT_EQ(check_double([](const Tensor& t) { return gelu(t); }, leaf(v, {10})), "");
  EXPECT_EQ(check_double([](const Tensor& t) { return gelu(t, "tanh"); }, leaf(v, {10})), "");
}

// layer_norm over the last one and two dims, with and without affine parameters.
TEST(CompositeLayerNorm, Values) {
  Dims shape{2, 3, 4};
  V v = randv(24, 11, -3, 3), w = randv(12, 12), b = randv(12, 13);
  Tensor x = f64(v, shape);
  const double eps = 1e-5;
  for (size_t nd : {1u, 2u}) {
    size_t block = nd == 1 ? 4 : 12;
    Dims ns = nd == 1 ? Dims{4} : Dims{3, 4};
    V plain(24), affine(24);
    for (size_t s = 0; s < 24; s += block) {
      V g(v.begin() + static_cast<long>(s), v.begin() + static_cast<long>(s + block));
      double m = mean_of(g), var0 = var_of(g, 0);
      for (size_t i = 0; i < block; ++i) {
        plain[s + i] = (g[i] - m) / std::sqrt(var0 + eps);
        affine[s + i] = plain[s + i] * w[i] + b[i];
      }
    }
    Tensor wt = f64(V(w.begin(), w.begin() + static_cast<long>(block)), ns);
    Tensor bt = f64(V(b.begin(), b.begin() + static_cast<long>(block)), ns);
    expect_near(vals(layer_norm(x, ns)), plain, 1e-10);
    expect_near(vals(layer_norm(x, ns, wt, bt, eps)), affine, 1e-10);
    V only_w(24);
    for (size_t i = 0; i < 24; ++i) only_w[i] = plain[i] * w[i % block];
    expect_near(vals(layer_norm(x, ns, wt)), only_w, 1e-10);
  }
  // Non-contiguous input: normalize the rows of a transposed matrix.
  Tensor xt = f64(v, {4, 6}).transpose(0, 1);
  V vt = transposed(v, 4, 6), want(24);
  for (size_t r = 0; r < 6; ++r) {
    V g(vt.begin() + static_cast<long>(r * 4), vt.begin() + static_cast<long>(r * 4 + 4));
    for (size_t i = 0; i < 4; ++i)
      want[r * 4 + i] = (g[i] - mean_of(g)) / std::sqrt(var_of(g, 0) + 1e-5);
  }
  expect_near(vals(layer_norm(xt, {4})), want, 1e-10);
}

// layer_norm gradients w.r.t. x, weight and bias, double backward, and shape errors.
TEST(CompositeLayerNorm, GradientsAndErrors) {
  V v = randv(12, 14, -2, 2);
  Tensor x = leaf(v, {3, 4}), w = leaf(randv(4, 15), {4}), b = leaf(randv(4, 16), {4});
  EXPECT_EQ(gradcheck(
                [](const std::vector<Tensor>& in) {
                  return std::vector<Tensor>{layer_norm(in[0], {4}, in[1], in[2])};
                },
                {x, w, b}),
            "");
  EXPECT_EQ(check_double([](const Tensor& t) { return layer_norm(t, {4}); }, leaf(v, {3, 4})), "");
  Tensor w2 = f64(randv(4, 17), {4});
  EXPECT_EQ(check_double([&](const Tensor& t) { return layer_norm(t, {4}, w2); }, leaf(v, {3, 4})),
            "");
  Tensor y = f64(v, {3, 4});
  expect_error([&] { layer_norm(y, {3}); }, "[layer_norm] normalized_shape [3]");
  expect_error([&] { layer_norm(y, {3}); }, "[3, 4]");
  expect_error([&] { layer_norm(y, {2, 3, 4}); }, "[layer_norm]");
  expect_error([&] { layer_norm(y, {}); }, "[layer_norm]");
  expect_error([&] { layer_norm(y, {4}, f64({1, 2}, {2})); }, "[layer_norm] weight shape");
  expect_error([&] { layer_norm(y, {4}, {}, f64({1}, {1})); }, "[layer_norm] bias shape");
}

// linear: batched input, bias, 1-D weight, non-contiguous weight, against loops.
TEST(CompositeLinear, Values) {
  const size_t B = 2, N = 3, I = 4, O = 5;
  V xv = randv(B * N * I, 18), wv = randv(O * I, 19), bv = randv(O, 20);
  Tensor x = f64(xv, {2, 3, 4});
  V want(B * N * O), want_nb(B * N * O);
  for (size_t r = 0; r < B * N; ++r)
    for (size_t o = 0; o < O; ++o) {
      double s = 0;
      for (size_t i = 0; i < I; ++i) s += xv[r * I + i] * wv[o * I + i];
      want_nb[r * O + o] = s;
      want[r * O + o] = s + bv[o];
    }
  Tensor out = linear(x, f64(wv, {5, 4}), f64(bv, {5}));
  EXPECT_EQ(out.shape(), (Dims{2, 3, 5}));
  expect_near(vals(out), want);
  expect_near(vals(linear(x, f64(wv, {5, 4}))), want_nb);
  // The weight given as the transpose of an [I, O] buffer (non-contiguous).
  Tensor wt = f64(transposed(wv, O, I), {4, 5}).transpose(0, 1);
  expect_near(vals(linear(x, wt, f64(bv, {5}))), want);
  // 1-D weight: a dot product over the last dim.
  Tensor w1 = f64(V(wv.begin(), wv.begin() + 4), {4});
  V dot;
  for (size_t r = 0; r < B * N; ++r) dot.push_back(want_nb[r * O]);
  expect_near(vals(linear(x, w1)), dot);
}

// linear gradients for all three inputs, and clear shape errors.
TEST(CompositeLinear, GradientsAndErrors) {
  Tensor x = leaf(randv(6, 21), {2, 3}), w = leaf(randv(12, 22), {4, 3}),
         b = leaf(randv(4, 23), {4});
  EXPECT_EQ(gradcheck(
                [](const std::vector<Tensor>& in) {
                  return std::vector<Tensor>{linear(in[0], in[1], in[2])};
                },
                {x, w, b}),
            "");
  Tensor y = f64(randv(6, 24), {2, 3});
  expect_error([&] { linear(y, f64(randv(8, 1), {4, 2})); }, "[linear] input shape [2, 3]");
  expect_error([&] { linear(y, f64(randv(8, 1), {4, 2})); }, "weight shape [4, 2]");
  expect_error([&] { linear(y, f64(randv(24, 1), {2, 4, 3})); }, "[linear]");
  expect_error(
      [&] {
        linear(y, f64(randv(12, 1), {4, 3}), f64({1, 2}, {2}));
      },
      "[linear] bias shape [2]");
}

// dropout: identity when disabled, zeros at p=1, kept fraction and scale, gradient.
TEST(CompositeDropout, ValuesAndStatistics) {
  Tensor x = full({200, 500}, 2.0, DType::f64);
  EXPECT_TRUE(dropout(x, 0.5, false).is_same(x));
  EXPECT_TRUE(dropout(x, 0.0).is_same(x));
  for (double a : vals(dropout(x, 1.0))) EXPECT_EQ(a, 0.0);
  const double p = 0.3;
  manual_seed(123);
  V y = vals(dropout(x, p));
  size_t kept = 0;
  for (double a : y) {
    if (a != 0.0) {
      ++kept;
      EXPECT_NEAR(a, 2.0 / (1.0 - p), 1e-12);
    }
  }
  // 100000 Bernoulli(0.7) draws: the standard deviation of the fraction is ~0.0014.
  double frac = static_cast<double>(kept) / static_cast<double>(y.size());
  EXPECT_NEAR(frac, 1.0 - p, 0.01);
  // The mean is preserved in expectation.
  double m = 0;
  for (double a : y) m += a;
  EXPECT_NEAR(m / static_cast<double>(y.size()), 2.0, 0.03);
  EXPECT_EQ(dropout(from_vector<float>({1.0f}), 0.5).dtype(), DType::f32);
  // Gradient is the mask times 1/(1-p).
  Tensor g = full({1000}, 1.0, DType::f64).requires_grad_();
  Tensor out = dropout(g, 0.5);
  out.sum().backward();
  expect_near(vals(g.grad()), vals(out));
  // Reseeding inside the function makes every evaluation draw the same mask.
  EXPECT_EQ(check1(
                [](const Tensor& t) {
                  manual_seed(5);
                  return dropout(t, 0.4);
                },
                leaf(randv(50, 40), {5, 10})),
            "");
}

// dropout draws from the Philox generator: same seed, same mask; next draw differs.
TEST(CompositeDropout, DeterminismAndErrors) {
  Tensor x = full({64, 64}, 1.0, DType::f32);
  manual_seed(42);
  V a = vals(dropout(x, 0.5));
  V b = vals(dropout(x, 0.5));
  manual_seed(42);
  V c = vals(dropout(x, 0.5));
  EXPECT_EQ(a, c);
  EXPECT_NE(a, b);
  manual_seed(43);
  EXPECT_NE(vals(dropout(x, 0.5)), a);
  expect_error([&] { dropout(x, 1.5); }, "[dropout]");
  expect_error([&] { dropout(x, -0.1); }, "[dropout]");
  expect_error([] { dropout(from_vector<int64_t>({1, 2}), 0.5); }, "[dropout]");
}

// embedding: rows picked by 2-D indices, repeated indices accumulate gradients, errors.
TEST(CompositeEmbedding, ValuesGradientsErrors) {
  V wv = randv(15, 25);
  Tensor w = f64(wv, {5, 3});
  Tensor idx = from_vector<int64_t>({4, 0, 2, 2}, {2, 2});
  Tensor e = embedding(idx, w);
  EXPECT_EQ(e.shape(), (Dims{2, 2, 3}));
  V want;
  for (int64_t i : {4, 0, 2, 2})
    for (size_t d = 0; d < 3; ++d) want.push_back(wv[static_cast<size_t>(i) * 3 + d]);
  expect_near(vals(e), want);
  // Non-contiguous indices and i32 indices.
  Tensor idx_t = from_vector<int64_t>({4, 2, 0, 2}, {2, 2}).transpose(0, 1);
  expect_near(vals(embedding(idx_t, w)), want);
  expect_near(vals(embedding(cast(idx, DType::i32), w)), want);
  Tensor wl = leaf(wv, {5, 3});
  embedding(idx, wl).sum().backward();
  expect_near(vals(wl.grad()), {1, 1, 1, 0, 0, 0, 2, 2, 2, 0, 0, 0, 1, 1, 1});
  EXPECT_EQ(
      gradcheck(
          [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{embedding(idx, in[0])}; },
          {leaf(wv, {5, 3})}),
      "");
  expect_error([&] { embedding(from_vector<double>({1.0}), w); }, "[embedding]");
  expect_error([&] { embedding(idx, f64(wv, {15})); }, "[embedding]");
  EXPECT_THROW(embedding(from_vector<int64_t>({5}), w), Error);  // index_select's range check
}

namespace {
// Naive attention for q [B, L, E], k [B, S, E], v [B, S, Ev] and an additive mask [L, S].
V attention_ref(const V& q, const V& k, const V& v, const V& add, size_t B, size_t L, size_t S,
                size_t E, size_t Ev, double scale) {
  V out(B * L * Ev, 0.0);
  for (size_t b = 0; b < B; ++b)
    for (size_t i = 0; i < L; ++i) {
      V s(S);
      double mx = -kInf;
      for (size_t j = 0; j < S; ++j) {
        double d = 0;
        for (size_t e = 0; e < E; ++e) d += q[(b * L + i) * E + e] * k[(b * S + j) * E + e];
        s[j] = d * scale + add[i * S + j];
        mx = std::max(mx, s[j]);
      }
      if (mx == -kInf) continue;  // fully masked row: zeros
      double tot = 0;
      for (double& a : s) tot += (a = std::exp(a - mx));
      for (size_t j = 0; j < S; ++j)
        for (size_t e = 0; e < Ev; ++e)
          out[(b * L + i) * Ev + e] += s[j] / tot * v[(b * S + j) * Ev + e];
    }
  return out;
}
}  // namespace

// scaled_dot_product_attention without mask, with bool / float / causal masks.
TEST(Attention, ValuesWithMasks) {
  const size_t B = 2, L = 3, S = 4, E = 5, Ev = 2;
  V qv = randv(B * L * E, 26), kv = randv(B * S * E, 27), vv = randv(B * S * Ev, 28);
  Tensor q = f64(qv, {2, 3, 5}), k = f64(kv, {2, 4, 5}), v = f64(vv, {2, 4, 2});
  V zero(L * S, 0.0);
  double sc = 1.0 / std::sqrt(5.0);
  expect_near(vals(scaled_dot_product_attention(q, k, v)),
              attention_ref(qv, kv, vv, zero, B, L, S, E, Ev, sc));
  expect_near(vals(scaled_dot_product_attention(q, k, v, {}, false, 0.3)),
              attention_ref(qv, kv, vv, zero, B, L, S, E, Ev, 0.3));
  // Bool mask [L, S] broadcast over the batch: true = keep.
  std::vector<int64_t> keep = {1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 1, 1};
  V add(L * S);
  for (size_t i = 0; i < keep.size(); ++i) add[i] = keep[i] ? 0.0 : -kInf;
  Tensor bmask = ne(from_vector<int64_t>(keep, {3, 4}), 0);
  expect_near(vals(scaled_dot_product_attention(q, k, v, bmask)),
              attention_ref(qv, kv, vv, add, B, L, S, E, Ev, sc));
  // Float additive mask.
  V fadd = randv(L * S, 29);
  expect_near(vals(scaled_dot_product_attention(q, k, v, f64(fadd, {3, 4}))),
              attention_ref(qv, kv, vv, fadd, B, L, S, E, Ev, sc));
  // An f32 mask is added in the query's dtype (f64 here), as in PyTorch.
  Tensor out32 = scaled_dot_product_attention(q, k, v, cast(f64(fadd, {3, 4}), DType::f32));
  EXPECT_EQ(out32.dtype(), DType::f64);
  expect_near(vals(out32), attention_ref(qv, kv, vv, fadd, B, L, S, E, Ev, sc), 1e-6);
  // Causal: key j visible to query i iff j <= i (top-left aligned, as PyTorch).
  V causal(L * S);
  for (size_t i = 0; i < L; ++i)
    for (size_t j = 0; j < S; ++j) causal[i * S + j] = j <= i ? 0.0 : -kInf;
  expect_near(vals(scaled_dot_product_attention(q, k, v, {}, true)),
              attention_ref(qv, kv, vv, causal, B, L, S, E, Ev, sc));
  // Non-contiguous key: the transpose of a [B, E, S] buffer.
  V kt(B * S * E);
  for (size_t b = 0; b < B; ++b)
    for (size_t s = 0; s < S; ++s)
      for (size_t e = 0; e < E; ++e) kt[(b * E + e) * S + s] = kv[(b * S + s) * E + e];
  Tensor knc = f64(kt, {2, 5, 4}).transpose(1, 2);
  expect_near(vals(scaled_dot_product_attention(q, knc, v)),
              attention_ref(qv, kv, vv, zero, B, L, S, E, Ev, sc));
}

// A fully masked query row gives zeros (PyTorch >= 2.5 math backend's _safe_softmax)
// and gradients stay finite.
TEST(Attention, FullyMaskedRowIsZero) {
  V qv = randv(6, 30), kv = randv(6, 31), vv = randv(6, 32);
  Tensor q = leaf(qv, {3, 2}), k = leaf(kv, {3, 2}), v = leaf(vv, {3, 2});
  Tensor mask = ne(from_vector<int64_t>({1, 1, 0, 0, 0, 0, 1, 0, 1}, {3, 3}), 0);
  Tensor out = scaled_dot_product_attention(q, k, v, mask);
  V o = vals(out);
  EXPECT_EQ(o[2], 0.0);
  EXPECT_EQ(o[3], 0.0);
  EXPECT_FALSE(std::isnan(o[0]) || std::isnan(o[4]));
  out.sum().backward();
  for (const Tensor& t : {q, k, v})
    for (double g : vals(t.grad())) EXPECT_TRUE(std::isfinite(g));
  // The same through an additive -inf mask.
  Tensor fmask = where(mask, 0.0, f64({-kInf}, {1}));
  expect_near(vals(scaled_dot_product_attention(q, k, v, fmask)), o);
}

// Attention gradients w.r.t. q, k and v (batched, masked) and its double backward.
TEST(Attention, Gradients) {
  Tensor q = leaf(randv(12, 33), {2, 3, 2}), k = leaf(randv(16, 34), {2, 4, 2}),
         v = leaf(randv(8, 35), {2, 4, 1});
  Tensor mask = ne(from_vector<int64_t>({1, 0, 1, 1}, {1, 4}), 0);
  EXPECT_EQ(
      gradcheck(
          [&](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{scaled_dot_product_attention(in[0], in[1], in[2], mask)};
          },
          {q, k, v}),
      "");
  EXPECT_EQ(
      gradcheck(
          [](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{scaled_dot_product_attention(in[0], in[1], in[2], {}, true)};
          },
          {q, k, v}),
      "");
  Tensor kc = f64(randv(16, 34), {2, 4, 2}), vc = f64(randv(8, 35), {2, 4, 1});
  EXPECT_EQ(check_double([&](const Tensor& t) { return scaled_dot_product_attention(t, kc, vc); },
                         leaf(randv(12, 36), {2, 3, 2})),
            "");
}

// Attention reports bad shapes, dtypes and conflicting masks with its name.
TEST(Attention, Errors) {
  Tensor q = f64(randv(6, 1), {3, 2}), k = f64(randv(8, 2), {4, 2}), v = f64(randv(4, 3), {4, 1});
  const char* op = "[scaled_dot_product_attention]";
  Tensor keep = ne(from_vector<int64_t>({1, 1, 1, 1}, {1, 4}), 0);
  expect_error([&] { scaled_dot_product_attention(q, k, v, keep, true); }, op);
  expect_error([&] { scaled_dot_product_attention(q, f64(randv(12, 2), {4, 3}), v); }, op);
  expect_error([&] { scaled_dot_product_attention(q, k, f64(randv(3, 3), {3, 1})); }, op);
  expect_error([&] { scaled_dot_product_attention(f64({1}, {1}), k, v); }, op);
  expect_error([&] { scaled_dot_product_attention(cast(q, DType::f32), k, v); }, op);
  expect_error([&] { scaled_dot_product_attention(q, k, v, from_vector<int64_t>({1})); }, op);
  Tensor q16 = cast(q, DType::f16);
  expect_error(
      [&] {
        scaled_dot_product_attention(q16, cast(k, DType::f16), cast(v, DType::f16), f64({0}, {1}));
      },
      "attn_mask");
  expect_error([&] { scaled_dot_product_attention(q, k, v, f64(randv(6, 4), {2, 3})); }, op);
}

namespace {
void expect_meta(const Tensor& t, const Dims& shape, DType dt = DType::f32) {
  EXPECT_TRUE(t.is_symbolic());
  EXPECT_EQ(t.shape(), shape);
  EXPECT_EQ(t.dtype(), dt);
}
}  // namespace

// Every composite runs on symbolic tensors (no data reads) with the right shapes.
TEST(CompositeTracing, RunsWithoutData) {
  kiln::testing::TraceScope scope;
  Tensor x = zeros({2, 3, 4});
  Tensor mask = gt(x, 0.0);
  ASSERT_TRUE(x.is_symbolic());
  expect_meta(square(x), {2, 3, 4});
  expect_meta(reciprocal(x), {2, 3, 4});
  expect_meta(clamp(x, -1.0, 1.0), {2, 3, 4});
  expect_meta(masked_fill(x, mask, 1.0), {2, 3, 4});
  expect_meta(mean(x, {1}), {2, 4});
  expect_meta(var(x, {0, 2}, 1, true), {1, 3, 1});
  expect_meta(kiln::std(x), {});
  expect_meta(logsumexp(x, {2}), {2, 3});
  expect_meta(softmax(x, 1), {2, 3, 4});
  expect_meta(log_softmax(x, -1), {2, 3, 4});
  expect_meta(gelu(x), {2, 3, 4});
  expect_meta(gelu(x, "tanh"), {2, 3, 4});
  expect_meta(silu(x), {2, 3, 4});
  expect_meta(layer_norm(x, {3, 4}, ones({3, 4}), zeros({3, 4})), {2, 3, 4});
  expect_meta(linear(x, zeros({5, 4}), zeros({5})), {2, 3, 5});
  expect_meta(dropout(x, 0.3), {2, 3, 4});
  expect_meta(embedding(zeros({2, 5}, DType::i64), zeros({7, 4})), {2, 5, 4});
  Tensor q = zeros({2, 3, 4}), k = zeros({2, 5, 4}), v = zeros({2, 5, 6});
  expect_meta(scaled_dot_product_attention(q, k, v), {2, 3, 6});
  expect_meta(scaled_dot_product_attention(q, k, v, {}, true), {2, 3, 6});
  expect_meta(scaled_dot_product_attention(q, k, v, gt(zeros({3, 5}), 0.0)), {2, 3, 6});
}
