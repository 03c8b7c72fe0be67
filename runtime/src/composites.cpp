// Composite ops: written only with public Tensor functions (no kernels, no data
// reads), so they differentiate to any order and trace like primitives.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <optional>

#include "autograd_internal.h"
#include "kiln/autograd.h"
#include "kiln/device_runtime.h"
#include "kiln/dispatch.h"
#include "kiln/functional.h"
#include "ops/fused_composites.h"
#include "ops/helpers.h"

namespace kiln {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

void check_floating(const Tensor& x, const char* op) {
  KILN_CHECK(is_floating(x.dtype()), "[", op, "] expected a floating dtype, got ", x.dtype());
}

// Number of elements reduced when reducing x over `dims` (empty = all).
int64_t reduced_count(const Tensor& x, const Dims& dims, const char* op) {
  int64_t n = 1;
  for (int64_t d : ops::normalize_dims(dims, x.dim(), op))
    if (x.dim() > 0) n *= x.shape()[static_cast<size_t>(d)];
  return n;
}

// The shape `keepdim=true` reduction results are viewed as when keepdim is false.
Dims squeezed_shape(const Tensor& x, const Dims& dims, const char* op) {
  return ops::reduced_shape(x.shape(), ops::normalize_dims(dims, x.dim(), op), false);
}

}  // namespace

Tensor square(const Tensor& x) {
  return mul(x, x);
}

// 1 / x as a wrapped scalar keeps x's floating dtype; integers become the default float.
Tensor reciprocal(const Tensor& x) {
  return div(1.0, x);
}

// maximum/minimum propagate NaN like torch.clamp; lo > hi gives hi everywhere, as in
// PyTorch. At exact ties the primitives split the gradient (0.5) where PyTorch passes 1.
Tensor clamp(const Tensor& x, const Scalar& lo, const Scalar& hi) {
  return minimum(maximum(x, lo), hi);
}
Tensor clamp_min(const Tensor& x, const Scalar& lo) {
  return maximum(x, lo);
}
Tensor clamp_max(const Tensor& x, const Scalar& hi) {
  return minimum(x, hi);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value) {
  KILN_CHECK(mask.dtype() == DType::b8, "[masked_fill] mask must be a bool tensor, got ",
             mask.dtype());
  broadcast_shapes(mask.shape(), x.shape(), "masked_fill");
  // A non-wrapped 0-d value of x's dtype: the fill never changes the result dtype.
  return where(mask, scalar_tensor(value, x.dtype(), "masked_fill"), x);
}

Tensor mean(const Tensor& x, const Dims& dims, bool keepdim) {
  KILN_CHECK(is_floating(x.dtype()), "[mean] could not infer the output dtype: input dtype ",
             x.dtype(), " is not supported, expected a floating dtype");
  int64_t n = reduced_count(x, dims, "mean");
  // n == 0 gives 0/0 = NaN, like torch.mean of an empty tensor.
  return div(sum(x, dims, keepdim), static_cast<double>(n));
}

Tensor var(const Tensor& x, const Dims& dims, int64_t correction, bool keepdim) {
  check_floating(x, "var");
  int64_t n = reduced_count(x, dims, "var");
  Tensor centered = x - mean(x, dims, true);
  // PyTorch divides by max(0, N - correction): a zero divisor gives inf/NaN.
  double denom = static_cast<double>(std::max<int64_t>(0, n - correction));
  return div(sum(centered * centered, dims, keepdim), denom);
}

Tensor std(const Tensor& x, const Dims& dims, int64_t correction, bool keepdim) {
  check_floating(x, "std");
  return sqrt(var(x, dims, correction, keepdim));
}

Tensor logsumexp(const Tensor& x, const Dims& dims, bool keepdim) {
  // Integers promote to the default float, as torch.logsumexp does.
  Tensor xf = is_floating(x.dtype()) ? x : cast(x, kDefaultFloat);
  Dims out_shape = squeezed_shape(xf, dims, "logsumexp");  // also validates dims
  // The shift is a constant for differentiation (its gradient cancels exactly):
  // detached, the backward skips amax's tie-splitting rule altogether.
  Tensor m = amax(xf, dims, true).detach();
  // Rows whose max is +-inf would give inf - inf = NaN: shift them by 0 instead, so
  // an all -inf row gives log(0) = -inf and a row holding +inf gives +inf (PyTorch).
  m = where(eq(abs(m), kInf), 0.0, m);
  Tensor r = log(sum(exp(xf - m), dims, keepdim));
  return r + (keepdim ? m : reshape(m, out_shape));
}

// Shifting by the row max keeps exp() finite. Its gradient cancels exactly, so the
// max is detached: the backward is PyTorch's (no pass through amax), cheaper and
// exact. A row of all -inf gives NaN, as in torch.softmax.
Tensor ops::softmax_unfused(const Tensor& x, int64_t d, bool log_form) {
  const bool grad = grad_mode_enabled() && x.requires_grad();
  Tensor y;
  {
    // With a gradient: computed without the tape, then softmax's own backward
    // (attach_softmax_backward), which saves only y.
    std::optional<NoGradGuard> no_grad;
    if (grad) no_grad.emplace();
    Tensor shifted = x - amax(x, {d}, true).detach();
    if (log_form) {
      y = shifted - log(sum(exp(shifted), {d}, true));
    } else {
      Tensor e = exp(shifted);
      y = e / sum(e, {d}, true);
    }
  }
  return grad ? ops::attach_softmax_backward(x, y, d, log_form) : y;
}

