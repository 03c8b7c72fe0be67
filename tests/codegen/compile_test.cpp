// kiln::compile end to end: whole training steps, differentiable forwards,
// guards, dynamic dims, errors, toggles and dumps.
#include "kiln/compile.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"
#include "runtime/test_util.h"

namespace kiln {
namespace {

std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed) {
  manual_seed(seed);
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Linear>(20, 32));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::Linear>(32, 10));
  return m;
}

std::shared_ptr<nn::Sequential> make_cnn(uint64_t seed) {
  manual_seed(seed);
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Conv2d>(1, 4, nn::Size2{3, 3}));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::MaxPool2d>(nn::Size2{2, 2}));
  m->push_back(std::make_shared<nn::Flatten>());
  m->push_back(std::make_shared<nn::Linear>(4 * 3 * 3, 10));
  return m;
}

void expect_same_params(nn::Module& a, nn::Module& b, double tol) {
  auto pa = a.parameters();
  auto pb = b.parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    auto x = pa[i].to_vector<double>();
    auto y = pb[i].to_vector<double>();
    ASSERT_EQ(x.size(), y.size());
    for (size_t k = 0; k < x.size(); ++k)
      ASSERT_NEAR(x[k], y[k], tol * (1 + std::abs(y[k]))) << "parameter " << i << " element " << k;
  }
}

