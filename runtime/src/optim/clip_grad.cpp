// clip_grad_norm_ / clip_grad_value_ with tensor ops (torch.nn.utils.clip_grad).
#include "kiln/optim/clip_grad.h"

#include <cmath>
#include <limits>

#include "kiln/autograd.h"
#include "kiln/functional.h"

namespace kiln::optim {

namespace {
// torch.linalg.vector_norm(x, ord) for ord > 0 or +inf, as a 0-d tensor of x's dtype.
Tensor grad_norm(const Tensor& x, double ord) {
  if (x.numel() == 0) return scalar_tensor(0.0, x.dtype());
  if (std::isinf(ord)) return amax(abs(x));
  if (ord == 1) return sum(abs(x));
  if (ord == 2) return sqrt(sum(mul(x, x)));
  return pow(sum(pow(abs(x), ord)), 1.0 / ord);
}
std::vector<Tensor> defined_grads(const std::vector<Tensor>& params, const char* op) {
  std::vector<Tensor> grads;
  for (size_t i = 0; i < params.size(); ++i) {
    KILN_CHECK(params[i].defined(), "[", op, "] parameter ", i, " is an undefined tensor");
    Tensor g = params[i].grad();
    if (g.defined()) grads.push_back(g);
  }
  return grads;
}
}  // namespace

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  // Written as !(x >= 0) so that NaN is rejected too.
  KILN_CHECK(max_norm >= 0, "[clip_grad_norm_] max_norm must be >= 0, got ", max_norm);
  KILN_CHECK(norm_type > 0, "[clip_grad_norm_] norm_type must be > 0 or inf, got ", norm_type);
  NoGradGuard ng;
  std::vector<Tensor> grads = defined_grads(params, "clip_grad_norm_");
  if (grads.empty()) return scalar_tensor(0.0, kDefaultFloat);
  DType dt = grads[0].dtype();
  for (auto& g : grads) {
    KILN_CHECK(is_floating(g.dtype()), "[clip_grad_norm_] gradient of dtype ", g.dtype(),
               " is not floating");
    dt = promote_types(dt, g.dtype());
  }
  std::vector<Tensor> norms;
  for (auto& g : grads) norms.push_back(cast(grad_norm(g, norm_type), dt));
  Tensor total = grad_norm(stack(norms), norm_type);
  if (error_if_nonfinite) {
    double v = total.item<double>();
    KILN_CHECK(std::isfinite(v), "[clip_grad_norm_] the total norm of order ", norm_type,
               " for gradients from `parameters` is non-finite (", v,
               "), so it cannot be clipped. To scale the gradients by the non-finite norm "
               "anyway, pass error_if_nonfinite = false");
  }
  // One factor for all grads; never scales up (clamped at 1).
  Tensor coef = clamp_max(div(max_norm, add(total, 1e-6)), 1.0);
  for (auto& g : grads) g.mul_(coef);
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  KILN_CHECK(clip_value >= 0, "[clip_grad_value_] clip_value must be >= 0, got ", clip_value);
  NoGradGuard ng;
  for (auto& g : defined_grads(params, "clip_grad_value_")) g.clamp_(-clip_value, clip_value);
}

}  // namespace kiln::optim
