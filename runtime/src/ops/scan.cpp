// Scans along one dim: cumsum and cumprod (the "scan" family of ops.def).
// Not fused: compiled plans run these eager kernels. Floating inputs
// accumulate in double (f32/f16/bf16 round each output), integers and bool in
// i64 with wrap-around, as torch.cumsum/cumprod on the CPU. The internal attr
// `reverse` (cumsum only) runs the sum from the end: cumsum's derivative.
#include <algorithm>
#include <type_traits>

#include "ops/along_dim.h"
#include "ops/helpers.h"
#include "ops/registry.h"

namespace kiln {
namespace ops {
namespace {

bool reversed(const Attrs& at) {
  return at.has("reverse") && at.b("reverse");
}

template <OpId Op>
void infer_scan(std::span<const Tensor> in, const Attrs& at, std::vector<TensorMeta>& out) {
  const char* name = op_name(Op);
  const Tensor& x = in[0];
  KILN_CHECK(at.has("dim"), "[", name, "] missing attribute 'dim'");
  wrap_dim(at.i("dim"), x.dim(), name);
  KILN_CHECK(Op == OpId::cumsum || !reversed(at), "[", name, "] has no 'reverse' form");
  out.push_back({is_floating(x.dtype()) ? x.dtype() : DType::i64, x.shape()});
}

template <typename T>
constexpr bool kFloatingStorage = !std::is_integral_v<T>;  // float, double, Half, BFloat16

template <OpId Op>
void kernel_scan(std::span<const Tensor> in, const Attrs& at, std::span<Tensor> out) {
  const Tensor& x = in[0];
  const Tensor& y = out[0];
  if (y.numel() == 0) return;
  const int64_t dim = wrap_dim(at.i("dim"), x.dim(), op_name(Op));
  const bool rev = reversed(at);
  const AlongDim xr(x, dim), yr(y, dim);
  const int64_t K = xr.len;
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr bool kFloat = kFloatingStorage<T>;
    using A = std::conditional_t<kFloat, double, uint64_t>;  // unsigned: wraps without UB
    using O = std::conditional_t<kFloat, T, int64_t>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    O* yp = static_cast<O*>(y.data_ptr());
    parallel_for(0, xr.rows, std::max<int64_t>(1, kDefaultGrain / K), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* xs = xp + xr.offset(r);
        O* ys = yp + yr.offset(r);
        A acc = Op == OpId::cumsum ? A(0) : A(1);
        for (int64_t i = 0; i < K; ++i) {
          const int64_t k = rev ? K - 1 - i : i;
          A v;
          if constexpr (kFloat)
            v = static_cast<double>(static_cast<compute_t<T>>(xs[k * xr.stride]));
          else
            v = static_cast<uint64_t>(static_cast<int64_t>(xs[k * xr.stride]));
          acc = Op == OpId::cumsum ? acc + v : acc * v;
          if constexpr (kFloat)
            ys[k * yr.stride] = O(static_cast<compute_t<T>>(acc));
          else
            ys[k * yr.stride] = static_cast<int64_t>(acc);
        }
      }
    });
  });
}

Tensor scan(OpId op, const Tensor& x, int64_t dim, bool reverse) {
  Attrs at;
  at.set("dim", dim);
  if (reverse) at.set("reverse", true);
  return dispatch1(op, {x}, at);
}

// The gradient of a running sum is the running sum of the gradient from the other end.
void vjp_cumsum(const VjpArgs& a, std::vector<Tensor>& gi) {
  if (!a.grads[0].defined()) return;
  gi[0] = scan(OpId::cumsum, a.grads[0], a.attrs.i("dim"), !reversed(a.attrs));
}

// d y_k / d x_i = prod_{j <= k, j != i} x_j. Before a row's first zero z that
// is rcumsum(g * y) / x (x_i != 0 there); at z it is rcumsum(g * y') with y'
// the running product of x with x_z read as 1; after z every term holds x_z = 0.
void vjp_cumprod(const VjpArgs& a, std::vector<Tensor>& gi) {
  const int64_t dim = a.attrs.i("dim");
  const Tensor& x = a.inputs[0];
  const Tensor& y = a.outputs[0];
  const Tensor& g = a.grads[0];
  if (!g.defined()) return;
  Tensor is_zero = eq(x, 0.0);
  Tensor zeros_so_far = scan(OpId::cumsum, is_zero, dim, false);
  Tensor before = eq(zeros_so_far, 0);
  Tensor first = logical_and(is_zero, eq(zeros_so_far, 1));
  Tensor g_before = scan(OpId::cumsum, g * y, dim, true) / where(before, x, 1.0);
  Tensor y_first = dispatch1(OpId::cumprod, {where(first, 1.0, x)}, Attrs().set("dim", dim));
  Tensor g_first = scan(OpId::cumsum, g * y_first, dim, true);
  gi[0] = where(before, g_before, where(first, g_first, 0.0));
}

}  // namespace

void register_scan(OpTable& t) {
  OpInfo& s = t[OpId::cumsum];
  s.infer = infer_scan<OpId::cumsum>;
  s.kernel = kernel_scan<OpId::cumsum>;
  s.vjp = vjp_cumsum;
  s.saves = kSaveNone;
  OpInfo& p = t[OpId::cumprod];
  p.infer = infer_scan<OpId::cumprod>;
  p.kernel = kernel_scan<OpId::cumprod>;
  p.vjp = vjp_cumprod;
  p.saves = kSaveInputs | kSaveOutputs;
}

}  // namespace ops

Tensor cumsum(const Tensor& x, int64_t dim) {
  return ops::scan(OpId::cumsum, x, dim, false);
}
Tensor cumprod(const Tensor& x, int64_t dim) {
  return ops::scan(OpId::cumprod, x, dim, false);
}

}  // namespace kiln
