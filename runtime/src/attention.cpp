// scaled_dot_product_attention as a composite (PyTorch's math backend), so it
// differentiates to any order and traces like any other composite. A query row
// whose keys are all masked outputs zeros, as the math backend does since
// PyTorch 2.5 (_safe_softmax); earlier versions returned NaN there.
#include <cmath>
#include <limits>
#include <optional>

#include "kiln/autograd.h"
#include "kiln/functional.h"
#include "ops/fused_composites.h"

namespace kiln {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// softmax over the last dim that gives 0 (not NaN) for rows that are all -inf,
// as PyTorch's _safe_softmax in the math backend (since 2.5). Shifting such rows
// by 0 instead of -inf keeps every intermediate finite, so the backward pass is
// NaN-free too. Any other row has a sum >= 1, so the guarded division is exact.
// The shift's gradient cancels exactly, so the max is detached (as in softmax):
// the backward saves no tie mask and makes no pass through amax.
Tensor safe_softmax_last(const Tensor& s) {
  // Eager: one fused pass and one tape node (its backward is softmax's: an all
  // -inf row's output is 0, so its gradient is too).
  if (s.dim() > 0)
    if (auto y = ops::fused_softmax(s, s.dim() - 1, false, true)) return *y;
  const bool grad = grad_mode_enabled() && s.requires_grad();
  Tensor y;
  {
    std::optional<NoGradGuard> no_grad;  // with a gradient, softmax's own backward
    if (grad) no_grad.emplace();
    Tensor m = amax(s, {-1}, true).detach();
    m = where(eq(m, -kInf), 0.0, m);
    Tensor e = exp(s - m);
    Tensor denom = sum(e, {-1}, true);
    y = e / where(eq(denom, 0.0), 1.0, denom);
  }
  return grad ? ops::attach_softmax_backward(s, y, s.dim() - 1, false) : y;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask, bool is_causal,
                                    std::optional<double> scale) {
  const char* op = "scaled_dot_product_attention";
  KILN_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, "[", op,
             "] query, key and value need at least 2 dims, got shapes ", q.shape(), ", ", k.shape(),
             " and ", v.shape());
  KILN_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), "[", op,
             "] query, key and value must have the same dtype, got ", q.dtype(), ", ", k.dtype(),
             " and ", v.dtype());
  KILN_CHECK(is_floating(q.dtype()), "[", op, "] expected a floating dtype, got ", q.dtype());
  KILN_CHECK(q.size(-1) == k.size(-1), "[", op, "] query shape ", q.shape(), " and key shape ",
             k.shape(), " must have the same embedding size (last dim)");
  KILN_CHECK(k.size(-2) == v.size(-2), "[", op, "] key shape ", k.shape(), " and value shape ",
             v.shape(), " must have the same sequence length (dim -2)");
  KILN_CHECK(!(is_causal && attn_mask.defined()), "[", op,
             "] attn_mask and is_causal cannot both be set");
  // PyTorch accepts bool, f32 or the query's dtype; additive masks apply in the query's dtype.
  KILN_CHECK(!attn_mask.defined() || attn_mask.dtype() == DType::b8 ||
                 attn_mask.dtype() == DType::f32 || attn_mask.dtype() == q.dtype(),
             "[", op, "] attn_mask must be bool, f32 or the query's dtype ", q.dtype(), ", got ",
             attn_mask.dtype());
  const int64_t L = q.size(-2), S = k.size(-2);
  const double sc = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));

  Tensor scores = matmul(q, transpose(k, -2, -1)) * sc;
  if (is_causal) {
    // Top-left aligned lower triangle (query i sees keys j <= i), like tril(ones(L, S)).
    Tensor keep = ge(unsqueeze(arange(L), 1), unsqueeze(arange(S), 0));
    scores = masked_fill(scores, logical_not(keep), -kInf);
  } else if (attn_mask.defined()) {
    broadcast_shapes(attn_mask.shape(), scores.shape(), op);
    if (attn_mask.dtype() == DType::b8) {
      scores = masked_fill(scores, logical_not(attn_mask), -kInf);
    } else {
      scores = scores + cast(attn_mask, q.dtype());
    }
  }
  return matmul(safe_softmax_last(scores), v);
}

}  // namespace kiln
