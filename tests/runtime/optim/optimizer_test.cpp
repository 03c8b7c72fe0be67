// Verifies the Optimizer base: parameter groups, zero_grad, skipped parameters,
// state_dict save/load (bit-exact continuation, mismatch errors) and bad hyperparameters.
#include <cmath>
#include <limits>
#include <memory>

#include "optim_test_util.h"

using namespace kiln;
using namespace kiln::optim;
using namespace kiln::optim::testing;

namespace {
Tensor vec(std::vector<double> v) {
  return from_vector<double>(v).requires_grad_();
}
Tensor copy_param(const Tensor& w) {
  return w.detach().clone().requires_grad_();
}

// Two parameters in two groups, driven by one loss.
struct TwoParams {
  Tensor w1 = vec({1.0, -2.0, 0.5});
  Tensor w2 = vec({0.3, -0.7});
  void backward() const { (sum(w1 * w1 * 1.5 + w1) + sum(w2.exp() * w2)).backward(); }
};

using Factory = std::function<std::unique_ptr<Optimizer>(std::vector<ParamGroup>)>;

// Trains 3 steps, saves, trains 3 more; a fresh optimizer over copies of the params
// loaded at step 3 must reproduce the last 3 steps bit for bit.
void check_resume_bit_exact(const Factory& make) {
  TwoParams a;
  auto groups = [](const TwoParams& p) {
    return std::vector<ParamGroup>{ParamGroup{{p.w1}, {}}, ParamGroup{{p.w2}, {{"lr", 0.03}}}};
  };
  auto opt = make(groups(a));
  auto sched = std::make_shared<StepLR>(*opt, 2, 0.5);  // adds "initial_lr" to the groups
  auto train = [&](Optimizer& o, TwoParams& p, LRScheduler& s) {
    o.zero_grad();
    p.backward();
    o.step();
    s.step();
  };
  for (int i = 0; i < 3; ++i) train(*opt, a, *sched);
  StateDict saved = opt->state_dict();
  StateDict saved_sched = sched->state_dict();
  TwoParams b{copy_param(a.w1), copy_param(a.w2)};
  for (int i = 0; i < 3; ++i) train(*opt, a, *sched);

  auto opt2 = make(groups(b));
  auto sched2 = std::make_shared<StepLR>(*opt2, 2, 0.5);
  opt2->load_state_dict(saved);
  sched2->load_state_dict(saved_sched);
  EXPECT_EQ(opt2->param_groups()[1].lr(), saved.at("param_groups.1.lr").item<double>());
  for (int i = 0; i < 3; ++i) train(*opt2, b, *sched2);
  EXPECT_EQ(a.w1.to_vector<double>(), b.w1.to_vector<double>()) << opt->name();
  EXPECT_EQ(a.w2.to_vector<double>(), b.w2.to_vector<double>()) << opt->name();
  EXPECT_EQ(sched->get_last_lr(), sched2->get_last_lr());
}
}  // namespace

// Groups override the defaults: each group's params move with its own lr.
TEST(OptimGroups, DifferentLearningRates) {
  Tensor w1 = vec({1.0, 2.0}), w2 = vec({3.0});
  SGD opt(std::vector<ParamGroup>{{{w1}, {}}, {{w2}, {{"lr", 0.01}}}}, {.lr = 0.1});
  (sum(w1 * w1) + sum(w2 * w2)).backward();
  opt.step();
  auto v1 = w1.to_vector<double>(), v2 = w2.to_vector<double>();
  EXPECT_DOUBLE_EQ(v1[0], 1.0 - 0.1 * 2.0);
  EXPECT_DOUBLE_EQ(v1[1], 2.0 - 0.1 * 4.0);
  EXPECT_DOUBLE_EQ(v2[0], 3.0 - 0.01 * 6.0);
  EXPECT_EQ(opt.param_groups()[0].lr(), 0.1);
  EXPECT_EQ(opt.param_groups()[1].lr(), 0.01);
  EXPECT_EQ(opt.options(1).momentum, 0.0);  // not overridden: the default
}

