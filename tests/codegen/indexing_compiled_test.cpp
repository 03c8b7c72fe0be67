// Compiled vs eager for the indexing and comparison additions of issue 22:
// integer-tensor indexing, isclose, the comparison / logical operators and
// adaptive_avg_pool2d traced into one graph (forward, and a step with
// backward); boolean-mask indexing and the value-reading allclose/equal are
// clear errors inside kiln::compile.
#include <gtest/gtest.h>

#include "compare.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "runtime/test_util.h"

namespace kiln {
namespace {

std::string diff(const Tensor& e, const Tensor& c) {
  return testing::diff_values(e, c, 1e-10);
}

// Every traceable addition, as outputs of x [2, 3, 6, 5] and y [2, 3, 6, 5].
std::vector<Tensor> everything(const Tensor& x, const Tensor& y) {
  Tensor idx = from_vector<int64_t>({1, -1, 0});
  return {x.index({idx}),
          x[from_vector<int64_t>({0})],
          isclose(x, x + y * 1e-3, 1e-2, 1e-3),
          x.isclose(y, 0.5, 0.1, true),
          x < y,
          x >= 0.0,
          (x > 0.0) & (y < 0.5),
          (x == y) | ~(y != 0.0),
          nn::functional::adaptive_avg_pool2d(x, 1),
          nn::functional::adaptive_avg_pool2d(x, {4, 3}),
          nn::functional::adaptive_avg_pool2d(y, {3, 5})};
}

// Verifies a compiled forward of every addition matches eager on two calls.
TEST(IndexingCompiled, ForwardMatchesEager) {
  auto f =
      compile([](const Tensor& x, const Tensor& y) { return everything(x, y); }, {.warmup = 0});
  for (int call = 0; call < 2; ++call) {
    Tensor x = randn({2, 3, 6, 5}, DType::f64), y = randn({2, 3, 6, 5}, DType::f64);
    std::vector<Tensor> e = everything(x, y), c = f(x, y);
    ASSERT_EQ(e.size(), c.size());
    for (size_t i = 0; i < e.size(); ++i) EXPECT_EQ(diff(e[i], c[i]), "") << "output " << i;
  }
  EXPECT_EQ(f.stats().traces, 1);
}

// Verifies a compiled step with backward through integer indexing and adaptive
// pooling sets the same .grad as eager.
TEST(IndexingCompiled, WholeStepGradsMatchEager) {
  auto loss_of = [](const Tensor& x) {
    Tensor a = x.index({from_vector<int64_t>({1, -1, 1})});
    Tensor p = nn::functional::adaptive_avg_pool2d(x, {4, 3});
    Tensor q = nn::AdaptiveAvgPool2d(1)(x);
    return (a * a).sum() + (p * 2.0).sum() + (q * q).sum();
  };
  Tensor x0 = randn({2, 3, 6, 5}, DType::f64);
  Tensor ex = x0.clone().requires_grad_(), cx = x0.clone().requires_grad_();
  auto step = compile(
      [&] {
        Tensor l = loss_of(cx);
        l.backward();
        return l;
      },
      {.warmup = 0});
  Tensor el = loss_of(ex);
  el.backward();
  Tensor cl = step();
  EXPECT_EQ(diff(el.detach(), cl), "");
  EXPECT_EQ(diff(ex.grad(), cx.grad()), "");
}

// Verifies boolean masks (reads and writes) and value reads are refused while
// tracing, naming the op.
TEST(IndexingCompiled, MasksAreNotTraceable) {
  auto rd = compile([](const Tensor& x) { return x[x > 0.0]; }, {.warmup = 0});
  testing::expect_error([&] { rd(ones({3})); }, {"[index]", "not traceable", "data-dependent"});
  auto wr = compile(
      [](const Tensor& x) {
        Tensor y = x.clone();
        y.index_put_({y < 0.0}, 0.0);
        return y;
      },
      {.warmup = 0});
  testing::expect_error([&] { wr(ones({3})); }, {"[index_put]", "not traceable"});
  auto ac =
      compile([](const Tensor& x) { return static_cast<double>(allclose(x, x)); }, {.warmup = 0});
  EXPECT_THROW(ac(ones({3})), Error);
  // Eagerly (compile disabled) the same functions run.
  auto rd_eager = compile([](const Tensor& x) { return x[x > 0.0]; }, {.enabled = false});
  EXPECT_EQ(rd_eager(from_vector<float>({1, -1, 2})).to_vector<float>(),
            (std::vector<float>{1, 2}));
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// The rest of issue 22's additions that no other compiled test covers: where
// with scalars, stack, var/std's unbiased spelling, min along a dim,
// embedding(input, weight), clip, and the Tensor methods (x.amax(1), ...).
std::vector<Tensor> the_rest(const Tensor& x, const Tensor& w, const Tensor& ids) {
  auto [mn, mi] = x.min(1, true);
  return {where(x > 0.0, x, 0.5),
          where(x > 0.0, -1.0, x),
          where(x > 0.0, 1.0, 2.0),
          stack({x, x * 2.0}, 1),
          var(x, {1}, false),
          x.std({0}, true, true),
          x.var(true),
          mn,
          mi,
          embedding(ids, w),
          clip(x, -0.5, 0.5),
          x.clip(x * 0.5, x.abs()),
          x.amax(1),
          x.amin(-1, true),
          x.argmax(1),
          x.softmax(-1),
          x.log_softmax(0),
          x.tanh(),
          x.masked_fill(x < 0.0, 0.0),
          x.sum(1),
          x.mean(-1, true),
          x.logsumexp(1),
          x.var(1),
          x.norm(2.0, {1})};
}

// Verifies a compiled forward of the rest matches eager on two calls.
TEST(IndexingCompiled, RestOfIssue22MatchesEager) {
  Tensor ids = from_vector<int64_t>({3, 0, 2, 2, 1}, {5});
  auto f =
      compile([&](const Tensor& x, const Tensor& w) { return the_rest(x, w, ids); }, {.warmup = 0});
  for (int call = 0; call < 2; ++call) {
    Tensor x = randn({4, 6}, DType::f64), w = randn({4, 3}, DType::f64);
    std::vector<Tensor> e = the_rest(x, w, ids), c = f(x, w);
    ASSERT_EQ(e.size(), c.size());
    for (size_t i = 0; i < e.size(); ++i) EXPECT_EQ(diff(e[i], c[i]), "") << "output " << i;
  }
  EXPECT_EQ(f.stats().traces, 1);
}

// Verifies a compiled step with backward through the rest sets eager's .grad.
TEST(IndexingCompiled, RestOfIssue22GradsMatchEager) {
  Tensor ids = from_vector<int64_t>({3, 0, 2, 2, 1}, {5});
  auto loss_of = [&](const Tensor& x, const Tensor& w) {
    Tensor loss = zeros({}, DType::f64);
    const std::vector<Tensor> outs = the_rest(x, w, ids);
    for (size_t i = 0; i < outs.size(); ++i)
      if (is_floating(outs[i].dtype()))
        loss = loss + (outs[i] * static_cast<double>(i + 1) * 0.01).sum();
    return loss;
  };
  Tensor x0 = randn({4, 6}, DType::f64), w0 = randn({4, 3}, DType::f64);
  Tensor ex = x0.clone().requires_grad_(), ew = w0.clone().requires_grad_();
  Tensor cx = x0.clone().requires_grad_(), cw = w0.clone().requires_grad_();
  auto step = compile(
      [&] {
        Tensor l = loss_of(cx, cw);
        l.backward();
        return l;
      },
      {.warmup = 0});
  Tensor el = loss_of(ex, ew);
  el.backward();
  Tensor cl = step();
  // where(c, 1.0, 2.0) is f32: compiled f32 sums add in float, eager's in double.
  EXPECT_EQ(testing::diff_values(el.detach(), cl, 1e-6), "");
  EXPECT_EQ(diff(ex.grad(), cx.grad()), "");
  EXPECT_EQ(diff(ew.grad(), cw.grad()), "");
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Verifies MultiheadAttention's separate q/k/v projections (kdim/vdim) train
// compiled like eager: same output and the same gradients of every weight.
TEST(IndexingCompiled, SeparateProjectionAttentionMatchesEager) {
  manual_seed(5);
  auto eager = std::make_shared<nn::MultiheadAttention>(
      4, 2, nn::MultiheadAttentionOptions{.kdim = 3, .vdim = 5});
  eager->to(DType::f64);
  auto comp = nn::clone_as(*eager);
  Tensor q = randn({2, 3, 4}, DType::f64), k = randn({2, 6, 3}, DType::f64),
         v = randn({2, 6, 5}, DType::f64);
  auto loss_of = [&](nn::MultiheadAttention& m) {
    Tensor out = std::get<0>(m.forward(q, k, v));
    return (out * out).sum();
  };
  auto step = compile(
      [&] {
        Tensor l = loss_of(*comp);
        l.backward();
        return l;
      },
      {.warmup = 0});
  Tensor el = loss_of(*eager);
  el.backward();
  Tensor cl = step();
  EXPECT_EQ(testing::diff_values(el.detach(), cl, 1e-9), "");
  auto ep = eager->named_parameters(), cp = comp->named_parameters();
  ASSERT_EQ(ep.size(), cp.size());
  for (size_t i = 0; i < ep.size(); ++i)
    EXPECT_EQ(testing::diff_values(ep[i].second.grad(), cp[i].second.grad(), 1e-9), "")
        << ep[i].first;
}

}  // namespace
}  // namespace kiln
