// Verifies the LR schedulers against their closed forms over many steps, OneCycleLR
// against PyTorch's formula, SequentialLR/ChainedScheduler composition, state and errors.
#include <cmath>
#include <numbers>

#include "optim_test_util.h"

using namespace kiln;
using namespace kiln::optim;
using namespace kiln::optim::testing;

namespace {
constexpr double kPi = std::numbers::pi;

// An SGD over one small parameter per group, lr 0.1 (and 0.05 for a second group).
struct Rig {
  Tensor w1 = from_vector<double>({1.0, 2.0}).requires_grad_();
  Tensor w2 = from_vector<double>({3.0}).requires_grad_();
  SGD opt{std::vector<ParamGroup>{{{w1}, {}}, {{w2}, {{"lr", 0.05}}}},
          SGDOptions{.lr = 0.1, .momentum = 0.9}};
  std::vector<double> base{0.1, 0.05};
};

// Steps `s` n times; after each step, every group's lr must match want(group base, epoch).
void expect_schedule(LRScheduler& s, Optimizer& opt, const std::vector<double>& base, int n,
                     const std::function<double(double, int)>& want, double tol = 1e-13) {
  for (int e = 0; e <= n; ++e) {
    if (e > 0) s.step();
    ASSERT_EQ(s.last_epoch(), e);
    for (size_t g = 0; g < base.size(); ++g) {
      double expected = want(base[g], e);
      EXPECT_NEAR(opt.param_groups()[g].lr(), expected, tol) << "epoch " << e << " group " << g;
      EXPECT_EQ(s.get_last_lr()[g], opt.param_groups()[g].lr());
    }
  }
}

// PyTorch's OneCycleLR formula, written out phase by phase: (lr, momentum) at `step`.
std::pair<double, double> one_cycle_reference(int step, double max_lr, int total,
                                              const OneCycleOptions& o) {
  const double initial = max_lr / o.div_factor, min_lr = initial / o.final_div_factor;
  auto anneal = [&](double a, double b, double pct) {
    if (o.anneal_strategy == AnnealStrategy::kLinear) return a + (b - a) * pct;
    return b + (a - b) / 2 * (std::cos(kPi * pct) + 1);
  };
  const double up_end = o.pct_start * total - 1;
  const double s = step;
  if (!o.three_phase) {
    if (s <= up_end) {
      double pct = s / up_end;
      return {anneal(initial, max_lr, pct), anneal(o.max_momentum, o.base_momentum, pct)};
    }
    double pct = (s - up_end) / (total - 1 - up_end);
    return {anneal(max_lr, min_lr, pct), anneal(o.base_momentum, o.max_momentum, pct)};
  }
  const double down_end = 2 * o.pct_start * total - 2;
  if (s <= up_end) {
    double pct = s / up_end;
    return {anneal(initial, max_lr, pct), anneal(o.max_momentum, o.base_momentum, pct)};
  }
  if (s <= down_end) {
    double pct = (s - up_end) / (down_end - up_end);
    return {anneal(max_lr, initial, pct), anneal(o.base_momentum, o.max_momentum, pct)};
  }
  double pct = (s - down_end) / (total - 1 - down_end);
  return {anneal(initial, min_lr, pct), o.max_momentum};
}
}  // namespace

// StepLR: lr = base * gamma^(epoch / step_size), for every group; step(epoch) jumps there.
TEST(SchedStepLR, ClosedForm) {
  Rig s;
  StepLR sched(s.opt, 3, 0.5);
  expect_schedule(sched, s.opt, s.base, 40,
                  [](double b, int e) { return b * std::pow(0.5, e / 3); });
  sched.step(int64_t{7});
  EXPECT_NEAR(s.opt.param_groups()[0].lr(), 0.1 * 0.25, 1e-15);
  EXPECT_EQ(sched.base_lrs(), s.base);
  EXPECT_EQ(s.opt.param_groups()[1].get("initial_lr"), 0.05);
}

