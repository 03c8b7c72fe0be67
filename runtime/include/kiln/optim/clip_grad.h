// Gradient clipping (torch.nn.utils.clip_grad_norm_ / clip_grad_value_).
#pragma once

#include <vector>

#include "kiln/tensor.h"

namespace kiln::optim {

/// Scales the grads of `params` in place so their joint norm (of order `norm_type`, > 0 or
/// +inf) is at most max_norm, by min(max_norm / (total + 1e-6), 1). Returns the total norm
/// (0-d, before clipping). Params without grad are skipped; a NaN/inf total is an error
/// only if `error_if_nonfinite`.
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);
/// Clamps every defined grad of `params` in place to [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace kiln::optim