// add_param_group adds a group with defaults filled in and checks it.
TEST(OptimGroups, AddParamGroup) {
  Tensor w1 = vec({1.0}), w2 = vec({2.0});
  Adam opt({w1}, {.lr = 0.01});
  opt.add_param_group({{w2}, {{"lr", 0.5}, {"beta1", 0.5}}});
  ASSERT_EQ(opt.param_groups().size(), 2u);
  EXPECT_EQ(opt.options(1).lr, 0.5);
  EXPECT_EQ(opt.options(1).betas.first, 0.5);
  EXPECT_EQ(opt.options(1).betas.second, 0.999);
  expect_error([&] { opt.add_param_group({{w1}, {}}); }, {"[Adam]", "more than once"});
  expect_error(
      [&] {
        opt.add_param_group({{vec({1.0})}, {{"betas", 0.5}}});
      },
      {"[Adam]", "unknown hyperparameter 'betas'"});
  expect_error(
      [&] {
        opt.add_param_group({{vec({1.0})}, {{"beta2", 1.0}}});
      },
      {"[Adam]", "beta2=1"});
  EXPECT_EQ(opt.param_groups().size(), 2u);
}

// zero_grad() drops the grads; zero_grad(false) zeroes them in place.
TEST(OptimZeroGrad, BothModes) {
  Tensor w = vec({1.0, 2.0});
  SGD opt({w}, {.lr = 0.1});
  sum(w * w).backward();
  Tensor g = w.grad();
  opt.zero_grad(/*set_to_none=*/false);
  ASSERT_TRUE(w.grad().defined());
  EXPECT_TRUE(w.grad().is_same(g));
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{0.0, 0.0}));
  sum(w * w).backward();  // accumulates onto the zeros
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{2.0, 4.0}));
  opt.zero_grad();
  EXPECT_FALSE(w.grad().defined());
  opt.zero_grad(false);  // no grad: nothing to do
  EXPECT_FALSE(w.grad().defined());
}

// Parameters without a gradient are skipped and get no state.
TEST(OptimStep, SkipsParamsWithoutGrad) {
  Tensor used = vec({1.0}), unused = vec({5.0});
  for (int kind = 0; kind < 4; ++kind) {
    std::unique_ptr<Optimizer> opt;
    if (kind == 0)
      opt = std::make_unique<SGD>(std::vector<Tensor>{used, unused},
                                  SGDOptions{.lr = 0.1, .momentum = 0.9});
    if (kind == 1) opt = std::make_unique<Adam>(std::vector<Tensor>{used, unused});
    if (kind == 2) opt = std::make_unique<AdamW>(std::vector<Tensor>{used, unused});
    if (kind == 3) opt = std::make_unique<RMSprop>(std::vector<Tensor>{used, unused});
    opt->zero_grad();
    sum(used * used).backward();
    opt->step();
    EXPECT_EQ(unused.to_vector<double>(), std::vector<double>{5.0}) << opt->name();
    EXPECT_TRUE(opt->state(unused).empty()) << opt->name();
    EXPECT_FALSE(opt->state(used).empty()) << opt->name();
  }
}

// step(closure) evaluates the loss with grad enabled, then updates.
TEST(OptimStep, Closure) {
  Tensor w = vec({2.0});
  SGD opt({w}, {.lr = 0.25});
  NoGradGuard ng;  // the closure still records the tape
  Tensor loss = opt.step([&] {
    opt.zero_grad();
    Tensor l = sum(w * w);
    l.backward();
    return l;
  });
  EXPECT_EQ(loss.item<double>(), 4.0);
  EXPECT_EQ(w.to_vector<double>(), std::vector<double>{1.0});
}

