// Test helper of the compiled-vs-eager suites: compares two results exactly in
// dtype and shape, and in values up to a tolerance (NaN positions and the signs
// of zeros must match).
#pragma once

#include <cmath>
#include <sstream>
#include <string>

#include "kiln/kiln.h"

namespace kiln::testing {

/// "" if `compiled` matches `eager`, else what differs (at most 4 elements listed).
/// `tol` is relative and absolute: |c - e| <= tol * (1 + |e|).
inline std::string diff_values(const Tensor& eager, const Tensor& compiled, double tol) {
  if (eager.defined() != compiled.defined())
    return eager.defined() ? "compiled is undefined" : "eager is undefined";
  if (!eager.defined()) return "";
  if (eager.dtype() != compiled.dtype() || eager.shape() != compiled.shape())
    return str("eager is ", eager.dtype(), eager.shape(), ", compiled is ", compiled.dtype(),
               compiled.shape());
  const std::vector<double> e = eager.to_vector<double>();
  const std::vector<double> c = compiled.to_vector<double>();
  int bad = 0;
  std::ostringstream os;
  for (size_t i = 0; i < e.size(); ++i) {
    bool ok;
    if (std::isnan(e[i]) || std::isnan(c[i]))
      ok = std::isnan(e[i]) && std::isnan(c[i]);
    else if (std::isinf(e[i]) || std::isinf(c[i]))
      ok = e[i] == c[i];
    else if (e[i] == 0 && c[i] == 0)
      ok = std::signbit(e[i]) == std::signbit(c[i]);
    else
      ok = std::abs(c[i] - e[i]) <= tol * (1 + std::abs(e[i]));
    if (!ok && ++bad <= 4)
      os << "\n    element " << i << ": eager " << e[i] << ", compiled " << c[i];
  }
  return bad == 0 ? "" : str(bad, " of ", e.size(), " values differ", os.str());
}

/// sum_k sum(outs[k] * w[k]) over the outputs that require grad and have a
/// defined weight (undefined if there is none): a loss whose gradients weigh
/// every output element differently.
inline Tensor weighted_loss(const std::vector<Tensor>& outs, const std::vector<Tensor>& w) {
  Tensor loss;
  for (size_t k = 0; k < outs.size(); ++k) {
    if (!w[k].defined() || !outs[k].requires_grad()) continue;
    Tensor term = sum(outs[k] * w[k]);
    loss = loss.defined() ? loss + term : term;
  }
  return loss;
}

}  // namespace kiln::testing