// MultiStepLR: one gamma factor per milestone passed; a repeated milestone counts twice.
TEST(SchedMultiStepLR, ClosedForm) {
  Rig s;
  MultiStepLR sched(s.opt, {10, 4, 10}, 0.1);
  expect_schedule(sched, s.opt, s.base, 20,
                  [](double b, int e) { return b * std::pow(0.1, (e >= 4) + 2 * (e >= 10)); });
}

// ExponentialLR: lr = base * gamma^epoch.
TEST(SchedExponentialLR, ClosedForm) {
  Rig s;
  ExponentialLR sched(s.opt, 0.9);
  expect_schedule(sched, s.opt, s.base, 50, [](double b, int e) { return b * std::pow(0.9, e); });
}

// CosineAnnealingLR's recursive steps follow the closed form for three half-periods.
TEST(SchedCosineAnnealingLR, ClosedForm) {
  Rig s;
  CosineAnnealingLR sched(s.opt, 10, 0.001);
  expect_schedule(sched, s.opt, s.base, 30, [](double b, int e) {
    return 0.001 + (b - 0.001) * (1 + std::cos(kPi * e / 10)) / 2;
  });
}

// Resuming (last_epoch = 4) keeps the restored lr for epoch 5, then follows the closed form.
TEST(SchedCosineAnnealingLR, ResumeFromLastEpoch) {
  Rig s;
  auto closed = [](double b, int e) { return b * (1 + std::cos(kPi * e / 10)) / 2; };
  for (size_t g = 0; g < 2; ++g) {
    s.opt.param_groups()[g].set("initial_lr", s.base[g]);
    s.opt.param_groups()[g].set_lr(closed(s.base[g], 5));
  }
  CosineAnnealingLR sched(s.opt, 10, 0.0, /*last_epoch=*/4);
  EXPECT_EQ(sched.last_epoch(), 5);
  EXPECT_EQ(s.opt.param_groups()[0].lr(), closed(0.1, 5));
  for (int e = 6; e <= 15; ++e) {
    sched.step();
    EXPECT_NEAR(s.opt.param_groups()[1].lr(), closed(0.05, e), 1e-13) << "epoch " << e;
  }
}

// Resuming ExponentialLR and LinearLR does not apply an extra factor in the constructor.
TEST(SchedExponentialLR, ResumeKeepsLr) {
  Rig s;
  for (auto& g : s.opt.param_groups()) g.set("initial_lr", g.lr() * 2);
  ExponentialLR sched(s.opt, 0.5, /*last_epoch=*/1);
  EXPECT_EQ(s.opt.param_groups()[0].lr(), 0.1);
  sched.step();
  EXPECT_EQ(s.opt.param_groups()[0].lr(), 0.05);
  EXPECT_EQ(sched.base_lrs()[0], 0.2);
  LinearLR lin(s.opt, 0.5, 1.0, 4, /*last_epoch=*/2);
  EXPECT_EQ(s.opt.param_groups()[0].lr(), 0.05);
}

// LinearLR warm-up: start_factor * base up to end_factor * base in total_iters, then flat.
TEST(SchedLinearLR, WarmUp) {
  Rig s;
  LinearLR sched(s.opt, 0.25, 1.0, 8);
  expect_schedule(sched, s.opt, s.base, 20,
                  [](double b, int e) { return b * (0.25 + 0.75 * std::min(e, 8) / 8.0); });
  Rig d;
  LinearLR defaults(d.opt);  // 1/3 -> 1 over 5 iterations
  expect_schedule(defaults, d.opt, d.base, 8, [](double b, int e) {
    return b * (1.0 / 3 + (1 - 1.0 / 3) * std::min(e, 5) / 5.0);
  });
}

// LambdaLR: lr = base * lambda(epoch).
TEST(SchedLambdaLR, Formula) {
  Rig s;
  LambdaLR sched(s.opt, [](int64_t e) { return 1.0 / (1.0 + static_cast<double>(e)); });
  expect_schedule(sched, s.opt, s.base, 10, [](double b, int e) { return b / (1.0 + e); });
}

