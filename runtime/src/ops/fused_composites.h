// Internal: eager mode's fused forms of the composites softmax, log_softmax,
// layer_norm, GELU and SiLU — one kernel forward, one backward (ops/
// fused_kernels.h), attached to the tape as one node. Each returns nothing when
// the call does not qualify (tracing, fusion off, not CPU, not f32/f64, other
// dims), and the composite then runs as its primitive ops (the traced form).
#pragma once

#include <optional>

#include "kiln/tensor.h"

namespace kiln::ops {

/// softmax (log_softmax when `log`) over `dim` (wrapped). `safe`: softmax
/// whose all -inf rows give zeros (scaled_dot_product_attention's; not with `log`).
std::optional<Tensor> fused_softmax(const Tensor& x, int64_t dim, bool log, bool safe = false);
/// Connects y = softmax(x) (log_softmax when `log`) over `dim`, computed without
/// grad, to the tape with PyTorch's backward, which reads y alone: y (g - sum(g y))
/// or g - exp(y) sum(g) (one fused pass on CPU f32/f64 rows).
Tensor attach_softmax_backward(const Tensor& x, const Tensor& y, int64_t dim, bool log);
/// layer_norm over the trailing `nd` dims; weight and bias may be undefined.
std::optional<Tensor> fused_layer_norm(const Tensor& x, size_t nd, const Tensor& weight,
                                       const Tensor& bias, double eps);
/// GELU (tanh or erf form).
std::optional<Tensor> fused_gelu(const Tensor& x, bool tanh);
/// SiLU.
std::optional<Tensor> fused_silu(const Tensor& x);

/// batch_norm's output, and with batch statistics their per-channel mean and
/// biased variance ([C], no history) for the caller's running-stat update.
struct FusedBatchNorm {
  Tensor y, mean, var;
};
/// batch_norm of x [N, C, ...] with batch statistics (`batch_stats`) or with
/// running_mean/running_var; weight and bias may be undefined.
std::optional<FusedBatchNorm> fused_batch_norm(const Tensor& x, const Tensor& running_mean,
                                               const Tensor& running_var, const Tensor& weight,
                                               const Tensor& bias, bool batch_stats, double eps);
/// ReLU's gradient g where y > 0, else 0, in one pass: only while no graph is
/// built (not tracing, no create_graph), for same-shape CPU f32/f64 y and g.
std::optional<Tensor> fused_relu_grad(const Tensor& y, const Tensor& g);

// The composites as primitive ops (composites.cpp): the traced form, and the
// differentiable recomputation the fused backwards use under create_graph.
Tensor softmax_unfused(const Tensor& x, int64_t dim, bool log);
Tensor layer_norm_unfused(const Tensor& x, size_t nd, const Tensor& weight, const Tensor& bias,
                          double eps);
Tensor gelu_unfused(const Tensor& x, bool tanh);
Tensor silu_unfused(const Tensor& x);

}  // namespace kiln::ops