// Trains `steps` steps eagerly and compiled from the same initial model and
// data; returns the compiled function's stats.
template <typename MakeModel, typename MakeOpt>
CompileStats train_both(MakeModel make_model, MakeOpt make_opt, const Dims& xshape, int steps,
                        double tol) {
  auto eager_model = make_model(1);
  auto comp_model = make_model(1);
  auto eager_opt = make_opt(*eager_model);
  auto comp_opt = make_opt(*comp_model);
  auto step_fn = [](nn::Module& m, optim::Optimizer& opt, const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = cross_entropy(m.forward(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  auto compiled = compile(
      [&](const Tensor& x, const Tensor& y) { return step_fn(*comp_model, *comp_opt, x, y); });
  manual_seed(7);
  for (int s = 0; s < steps; ++s) {
    Tensor x = randn(xshape);
    Tensor y = randint(0, 10, {xshape[0]});
    Tensor le = step_fn(*eager_model, *eager_opt, x, y);
    Tensor lc = compiled(x, y);
    EXPECT_NEAR(le.item<double>(), lc.item<double>(), tol * (1 + std::abs(le.item<double>())))
        << "step " << s;
  }
  expect_same_params(*comp_model, *eager_model, tol);
  return compiled.stats();
}

// A compiled MLP training step (forward, backward, SGD momentum) matches eager after 20 steps.
TEST(Compile, MlpTrainingStepSgdMomentumMatchesEager) {
  auto st = train_both(
      make_mlp,
      [](nn::Module& m) {
        return std::make_unique<optim::SGD>(m.parameters(),
                                            optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
      },
      {16, 20}, 20, 1e-5);
  EXPECT_EQ(st.traces, 1);
  EXPECT_EQ(st.compiled_calls, 19);  // the first call warms up eagerly
}

// A compiled MLP training step with Adam matches eager after 20 steps (step counts on the host).
TEST(Compile, MlpTrainingStepAdamMatchesEager) {
  auto st = train_both(
      make_mlp,
      [](nn::Module& m) {
        return std::make_unique<optim::Adam>(m.parameters(), optim::AdamOptions{.lr = 1e-2});
      },
      {16, 20}, 20, 1e-5);
  EXPECT_EQ(st.traces, 1);
}

// The small CNN's compiled training step (conv, pool, linear, AdamW) matches eager after 20 steps.
TEST(Compile, CnnTrainingStepMatchesEager) {
  auto st = train_both(
      make_cnn,
      [](nn::Module& m) {
        return std::make_unique<optim::AdamW>(m.parameters(),
                                              optim::AdamWOptions{.lr = 1e-2, .weight_decay = 0.1});
      },
      {8, 1, 8, 8}, 20, 1e-5);
  EXPECT_EQ(st.traces, 1);
}

// A learning-rate scheduler drives a compiled step: lr is read at every call.
TEST(Compile, SchedulerChangesReachTheCompiledStep) {
  auto model = make_mlp(1);
  auto ref = make_mlp(1);
  optim::SGD opt(model->parameters(), {.lr = 0.1});
  optim::SGD ref_opt(ref->parameters(), {.lr = 0.1});
  optim::StepLR sched(opt, 2, 0.5);
  optim::StepLR ref_sched(ref_opt, 2, 0.5);
  auto step = compile([&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    cross_entropy(model->forward(x), y).backward();
    opt.step();
  });
  manual_seed(3);
  for (int s = 0; s < 8; ++s) {
    Tensor x = randn({4, 20});
    Tensor y = randint(0, 10, {4});
    step(x, y);
    sched.step();
    ref_opt.zero_grad();
    cross_entropy(ref->forward(x), y).backward();
    ref_opt.step();
    ref_sched.step();
  }
  expect_same_params(*model, *ref, 1e-5);
  EXPECT_EQ(step.stats().traces, 1);
}

// A forward-only compiled function stays differentiable: its backward runs as
// one compiled region and gives the eager gradients.
TEST(Compile, CompiledForwardIsDifferentiable) {
  auto model = make_mlp(2);
  auto fwd = compile([&](const Tensor& x) { return tanh(model->forward(x)).sum(); }, {.warmup = 0});
  Tensor x = randn({5, 20}).requires_grad_();
  Tensor loss = fwd(x);
  EXPECT_EQ(fwd.stats().traces, 1);
  ASSERT_TRUE(loss.requires_grad());
  loss.backward();
  std::vector<Tensor> g_compiled;
  for (auto& p : model->parameters()) g_compiled.push_back(p.grad().clone());
  Tensor gx = x.grad().clone();
  for (auto& p : model->parameters()) p.set_grad(Tensor());
  x.set_grad(Tensor());
  tanh(model->forward(x)).sum().backward();
  auto params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_TRUE(allclose(g_compiled[i], params[i].grad(), 1e-5, 1e-6)) << "parameter " << i;
  EXPECT_TRUE(allclose(gx, x.grad(), 1e-5, 1e-6));
}

// Dropout inside a compiled function draws the same mask as eager for the same seed,
// and a new mask on every call.
TEST(Compile, DropoutMatchesEagerMasks) {
  auto f = [](const Tensor& x) { return dropout(x, 0.5, true); };
  auto cf = compile(f, {.warmup = 0});
  Tensor x = ones({64});
  manual_seed(11);
  Tensor e1 = f(x), e2 = f(x);
  manual_seed(11);
  Tensor c1 = cf(x), c2 = cf(x);
  EXPECT_TRUE(equal(e1, c1));
  EXPECT_TRUE(equal(e2, c2));
  EXPECT_FALSE(equal(c1, c2));
  EXPECT_EQ(cf.stats().traces, 1);
}

// A dtype change re-traces; the same signature reuses the plan.
TEST(CompileGuards, DtypeChangeRetraces) {
  auto f = compile([](const Tensor& x) { return x * 2 + 1; }, {.warmup = 0});
  f(ones({3}));
  f(ones({3}));
  EXPECT_EQ(f.stats().traces, 1);
  Tensor r = f(ones({3}, DType::f64));
  EXPECT_EQ(r.dtype(), DType::f64);
  EXPECT_EQ(f.stats().traces, 2);
  EXPECT_NE(f.stats().last_miss.find("dtype"), std::string::npos) << f.stats().last_miss;
}

// A batch-size change on a dynamic dim makes one symbolic plan that serves every batch size.
TEST(CompileGuards, DynamicBatchReusesThePlan) {
  auto model = make_mlp(3);
  auto f = compile(
      [&](const Tensor& x, const Tensor& y) {
        return cross_entropy(model->forward(x).reshape({x.size(0), 10}), y);
      },
      {.dynamic = {{0, 0}, {1, 0}}, .warmup = 0});
  NoGradGuard ng;
  for (int64_t b : {8, 16, 5, 32, 3}) {
    Tensor x = randn({b, 20});
    Tensor y = randint(0, 10, {b});
    Tensor want = cross_entropy(model->forward(x), y);
    EXPECT_TRUE(allclose(f(x, y), want, 1e-5, 1e-6)) << "batch " << b;
  }
  EXPECT_EQ(f.stats().traces, 2);  // the second size generalizes the first plan
  EXPECT_EQ(f.stats().generalized, 1);
  EXPECT_EQ(f.stats().compiled_calls, 5);
}

// A captured tensor replaced by one of a different shape re-traces (no stale plan).
TEST(CompileGuards, ReplacedCaptureRetraces) {
  Tensor w = ones({3, 3});
  auto f = compile([&](const Tensor& x) { return matmul(x, w); }, {.warmup = 0});
  f(ones({2, 3}));
  w = ones({3, 4});
  Tensor r = f(ones({2, 3}));
  EXPECT_EQ(r.shape(), (Dims{2, 4}));
  EXPECT_EQ(f.stats().traces, 2);
  EXPECT_NE(f.stats().last_miss.find("captured tensor"), std::string::npos) << f.stats().last_miss;
}

// Switching a module between train and eval re-traces (dropout is on, then off).
TEST(CompileGuards, TrainEvalFlagRetraces) {
  auto drop = std::make_shared<nn::Dropout>(0.5);
  auto f = compile([&](const Tensor& x) { return drop->forward(x); }, {.warmup = 0});
  Tensor x = ones({100});
  f(x);
  drop->eval();
  EXPECT_TRUE(equal(f(x), x));
  EXPECT_EQ(f.stats().traces, 2);
  EXPECT_NE(f.stats().last_miss.find("training"), std::string::npos) << f.stats().last_miss;
}

// BatchNorm running statistics are written back after every compiled call.
TEST(Compile, BatchNormRunningStatsAreWrittenBack) {
  manual_seed(4);
  auto bn_c = std::make_shared<nn::BatchNorm1d>(6);
  auto bn_e = std::make_shared<nn::BatchNorm1d>(6);
  auto f = compile([&](const Tensor& x) { return bn_c->forward(x); });
  NoGradGuard ng;
  for (int s = 0; s < 4; ++s) {
    Tensor x = randn({10, 6});
    EXPECT_TRUE(allclose(f(x), bn_e->forward(x), 1e-5, 1e-6));
  }
  EXPECT_TRUE(allclose(bn_c->buffers()[0], bn_e->buffers()[0], 1e-6, 1e-7));
  EXPECT_TRUE(allclose(bn_c->buffers()[1], bn_e->buffers()[1], 1e-6, 1e-7));
  EXPECT_TRUE(equal(bn_c->buffers()[2], bn_e->buffers()[2]));
}

// Captured state overwritten from an overlapping view of itself (w.copy_(w.t()))
// matches eager: the write-back reads the whole source before writing; and an
// in-place write into an expanded real tensor is refused as eagerly.
TEST(Compile, OverlappingCopyOfCapturedStateMatchesEager) {
  Tensor wc = arange(0, 9).to(DType::f32).reshape({3, 3}), we = wc.clone();
  auto step = [](Tensor& w, const Tensor& x) {
    NoGradGuard ng;
    w.copy_(w.t() * 2);
    w.copy_(w.t());
    return matmul(w, x);
  };
  auto f = compile([&](const Tensor& x) { return step(wc, x); });
  for (int s = 0; s < 4; ++s) {
    Tensor x = randn({3, 2});
    EXPECT_TRUE(allclose(f(x), step(we, x), 1e-6, 1e-6)) << "call " << s;
    EXPECT_TRUE(equal(wc, we)) << "call " << s;
  }
  Tensor e = ones({1}).expand({4});
  auto g = compile([&](const Tensor& x) {
    NoGradGuard ng;
    e.add_(x);
    return x;
  });
  testing::expect_error([&] { g(ones({4})); }, {"[add_]", "more than one element"});
  testing::expect_error([&] { g(ones({4})); }, {"[add_]", "more than one element"});
}

// item() while tracing raises an error naming the read and this file.
TEST(CompileErrors, ValueReadNamesTheCallSite) {
  auto f = compile([](const Tensor& x) { return x * x.sum().item<double>(); }, {.warmup = 0});
  testing::expect_error([&] { f(ones({3})); }, {"item()", "compile_test.cpp", "Fallback::kEager"});
}

// With {.fallback = eager} the function runs eagerly for that signature, warning once.
TEST(CompileErrors, FallbackEagerRunsThePlainFunction) {
  auto f = compile([](const Tensor& x) { return x * x.sum().item<double>(); },
                   {.fallback = Fallback::kEager, .warmup = 0});
  ::testing::internal::CaptureStderr();
  Tensor r1 = f(ones({3}));
  Tensor r2 = f(ones({3}));
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(equal(r1, full({3}, 3.0)));
  EXPECT_TRUE(equal(r2, full({3}, 3.0)));
  EXPECT_EQ(f.stats().traces, 0);
  EXPECT_EQ(f.stats().eager_calls, 2);
  size_t first = err.find("from now on");
  EXPECT_NE(first, std::string::npos);
  EXPECT_EQ(err.find("from now on", first + 1), std::string::npos) << "warned twice: " << err;
}

// {.enabled = false} and KILN_EAGER=1 run the plain function.
TEST(Compile, DisabledRunsEagerly) {
  auto f = compile([](const Tensor& x) { return x + 1; }, {.enabled = false});
  f(ones({2}));
  EXPECT_EQ(f.stats().traces, 0);
  setenv("KILN_EAGER", "1", 1);
  auto g = compile([](const Tensor& x) { return x + 1; }, {.warmup = 0});
  g(ones({2}));
  unsetenv("KILN_EAGER");
  EXPECT_EQ(g.stats().traces, 0);
  EXPECT_EQ(g.stats().eager_calls, 1);
}

// Results may be nested vectors/tuples; arithmetic arguments are guarded by value.
TEST(Compile, NestedResultsAndScalarArguments) {
  auto f = compile(
      [](const std::vector<Tensor>& xs, double s) {
        return std::make_tuple(xs[0] * s, std::vector<Tensor>{xs[1] + s, xs[0] - xs[1]});
      },
      {.warmup = 0});
  auto [a, v] = f(std::vector<Tensor>{ones({2}), full({2}, 3.0)}, 2.0);
  EXPECT_TRUE(equal(a, full({2}, 2.0)));
  ASSERT_EQ(v.size(), 2u);
  EXPECT_TRUE(equal(v[0], full({2}, 5.0)));
  EXPECT_TRUE(equal(v[1], full({2}, -2.0)));
  f(std::vector<Tensor>{ones({2}), ones({2})}, 3.0);
  EXPECT_EQ(f.stats().traces, 2);
}

// KILN_CHECK_COMPILED runs eager beside compiled and finds no difference on a training step.
TEST(Compile, CheckCompiledAgreesOnATrainingStep) {
  setenv("KILN_CHECK_COMPILED", "1", 1);
  auto model = make_mlp(5);
  optim::Adam opt(model->parameters(), {.lr = 1e-2});
  auto step = compile([&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
    return loss;
  });
  unsetenv("KILN_CHECK_COMPILED");
  for (int s = 0; s < 4; ++s) step(randn({4, 20}), randint(0, 10, {4}));
  EXPECT_EQ(step.stats().compiled_calls, 3);
  EXPECT_EQ(step.stats().check_mismatches, 0) << step.stats().last_check_report;
  EXPECT_EQ(opt.state(model->parameters()[0]).at("step").item<double>(), 4.0);
}

// KILN_DUMP writes the traced and optimized graphs as text and DOT, and the fusion plan.
TEST(Compile, DumpWritesGraphs) {
  auto dir = std::filesystem::temp_directory_path() / "kiln_dump_test";
  std::filesystem::remove_all(dir);
  setenv("KILN_DUMP", dir.c_str(), 1);
  auto f = compile([](const Tensor& x) { return relu(x) * 2; }, {.warmup = 0, .name = "dumped"});
  unsetenv("KILN_DUMP");
  f(ones({4}));
  for (const char* s : {"traced", "optimized"})
    for (const char* ext : {".kir", ".dot"})
      EXPECT_TRUE(std::filesystem::exists(dir / (std::string("dumped.0.") + s + ext))) << s << ext;
  EXPECT_TRUE(std::filesystem::exists(dir / "dumped.0.optimized.fusion.txt"));
  std::filesystem::remove_all(dir);
}

// An embedding lookup of captured indices compiles (its range check cannot
// read values while tracing); an index out of range still fails when it runs.
TEST(Compile, EmbeddingOfCapturedIndices) {
  manual_seed(2);
  nn::Embedding emb(10, 4);
  const Tensor idx = arange(5);
  auto f = compile([&] { return emb(idx).sum(); }, {.warmup = 0});
  EXPECT_TRUE(allclose(f(), emb(idx).sum(), 1e-6, 1e-6));
  EXPECT_EQ(f.stats().traces, 1);
  const Tensor bad = from_vector<int64_t>({3, 12}, {2});
  auto g = compile([&] { return emb(bad).sum(); }, {.warmup = 0});
  EXPECT_THROW(g(), Error);
}

}  // namespace
}  // namespace kiln