// Eager mode runs the composites below as one fused kernel where it can
// (ops/fused_composites.h); tracing records their primitive ops.
Tensor softmax(const Tensor& x, int64_t dim) {
  check_floating(x, "softmax");
  int64_t d = wrap_dim(dim, x.dim(), "softmax");
  if (auto y = ops::fused_softmax(x, d, false)) return *y;
  return ops::softmax_unfused(x, d, false);
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  check_floating(x, "log_softmax");
  int64_t d = wrap_dim(dim, x.dim(), "log_softmax");
  if (auto y = ops::fused_softmax(x, d, true)) return *y;
  return ops::softmax_unfused(x, d, true);
}

Tensor ops::gelu_unfused(const Tensor& x, bool tanh_form) {
  if (!tanh_form) return x * (erf(x * (std::numbers::sqrt2 / 2.0)) + 1.0) * 0.5;
  // 0.5 (1 + tanh(u)) == sigmoid(2u): one exp and one divide, and no cancellation
  // in 1 + tanh(u) for negative u. The 2 is folded into sqrt(2/pi).
  const double k2 = 2.0 * std::sqrt(2.0 / std::numbers::pi);
  return x * sigmoid((x + x * x * x * 0.044715) * k2);
}

Tensor gelu(const Tensor& x, const std::string& approximate) {
  check_floating(x, "gelu");
  KILN_CHECK(approximate == "none" || approximate == "tanh",
             "[gelu] approximate must be \"none\" or \"tanh\", got \"", approximate, "\"");
  const bool tanh_form = approximate == "tanh";
  if (auto y = ops::fused_gelu(x, tanh_form)) return *y;
  return ops::gelu_unfused(x, tanh_form);
}

Tensor ops::silu_unfused(const Tensor& x) {
  return x * sigmoid(x);
}

Tensor silu(const Tensor& x) {
  check_floating(x, "silu");
  if (auto y = ops::fused_silu(x)) return *y;
  return ops::silu_unfused(x);
}

Tensor layer_norm(const Tensor& x, const Dims& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  const size_t nd = normalized_shape.size();
  KILN_CHECK(nd > 0, "[layer_norm] normalized_shape must have at least one dim");
  bool match = x.shape().size() >= nd;
  for (size_t i = 0; match && i < nd; ++i)
    match = x.shape()[x.shape().size() - nd + i] == normalized_shape[i];
  KILN_CHECK(match, "[layer_norm] normalized_shape ", normalized_shape,
             " does not match the trailing dims of input shape ", x.shape());
  check_floating(x, "layer_norm");
  KILN_CHECK(!weight.defined() || weight.shape() == normalized_shape, "[layer_norm] weight shape ",
             weight.defined() ? weight.shape() : Dims{}, " does not match normalized_shape ",
             normalized_shape);
  KILN_CHECK(!bias.defined() || bias.shape() == normalized_shape, "[layer_norm] bias shape ",
             bias.defined() ? bias.shape() : Dims{}, " does not match normalized_shape ",
             normalized_shape);
  if (auto y = ops::fused_layer_norm(x, nd, weight, bias, eps)) return *y;
  return ops::layer_norm_unfused(x, nd, weight, bias, eps);
}

Tensor ops::layer_norm_unfused(const Tensor& x, size_t nd, const Tensor& weight, const Tensor& bias,
                               double eps) {
  Dims dims;
  for (size_t i = 0; i < nd; ++i) dims.push_back(x.dim() - static_cast<int64_t>(nd - i));
  Tensor centered = x - mean(x, dims, true);
  // Biased variance, as torch.layer_norm.
  Tensor v = mean(centered * centered, dims, true);
  Tensor y = centered * rsqrt(v + eps);
  if (weight.defined()) y = y * weight;
  if (bias.defined()) y = y + bias;
  return y;
}