// state_dict flattens state and hyperparameters into PyTorch-like names.
TEST(OptimStateDict, Layout) {
  TwoParams p;
  Adam opt(std::vector<ParamGroup>{{{p.w1}, {}}, {{p.w2}, {{"lr", 0.5}}}}, {.amsgrad = true});
  p.backward();
  opt.step();
  StateDict sd = opt.state_dict();
  for (const char* k :
       {"state.0.step", "state.0.exp_avg", "state.0.exp_avg_sq", "state.0.max_exp_avg_sq",
        "state.1.exp_avg", "param_groups.0.lr", "param_groups.0.beta1", "param_groups.0.beta2",
        "param_groups.0.eps", "param_groups.0.weight_decay", "param_groups.0.amsgrad",
        "param_groups.0.maximize", "param_groups.0.params", "param_groups.1.lr",
        "param_groups.1.params"})
    EXPECT_TRUE(sd.contains(k)) << k;
  EXPECT_EQ(sd.at("param_groups.1.lr").dim(), 0);
  EXPECT_EQ(sd.at("param_groups.1.lr").dtype(), DType::f64);
  EXPECT_EQ(sd.at("param_groups.1.lr").item<double>(), 0.5);
  EXPECT_EQ(sd.at("param_groups.0.amsgrad").item<double>(), 1.0);
  EXPECT_EQ(sd.at("param_groups.1.params").dtype(), DType::i64);
  EXPECT_EQ(sd.at("param_groups.1.params").to_vector<int64_t>(), std::vector<int64_t>{1});
  EXPECT_EQ(sd.at("state.1.exp_avg").shape(), (Dims{2}));
  // A snapshot: stepping again does not change the saved tensors.
  auto before = sd.at("state.0.exp_avg").to_vector<double>();
  p.backward();
  opt.step();
  EXPECT_EQ(sd.at("state.0.exp_avg").to_vector<double>(), before);
}

// Save mid-training, load into a fresh optimizer over fresh params: bit-identical run.
TEST(OptimStateDict, ResumeIsBitExact) {
  check_resume_bit_exact([](std::vector<ParamGroup> g) {
    return std::make_unique<SGD>(std::move(g),
                                 SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
  });
  check_resume_bit_exact([](std::vector<ParamGroup> g) {
    return std::make_unique<Adam>(std::move(g), AdamOptions{.lr = 0.1, .amsgrad = true});
  });
  check_resume_bit_exact([](std::vector<ParamGroup> g) {
    return std::make_unique<AdamW>(std::move(g), AdamWOptions{.lr = 0.1, .weight_decay = 0.1});
  });
  check_resume_bit_exact([](std::vector<ParamGroup> g) {
    return std::make_unique<RMSprop>(std::move(g),
                                     RMSpropOptions{.momentum = 0.5, .centered = true});
  });
}

// Loading restores hyperparameters (and scheduler keys) and replaces the old state.
TEST(OptimStateDict, LoadRestoresHyperparameters) {
  Tensor w = vec({1.0, 2.0});
  SGD a({w}, {.lr = 0.1, .momentum = 0.9});
  a.param_groups()[0].set("initial_lr", 0.7);
  sum(w * w).backward();
  a.step();
  Tensor w2 = vec({1.0, 2.0});
  SGD b({w2}, {.lr = 0.5});
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.options(0).lr, 0.1);
  EXPECT_EQ(b.options(0).momentum, 0.9);
  EXPECT_EQ(b.param_groups()[0].get("initial_lr"), 0.7);
  EXPECT_EQ(b.state(w2).at("momentum_buffer").to_vector<double>(),
            a.state(w).at("momentum_buffer").to_vector<double>());
  // The loaded state is a private copy.
  EXPECT_FALSE(b.state(w2).at("momentum_buffer").is_same(a.state(w).at("momentum_buffer")));
}

