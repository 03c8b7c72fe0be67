// Verifies the first steps of SGD, Adam, AdamW and RMSprop (and their variants)
// against the torch.optim formulas evaluated in plain double arithmetic.
#include <algorithm>
#include <cmath>

#include "optim_test_util.h"

using namespace kiln;
using namespace kiln::optim;
using namespace kiln::optim::testing;

namespace {

// torch.optim.SGD's update, element by element.
std::vector<std::vector<double>> sgd_reference(const Quadratic& q, int steps, SGDOptions o) {
  std::vector<double> buf;
  return reference_steps(q, steps, [&](std::vector<double>& w, std::vector<double> g, int t) {
    for (size_t i = 0; i < w.size(); ++i) {
      if (o.maximize) g[i] = -g[i];
      if (o.weight_decay != 0) g[i] += o.weight_decay * w[i];
    }
    if (o.momentum != 0) {
      if (t == 1)
        buf = g;
      else
        for (size_t i = 0; i < w.size(); ++i)
          buf[i] = o.momentum * buf[i] + (1 - o.dampening) * g[i];
      for (size_t i = 0; i < w.size(); ++i) g[i] = o.nesterov ? g[i] + o.momentum * buf[i] : buf[i];
    }
    for (size_t i = 0; i < w.size(); ++i) w[i] -= o.lr * g[i];
  });
}

// torch.optim.Adam / AdamW's update (textbook form: m = b1 m + (1 - b1) g ...).
std::vector<std::vector<double>> adam_reference(const Quadratic& q, int steps, AdamOptions o,
                                                bool decoupled) {
  std::vector<double> m(q.w0.size()), v(q.w0.size()), vmax(q.w0.size());
  auto [b1, b2] = o.betas;
  return reference_steps(q, steps, [&](std::vector<double>& w, std::vector<double> g, int t) {
    for (size_t i = 0; i < w.size(); ++i) {
      if (o.maximize) g[i] = -g[i];
      if (o.weight_decay != 0) {
        if (decoupled)
          w[i] *= 1 - o.lr * o.weight_decay;
        else
          g[i] += o.weight_decay * w[i];
      }
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      vmax[i] = std::max(vmax[i], v[i]);
      double second = o.amsgrad ? vmax[i] : v[i];
      double m_hat = m[i] / (1 - std::pow(b1, t));
      double denom = std::sqrt(second) / std::sqrt(1 - std::pow(b2, t)) + o.eps;
      w[i] -= o.lr * m_hat / denom;
    }
  });
}

// torch.optim.RMSprop's update.
std::vector<std::vector<double>> rmsprop_reference(const Quadratic& q, int steps,
                                                   RMSpropOptions o) {
  size_t n = q.w0.size();
  std::vector<double> sq(n), ga(n), buf(n);
  return reference_steps(q, steps, [&](std::vector<double>& w, std::vector<double> g, int) {
    for (size_t i = 0; i < n; ++i) {
      if (o.maximize) g[i] = -g[i];
      if (o.weight_decay != 0) g[i] += o.weight_decay * w[i];
      sq[i] = o.alpha * sq[i] + (1 - o.alpha) * g[i] * g[i];
      double avg;
      if (o.centered) {
        ga[i] = o.alpha * ga[i] + (1 - o.alpha) * g[i];
        avg = std::sqrt(sq[i] - ga[i] * ga[i]) + o.eps;
      } else {
        avg = std::sqrt(sq[i]) + o.eps;
      }
      if (o.momentum > 0) {
        buf[i] = o.momentum * buf[i] + g[i] / avg;
        w[i] -= o.lr * buf[i];
      } else {
        w[i] -= o.lr * g[i] / avg;
      }
    }
  });
}

void check_sgd(SGDOptions o) {
  Quadratic q;
  Tensor w = q.param();
  SGD opt({w}, o);
  expect_trajectory(kiln_steps(opt, w, q, 3), sgd_reference(q, 3, o));
}
void check_adam(AdamOptions o) {
  Quadratic q;
  Tensor w = q.param();
  Adam opt({w}, o);
  expect_trajectory(kiln_steps(opt, w, q, 3), adam_reference(q, 3, o, false));
}
void check_adamw(AdamWOptions o) {
  Quadratic q;
  Tensor w = q.param();
  AdamW opt({w}, o);
  AdamOptions same{o.lr, o.betas, o.eps, o.weight_decay, o.amsgrad, o.maximize};
  expect_trajectory(kiln_steps(opt, w, q, 3), adam_reference(q, 3, same, true));
}
void check_rmsprop(RMSpropOptions o) {
  Quadratic q;
  Tensor w = q.param();
  RMSprop opt({w}, o);
  expect_trajectory(kiln_steps(opt, w, q, 3), rmsprop_reference(q, 3, o));
}

}  // namespace

