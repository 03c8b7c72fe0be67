// Compiled vs eager for the issue-22 ops and composites: sort/topk/cumsum/
// cumprod and the layout/linalg composites traced into one graph (forward and a
// whole step with backward), multinomial's Philox draws (the same numbers
// eager and compiled, call after call), its bad-probability errors raised by
// the compiled plan's kernel, and the "not traceable" errors of nonzero and
// masked_select.
#include <gtest/gtest.h>

#include <limits>

#include "compare.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "kiln/random.h"
#include "runtime/test_util.h"

namespace kiln {
namespace {

std::string diff(const Tensor& e, const Tensor& c) {
  return testing::diff_values(e, c, 1e-10);
}

double kInfinity() {
  return std::numeric_limits<double>::infinity();
}

// Every op under test, as one list of outputs of x [4, 6] and y [4, 6].
std::vector<Tensor> everything(const Tensor& x, const Tensor& y) {
  auto [sv, si] = sort(x, 1, true);
  auto [tv, ti] = topk(x, 3, 0, false);
  auto [mv, mi] = x.max(1);
  std::vector<Tensor> out{sv, si, tv, ti, mv, mi, argsort(y, 0), cumsum(x, 1), cumprod(y, 0)};
  for (Tensor t : {flip(x, {0, 1}),
                   roll(x, {2, -1}, {1, 0}),
                   repeat(x, {2, 1, 2}),
                   tile(y, {2}),
                   one_hot(argmax(x, 1), 6),
                   isnan(x / y),
                   isinf(1.0 / x),
                   isfinite(x),
                   nan_to_num(log(y)),
                   outer(x[0], y[1]),
                   bmm(x.reshape({2, 2, 6}), y.reshape({2, 6, 2})),
                   baddbmm(x.reshape({2, 2, 6}).slice(2, 0, 2), x.reshape({2, 2, 6}),
                           y.reshape({2, 6, 2}), 0.5, 2.0),
                   einsum("ij,kj->ik", {x, y}),
                   einsum("ij->j", {x}),
                   normalize(x),
                   cosine_similarity(x, y),
                   vector_norm(x, 3.0, {1}),
                   norm(x, kInfinity()),
                   clamp(x, y, y + 1.0),
                   split(x, 4, 1)[1],
                   chunk(y, 3, 1)[2],
                   unbind(x, 0)[3]})
    out.push_back(t);
  return out;
}
// Verifies a compiled forward of every op matches eager on two calls (new data).
TEST(OrderingCompiled, ForwardMatchesEager) {
  auto f =
      compile([](const Tensor& x, const Tensor& y) { return everything(x, y); }, {.warmup = 0});
  for (int call = 0; call < 2; ++call) {
    Tensor x = randn({4, 6}, DType::f64), y = randn({4, 6}, DType::f64);
    std::vector<Tensor> e = everything(x, y), c = f(x, y);
    ASSERT_EQ(e.size(), c.size());
    for (size_t i = 0; i < e.size(); ++i) EXPECT_EQ(diff(e[i], c[i]), "") << "output " << i;
  }
  EXPECT_EQ(f.stats().traces, 1);
}

// Verifies a compiled step with backward through sort/topk/cumsum/cumprod and the
// composites sets the same .grad as eager.
TEST(OrderingCompiled, WholeStepGradsMatchEager) {
  auto loss_of = [](const Tensor& x, const Tensor& y) {
    Tensor loss = zeros({}, DType::f64);
    const std::vector<Tensor> outs = everything(x, y);
    for (size_t i = 0; i < outs.size(); ++i)
      if (is_floating(outs[i].dtype()))
        loss = loss + (outs[i] * static_cast<double>(i + 1) * 0.01).sum();
    return loss;
  };
  Tensor x0 = randn({4, 6}, DType::f64), y0 = randn({4, 6}, DType::f64).abs() + 0.5;
  Tensor ex = x0.clone().requires_grad_(), ey = y0.clone().requires_grad_();
  Tensor cx = x0.clone().requires_grad_(), cy = y0.clone().requires_grad_();
  auto step = compile(
      [&] {
        Tensor l = loss_of(cx, cy);
        l.backward();
        return l;
      },
      {.warmup = 0});
  Tensor el = loss_of(ex, ey);
  el.backward();
  Tensor cl = step();
  EXPECT_EQ(diff(el.detach(), cl), "");
  EXPECT_EQ(diff(ex.grad(), cx.grad()), "");
  EXPECT_EQ(diff(ey.grad(), cy.grad()), "");
}

// Verifies multinomial draws the same numbers eager and compiled, call after call
// (the compiled plan takes its offsets from the default generator like rand).
TEST(OrderingCompiled, MultinomialDrawsTheSameNumbers) {
  Tensor p = rand({3, 10}) + 0.01;
  auto f = compile(
      [](const Tensor& probs) {
        return std::vector<Tensor>{multinomial(probs, 4, true), multinomial(probs, 5, false)};
      },
      {.warmup = 0});
  manual_seed(123);
  std::vector<std::vector<int64_t>> eager;
  for (int call = 0; call < 3; ++call) {
    eager.push_back(multinomial(p, 4, true).to_vector<int64_t>());
    eager.push_back(multinomial(p, 5, false).to_vector<int64_t>());
  }
  manual_seed(123);
  for (int call = 0; call < 3; ++call) {
    std::vector<Tensor> c = f(p);
    EXPECT_EQ(c[0].to_vector<int64_t>(), eager[static_cast<size_t>(2 * call)]) << call;
    EXPECT_EQ(c[1].to_vector<int64_t>(), eager[static_cast<size_t>(2 * call + 1)]) << call;
  }
  EXPECT_EQ(f.stats().traces, 1);
  EXPECT_NE(eager[0], eager[2]);  // the generator moved on
}

// Verifies bad probabilities (and one_hot's out-of-range classes) fail a compiled
// call with the kernel's kiln::Error, and an explicit generator or a value-dependent shape is
// refused while tracing.
TEST(OrderingCompiled, ErrorsInsideCompile) {
  auto f = compile([](const Tensor& probs) { return multinomial(probs, 2, true); }, {.warmup = 0});
  EXPECT_EQ(f(ones({2, 3})).shape(), (Dims{2, 2}));
  testing::expect_error(
      [&] {
        f(from_vector<float>({1, 1, 1, 0, 0, 0}, {2, 3}));
      },
      {"[multinomial]", "row 1", "sum to 0"});
  testing::expect_error(
      [&] {
        f(from_vector<float>({1, -1, 1, 1, 1, 1}, {2, 3}));
      },
      {"[multinomial]", "-1", "category 1"});
  Generator g;
  auto h =
      compile([&g](const Tensor& probs) { return multinomial(probs, 1, true, &g); }, {.warmup = 0});
  testing::expect_error([&] { h(ones({3})); }, {"[multinomial]", "explicit generator"});
  auto oh = compile([](const Tensor& i) { return one_hot(i, 3); }, {.warmup = 0});
  EXPECT_EQ(oh(from_vector<int64_t>({0, 2})).to_vector<int64_t>(),
            (std::vector<int64_t>{1, 0, 0, 0, 0, 1}));
  EXPECT_THROW(oh(from_vector<int64_t>({0, 5})), Error);  // scatter_add's range check
  auto nz = compile([](const Tensor& x) { return nonzero(x); }, {.warmup = 0});
  testing::expect_error([&] { nz(ones({3})); }, {"[nonzero]", "not traceable"});
  auto ms = compile([](const Tensor& x) { return masked_select(x, gt(x, 0.0)); }, {.warmup = 0});
  testing::expect_error([&] { ms(ones({3})); }, {"[masked_select]", "not traceable"});
}

}  // namespace
}  // namespace kiln