// Mismatched state dicts are rejected with a message naming the difference, atomically.
TEST(OptimStateDict, MismatchErrors) {
  TwoParams p;
  Adam src(std::vector<ParamGroup>{{{p.w1}, {}}, {{p.w2}, {}}});
  p.backward();
  src.step();
  StateDict sd = src.state_dict();

  Adam one_group({p.w1, p.w2});
  expect_error([&] { one_group.load_state_dict(sd); }, {"[Adam]", "2 parameter groups", "has 1"});
  Adam fewer(std::vector<ParamGroup>{{{p.w1}, {}}, {{vec({1.0, 2.0}), vec({3.0})}, {}}});
  expect_error([&] { fewer.load_state_dict(sd); },
               {"[Adam]", "group 1 has 1 parameters in the state dict, 2 in the optimizer"});
  Tensor other = vec({1.0, 2.0, 3.0});
  Adam shapes(std::vector<ParamGroup>{{{p.w1}, {}}, {{other}, {}}});
  expect_error([&] { shapes.load_state_dict(sd); },
               {"[Adam]", "'state.1.exp_avg' has shape [2]", "parameter 1 has shape [3]"});
  EXPECT_TRUE(shapes.state(other).empty());  // nothing was loaded

  StateDict missing = sd;
  missing.erase("param_groups.0.eps");
  Adam fresh(std::vector<ParamGroup>{{{vec({1, 2, 3})}, {}}, {{vec({1, 2})}, {}}});
  expect_error([&] { fresh.load_state_dict(missing); }, {"[Adam]", "param_groups.0.eps"});
  StateDict extra = sd;
  extra.set("bogus", vec({1.0}));
  expect_error([&] { fresh.load_state_dict(extra); }, {"[Adam]", "unexpected entry 'bogus'"});
  StateDict bad = sd;
  bad.set("param_groups.0.lr", scalar_tensor(-1.0, DType::f64));
  expect_error([&] { fresh.load_state_dict(bad); }, {"[Adam]", "lr=-1"});
  EXPECT_EQ(fresh.options(0).lr, 1e-3);
  SGD sgd(std::vector<ParamGroup>{{{vec({1, 2, 3})}, {}}, {{vec({1, 2})}, {}}});
  expect_error([&] { sgd.load_state_dict(sd); }, {"[SGD]", "missing hyperparameter"});
}

// Invalid hyperparameters raise kiln::Error naming the optimizer and the value.
TEST(OptimErrors, BadHyperparameters) {
  auto w = [] { return std::vector<Tensor>{vec({1.0})}; };
  double nan = std::nan("");
  expect_error([&] { SGD(w(), {.lr = -0.1}); }, {"[SGD]", "lr=-0.1"});
  expect_error([&] { SGD(w(), {.lr = nan}); }, {"[SGD]", "lr=nan"});
  expect_error([&] { SGD(w(), {.momentum = -1}); }, {"[SGD]", "momentum=-1"});
  expect_error([&] { SGD(w(), {.weight_decay = -1e-3}); }, {"[SGD]", "weight_decay=-0.001"});
  expect_error([&] { SGD(w(), {.nesterov = true}); }, {"[SGD]", "Nesterov", "momentum=0"});
  expect_error([&] { SGD(w(), {.momentum = 0.9, .dampening = 0.1, .nesterov = true}); },
               {"[SGD]", "dampening=0.1"});
  expect_error([&] { Adam(w(), {.lr = -1}); }, {"[Adam]", "lr=-1"});
  expect_error([&] { Adam(w(), {.betas = {1.0, 0.999}}); }, {"[Adam]", "beta1=1"});
  expect_error([&] { Adam(w(), {.betas = {0.9, -0.1}}); }, {"[Adam]", "beta2=-0.1"});
  expect_error([&] { Adam(w(), {.eps = -1e-8}); }, {"[Adam]", "eps=-1e-08"});
  expect_error([&] { Adam(w(), {.weight_decay = -1}); }, {"[Adam]", "weight_decay=-1"});
  expect_error([&] { AdamW(w(), {.betas = {0.9, 1.5}}); }, {"[AdamW]", "beta2=1.5"});
  expect_error([&] { RMSprop(w(), {.alpha = -0.5}); }, {"[RMSprop]", "alpha=-0.5"});
  expect_error([&] { RMSprop(w(), {.eps = -1}); }, {"[RMSprop]", "eps=-1"});
  expect_error([&] { RMSprop(w(), {.momentum = -0.5}); }, {"[RMSprop]", "momentum=-0.5"});
}

