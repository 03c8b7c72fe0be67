// Loss functions as composites (PyTorch's formulas and reductions). Target
// values are never read on the host, so they also work while tracing; class
// indices out of range are reported by gather's own check.
#include "kiln/functional.h"

namespace kiln {
namespace {

Tensor reduce(const Tensor& elems, Reduction r) {
  switch (r) {
    case Reduction::kNone:
      return elems;
    case Reduction::kSum:
      return sum(elems);
    case Reduction::kMean:
      return mean(elems);
  }
  return elems;
}

// The dim holding the classes: 0 for unbatched [C] input, else 1.
int64_t class_dim_of(const Tensor& input) {
  return input.dim() == 1 ? 0 : 1;
}

void check_input(const Tensor& input, const char* op, const char* what) {
  KILN_CHECK(input.dim() >= 1, "[", op, "] expected ", what,
             " of shape [C], [N, C] or [N, C, d...], got a 0-d tensor");
  KILN_CHECK(is_floating(input.dtype()), "[", op, "] ", what, " must be floating, got ",
             input.dtype());
}

// Checks a class-index target against input [N, C, d...] and returns it as i64.
Tensor class_target(const Tensor& input, const Tensor& target, const char* op, const char* what) {
  Dims expect = input.shape();
  expect.erase(static_cast<size_t>(class_dim_of(input)));
  KILN_CHECK(target.shape() == expect, "[", op, "] target shape ", target.shape(),
             " does not match ", what, " shape ", input.shape(),
             " (expected class indices of shape ", expect, ")");
  KILN_CHECK(is_integral(target.dtype()), "[", op,
             "] class-index target must be an integer tensor, got ", target.dtype());
  return cast(target, DType::i64);
}

// Per-element -log_probs[target] (0 where ignored) and the mask of kept targets.
Tensor masked_nll(const Tensor& log_probs, const Tensor& target, int64_t ignore_index,
                  Tensor& valid) {
  int64_t cd = class_dim_of(log_probs);
  valid = ne(target, ignore_index);
  // Ignored targets may hold any value (e.g. -100): gather class 0 there instead.
  Tensor safe = where(valid, target, int64_t{0});
  Tensor picked = squeeze(gather(log_probs, cd, unsqueeze(safe, cd)), cd);
  return where(valid, -picked, 0.0);
}

// Mean over non-ignored targets: 0/0 = NaN when all are ignored, as in PyTorch.
Tensor reduce_masked(const Tensor& elems, const Tensor& valid, Reduction r) {
  if (r == Reduction::kMean) return sum(elems) / sum(valid);
  return reduce(elems, r);
}

void check_options(const CrossEntropyOptions& opts, const char* op) {
  KILN_CHECK(opts.label_smoothing >= 0.0 && opts.label_smoothing <= 1.0, "[", op,
             "] label_smoothing must be between 0.0 and 1.0, got ", opts.label_smoothing);
}

// Elementwise losses compare tensors of one shape; silently broadcasting [N, 1]
// against [N] is a classic bug, so it is an error (PyTorch warns or raises).
void check_same_shape(const Tensor& input, const Tensor& target, const char* op) {
  KILN_CHECK(target.shape() == input.shape(), "[", op, "] target shape ", target.shape(),
             " does not match input shape ", input.shape());
  KILN_CHECK(is_floating(input.dtype()), "[", op, "] input must be floating, got ", input.dtype());
  KILN_CHECK(is_floating(target.dtype()), "[", op, "] target must be floating, got ",
             target.dtype());
}

// log(y) clamped below at -100 (BCE's guard against log(0)). The log sees 1 where
// y == 0, so the backward pass gives 0 there instead of 0 * inf = NaN.
Tensor clamped_log(const Tensor& y) {
  Tensor zero = eq(y, 0.0);
  return where(zero, -100.0, clamp_min(log(where(zero, 1.0, y)), -100.0));
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& opts) {
  const char* op = "cross_entropy";
  check_input(logits, op, "logits");
  check_options(opts, op);
  const int64_t cd = class_dim_of(logits);
  const double eps = opts.label_smoothing;
  const double n_classes = static_cast<double>(logits.size(cd));
  Tensor logp = log_softmax(logits, cd);

  if (target.shape() == logits.shape()) {
    // Class probabilities (PyTorch decides by the shapes being equal).
    KILN_CHECK(is_floating(target.dtype()), "[", op,
               "] target with class probabilities (same "
               "shape as logits ",
               logits.shape(), ") must be floating, got ", target.dtype());
    KILN_CHECK(opts.ignore_index < 0, "[", op,
               "] ignore_index is not supported for class-probability targets");
    Tensor t = eps > 0.0 ? target * (1.0 - eps) + eps / n_classes : target;
    Tensor elems = -sum(logp * t, {cd});
    if (opts.reduction != Reduction::kMean) return reduce(elems, opts.reduction);
    // Mean over the N * d... positions (0/0 = NaN when empty, like PyTorch).
    double positions = n_classes > 0 ? static_cast<double>(logits.numel()) / n_classes : 0.0;
    return sum(elems) / positions;
  }

  Tensor t = class_target(logits, target, op, "logits");
  Tensor valid;
  Tensor elems = masked_nll(logp, t, opts.ignore_index, valid);
  if (eps > 0.0) {
    // PyTorch: (1 - eps) * nll + eps / C * (-sum_c logp_c), the smoothing term also
    // zeroed at ignored targets and reduced with the same count.
    Tensor smooth = where(valid, -sum(logp, {cd}), 0.0);
    elems = elems * (1.0 - eps) + smooth * (eps / n_classes);
  }
  return reduce_masked(elems, valid, opts.reduction);
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const CrossEntropyOptions& opts) {
  const char* op = "nll_loss";
  check_input(log_probs, op, "log_probs");
  KILN_CHECK(opts.label_smoothing == 0.0, "[", op,
             "] label_smoothing is not supported (use cross_entropy)");
  Tensor t = class_target(log_probs, target, op, "log_probs");
  Tensor valid;
  Tensor elems = masked_nll(log_probs, t, opts.ignore_index, valid);
  return reduce_masked(elems, valid, opts.reduction);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction r) {
  check_same_shape(input, target, "mse_loss");
  Tensor d = input - target;
  return reduce(d * d, r);
}

// Input values are not checked to lie in [0, 1] (that would need a data read);
// values outside give NaN from the log, where PyTorch raises.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, Reduction r) {
  check_same_shape(input, target, "binary_cross_entropy");
  Tensor elems = -(target * clamped_log(input) + (1.0 - target) * clamped_log(1.0 - input));
  return reduce(elems, r);
}

// max(x, 0) - x t + log(1 + exp(-|x|)): exp never overflows. clamp_min splits the
// gradient at x == 0, which gives exactly sigmoid(0) - t there.
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target, Reduction r) {
  check_same_shape(logits, target, "binary_cross_entropy_with_logits");
  Tensor elems = clamp_min(logits, 0.0) - logits * target + log1p(exp(-abs(logits)));
  return reduce(elems, r);
}

}  // namespace kiln
