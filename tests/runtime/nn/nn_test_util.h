// Helpers shared by the nn tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"

namespace kiln::nn_test {

using V = std::vector<double>;

inline V vals(const Tensor& t) {
  return t.to_vector<double>();
}

/// Element-wise |got - want| <= tol * max(1, |want|).
inline void expect_close(const Tensor& got, const Tensor& want, double tol = 1e-12) {
  ASSERT_EQ(got.shape(), want.shape());
  V g = vals(got), w = vals(want);
  for (size_t i = 0; i < g.size(); ++i)
    EXPECT_NEAR(g[i], w[i], tol * std::max(1.0, std::abs(w[i]))) << "element " << i;
}

/// Bit-exact equality of values (same shape).
inline void expect_equal(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  EXPECT_EQ(vals(got), vals(want));
}

/// f() must throw kiln::Error whose message contains every needle.
inline void expect_error(const std::function<void()>& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "expected a kiln::Error";
  } catch (const Error& e) {
    for (const auto& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "missing \"" << n << "\" in: " << e.what();
  }
}

/// Mean and (biased) variance of all elements.
inline std::pair<double, double> moments(const Tensor& t) {
  V v = vals(t);
  double m = 0, s = 0;
  for (double x : v) m += x;
  m /= static_cast<double>(v.size());
  for (double x : v) s += (x - m) * (x - m);
  return {m, s / static_cast<double>(v.size())};
}

/// gradcheck of `f(x)` w.r.t. x and every parameter of `m` (all f64).
inline std::string gradcheck_module(nn::Module& m, const Tensor& x,
                                    const std::function<Tensor(const Tensor&)>& f) {
  std::vector<Tensor> inputs = m.parameters();
  inputs.push_back(x);
  return gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in.back())}; },
                   inputs);
}

}  // namespace kiln::nn_test