// Bad parameter lists raise kiln::Error instead of crashing.
TEST(OptimErrors, BadParameters) {
  expect_error([] { SGD(std::vector<Tensor>{}); }, {"[SGD]", "empty parameter list"});
  expect_error([] { Adam(std::vector<ParamGroup>{}); }, {"[Adam]", "empty list"});
  expect_error([] { SGD(std::vector<Tensor>{Tensor()}); }, {"[SGD]", "undefined"});
  expect_error(
      [] {
        SGD(std::vector<Tensor>{from_vector<int64_t>({1, 2})});
      },
      {"[SGD]", "dtype i64"});
  Tensor leaf = vec({1.0});
  expect_error([&] { SGD(std::vector<Tensor>{leaf * 2.0}); }, {"[SGD]", "not a leaf"});
  expect_error([&] { SGD(std::vector<Tensor>{leaf, leaf}); }, {"[SGD]", "more than once"});
  expect_error(
      [&] {
        SGD(std::vector<ParamGroup>{{{leaf}, {{"lr", 0.1}, {"nesterov_", 1}}}});
      },
      {"[SGD]", "unknown hyperparameter 'nesterov_'"});
  SGD ok({leaf});
  expect_error([&] { ok.options(3); }, {"[SGD]", "no parameter group 3"});
  expect_error([&] { ok.param_groups()[0].get("betas"); }, {"no hyperparameter named 'betas'"});
}

// Loaded state is refused when it could not have come from training: a step
// count that is negative, NaN or fractional, or a negative/NaN average of
// squares (Adam's exp_avg_sq and max_exp_avg_sq, RMSprop's square_avg).
TEST(OptimStateDict, ImpossibleStateIsRefused) {
  TwoParams p;
  Adam src(std::vector<ParamGroup>{{{p.w1}, {}}, {{p.w2}, {}}}, {.amsgrad = true});
  p.backward();
  src.step();
  const StateDict good = src.state_dict();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto load_with = [&](const std::string& key, const Tensor& value) {
    StateDict sd = good;
    sd.set(key, value);
    Adam dst(std::vector<ParamGroup>{{{copy_param(p.w1)}, {}}, {{copy_param(p.w2)}, {}}},
             {.amsgrad = true});
    dst.load_state_dict(sd);
  };
  for (double step : {-1.0, nan, 2.5, 1e300})
    expect_error([&] { load_with("state.0.step", scalar_tensor(step, DType::f64)); },
                 {"[Adam]", "'state.0.step' must be a whole number of steps >= 0"});
  load_with("state.0.step", scalar_tensor(7.0, DType::f64));  // any whole count is fine
  expect_error(
      [&] {
        load_with("state.0.exp_avg_sq", from_vector<double>({1, -0.5, 2}));
      },
      {"[Adam]", "'state.0.exp_avg_sq' is an average of squares but holds -0.5"});
  expect_error(
      [&] {
        load_with("state.1.max_exp_avg_sq", from_vector<double>({nan, 1}));
      },
      {"[Adam]", "'state.1.max_exp_avg_sq'", "holds NaN"});
  load_with("state.0.exp_avg", from_vector<double>({-1, -2, -3}));  // first moments may be < 0

  Tensor w = vec({1.0, 2.0});
  RMSprop rms({w}, {});
  sum(w * w).backward();
  rms.step();
  StateDict sd = rms.state_dict();
  sd.set("state.0.square_avg", from_vector<double>({-1, 0}));
  RMSprop fresh({copy_param(w)}, {});
  expect_error([&] { fresh.load_state_dict(sd); },
               {"[RMSprop]", "'state.0.square_avg' is an average of squares"});
}
