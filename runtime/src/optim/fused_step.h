// Internal: the optimizers' fused eager steps (PyTorch's fused=True): every
// parameter's whole update in one pass over its memory, all parameters of a
// step in one multi-tensor launch on the thread pool. The arithmetic is the
// per-op form's, step for step in the parameter's dtype, so results are the
// same bit for bit.
#pragma once

#include <vector>

#include "kiln/tensor.h"

namespace kiln::optim::detail {

/// True when a fused step may update p: not tracing, p and every tensor of its
/// update (`others`, undefined ones skipped) real contiguous CPU tensors of p's
/// dtype, f32 or f64.
bool fusable(const Tensor& p, std::initializer_list<const Tensor*> others);

/// One parameter's Adam/AdamW update; the numbers are the per-op form's host scalars.
struct AdamJob {
  Tensor p, grad, exp_avg, exp_avg_sq, max_exp_avg_sq;  ///< max_exp_avg_sq: amsgrad only
  double neg_step_size = 0, bias_correction2_sqrt = 1;
};
/// The group-wide part of an Adam/AdamW update.
struct AdamConfig {
  bool small = true;       ///< lerp's formula: |1 - beta1| < 0.5
  bool decoupled = false;  ///< AdamW: p *= decay; else grad += decay * p
  bool has_decay = false, amsgrad = false, maximize = false;
  double one_minus_beta1 = 0, beta1_again = 0, beta2 = 0, one_minus_beta2 = 0, eps = 0, decay = 0;
};
/// Runs the jobs (one launch) and bumps the version of every tensor written.
void adam_step(const AdamConfig& c, const std::vector<AdamJob>& jobs);

/// One parameter's SGD update: p += neg_lr * d, d from the gradient (and the
/// momentum buffer `buf`, updated in place, when momentum is on and it exists).
struct SgdJob {
  Tensor p, grad, buf;
  bool first = false;  ///< buf was just created: it takes d as is
};
/// The group-wide part of an SGD update.
struct SgdConfig {
  bool has_decay = false, has_momentum = false, nesterov = false, maximize = false;
  /// keep: 1 - dampening (1 without dampening: d * 1 is d exactly).
  double weight_decay = 0, momentum = 0, keep = 1, neg_lr = 0;
};
/// Runs the jobs (one launch) and bumps the version of every tensor written.
void sgd_step(const SgdConfig& c, const std::vector<SgdJob>& jobs);

/// One parameter's RMSprop update (grad_avg: centered only; buf: momentum only).
struct RmspropJob {
  Tensor p, grad, square_avg, grad_avg, buf;
};
/// The group-wide part of an RMSprop update.
struct RmspropConfig {
  bool has_decay = false, centered = false, small = true, has_momentum = false, maximize = false;
  double weight_decay = 0, alpha = 0, one_minus_alpha = 0, alpha_again = 0, eps = 0, momentum = 0,
         neg_lr = 0;
};
/// Runs the jobs (one launch) and bumps the version of every tensor written.
void rmsprop_step(const RmspropConfig& c, const std::vector<RmspropJob>& jobs);

}  // namespace kiln::optim::detail
