// kiln::compile and program state: recompile logs and limits, freezing,
// in-place/view rules while tracing, state restored after a failed trace, and
// tensors a traced call stores outside the function: state created on the
// first, traced call (warmup = 0) becomes real and the next call traces the
// steady state; a function that stores new tensors on every call runs eagerly
// after its second trace.
#include <gtest/gtest.h>

#include <cstdlib>

#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"
#include "runtime/test_util.h"

namespace kiln {
namespace {

// KILN_LOG=recompiles names the failed guard of every re-trace.
TEST(CompileLog, RecompilesAreLoggedWithTheFailedGuard) {
  setenv("KILN_LOG", "recompiles", 1);
  auto f = compile([](const Tensor& x) { return x + 1; }, {.warmup = 0, .name = "logged"});
  ::testing::internal::CaptureStderr();
  f(ones({2}));
  f(ones({3}));
  std::string err = ::testing::internal::GetCapturedStderr();
  unsetenv("KILN_LOG");
  EXPECT_NE(err.find("recompiling logged"), std::string::npos) << err;
  EXPECT_NE(err.find("argument 0 dim 0 changed (2 -> 3)"), std::string::npos) << err;
}

// Past the recompile limit a loud warning appears once; compilation goes on.
TEST(CompileLog, RecompileLimitWarnsLoudlyOnce) {
  auto f = compile([](const Tensor& x) { return x * 3; },
                   {.warmup = 0, .name = "churn", .recompile_limit = 2});
  ::testing::internal::CaptureStderr();
  for (int64_t n = 1; n <= 5; ++n) f(ones({n}));
  std::string err = ::testing::internal::GetCapturedStderr();
  size_t w = err.find("WARNING: churn has been re-traced");
  EXPECT_NE(w, std::string::npos) << err;
  EXPECT_EQ(err.find("WARNING", w + 1), std::string::npos) << err;
  EXPECT_EQ(f.stats().traces, 5);  // never a silent drop to eager
}

// {.freeze = true} folds parameter-only subgraphs into constants and re-traces
// when a frozen parameter is modified in place.
TEST(CompileFreeze, ParameterOnlySubgraphsFoldAndWritesRetrace) {
  Tensor w = full({4, 4}, 0.5);
  Tensor b = full({4}, 1.0);
  auto fn = [&](const Tensor& x) { return matmul(x, w.t() * 2) + b.exp(); };
  auto frozen = compile(fn, {.freeze = true, .warmup = 0});
  auto plain = compile(fn, {.warmup = 0});
  Tensor x = ones({2, 4});
  EXPECT_TRUE(allclose(frozen(x), fn(x)));
  plain(x);
  EXPECT_LT(frozen.stats().graph_nodes, plain.stats().graph_nodes) << frozen.graph_text();
  {
    NoGradGuard ng;
    w.add_(1.0);
  }
  EXPECT_TRUE(allclose(frozen(x), fn(x)));
  EXPECT_EQ(frozen.stats().traces, 2);
  EXPECT_NE(frozen.stats().last_miss.find("modified in place"), std::string::npos);
}

// Writing in place into a view while tracing is a clear error.
// A factory chain made inside the function folds into one constant on the CPU
// (fold_constants places it on the plan's device, which the driver names).
TEST(CompileFreeze, FactoryChainsFoldOnTheCpu) {
  auto f = compile([](const Tensor& x) { return x + arange(5).to(DType::f32) * 2; });
  const Tensor x = ones({5});
  EXPECT_TRUE(allclose(f(x), f(x)));
  EXPECT_TRUE(allclose(f(x), x + arange(5).to(DType::f32) * 2));
  EXPECT_EQ(f.graph_text().find("arange"), std::string::npos) << f.graph_text();
}

TEST(CompileErrors, InPlaceIntoAViewIsAnError) {
  auto f = compile(
      [](const Tensor& x) {
        Tensor y = x * 1;
        Tensor v = y.reshape({4});
        v.add_(1.0);
        return y;
      },
      {.warmup = 0});
  testing::expect_error([&] { f(ones({2, 2})); }, "writing in place into a view");
}

// Reading a view taken before its base was written in place is a clear error.
TEST(CompileErrors, StaleViewReadIsAnError) {
  auto f = compile(
      [](const Tensor& x) {
        Tensor y = x * 1;
        Tensor v = y.reshape({4});
        y.mul_(2.0);
        return v + 1;
      },
      {.warmup = 0});
  testing::expect_error([&] { f(ones({2, 2})); }, "modified in place after the view was taken");
}

// A traced value stored outside the function is made real by the run that
// traced it (the CompileEscape tests below have the rest of the rules).
TEST(CompileState, EscapedTracedValueHoldsItsValue) {
  Tensor leaked;
  auto f = compile(
      [&](const Tensor& x) {
        leaked = x * 2;
        return x + 1;
      },
      {.warmup = 0});
  f(ones({2}));
  ASSERT_FALSE(leaked.is_symbolic());
  EXPECT_TRUE(equal(leaked + 1, full({2}, 3.0)));
}

// A trace that fails leaves .grad fields, version counters and the generator as they were.
TEST(CompileErrors, FailedTraceRestoresProgramState) {
  manual_seed(1);
  auto lin = std::make_shared<nn::Linear>(3, 2);
  optim::SGD opt(lin->parameters(), {.lr = 0.1});
  lin->forward(ones({1, 3})).sum().backward();
  Tensor g0 = lin->weight.grad();
  const uint32_t v0 = lin->weight.version();
  const uint64_t off0 = default_generator().offset;
  auto f = compile(
      [&](const Tensor& x) {
        opt.zero_grad();
        Tensor loss = dropout(lin->forward(x), 0.5, true).sum();
        loss.backward();
        opt.step();
        return loss * loss.item<double>();  // fails after backward and the update
      },
      {.warmup = 0});
  testing::expect_error([&] { f(ones({1, 3})); }, "item()");
  EXPECT_TRUE(lin->weight.grad().is_same(g0));
  EXPECT_EQ(lin->weight.version(), v0);
  EXPECT_EQ(default_generator().offset, off0);
}

// Optimizer hyperparameters are per-call values: a new momentum reaches the
// compiled step without a re-trace (same parameters as eager); only what
// changes the update's ops (momentum 0: no buffer) re-traces, naming it.
TEST(CompileGuards, OptimizerHyperparametersArePerCallValues) {
  auto make = [] {
    manual_seed(2);
    return std::make_shared<nn::Linear>(3, 2);
  };
  auto lc = make(), le = make();
  optim::SGD oc(lc->parameters(), {.lr = 0.1, .momentum = 0.5});
  optim::SGD oe(le->parameters(), {.lr = 0.1, .momentum = 0.5});
  auto body = [](nn::Linear& lin, optim::SGD& opt, const Tensor& x) {
    opt.zero_grad();
    lin.forward(x).sum().backward();
    opt.step();
  };
  auto step = compile([&](const Tensor& x) { body(*lc, oc, x); });
  auto both = [&] {
    step(ones({2, 3}));
    body(*le, oe, ones({2, 3}));
  };
  for (int i = 0; i < 3; ++i) both();
  EXPECT_EQ(step.stats().traces, 1);
  oc.param_groups()[0].set("momentum", 0.9);
  oe.param_groups()[0].set("momentum", 0.9);
  for (int i = 0; i < 2; ++i) both();
  EXPECT_EQ(step.stats().traces, 1) << step.stats().last_miss;
  EXPECT_TRUE(allclose(lc->weight, le->weight, 1e-6, 1e-6));
  oc.param_groups()[0].set("momentum", 0.0);
  step(ones({2, 3}));
  EXPECT_EQ(step.stats().traces, 2);
  EXPECT_NE(step.stats().last_miss.find(
                "SGD hyperparameter momentum of group 0 changed from 0.5 (when traced) to 0"),
            std::string::npos)
      << step.stats().last_miss;
}

// Gradient accumulation without zero_grad: compiled backward adds into the existing .grad.
TEST(Compile, GradientAccumulationAddsIntoExistingGrad) {
  manual_seed(3);
  auto lin = std::make_shared<nn::Linear>(3, 2);
  auto ref = std::make_shared<nn::Linear>(3, 2);
  {
    NoGradGuard ng;
    ref->weight.copy_(lin->weight);
    ref->bias.copy_(lin->bias);
  }
  auto acc = compile([&](const Tensor& x) { lin->forward(x).pow(2).sum().backward(); });
  for (int i = 0; i < 4; ++i) {
    Tensor x = randn({2, 3});
    acc(x);
    ref->forward(x).pow(2).sum().backward();
  }
  EXPECT_TRUE(allclose(lin->weight.grad(), ref->weight.grad(), 1e-5, 1e-6));
  EXPECT_TRUE(allclose(lin->bias.grad(), ref->bias.grad(), 1e-5, 1e-6));
}

// Post-accumulate-grad hooks (what DDP uses) fire once per compiled step with
// the real gradient, not with the traced stand-in.
TEST(Compile, PostAccumulateGradHooksFireWithRealGradients) {
  manual_seed(6);
  auto lin = std::make_shared<nn::Linear>(3, 2);
  int calls = 0;
  Tensor seen;
  lin->weight.register_post_accumulate_grad_hook([&](const Tensor& p) {
    ++calls;
    ASSERT_FALSE(p.grad().is_symbolic());
    seen = p.grad().clone();
  });
  auto step = compile([&](const Tensor& x) {
    lin->zero_grad();
    lin->forward(x).sum().backward();
  });
  for (int i = 0; i < 3; ++i) step(full({2, 3}, static_cast<double>(i)));
  EXPECT_EQ(calls, 3);
  EXPECT_TRUE(allclose(seen, full({2, 3}, 4.0)));  // d/dW sum(x W^T) = column sums of x
}

// Double backward through a compiled forward is refused with a clear error.
TEST(CompileErrors, DoubleBackwardIsAClearError) {
  auto f = compile([](const Tensor& x) { return (x * x * x).sum(); }, {.warmup = 0});
  Tensor x = full({2}, 2.0, DType::f64).requires_grad_();
  Tensor y = f(x);
  testing::expect_error([&] { kiln::grad({y}, {x}, {}, {.create_graph = true}); },
                        "double backward");
}

// KILN_CHECK_COMPILED catches a host number baked in at trace time: a global
// read as a plain double (not through host_scalar) goes stale in the plan.
TEST(CompileCheck, ReportsTheFirstDifferingOutput) {
  static double scale = 2.0;
  setenv("KILN_CHECK_COMPILED", "1", 1);
  auto f = compile([](const Tensor& x) { return std::make_tuple(x + 1, x * scale); },
                   {.warmup = 0, .name = "stale"});
  unsetenv("KILN_CHECK_COMPILED");
  ::testing::internal::CaptureStderr();
  f(ones({3}));
  EXPECT_EQ(f.stats().check_mismatches, 0);
  scale = 5.0;
  auto [a, b] = f(ones({3}));
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(equal(b, full({3}, 5.0)));  // the eager (reference) result is returned
  EXPECT_EQ(f.stats().check_mismatches, 1);
  EXPECT_NE(f.stats().last_check_report.find("result 1 differs"), std::string::npos)
      << f.stats().last_check_report;
  EXPECT_NE(f.stats().last_check_report.find("mul"), std::string::npos)
      << f.stats().last_check_report;
  EXPECT_NE(err.find("KILN_CHECK_COMPILED: stale"), std::string::npos) << err;
}

// ---- tensors stored outside the traced function ----

template <typename Opt, typename Options>
void expect_warmup_zero_matches_eager(const Options& opts, bool zero_grad_first, int traces) {
  auto make = [&] {
    manual_seed(11);
    auto m = std::make_shared<nn::Linear>(6, 4);
    auto o = std::make_shared<Opt>(m->parameters(), opts);
    return std::make_pair(m, o);
  };
  auto [me, oe] = make();
  auto [mc, oc] = make();
  Tensor x = randn({5, 6}), y = randn({5, 4});
  auto step = [&](nn::Linear& m, Opt& o) {
    if (zero_grad_first) o.zero_grad();
    Tensor loss = mse_loss(m.forward(x), y);
    loss.backward();
    o.step();
    if (!zero_grad_first) o.zero_grad();
    return loss;
  };
  auto f = compile([&] { return step(*mc, *oc); }, {.warmup = 0});
  for (int i = 0; i < 6; ++i) {
    Tensor le = step(*me, *oe), lc = f();
    EXPECT_TRUE(allclose(le, lc, 1e-5, 1e-6)) << "step " << i;
    for (size_t k = 0; k < 2; ++k)
      EXPECT_TRUE(allclose(me->parameters()[k], mc->parameters()[k], 1e-5, 1e-6))
          << "parameter " << k << " after step " << i;
  }
  EXPECT_EQ(f.stats().traces, traces) << "zero_grad_first " << zero_grad_first;
  EXPECT_EQ(f.stats().eager_calls, 0);
  EXPECT_EQ(f.stats().compiled_calls, 6);
}

// SGD's momentum buffers, created by a traced first step as a copy of the
// gradient, hold real values afterwards: the first call makes them, the second
// traces the steady step, the rest replay it. Training matches eager step for
// step, whichever end of the step zeroes the gradients (zeroing at the end used
// to replay the first-step update forever, silently). Adam's moments start as
// real zeros even while tracing, so one trace serves.
TEST(CompileEscape, WarmupZeroOptimizerStateIsMadeOnce) {
  const optim::SGDOptions sgd{.lr = 0.1, .momentum = 0.9};
  expect_warmup_zero_matches_eager<optim::SGD>(sgd, true, 2);
  expect_warmup_zero_matches_eager<optim::SGD>(sgd, false, 2);
  expect_warmup_zero_matches_eager<optim::Adam>(optim::AdamOptions{.lr = 0.01}, false, 1);
}

// A traced value kept in a member on the first call becomes a real tensor with
// the value eager would have stored; later calls read it as captured state.
TEST(CompileEscape, ValueCachedOnceBecomesState) {
  Tensor cache;
  auto fn = [&](const Tensor& x) {
    if (!cache.defined()) cache = x * 2;
    return x + cache;
  };
  auto f = compile(fn, {.warmup = 0});
  Tensor a = f(full({3}, 1.0));
  ASSERT_TRUE(cache.defined());
  EXPECT_FALSE(cache.is_symbolic());
  EXPECT_TRUE(equal(cache, full({3}, 2.0)));
  EXPECT_TRUE(equal(a, full({3}, 3.0)));
  EXPECT_TRUE(equal(f(full({3}, 5.0)), full({3}, 7.0)));
  EXPECT_TRUE(equal(f(full({3}, 0.0)), full({3}, 2.0)));
  EXPECT_EQ(f.stats().traces, 2);
}

// A function that stores a new tensor on every call cannot be replayed: after
// its second such trace the signature runs eagerly (one warning), and every
// stored tensor holds its real value.
TEST(CompileEscape, NewTensorsEveryCallTurnEager) {
  std::vector<Tensor> history;
  auto fn = [&](const Tensor& x) {
    Tensor y = x * 3;
    history.push_back(y);
    return y + 1;
  };
  auto f = compile(fn, {.warmup = 0, .name = "history"});
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 4; ++i) f(full({2}, static_cast<double>(i)));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("history: every traced call stores new tensors"), std::string::npos) << err;
  EXPECT_EQ(f.stats().traces, 2);
  EXPECT_EQ(f.stats().eager_calls, 2);
  ASSERT_EQ(history.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_FALSE(history[static_cast<size_t>(i)].is_symbolic()) << i;
    EXPECT_TRUE(equal(history[static_cast<size_t>(i)], full({2}, 3.0 * i))) << i;
  }
}

}  // namespace
}  // namespace kiln
