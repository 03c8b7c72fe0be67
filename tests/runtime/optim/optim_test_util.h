// Shared helpers of the optim tests: a tiny f64 quadratic problem whose updates
// the tests recompute with plain double arithmetic.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/optim/optim.h"

namespace kiln::optim::testing {

/// loss = sum(a * w * w + b * w), so dloss/dw = 2 * a * w + b.
struct Quadratic {
  std::vector<double> a{0.5, 1.5, 2.0};
  std::vector<double> b{-1.0, 0.25, 3.0};
  std::vector<double> w0{1.0, -2.0, 0.5};

  std::vector<double> grad(const std::vector<double>& w) const {
    std::vector<double> g(w.size());
    for (size_t i = 0; i < w.size(); ++i) g[i] = 2 * a[i] * w[i] + b[i];
    return g;
  }
  Tensor param() const { return from_vector<double>(w0).requires_grad_(); }
  Tensor loss(const Tensor& w) const {
    return sum(w * w * from_vector<double>(a) + w * from_vector<double>(b));
  }
};

/// Runs `steps` steps (zero_grad, backward, step); returns w after each step.
inline std::vector<std::vector<double>> kiln_steps(Optimizer& opt, const Tensor& w,
                                                   const Quadratic& q, int steps) {
  std::vector<std::vector<double>> out;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    q.loss(w).backward();
    opt.step();
    out.push_back(w.to_vector<double>());
  }
  return out;
}

/// The reference trajectory: `update(w, g, t)` applies step t (1-based) in doubles.
inline std::vector<std::vector<double>> reference_steps(
    const Quadratic& q, int steps,
    const std::function<void(std::vector<double>&, std::vector<double>, int)>& update) {
  std::vector<std::vector<double>> out;
  std::vector<double> w = q.w0;
  for (int t = 1; t <= steps; ++t) {
    update(w, q.grad(w), t);
    out.push_back(w);
  }
  return out;
}

inline void expect_trajectory(const std::vector<std::vector<double>>& got,
                              const std::vector<std::vector<double>>& want, double tol = 1e-12) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t s = 0; s < got.size(); ++s) {
    ASSERT_EQ(got[s].size(), want[s].size());
    for (size_t i = 0; i < got[s].size(); ++i)
      EXPECT_NEAR(got[s][i], want[s][i], tol * std::max(1.0, std::abs(want[s][i])))
          << "step " << s + 1 << ", element " << i;
  }
}

/// Runs fn and expects a kiln::Error whose message contains every string of `parts`.
inline void expect_error(const std::function<void()>& fn, std::vector<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected a kiln::Error containing '" << parts[0] << "'";
  } catch (const Error& e) {
    for (auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "message '" << e.what() << "' lacks '" << p << "'";
  }
}

}  // namespace kiln::optim::testing
