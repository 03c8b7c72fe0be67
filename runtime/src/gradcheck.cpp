// gradcheck: analytic gradients (kiln::grad) against central finite
// differences, for a random projection of the outputs (one backward pass).
#include <cmath>
#include <cstring>

#include "kiln/autograd.h"
#include "kiln/functional.h"
#include "ops/loops.h"

namespace kiln {
namespace {

// Reads/writes element i (row-major) of a floating tensor as double.
double get(const Tensor& t, int64_t i) {
  return element_as_double(t, i);
}

void put(const Tensor& t, int64_t i, double v) {
  const Dims& sh = t.shape();
  int64_t off = 0;
  for (size_t d = sh.size(); d-- > 0;) {
    off += (i % sh[d]) * t.strides()[d];
    i /= sh[d];
  }
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T x;
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
      x = T(static_cast<float>(v));
    else
      x = static_cast<T>(v);
    std::memcpy(static_cast<char*>(t.data_ptr()) + off * static_cast<int64_t>(sizeof(T)), &x,
                sizeof(T));
  });
}

// sum_k <out_k, w_k> as a double, evaluated without autograd.
double projected(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                 const std::vector<Tensor>& inputs, const std::vector<Tensor>& weights) {
  NoGradGuard ng;
  auto outs = fn(inputs);
  double s = 0;
  for (size_t k = 0; k < outs.size() && k < weights.size(); ++k) {
    if (!outs[k].defined() || !is_floating(outs[k].dtype())) continue;
    Tensor o = cast(outs[k], DType::f64);
    for (int64_t i = 0; i < o.numel(); ++i) s += get(o, i) * get(weights[k], i);
  }
  return s;
}

}  // namespace

std::string gradcheck(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                      const std::vector<Tensor>& inputs, GradcheckOptions opts) {
  std::vector<Tensor> outs = fn(inputs);
  std::vector<Tensor> weights, diff_outs, diff_w;
  for (const Tensor& o : outs) {
    Tensor w = (o.defined() && is_floating(o.dtype()))
                   ? cast(rand(o.shape(), DType::f64) * 2.0 - 1.0, o.dtype())
                   : Tensor();
    if (w.defined()) w = cast(w, DType::f64);
    weights.push_back(w);
    if (o.defined() && o.requires_grad()) {
      diff_outs.push_back(o);
      diff_w.push_back(cast(w, o.dtype()));
    }
  }
  std::vector<Tensor> wrt;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) wrt.push_back(t);
  if (wrt.empty()) return "gradcheck: no input requires grad";

  std::vector<Tensor> analytic(wrt.size());
  if (!diff_outs.empty())
    analytic = grad(diff_outs, wrt, diff_w,
                    {.retain_graph = false, .create_graph = false, .allow_unused = true});

  std::string report;
  size_t k = 0;
  for (size_t ii = 0; ii < inputs.size(); ++ii) {
    const Tensor& x = inputs[ii];
    if (!x.defined() || !x.requires_grad()) continue;
    Tensor a = analytic[k].defined() ? cast(analytic[k], DType::f64) : zeros(x.shape(), DType::f64);
    ++k;
    for (int64_t i = 0; i < x.numel(); ++i) {
      double orig = get(x, i);
      double num;
      {
        NoGradGuard ng;
        put(x, i, orig + opts.eps);
        double fp = projected(fn, inputs, weights);
        put(x, i, orig - opts.eps);
        double fm = projected(fn, inputs, weights);
        put(x, i, orig);
        num = (fp - fm) / (2 * opts.eps);
      }
      double an = get(a, i);
      if (std::abs(an - num) > opts.atol + opts.rtol * std::abs(num) ||
          std::isnan(an) != std::isnan(num)) {
        report += str("input ", ii, " element ", i, ": analytic ", an, " vs numerical ", num, "\n");
        if (report.size() > 2000) return report;
      }
    }
  }
  return report;
}

}  // namespace kiln