// Plain SGD: w -= lr * g for three steps.
TEST(OptimSGD, PlainSteps) {
  check_sgd({.lr = 0.1});
}

// The first steps are hand-checkable: w1 = w0 - lr * (2 a w0 + b).
TEST(OptimSGD, FirstStepByHand) {
  Quadratic q;
  Tensor w = q.param();
  SGD opt({w}, {.lr = 0.1});
  auto got = kiln_steps(opt, w, q, 1);
  // g = 2*[0.5, 1.5, 2]*[1, -2, 0.5] + [-1, 0.25, 3] = [0, -5.75, 5]
  expect_trajectory(got, {{1.0, -2.0 + 0.575, 0.5 - 0.5}});
}

// Momentum with dampening: the buffer starts as the first gradient, undamped.
TEST(OptimSGD, MomentumAndDampening) {
  check_sgd({.lr = 0.05, .momentum = 0.9});
  check_sgd({.lr = 0.05, .momentum = 0.9, .dampening = 0.3});
}

// Nesterov momentum adds momentum * buffer to the gradient.
TEST(OptimSGD, Nesterov) {
  check_sgd({.lr = 0.05, .momentum = 0.8, .nesterov = true});
}

// L2 weight decay and maximize (gradient ascent), alone and with momentum.
TEST(OptimSGD, WeightDecayAndMaximize) {
  check_sgd({.lr = 0.1, .weight_decay = 0.01});
  check_sgd({.lr = 0.1, .maximize = true});
  check_sgd({.lr = 0.02, .momentum = 0.9, .weight_decay = 0.1, .nesterov = true, .maximize = true});
}

// SGD with momentum keeps a momentum_buffer equal to the first gradient after one step.
TEST(OptimSGD, MomentumBufferState) {
  Quadratic q;
  Tensor w = q.param();
  SGD opt({w}, {.lr = 0.1, .momentum = 0.9});
  EXPECT_TRUE(opt.state(w).empty());
  kiln_steps(opt, w, q, 1);
  ASSERT_TRUE(opt.state(w).contains("momentum_buffer"));
  auto buf = opt.state(w).at("momentum_buffer").to_vector<double>();
  EXPECT_EQ(buf, q.grad(q.w0));
  EXPECT_FALSE(opt.state(w).contains("step"));  // SGD counts no steps, like PyTorch
}

// Adam with the default betas and a large lr so that bias corrections matter.
TEST(OptimAdam, DefaultSteps) {
  check_adam({.lr = 0.1});
}

// Adam variants: custom betas/eps, L2 weight decay, amsgrad, maximize.
TEST(OptimAdam, Variants) {
  check_adam({.lr = 0.05, .betas = {0.5, 0.7}, .eps = 1e-3});
  check_adam({.lr = 0.05, .weight_decay = 0.1});
  check_adam({.lr = 0.3, .betas = {0.8, 0.5}, .amsgrad = true});
  check_adam({.lr = 0.05, .maximize = true});
  check_adam(
      {.lr = 0.05, .betas = {0.0, 0.0}, .weight_decay = 0.2, .amsgrad = true, .maximize = true});
}

