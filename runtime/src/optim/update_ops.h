// Fused-looking pointwise helpers of the optimizers, written with tensor ops in
// the same evaluation order as PyTorch's CPU kernels (internal to src/optim).
#pragma once

#include <cmath>

#include "kiln/functional.h"

namespace kiln::optim::detail {

/// self += weight * (end - self), computed like torch.lerp_: two formulas by
/// |weight| < 0.5 (`small`); `weight` and `one_minus` (1 - weight, rounded as
/// torch does) are host numbers (Optimizer::hyper), so either may change per call.
inline void lerp_(Tensor& self, const Tensor& end, bool small, const Tensor& weight,
                  const Tensor& one_minus) {
  if (small) {
    self.add_(mul(sub(end, self), weight));
  } else {
    self.copy_(sub(end, mul(sub(end, self), one_minus)));
  }
}

/// self += value * t1 * t2 (torch.addcmul_).
inline void addcmul_(Tensor& self, const Tensor& t1, const Tensor& t2, double value) {
  self.add_(mul(mul(t1, value), t2));
}
inline void addcmul_(Tensor& self, const Tensor& t1, const Tensor& t2, const Tensor& value) {
  self.add_(mul(mul(t1, value), t2));
}

/// self += value * t1 / t2 (torch.addcdiv_).
inline void addcdiv_(Tensor& self, const Tensor& t1, const Tensor& t2, double value) {
  self.add_(div(mul(t1, value), t2));
}

}  // namespace kiln::optim::detail