// OneCycleLR (cos and linear, two and three phases) matches PyTorch's formula, and cycles
// SGD's momentum inversely to the lr.
TEST(SchedOneCycleLR, MatchesPyTorchFormula) {
  for (bool three : {false, true})
    for (auto strategy : {AnnealStrategy::kCos, AnnealStrategy::kLinear}) {
      Rig s;
      OneCycleOptions o{.anneal_strategy = strategy, .three_phase = three};
      OneCycleLR sched(s.opt, std::vector<double>{1.0, 0.5}, 100, o);
      const double maxes[2] = {1.0, 0.5};
      for (int step = 0; step <= 100; ++step) {
        if (step > 0) sched.step();
        for (size_t g = 0; g < 2; ++g) {
          auto [lr, mom] = one_cycle_reference(step, maxes[g], 100, o);
          const ParamGroup& pg = s.opt.param_groups()[g];
          EXPECT_NEAR(pg.lr(), lr, 1e-14) << "step " << step << " three " << three;
          EXPECT_NEAR(pg.get("momentum"), mom, 1e-14) << "step " << step;
        }
        // The last scheduled step (total_steps - 1) ends at min_lr = max_lr / 25 / 1e4.
        if (step == 99) {
          EXPECT_NEAR(s.opt.param_groups()[0].lr(), 1.0 / 25 / 1e4, 1e-15);
        }
      }
    }
}

// With Adam, OneCycleLR cycles beta1; stepping past total_steps is an error that changes nothing.
TEST(SchedOneCycleLR, CyclesBeta1AndStopsAtTotalSteps) {
  Tensor w = from_vector<double>({1.0}).requires_grad_();
  Adam opt({w});
  OneCycleOptions o{.pct_start = 0.25, .base_momentum = 0.8, .max_momentum = 0.9};
  OneCycleLR sched(opt, 0.01, 20, o);
  EXPECT_EQ(opt.options(0).betas.first, 0.9);
  EXPECT_EQ(opt.options(0).betas.second, 0.999);
  for (int step = 1; step <= 20; ++step) {
    sched.step();
    auto [lr, mom] = one_cycle_reference(step, 0.01, 20, o);
    EXPECT_NEAR(opt.param_groups()[0].lr(), lr, 1e-15);
    EXPECT_NEAR(opt.options(0).betas.first, mom, 1e-15);
  }
  double lr = opt.param_groups()[0].lr();
  expect_error([&] { sched.step(); }, {"[OneCycleLR]", "tried to step 21 times", "20"});
  EXPECT_EQ(sched.last_epoch(), 20);
  EXPECT_EQ(opt.param_groups()[0].lr(), lr);
}

// SequentialLR: linear warm-up for 5 epochs, then cosine annealing restarted at epoch 0.
TEST(SchedSequentialLR, WarmUpThenCosine) {
  Rig s;
  auto warm = std::make_shared<LinearLR>(s.opt, 0.1, 1.0, 4);
  auto cosine = std::make_shared<CosineAnnealingLR>(s.opt, 10, 0.001);
  SequentialLR sched(s.opt, {warm, cosine}, {5});
  expect_schedule(sched, s.opt, s.base, 25, [](double b, int e) {
    if (e < 5) return b * (0.1 + 0.9 * std::min(e, 4) / 4.0);
    return 0.001 + (b - 0.001) * (1 + std::cos(kPi * (e - 5) / 10)) / 2;
  });
}

// SequentialLR over three schedulers switches at each milestone.
TEST(SchedSequentialLR, ThreeSchedulers) {
  Rig s;
  auto a = std::make_shared<ExponentialLR>(s.opt, 0.9);
  auto b = std::make_shared<StepLR>(s.opt, 2, 0.5);
  auto c = std::make_shared<LinearLR>(s.opt, 0.5, 1.0, 2);
  SequentialLR sched(s.opt, {a, b, c}, {3, 7});
  expect_schedule(sched, s.opt, s.base, 12, [](double base, int e) {
    if (e < 3) return base * std::pow(0.9, e);
    if (e < 7) return base * std::pow(0.5, (e - 3) / 2);
    return base * (0.5 + 0.5 * std::min(e - 7, 2) / 2.0);
  });
}