// amsgrad keeps max_exp_avg_sq >= exp_avg_sq, and a step counter.
TEST(OptimAdam, AmsgradState) {
  Quadratic q;
  Tensor w = q.param();
  Adam opt({w}, {.lr = 0.3, .betas = {0.8, 0.5}, .amsgrad = true});
  kiln_steps(opt, w, q, 3);
  const StateDict& st = opt.state(w);
  EXPECT_EQ(st.at("step").item<double>(), 3.0);
  auto v = st.at("exp_avg_sq").to_vector<double>();
  auto vmax = st.at("max_exp_avg_sq").to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i) EXPECT_GE(vmax[i], v[i]);
}

// AdamW decays the weights directly (default weight_decay 1e-2) instead of the gradient.
TEST(OptimAdamW, DecoupledWeightDecay) {
  check_adamw({.lr = 0.1});
  check_adamw({.lr = 0.1, .weight_decay = 0.5, .amsgrad = true});
  check_adamw({.lr = 0.1, .weight_decay = 0.5, .maximize = true});
  Quadratic q;
  Tensor w = q.param();
  AdamW opt({w});
  EXPECT_EQ(opt.options(0).weight_decay, 1e-2);
  EXPECT_EQ(opt.name(), "AdamW");
}

// AdamW and Adam differ once weight decay is on (decoupled vs L2).
TEST(OptimAdamW, DiffersFromAdamWithDecay) {
  Quadratic q;
  Tensor w1 = q.param(), w2 = q.param();
  Adam a({w1}, {.lr = 0.1, .weight_decay = 0.5});
  AdamW b({w2}, {.lr = 0.1, .weight_decay = 0.5});
  auto ta = kiln_steps(a, w1, q, 2), tb = kiln_steps(b, w2, q, 2);
  EXPECT_NE(ta[1], tb[1]);
}

// RMSprop with defaults, then momentum, centered, weight decay and maximize.
TEST(OptimRMSprop, Variants) {
  check_rmsprop({});
  check_rmsprop({.lr = 0.01, .alpha = 0.9, .momentum = 0.9});
  check_rmsprop({.lr = 0.01, .alpha = 0.8, .centered = true});
  check_rmsprop({.lr = 0.01,
                 .alpha = 0.8,
                 .eps = 1e-4,
                 .weight_decay = 0.1,
                 .momentum = 0.5,
                 .centered = true,
                 .maximize = true});
}

// RMSprop's state holds step, square_avg and, when used, grad_avg and momentum_buffer.
TEST(OptimRMSprop, StateKeys) {
  Quadratic q;
  Tensor w = q.param();
  RMSprop opt({w}, {.momentum = 0.5, .centered = true});
  kiln_steps(opt, w, q, 2);
  const StateDict& st = opt.state(w);
  for (const char* k : {"step", "square_avg", "grad_avg", "momentum_buffer"})
    EXPECT_TRUE(st.contains(k)) << k;
  EXPECT_EQ(st.at("step").item<double>(), 2.0);
}

// f32 parameters are updated in f32 and stay close to the f64 reference.
TEST(OptimAdam, Float32Parameters) {
  Quadratic q;
  Tensor w = from_vector<float>({1.0f, -2.0f, 0.5f}).requires_grad_();
  Adam opt({w}, {.lr = 0.1});
  for (int s = 0; s < 3; ++s) {
    opt.zero_grad();
    sum(w * w * from_vector<float>({0.5f, 1.5f, 2.0f}) + w * from_vector<float>({-1, 0.25, 3}))
        .backward();
    opt.step();
  }
  EXPECT_EQ(w.dtype(), DType::f32);
  EXPECT_EQ(opt.state(w).at("exp_avg").dtype(), DType::f32);
  auto want = adam_reference(q, 3, {.lr = 0.1}, false).back();
  auto got = w.to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5);
}
