// Unary elementwise primitives: shape/dtype rule, eager kernel, derivative.
#include <numbers>

#include "dense_dispatch.h"
#include "ops/fused_composites.h"
#include "ops/helpers.h"
#include "ops/registry.h"
#include "ops/scalar_ops.h"
#include "ops/vec_math.h"

namespace kiln {
namespace ops {
namespace {

// Ops that keep integer dtypes; the kFloatMath ones (ops.def) compute in
// floating point (an integer input gives the default float, as in PyTorch).
bool keeps_integers(OpId op) {
  return !op_info(op).has(kFloatMath);
}

template <OpId Op>
void infer_unary(std::span<const Tensor> in, const Attrs&, std::vector<TensorMeta>& out) {
  DType t = in[0].dtype();
  const char* name = op_name(Op);
  if constexpr (Op == OpId::logical_not) {
    out.push_back({DType::b8, in[0].shape()});
    return;
  }
  KILN_CHECK(t != DType::b8 || Op == OpId::abs || Op == OpId::sign, "[", name,
             "] is not supported on bool tensors");
  if (!is_floating(t) && !keeps_integers(Op)) t = kDefaultFloat;
  out.push_back({t, in[0].shape()});
}

// One run of n elements at byte strides s (out, x); contiguous runs take the
// loop the compiler vectorizes. Out of line, so the dense path and
// strided_loop's runs share one copy of each (op, dtype) loop.
// Ops with an f32 expansion (vec::Expanded) run its loop for f32, f16 and bf16.
template <typename T, typename R, typename F>
[[gnu::noinline]] void unary_run(char* const* p, const int64_t* s, int64_t n) {
  using C = compute_t<T>;
  if constexpr (vec::HasExpansion<F> && std::is_same_v<C, float>) {
    vec::run_loop<1, T>(F::kLoop, p, s, n);
  } else {
    const F f{};
    if (s[0] == sizeof(R) && s[1] == sizeof(T)) {
      R* __restrict o = reinterpret_cast<R*>(p[0]);
      const T* __restrict a = reinterpret_cast<const T*>(p[1]);
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<R>(f(static_cast<C>(a[i])));
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const T* a = reinterpret_cast<const T*>(p[1] + i * s[1]);
        R* o = reinterpret_cast<R*>(p[0] + i * s[0]);
        *o = static_cast<R>(f(static_cast<C>(*a)));
      }
    }
  }
}

template <typename T, typename R, typename F>
void map_unary(const Tensor& x, const Tensor& out) {
  // Dense operands skip strided_loop's per-call setup; small calls run inline.
  if (x.is_contiguous() && out.is_contiguous() && x.shape() == out.shape()) {
    constexpr int64_t st[2] = {sizeof(R), sizeof(T)};
    char* o = static_cast<char*>(out.data_ptr());
    char* a = static_cast<char*>(x.data_ptr());
    auto run = [&](int64_t lo, int64_t hi) {
      char* p[2] = {o + lo * st[0], a + lo * st[1]};
      unary_run<T, R, F>(p, st, hi - lo);
    };
    const int64_t n = out.numel();
    if (n <= kDefaultGrain)
      run(0, n);
    else
      parallel_for(0, n, kDefaultGrain, run);
    return;
  }
  std::array<char*, 2> base{static_cast<char*>(out.data_ptr()), static_cast<char*>(x.data_ptr())};
  std::array<Dims, 2> st{broadcast_byte_strides(out, out.shape()),
                         broadcast_byte_strides(x, out.shape())};
  // A function pointer, not a lambda: one strided_loop serves every (op, dtype).
  strided_loop<2>(out.shape(), base, st, &unary_run<T, R, F>);
}

template <OpId Op, typename F>
void kernel_unary(std::span<const Tensor> in, const Attrs&, std::span<Tensor> out) {
  if constexpr (Op == OpId::logical_not) {
    visit_dtype(in[0].dtype(), [&](auto tag) {
      using T = decltype(tag);
      map_unary<T, bool, F>(in[0], out[0]);
    });
  } else {
    Tensor x = to_dtype_raw(in[0], out[0].dtype());
    visit_dtype(out[0].dtype(), [&](auto tag) {
      using T = decltype(tag);
      // kFloatMath ops compute in floating point (infer_unary): no integer loops.
      if constexpr ((static_traits(Op) & kFloatMath) && std::is_integral_v<T>)
        KILN_CHECK(false, "[", op_name(Op), "] internal: no kernel computes in ", out[0].dtype());
      else
        map_unary<T, T, F>(x, out[0]);
    });
  }
}

// ---- derivative rules (Tensor ops, so they differentiate again) ----
// The rules stay one line each, a table to read down (clang-format would unfold them).
// clang-format off
#define VJP(name) void vjp_##name(const VjpArgs& a, std::vector<Tensor>& gi)
#define G a.grads[0]
#define X a.inputs[0]
#define Y a.outputs[0]
VJP(neg) { gi[0] = -G; }
VJP(abs) { gi[0] = G * sign(X); }
VJP(exp) { gi[0] = G * Y; }
VJP(log) { gi[0] = G / X; }
VJP(log1p) { gi[0] = G / (X + 1.0); }
VJP(sqrt) { gi[0] = G / (Y * 2.0); }
VJP(rsqrt) { gi[0] = G * (Y * Y * Y) * -0.5; }
VJP(tanh) { gi[0] = G * (1.0 - Y * Y); }
VJP(sigmoid) { gi[0] = G * (Y * (1.0 - Y)); }
VJP(relu) { auto f = fused_relu_grad(Y, G); gi[0] = f ? *f : where(gt(Y, 0.0), G, 0.0); }
VJP(sin) { gi[0] = G * cos(X); }
VJP(cos) { gi[0] = -(G * sin(X)); }
VJP(erf) { gi[0] = G * (exp(-(X * X)) * (2.0 / std::sqrt(std::numbers::pi))); }
VJP(sign) { gi[0] = zeros_like(G); }
#undef VJP
// clang-format on
#undef G
#undef X
#undef Y

template <OpId Op, typename F>
void reg(OpTable& t, VjpFn vjp, uint8_t saves) {
  OpInfo& e = t[Op];
  e.infer = infer_unary<Op>;
  e.kernel = kernel_unary<Op, F>;
  e.vjp = vjp;
  e.saves = saves;
  // Dispatch's dense fast path, for the dtypes infer_unary keeps (and accepts):
  // map_unary's dense loop, as kernel_unary runs it.
  for (int d = 0; d < kNumDTypes; ++d)
    visit_dtype(static_cast<DType>(d), [&](auto tag) {
      using T = decltype(tag);
      constexpr DType dt = dtype_v<T>;
      if constexpr (Op == OpId::logical_not)
        detail::register_dense_run(Op, dt, DType::b8, &unary_run<T, bool, F>);
      else if constexpr (std::is_same_v<T, bool> && Op != OpId::abs && Op != OpId::sign)
        return;
      else if constexpr ((static_traits(Op) & kFloatMath) && std::is_integral_v<T>)
        return;
      else
        detail::register_dense_run(Op, dt, dt, &unary_run<T, T, F>);
    });
}

}  // namespace

void register_unary(OpTable& t) {
  namespace s = scalar;
  using vec::Expanded;
  using L = vec::Loop;
  reg<OpId::neg, s::neg>(t, vjp_neg, kSaveNone);
  reg<OpId::abs, s::abs>(t, vjp_abs, kSaveInputs);
  reg<OpId::exp, Expanded<s::exp, L::kExp>>(t, vjp_exp, kSaveOutputs);
  reg<OpId::log, Expanded<s::log, L::kLog>>(t, vjp_log, kSaveInputs);
  reg<OpId::log1p, Expanded<s::log1p, L::kLog1p>>(t, vjp_log1p, kSaveInputs);
  reg<OpId::sqrt, s::sqrt>(t, vjp_sqrt, kSaveOutputs);
  reg<OpId::rsqrt, s::rsqrt>(t, vjp_rsqrt, kSaveOutputs);
  reg<OpId::tanh, Expanded<s::tanh, L::kTanh>>(t, vjp_tanh, kSaveOutputs);
  reg<OpId::sigmoid, Expanded<s::sigmoid, L::kSigmoid>>(t, vjp_sigmoid, kSaveOutputs);
  reg<OpId::relu, s::relu>(t, vjp_relu, kSaveOutputs);
  reg<OpId::sin, Expanded<s::sin, L::kSin>>(t, vjp_sin, kSaveInputs);
  reg<OpId::cos, Expanded<s::cos, L::kCos>>(t, vjp_cos, kSaveInputs);
  reg<OpId::erf, Expanded<s::erf, L::kErf>>(t, vjp_erf, kSaveInputs);
  reg<OpId::sign, s::sign>(t, vjp_sign, kSaveNone);
  reg<OpId::logical_not, s::logical_not>(t, nullptr, kSaveNone);
}

}  // namespace ops

#define KILN_UNARY_DEF(name)                            \
  Tensor name(const Tensor& x) {                        \
    return detail::dispatch_elementwise(OpId::name, x); \
  }
KILN_UNARY_DEF(neg)
KILN_UNARY_DEF(abs)
KILN_UNARY_DEF(exp)
KILN_UNARY_DEF(log)
KILN_UNARY_DEF(log1p)
KILN_UNARY_DEF(sqrt)
KILN_UNARY_DEF(rsqrt)
KILN_UNARY_DEF(tanh)
KILN_UNARY_DEF(sigmoid)
KILN_UNARY_DEF(relu)
KILN_UNARY_DEF(sin)
KILN_UNARY_DEF(cos)
KILN_UNARY_DEF(erf)
KILN_UNARY_DEF(sign)
KILN_UNARY_DEF(logical_not)
#undef KILN_UNARY_DEF

Tensor operator-(const Tensor& x) {
  return neg(x);
}

}  // namespace kiln