// SequentialLR's state_dict (with its children's) resumes the same lrs bit for bit.
TEST(SchedSequentialLR, StateDictResume) {
  Rig s1, s2;
  auto make = [](Rig& s) {
    auto warm = std::make_shared<LinearLR>(s.opt, 0.2, 1.0, 3);
    auto cosine = std::make_shared<CosineAnnealingLR>(s.opt, 8, 0.0);
    return std::make_unique<SequentialLR>(
        s.opt, std::vector<std::shared_ptr<LRScheduler>>{warm, cosine}, std::vector<int64_t>{4});
  };
  auto q1 = make(s1);
  for (int i = 0; i < 6; ++i) q1->step();
  StateDict opt_sd = s1.opt.state_dict(), sched_sd = q1->state_dict();
  EXPECT_TRUE(sched_sd.contains("schedulers.1.last_epoch"));
  auto q2 = make(s2);
  s2.opt.load_state_dict(opt_sd);
  q2->load_state_dict(sched_sd);
  for (int i = 0; i < 6; ++i) {
    q1->step();
    q2->step();
    EXPECT_EQ(q1->get_last_lr(), q2->get_last_lr()) << "step " << i;
  }
}

// ChainedScheduler multiplies the effects of its schedulers at every step.
TEST(SchedChainedScheduler, ComposesMultiplicatively) {
  Rig s;
  auto a = std::make_shared<ExponentialLR>(s.opt, 0.9);
  auto b = std::make_shared<MultiStepLR>(s.opt, std::vector<int64_t>{2, 5}, 0.1);
  ChainedScheduler sched(s.opt, {a, b});
  expect_schedule(sched, s.opt, s.base, 8, [](double base, int e) {
    return base * std::pow(0.9, e) * std::pow(0.1, (e >= 2) + (e >= 5));
  });
}

// Invalid scheduler arguments raise kiln::Error naming the scheduler.
TEST(SchedErrors, BadArguments) {
  Rig s;
  expect_error([&] { StepLR(s.opt, 0); }, {"[StepLR]", "step_size", "0"});
  expect_error([&] { ExponentialLR(s.opt, -0.5); }, {"[ExponentialLR]", "-0.5"});
  expect_error([&] { CosineAnnealingLR(s.opt, 0); }, {"[CosineAnnealingLR]", "T_max"});
  expect_error([&] { LinearLR(s.opt, 0.0); }, {"[LinearLR]", "start_factor", "0"});
  expect_error([&] { LinearLR(s.opt, 0.5, 1.5); }, {"[LinearLR]", "end_factor", "1.5"});
  expect_error([&] { OneCycleLR(s.opt, 0.1, 0); }, {"[OneCycleLR]", "total_steps"});
  expect_error([&] { OneCycleLR(s.opt, 0.1, 10, {.pct_start = 1.5}); },
               {"[OneCycleLR]", "pct_start", "1.5"});
  expect_error([&] { OneCycleLR(s.opt, std::vector<double>{0.1}, 10); },
               {"[OneCycleLR]", "1 max_lr values for 2 parameter groups"});
  expect_error([&] { StepLR(s.opt, 2, 0.1, /*last_epoch=*/3); }, {"[StepLR]", "initial_lr"});
  auto a = std::make_shared<StepLR>(s.opt, 2);
  expect_error(
      [&] {
        SequentialLR(s.opt, {a, a}, {});
      },
      {"[SequentialLR]", "1 milestones for 2 schedulers, got 0"});
  expect_error([&] { SequentialLR(s.opt, {}, {}); }, {"[SequentialLR]", "at least one"});
  Rig other;
  expect_error([&] { ChainedScheduler(other.opt, {a}); },
               {"[ChainedScheduler]", "different optimizer"});
}