namespace {

// linear's eager form on a device whose runtime multiplies with a bias
// epilogue (CUDA: cuBLASLt's CUBLASLT_EPILOGUE_BIAS, the bias added to the
// accumulator before the output is rounded): one GEMM instead of matmul + add.
// Only for real tensors of one floating dtype on one non-CPU device, a 2-D
// weight and a [out] bias, with eager fusion on (set_eager_fusion) and nothing
// traced: a traced linear stays matmul + add, which compiled CUDA graphs turn
// into the same GEMM (codegen/executor). The gradients are matmul's and add's,
// written with the same Tensor ops as their vjps (so differentiable again).
std::optional<Tensor> device_linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (!bias.defined() || weight.dim() != 2 || bias.dim() != 1 || !eager_fusion_enabled() ||
      current_recorder() != nullptr)
    return std::nullopt;
  const Device dev = x.device();
  if (dev.is_cpu() || x.is_symbolic() || weight.is_symbolic() || bias.is_symbolic())
    return std::nullopt;
  const DType dt = x.dtype();
  if (!is_floating(dt) || weight.dtype() != dt || bias.dtype() != dt || weight.device() != dev ||
      bias.device() != dev)
    return std::nullopt;
  const int64_t out = weight.size(0), in = weight.size(1);
  Dims shape = x.shape();
  shape.back() = out;
  Tensor y = make_tensor(shape, dt, dev);
  {
    NoGradGuard ng;
    const Tensor ins[3] = {x.detach(), transpose(weight.detach(), 0, 1), bias.detach()};
    Tensor outs[1] = {y};
    device_runtime(dev, "linear").run(OpId::matmul, ins, Attrs(), outs);
  }
  const bool need =
      grad_mode_enabled() && (x.requires_grad() || weight.requires_grad() || bias.requires_grad());
  if (!need) return y;
  auto sx = std::make_shared<SavedTensor>(x, false);
  auto sw = std::make_shared<SavedTensor>(weight, false);
  const bool gx_needed = x.requires_grad(), gw_needed = weight.requires_grad(),
             gb_needed = bias.requires_grad();
  const Dims bshape = bias.shape();
  auto backward = [=](const std::vector<Tensor>& g) -> std::vector<Tensor> {
    if (!g[0].defined()) return {Tensor(), Tensor(), Tensor()};
    const Tensor xs = sx->unpack(nullptr, "LinearBackward");
    const Tensor ws = sw->unpack(nullptr, "LinearBackward");
    std::vector<Tensor> gi(3);
    // Each GEMM says whose gradient it computes: only the weight's may take
    // the weight's gradient destination (kiln/grad_destination.h).
    if (gw_needed) {  // matmul's vjp for a transposed weight: a's rows folded, one GEMM
      autograd::DestinationsFor only_w(1);
      const int64_t rows = in == 0 ? 0 : xs.numel() / in;
      gi[1] = matmul(transpose(reshape(g[0], {rows, out}), 0, 1), reshape(xs, {rows, in}));
    }
    if (gx_needed) {
      autograd::DestinationsFor only_x(0);
      gi[0] = matmul(g[0], ws);
    }
    if (gb_needed) {  // the sum over the batch may write the bias's destination
      autograd::DestinationsFor only_b(2);
      gi[2] = sum_to(g[0], bshape);
    }
    return gi;
  };
  return attach_function("LinearBackward", {x, weight, bias}, {y}, std::move(backward))[0];
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  KILN_CHECK(weight.dim() == 1 || weight.dim() == 2,
             "[linear] weight must be 1-D or 2-D [out_features, in_features], got shape ",
             weight.shape());
  KILN_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(-1), "[linear] input shape ", x.shape(),
             " is incompatible with weight shape ", weight.shape(),
             " (the last input dim must equal in_features = ", weight.size(-1), ")");
  int64_t out = weight.dim() == 2 ? weight.size(0) : 1;
  KILN_CHECK(!bias.defined() || bias.dim() == 0 ||
                 (bias.dim() == 1 && (bias.size(0) == out || bias.size(0) == 1)),
             "[linear] bias shape ", bias.shape(), " does not match out_features = ", out,
             " of weight shape ", weight.shape());
  if (auto y = device_linear(x, weight, bias)) return *y;
  Tensor y = weight.dim() == 2 ? matmul(x, transpose(weight, 0, 1)) : matmul(x, weight);
  if (!bias.defined()) return y;
  return y + bias;
}

Tensor dropout(const Tensor& x, double p, bool training) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, "[dropout] probability has to be between 0 and 1, but got ", p);
  if (!training || p == 0.0) return x;
  check_floating(x, "dropout");
  // Multiplying (rather than zeros_like) keeps the graph; like PyTorch, inf/NaN inputs
  // stay NaN where dropped.
  if (p == 1.0) return x * 0.0;
  // Keep with probability 1 - p; the uniforms come from the Philox default generator.
  Tensor keep = cast(lt(rand_like(x), 1.0 - p), x.dtype());
  return x * (keep * (1.0 / (1.0 - p)));
}

// Argument order of F.embedding(input, weight); a call in the old (weight,
// indices) order fails the integer check below with a message saying so.
Tensor embedding(const Tensor& input, const Tensor& weight) {
  KILN_CHECK(is_integral(input.dtype()),
             "[embedding] input (the indices, the first argument, as "
             "in F.embedding(input, weight)) must be an integer tensor, got ",
             input.dtype());
  KILN_CHECK(weight.dim() == 2, "[embedding] weight must be 2-D [num_embeddings, dim], got shape ",
             weight.shape());
  Tensor flat = reshape(cast(input, DType::i64), {input.numel()});
  Dims shape = input.shape();
  shape.push_back(weight.size(1));
  return reshape(index_select(weight, 0, flat), shape);
}

}  // namespace kiln
