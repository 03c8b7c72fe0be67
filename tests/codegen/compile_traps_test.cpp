// Traps where a compiled function could silently differ from the same code run
// eagerly (issue: compile never gives a silently different answer): arguments
// updated in place, arguments that alias each other or captured state,
// kiln::grad inside the function, and the bound on plans. Each compares
// compiled calls with eager calls of the same function.
#include <gtest/gtest.h>

#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"
#include "runtime/test_util.h"

namespace kiln {
namespace {

std::vector<float> values(const Tensor& t) {
  return t.contiguous().to_vector<float>();
}

// y = x; y.add_(1) changes the caller's tensor in eager: compiled writes it back.
TEST(CompileTraps, ArgumentUpdatedInPlaceIsWrittenBack) {
  auto fn = [](const Tensor& x) {
    Tensor y = x;
    y.add_(1);
    return y * 10;
  };
  auto f = compile(fn);
  for (int call = 0; call < 4; ++call) {
    Tensor a = zeros({2});
    EXPECT_EQ(values(f(a)), (std::vector<float>{10, 10})) << "call " << call;
    EXPECT_EQ(values(a), (std::vector<float>{1, 1})) << "call " << call;
  }
  EXPECT_GE(f.stats().compiled_calls, 2);
  // A non-contiguous argument (a transposed view) is written through the view.
  auto g = compile([](const Tensor& x) {
    NoGradGuard ng;
    Tensor y = x;
    y.mul_(2);
    return y.sum();
  });
  for (int call = 0; call < 3; ++call) {
    Tensor base = arange(0, 6).to(DType::f32).reshape({2, 3});
    EXPECT_FLOAT_EQ(g(base.t()).item<float>(), 30.0f);
    EXPECT_EQ(values(base), (std::vector<float>{0, 2, 4, 6, 8, 10})) << "call " << call;
  }
}

// The same tensor passed twice: a write through one argument is seen through
// the other, as in eager; passing two different tensors is another plan.
TEST(CompileTraps, SameTensorPassedTwice) {
  auto fn = [](const Tensor& a, const Tensor& b) {
    Tensor t = a;
    t.add_(1);
    return b * 2;
  };
  auto g = compile(fn);
  Tensor xc = zeros({3}), xe = zeros({3});
  for (int call = 0; call < 4; ++call) {
    Tensor rc = g(xc, xc), re = fn(xe, xe);
    EXPECT_EQ(values(rc), values(re)) << "call " << call;
    EXPECT_EQ(values(xc), values(xe)) << "call " << call;
  }
  EXPECT_EQ(values(xc), (std::vector<float>{4, 4, 4}));
  EXPECT_GE(g.stats().compiled_calls, 2);
  Tensor a = zeros({3}), b = ones({3});
  for (int call = 0; call < 3; ++call) EXPECT_EQ(values(g(a, b)), (std::vector<float>{2, 2, 2}));
  EXPECT_EQ(values(a), (std::vector<float>{3, 3, 3}));
  EXPECT_EQ(values(g(xc, xc)), (std::vector<float>{10, 10, 10}));  // the first plan again
}

// Overlapping views as two arguments, one written: the traced graph would
// treat them as independent, so that signature runs eagerly (one warning).
TEST(CompileTraps, OverlappingArgumentsWrittenRunEagerly) {
  auto fn = [](const Tensor& a, const Tensor& b) {
    NoGradGuard ng;
    Tensor t = a;
    t.mul_(2);
    return b * 1;
  };
  auto g = compile(fn);
  for (int call = 0; call < 4; ++call) {
    Tensor bc = from_vector<float>({1, 2, 3}), be = bc.clone();
    Tensor rc = g(bc.slice(0, 0, 2), bc.slice(0, 1, 3));
    Tensor re = fn(be.slice(0, 0, 2), be.slice(0, 1, 3));
    EXPECT_EQ(values(rc), values(re)) << "call " << call;
    EXPECT_EQ(values(bc), (std::vector<float>{2, 4, 3})) << "call " << call;
  }
  EXPECT_EQ(g.stats().compiled_calls, 0);
  // The same function on disjoint tensors compiles.
  for (int call = 0; call < 3; ++call) {
    Tensor a = ones({2}), b = from_vector<float>({5, 6});
    EXPECT_EQ(values(g(a, b)), (std::vector<float>{5, 6}));
    EXPECT_EQ(values(a), (std::vector<float>{2, 2}));
  }
  EXPECT_GE(g.stats().compiled_calls, 1);
  // Overlapping views that are only read compile too.
  auto h = compile([](const Tensor& a, const Tensor& b) { return a + b; });
  Tensor base = from_vector<float>({1, 2, 3});
  for (int call = 0; call < 3; ++call)
    EXPECT_EQ(values(h(base.slice(0, 0, 2), base.slice(0, 1, 3))), (std::vector<float>{3, 5}));
  EXPECT_GE(h.stats().compiled_calls, 1);
}

// An argument that is also captured state the function updates: eager sees the
// update through the argument, so this signature runs eagerly; another
// argument compiles.
TEST(CompileTraps, ArgumentSharingWrittenCapturedStateRunsEagerly) {
  Tensor wc = ones({3}), we = ones({3});
  auto make = [](Tensor& w) {
    return [&w](const Tensor& x) {
      NoGradGuard ng;
      w.add_(1);
      return x * 1;
    };
  };
  auto f = compile(make(wc));
  auto fe = make(we);
  for (int call = 0; call < 4; ++call) EXPECT_EQ(values(f(wc)), values(fe(we))) << "call " << call;
  EXPECT_EQ(values(wc), values(we));
  EXPECT_EQ(f.stats().compiled_calls, 0);
  for (int call = 0; call < 3; ++call)
    EXPECT_EQ(values(f(ones({3}))), (std::vector<float>{1, 1, 1}));
  EXPECT_GE(f.stats().compiled_calls, 1);
  EXPECT_EQ(values(wc), (std::vector<float>{8, 8, 8}));
}

// kiln::grad inside the compiled function, returning the gradients.
TEST(CompileTraps, GradInsideTheFunction) {
  manual_seed(3);
  Tensor w = randn({4, 3}).requires_grad_();
  auto fn = [&](const Tensor& x) {
    Tensor loss = (kiln::tanh(matmul(x, w)) * 0.5).sum();
    std::vector<Tensor> g = kiln::grad({loss}, {w});
    return std::make_tuple(loss.detach(), g[0]);
  };
  auto f = compile(fn);
  for (int call = 0; call < 4; ++call) {
    Tensor x = randn({5, 4});
    auto [lc, gc] = f(x);
    auto [le, ge] = fn(x);
    EXPECT_TRUE(allclose(lc, le, 1e-5, 1e-5)) << "call " << call;
    EXPECT_TRUE(allclose(gc, ge, 1e-5, 1e-5)) << "call " << call;
  }
  EXPECT_GE(f.stats().compiled_calls, 2);
  EXPECT_FALSE(w.grad().defined());  // kiln::grad does not accumulate
}

// The loss itself is returned (it requires grad): the caller cannot backward
// through it again, in eager or compiled, but the call itself works.
TEST(CompileTraps, GradInsideWithTheLossReturned) {
  manual_seed(4);
  Tensor w = randn({3}).requires_grad_();
  auto fn = [&](const Tensor& x) {
    Tensor loss = (x * w).pow(2).sum();
    std::vector<Tensor> g = kiln::grad({loss}, {w});
    return std::make_tuple(loss, g[0]);
  };
  auto f = compile(fn);
  for (int call = 0; call < 4; ++call) {
    Tensor x = randn({3});
    auto [lc, gc] = f(x);
    auto [le, ge] = fn(x);
    EXPECT_TRUE(allclose(lc.detach(), le.detach(), 1e-5, 1e-6)) << "call " << call;
    EXPECT_TRUE(allclose(gc, ge, 1e-5, 1e-6)) << "call " << call;
    EXPECT_THROW(le.backward(), Error);
    EXPECT_THROW(lc.backward(), Error) << "call " << call;
  }
}

// Plans are bounded: the least recently used is dropped (counted, one warning)
// and a dropped signature seen again re-traces.
TEST(CompileTraps, PlansAreBoundedLeastRecentlyUsedFirst) {
  auto f = compile([](const Tensor& x) { return x * 2 + 1; }, {.warmup = 0, .plan_limit = 3});
  for (int64_t n = 1; n <= 5; ++n) EXPECT_EQ(f(ones({n})).sum().item<float>(), 3.0f * n);
  EXPECT_EQ(f.stats().traces, 5);
  EXPECT_EQ(f.stats().evictions, 2);
  f(ones({5}));  // kept: no trace
  EXPECT_EQ(f.stats().traces, 5);
  f(ones({1}));  // dropped: traced again
  EXPECT_EQ(f.stats().traces, 6);
  testing::expect_error([] { compile([](const Tensor& x) { return x; }, {.plan_limit = 0}); },
                        {"[compile]", "plan_limit must be at least 1"});
}

// A training step with its scheduler step inside: the scheduler advances at
// every compiled call (a host action), as in eager.
TEST(CompileTraps, SchedulerStepInsideTheCompiledStep) {
  auto run = [](bool compiled) {
    manual_seed(7);
    nn::Linear lin(4, 2);
    optim::SGD opt(lin.parameters(), {.lr = 1.0});
    optim::LambdaLR sched(opt, [](int64_t e) { return 1.0 / static_cast<double>(e + 1); });
    auto step = [&](const Tensor& x) {
      opt.zero_grad();
      Tensor loss = lin.forward(x).pow(2).mean();
      loss.backward();
      opt.step();
      sched.step();
      return loss.detach();
    };
    auto f = compile(step, {.enabled = compiled});
    std::vector<float> losses;
    manual_seed(8);
    for (int i = 0; i < 6; ++i) losses.push_back(f(randn({3, 4})).item<float>());
    if (compiled) {
      EXPECT_GE(f.stats().compiled_calls, 4);
      EXPECT_EQ(f.stats().traces, 1);
    }
    return std::make_tuple(losses, opt.param_groups()[0].lr(), sched.last_epoch(),
                           values(lin.weight));
  };
  auto [le, lre, ee, we] = run(false);
  auto [lc, lrc, ec, wc] = run(true);
  EXPECT_EQ(ee, 6);
  EXPECT_EQ(ec, 6);
  EXPECT_DOUBLE_EQ(lre, 1.0 / 7);
  EXPECT_DOUBLE_EQ(lrc, 1.0 / 7);
  for (size_t i = 0; i < le.size(); ++i) EXPECT_NEAR(lc[i], le[i], 1e-5 * (1 + std::abs(le[i])));
  for (size_t i = 0; i < we.size(); ++i) EXPECT_NEAR(wc[i], we[i], 1e-5);
}

// OneCycleLR cycles SGD's momentum (and Adam's beta1): numbers a scheduler may
// change are per-call values, so the compiled step never re-traces.
TEST(CompileTraps, OneCycleMomentumDoesNotRetrace) {
  for (bool adam : {false, true}) {
    SCOPED_TRACE(adam ? "Adam" : "SGD");
    auto run = [adam](bool compiled) {
      manual_seed(9);
      nn::Linear lin(5, 3);
      std::unique_ptr<optim::Optimizer> opt;
      if (adam) {
        opt = std::make_unique<optim::Adam>(lin.parameters(), optim::AdamOptions{.lr = 0.01});
      } else {
        opt = std::make_unique<optim::SGD>(lin.parameters(),
                                           optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
      }
      optim::OneCycleLR sched(*opt, 0.1, 20);
      auto f = compile(
          [&](const Tensor& x) {
            opt->zero_grad();
            Tensor loss = kiln::tanh(lin.forward(x)).sum();
            loss.backward();
            opt->step();
            sched.step();
            return loss.detach();
          },
          {.enabled = compiled});
      manual_seed(10);
      std::vector<float> l;
      for (int i = 0; i < 12; ++i) l.push_back(f(randn({2, 5})).item<float>());
      if (compiled) {
        EXPECT_EQ(f.stats().traces, 1) << f.stats().last_miss;
      }
      return std::make_pair(l, values(lin.weight));
    };
    auto [le, we] = run(false);
    auto [lc, wc] = run(true);
    for (size_t i = 0; i < le.size(); ++i) EXPECT_NEAR(lc[i], le[i], 1e-4 * (1 + std::abs(le[i])));
    for (size_t i = 0; i < we.size(); ++i) EXPECT_NEAR(wc[i], we[i], 1e-5);
  }
}

// A re-trace names the real cause: the train/eval switch of a plan whose
// shapes match, not a dim of another plan; a structural hyperparameter names
// its old and new value.
TEST(CompileTraps, RetraceReasonsNameTheRealCause) {
  nn::Sequential net;
  net.push_back(std::make_shared<nn::Linear>(3, 3));
  net.push_back(std::make_shared<nn::Dropout>(0.5));  // reads the train flag
  auto f = compile([&](const Tensor& x) { return net.forward(x); }, {.warmup = 0});
  {
    NoGradGuard ng;
    f(ones({4, 3}));
    f(ones({8, 3}));
    net.eval();
    f(ones({8, 3}));
  }
  EXPECT_NE(f.stats().last_miss.find("training changed (true -> false)"), std::string::npos)
      << f.stats().last_miss;
  Tensor w = ones({3}).requires_grad_();
  optim::SGD opt({w}, {.lr = 0.1, .momentum = 0.9});
  auto step = compile(
      [&](const Tensor& x) {
        opt.zero_grad();
        (w * x).sum().backward();
        opt.step();
      },
      {.warmup = 0});
  step(ones({3}));
  step(ones({3}));
  opt.param_groups()[0].set("momentum", 0.0);
  step(ones({3}));
  EXPECT_NE(step.stats().last_miss.find(
                "SGD hyperparameter momentum of group 0 changed from 0.9 (when traced) to 0"),
            std::string::npos)
      << step.stats().last_miss;
}

// A function that flips a guarded module flag itself (eval() after the
// forward) cannot be replayed: replays run no host code, so the flag would
// never flip and every call re-traces. One warning names the flag and the fix;
// results stay eager's.
TEST(CompileTraps, FunctionChangingGuardedHostStateWarnsOnce) {
  nn::Sequential net;
  net.push_back(std::make_shared<nn::Linear>(3, 3));
  net.push_back(std::make_shared<nn::Dropout>(0.5));  // reads the train flag
  auto f = compile(
      [&](const Tensor& x) {
        net.eval();
        Tensor y = net.forward(x);
        net.train();
        return y;
      },
      {.warmup = 0, .name = "flips"});
  NoGradGuard ng;
  const Tensor x = ones({4, 3});
  ::testing::internal::CaptureStderr();
  std::vector<Tensor> got;
  for (int i = 0; i < 3; ++i) got.push_back(f(x));
  const std::string err = ::testing::internal::GetCapturedStderr();
  const size_t w = err.find("flips: the function changes host state it depends on");
  EXPECT_NE(w, std::string::npos) << err;
  const size_t first = err.find("changes host state");
  EXPECT_EQ(err.find("changes host state", first + 1), std::string::npos) << err;  // once
  EXPECT_NE(err.find("training changed"), std::string::npos) << err;
  net.eval();
  const Tensor want = net.forward(x);
  for (const Tensor& g : got) EXPECT_TRUE(allclose(g, want));
}

// KILN_CHECK_COMPILED does not flag rounding: a long reassociated sum whose
// result is near zero (cancellation) agrees within a tolerance scaled by the
// tensor's magnitude and the reduction size; a real difference in a captured
// parameter is reported by its module path with the largest errors.
TEST(CompileTraps, CheckCompiledToleratesRoundingAndNamesModulePaths) {
  setenv("KILN_CHECK_COMPILED", "1", 1);
  auto sums = compile([](const Tensor& x) { return x.sum({1}); }, {.warmup = 0, .name = "sums"});
  manual_seed(11);
  Tensor x = randn({8, 100000});
  x = cat({x, neg(x.slice(1, 0, 100000))}, 1);  // rows summing to about 0
  ::testing::internal::CaptureStderr();
  sums(x);
  sums(x);
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(sums.stats().check_mismatches, 0) << sums.stats().last_check_report;

  static double lr = 0.5;
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Linear>(3, 2));
  auto step = compile(
      [&](const Tensor& in) {
        NoGradGuard ng;
        net->at<nn::Linear>(0)->weight.sub_(mul(in.sum(), lr));  // lr baked in
        return in * 1;
      },
      {.warmup = 0, .name = "paths"});
  unsetenv("KILN_CHECK_COMPILED");
  ::testing::internal::CaptureStderr();
  step(ones({3}));
  lr = 1.5;
  step(ones({3}));
  const std::string err = ::testing::internal::GetCapturedStderr();
  const std::string& r = step.stats().last_check_report;
  EXPECT_EQ(step.stats().check_mismatches, 1) << r;
  for (const char* part :
       {"(0.weight) after the call differs", "max abs error 3", "baked in: pass them as arguments"})
    EXPECT_NE(r.find(part), std::string::npos) << part << "\n" << r;
}

}  // namespace
}  // namespace kiln
