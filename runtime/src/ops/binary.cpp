// Binary elementwise primitives (with NumPy broadcasting and PyTorch type
// promotion), where and cast.
#include "dense_dispatch.h"
#include "ops/helpers.h"
#include "ops/registry.h"
#include "ops/scalar_ops.h"
#include "ops/vec_math.h"

namespace kiln {
namespace ops {
namespace {

// Comparisons and logical ops: a bool result (ops.def's kPredicate).
constexpr bool is_predicate(OpId op) {
  return (static_traits(op) & kPredicate) != 0;
}

// The dtype the op computes in.
DType compute_dtype(OpId op, std::span<const Tensor> in) {
  DType t = result_type(in.first(2));
  if (op == OpId::div && !is_floating(t)) t = kDefaultFloat;
  return t;
}

template <OpId Op>
void infer_binary(std::span<const Tensor> in, const Attrs&, std::vector<TensorMeta>& out) {
  const char* name = op_name(Op);
  Dims shape = broadcast_shapes(in[0].shape(), in[1].shape(), name);
  DType c = compute_dtype(Op, in);
  if constexpr (Op == OpId::sub || Op == OpId::pow || Op == OpId::div) {
    KILN_CHECK(c != DType::b8, "[", name, "] is not supported on two bool tensors (", in[0].dtype(),
               ", ", in[1].dtype(), ")");
  }
  bool to_bool = is_predicate(Op);
  out.push_back({to_bool ? DType::b8 : c, std::move(shape)});
}

// One run of n elements: out, x, y at byte strides s. Contiguous operands and
// a broadcast single element take loops the compiler vectorizes. The dense path
// and strided_loop's runs both call it, and it is kept out of line, so each
// (op, dtype) pair compiles these loops once (they dominate the build's time).
// pow (vec::Expanded) runs its f32 loop for f32, f16 and bf16.
template <typename T, typename R, typename F>
[[gnu::noinline]] void binary_run(char* const* p, const int64_t* s, int64_t n) {
  using C = compute_t<T>;
  if constexpr (vec::HasExpansion<F> && std::is_same_v<C, float>) {
    vec::run_loop<2, T>(F::kLoop, p, s, n);
  } else {
    const F f{};
    R* __restrict o = reinterpret_cast<R*>(p[0]);
    const T* __restrict x = reinterpret_cast<const T*>(p[1]);
    const T* __restrict y = reinterpret_cast<const T*>(p[2]);
    constexpr int64_t kT = sizeof(T);
    if (s[0] == sizeof(R) && s[1] == kT && s[2] == kT) {
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<R>(f(C(x[i]), C(y[i])));
    } else if (s[0] == sizeof(R) && s[1] == kT && s[2] == 0) {
      const C yv = C(y[0]);
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<R>(f(C(x[i]), yv));
    } else if (s[0] == sizeof(R) && s[1] == 0 && s[2] == kT) {
      const C xv = C(x[0]);
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<R>(f(xv, C(y[i])));
    } else {
      for (int64_t i = 0; i < n; ++i) {
        auto xv = C(*reinterpret_cast<const T*>(p[1] + i * s[1]));
        auto yv = C(*reinterpret_cast<const T*>(p[2] + i * s[2]));
        *reinterpret_cast<R*>(p[0] + i * s[0]) = static_cast<R>(f(xv, yv));
      }
    }
  }
}

// The dense cases without strided_loop's per-call setup (dim vectors): x and
// y contiguous with out's shape, or one of them a single element. Small calls
// run inline; returns false for anything else.
template <typename T, typename R, typename F>
bool map_binary_dense(const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t n = out.numel();
  auto dense = [&](const Tensor& t) { return t.shape() == out.shape() && t.is_contiguous(); };
  if (!out.is_contiguous()) return false;
  const bool da = dense(a), db = dense(b);
  const bool sa = !da && a.numel() == 1, sb = !db && b.numel() == 1;
  if (!((da || sa) && (db || sb))) return false;
  const int64_t st[3] = {sizeof(R), da ? int64_t(sizeof(T)) : 0, db ? int64_t(sizeof(T)) : 0};
  char* base[3] = {static_cast<char*>(out.data_ptr()), static_cast<char*>(a.data_ptr()),
                   static_cast<char*>(b.data_ptr())};
  auto run = [&](int64_t lo, int64_t hi) {
    char* p[3] = {base[0] + lo * st[0], base[1] + lo * st[1], base[2] + lo * st[2]};
    binary_run<T, R, F>(p, st, hi - lo);
  };
  if (n <= kDefaultGrain)
    run(0, n);
  else
    parallel_for(0, n, kDefaultGrain, run);
  return true;
}

template <typename T, typename R, typename F>
void map_binary(const Tensor& a, const Tensor& b, const Tensor& out) {
  if (map_binary_dense<T, R, F>(a, b, out)) return;
  const Dims& shape = out.shape();
  std::array<char*, 3> base{static_cast<char*>(out.data_ptr()), static_cast<char*>(a.data_ptr()),
                            static_cast<char*>(b.data_ptr())};
  std::array<Dims, 3> st{broadcast_byte_strides(out, shape), broadcast_byte_strides(a, shape),
                         broadcast_byte_strides(b, shape)};
  // A function pointer, not a lambda: one strided_loop serves every (op, dtype).
  strided_loop<3>(shape, base, st, &binary_run<T, R, F>);
}

// Whether an op can compute in T, so impossible loops are never compiled: div
// computes in floating point (integer inputs are promoted first), and
// infer_binary rejects sub and pow on two bools.
template <OpId Op, typename T>
constexpr bool computes_in() {
  if constexpr (Op == OpId::div) return !std::is_integral_v<T>;
  if constexpr (Op == OpId::sub || Op == OpId::pow) return !std::is_same_v<T, bool>;
  return true;
}

template <OpId Op, typename F>
void kernel_binary(std::span<const Tensor> in, const Attrs&, std::span<Tensor> out) {
  DType c = compute_dtype(Op, in);
  Tensor a = to_dtype_raw(in[0], c), b = to_dtype_raw(in[1], c);
  visit_dtype(c, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!computes_in<Op, T>())
      KILN_CHECK(false, "[", op_name(Op), "] internal: no kernel computes in ", c);
    else if constexpr (is_predicate(Op))
      map_binary<T, bool, F>(a, b, out[0]);
    else
      map_binary<T, T, F>(a, b, out[0]);
  });
}

// ---- derivative rules ----
// The rules stay one line each, a table to read down (clang-format would unfold them).
// clang-format off
#define VJP(name) void vjp_##name(const VjpArgs& a, std::vector<Tensor>& gi)
#define G a.grads[0]
#define A a.inputs[0]
#define B a.inputs[1]
VJP(add) {
  gi[0] = G;
  gi[1] = G;
}
VJP(sub) {
  gi[0] = G;
  if (a.needs(1)) gi[1] = -G;
}
VJP(mul) {
  if (a.needs(0)) gi[0] = G * B;
  if (a.needs(1)) gi[1] = G * A;
}
VJP(div) {
  if (a.needs(0)) gi[0] = G / B;
  if (a.needs(1)) gi[1] = -(G * A) / (B * B);
}
VJP(pow) {
  // d/da a^b = b a^(b-1); d/db a^b = a^b log a (taken as 0 where a == 0, b >= 0).
  if (a.needs(0)) gi[0] = where(eq(B, 0.0), 0.0, G * B * pow(A, B - 1.0));
  if (a.needs(1)) {
    Tensor y = pow(A, B);
    gi[1] = where(logical_and(eq(A, 0.0), ge(B, 0.0)), 0.0, G * y * log(A));
  }
}
// maximum/minimum: the winner takes the gradient, ties split it evenly.
VJP(maximum) {
  Tensor share = where(eq(A, B), 0.5, where(gt(A, B), 1.0, 0.0));
  if (a.needs(0)) gi[0] = G * share;
  if (a.needs(1)) gi[1] = G * (1.0 - share);
}
VJP(minimum) {
  Tensor share = where(eq(A, B), 0.5, where(lt(A, B), 1.0, 0.0));
  if (a.needs(0)) gi[0] = G * share;
  if (a.needs(1)) gi[1] = G * (1.0 - share);
}
VJP(where) {
  const Tensor& c = a.inputs[0];
  if (a.needs(1)) gi[1] = where(c, G, 0.0);
  if (a.needs(2)) gi[2] = where(c, 0.0, G);
}
VJP(cast) { gi[0] = G; }
#undef VJP
// clang-format on
#undef G
#undef A
#undef B

template <OpId Op, typename F>
void reg(OpTable& t, VjpFn vjp, uint8_t saves) {
  OpInfo& e = t[Op];
  e.infer = infer_binary<Op>;
  e.kernel = kernel_binary<Op, F>;
  e.vjp = vjp;
  e.saves = saves;
  // Dispatch's dense fast path: two inputs of one dtype T compute in T
  // (result_type), through the same loop as map_binary's dense case.
  for (int d = 0; d < kNumDTypes; ++d)
    visit_dtype(static_cast<DType>(d), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!computes_in<Op, T>())
        return;
      else if constexpr (is_predicate(Op))
        detail::register_dense_run(Op, dtype_v<T>, DType::b8, &binary_run<T, bool, F>);
      else
        detail::register_dense_run(Op, dtype_v<T>, dtype_v<T>, &binary_run<T, T, F>);
    });
}

// ---- where ----
void infer_where(std::span<const Tensor> in, const Attrs&, std::vector<TensorMeta>& out) {
  KILN_CHECK(in[0].dtype() == DType::b8, "[where] condition must be a bool tensor, got ",
             in[0].dtype());
  Dims shape = broadcast_all(in, "where");
  out.push_back({result_type(in.subspan(1)), std::move(shape)});
}

// A contiguous run of where: the condition's bytes, each value operand either
// contiguous or one broadcast element (A1/B1). Both sides are loaded and then
// selected, so the loop vectorizes into blends; the element-by-element form
// branched on the condition and paid a misprediction on every other element
// of a random mask (3.2 ns an element on 128 x 1024, session 19).
template <typename T, bool A1, bool B1>
void where_run(T* __restrict o, const uint8_t* __restrict c, const T* __restrict a,
               const T* __restrict b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T x = a[A1 ? 0 : i], y = b[B1 ? 0 : i];
    o[i] = c[i] != 0 ? x : y;
  }
}

void kernel_where(std::span<const Tensor> in, const Attrs&, std::span<Tensor> out) {
  DType t = out[0].dtype();
  Tensor a = to_dtype_raw(in[1], t), b = to_dtype_raw(in[2], t);
  const Dims& shape = out[0].shape();
  std::array<char*, 4> base{static_cast<char*>(out[0].data_ptr()),
                            static_cast<char*>(in[0].data_ptr()), static_cast<char*>(a.data_ptr()),
                            static_cast<char*>(b.data_ptr())};
  std::array<Dims, 4> st{broadcast_byte_strides(out[0], shape),
                         broadcast_byte_strides(in[0], shape), broadcast_byte_strides(a, shape),
                         broadcast_byte_strides(b, shape)};
  visit_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    const auto size = static_cast<int64_t>(sizeof(T));
    strided_loop<4>(shape, base, st, [&](char** p, const int64_t* s, int64_t n) {
      const bool a1 = s[2] == 0, b1 = s[3] == 0;
      if (s[0] == size && s[1] == 1 && (a1 || s[2] == size) && (b1 || s[3] == size)) {
        auto* o = reinterpret_cast<T*>(p[0]);
        const auto* c = reinterpret_cast<const uint8_t*>(p[1]);
        const auto *a = reinterpret_cast<const T*>(p[2]), *b = reinterpret_cast<const T*>(p[3]);
        if (a1 && b1)
          where_run<T, true, true>(o, c, a, b, n);
        else if (a1)
          where_run<T, true, false>(o, c, a, b, n);
        else if (b1)
          where_run<T, false, true>(o, c, a, b, n);
        else
          where_run<T, false, false>(o, c, a, b, n);
        return;
      }
      for (int64_t i = 0; i < n; ++i) {  // both loaded, then selected: no branch
        const bool c = *reinterpret_cast<const bool*>(p[1] + i * s[1]);
        const T x = *reinterpret_cast<const T*>(p[2] + i * s[2]);
        const T y = *reinterpret_cast<const T*>(p[3] + i * s[3]);
        *reinterpret_cast<T*>(p[0] + i * s[0]) = c ? x : y;
      }
    });
  });
}

// ---- cast ----
void infer_cast(std::span<const Tensor> in, const Attrs& at, std::vector<TensorMeta>& out) {
  out.push_back({at.dtype("dtype"), in[0].shape()});
}
void kernel_cast(std::span<const Tensor> in, const Attrs&, std::span<Tensor> out) {
  copy_into(out[0], in[0]);
}

}  // namespace

void register_binary(OpTable& t) {
  namespace s = scalar;
  reg<OpId::add, s::add>(t, vjp_add, kSaveNone);
  reg<OpId::sub, s::sub>(t, vjp_sub, kSaveNone);
  reg<OpId::mul, s::mul>(t, vjp_mul, kSaveInputs);
  reg<OpId::div, s::div>(t, vjp_div, kSaveInputs);
  reg<OpId::pow, vec::Expanded<s::pow, vec::Loop::kPow>>(t, vjp_pow, kSaveInputs);
  reg<OpId::maximum, s::maximum>(t, vjp_maximum, kSaveInputs);
  reg<OpId::minimum, s::minimum>(t, vjp_minimum, kSaveInputs);
  t[OpId::mul].save_only_for_others = 0b11;  // a for b's gradient, b for a's
  t[OpId::div].save_only_for_others = 0b01;  // a only for b's gradient
  reg<OpId::eq, s::eq>(t, nullptr, kSaveNone);
  reg<OpId::ne, s::ne>(t, nullptr, kSaveNone);
  reg<OpId::lt, s::lt>(t, nullptr, kSaveNone);
  reg<OpId::le, s::le>(t, nullptr, kSaveNone);
  reg<OpId::gt, s::gt>(t, nullptr, kSaveNone);
  reg<OpId::ge, s::ge>(t, nullptr, kSaveNone);
  reg<OpId::logical_and, s::logical_and>(t, nullptr, kSaveNone);
  reg<OpId::logical_or, s::logical_or>(t, nullptr, kSaveNone);
  OpInfo& w = t[OpId::where];
  w.infer = infer_where;
  w.kernel = kernel_where;
  w.vjp = vjp_where;
  w.saves = kSaveInputs;
  w.nondiff_inputs = 1u;  // the condition
  OpInfo& c = t[OpId::cast];
  c.infer = infer_cast;
  c.kernel = kernel_cast;
  c.vjp = vjp_cast;
  c.saves = kSaveNone;
}

}  // namespace ops

#define KILN_BINARY_DEF(name)                                             \
  Tensor name(const Tensor& a, const Tensor& b) {                         \
    return detail::dispatch_elementwise(OpId::name, a, b);                \
  }                                                                       \
  Tensor name(const Tensor& a, const Scalar& b) {                         \
    return detail::dispatch_elementwise(OpId::name, a, scalar_tensor(b)); \
  }                                                                       \
  Tensor name(const Scalar& a, const Tensor& b) {                         \
    return detail::dispatch_elementwise(OpId::name, scalar_tensor(a), b); \
  }
KILN_BINARY_DEF(add)
KILN_BINARY_DEF(sub)
KILN_BINARY_DEF(mul)
KILN_BINARY_DEF(div)
KILN_BINARY_DEF(pow)
KILN_BINARY_DEF(maximum)
KILN_BINARY_DEF(minimum)
KILN_BINARY_DEF(eq)
KILN_BINARY_DEF(ne)
KILN_BINARY_DEF(lt)
KILN_BINARY_DEF(le)
KILN_BINARY_DEF(gt)
KILN_BINARY_DEF(ge)
KILN_BINARY_DEF(logical_and)
KILN_BINARY_DEF(logical_or)
#undef KILN_BINARY_DEF

Tensor where(const Tensor& c, const Tensor& a, const Tensor& b) {
  return dispatch1(OpId::where, {c, a, b});
}
Tensor where(const Tensor& c, const Tensor& a, const Scalar& b) {
  return dispatch1(OpId::where, {c, a, scalar_tensor(b)});
}
Tensor where(const Tensor& c, const Scalar& a, const Tensor& b) {
  return dispatch1(OpId::where, {c, scalar_tensor(a), b});
}

Tensor where(const Tensor& c, const Scalar& a, const Scalar& b) {
  return dispatch1(OpId::where, {c, scalar_tensor(a), scalar_tensor(b)});
}

Tensor cast(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  return dispatch1(OpId::cast, {x}, Attrs().set("dtype", dtype));
}

Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}
Tensor operator+(const Tensor& a, const Scalar& b) {
  return add(a, b);
}
Tensor operator-(const Tensor& a, const Scalar& b) {
  return sub(a, b);
}
Tensor operator*(const Tensor& a, const Scalar& b) {
  return mul(a, b);
}
Tensor operator/(const Tensor& a, const Scalar& b) {
  return div(a, b);
}
Tensor operator+(const Scalar& a, const Tensor& b) {
  return add(a, b);
}
Tensor operator-(const Scalar& a, const Tensor& b) {
  return sub(a, b);
}
Tensor operator*(const Scalar& a, const Tensor& b) {
  return mul(a, b);
}
Tensor operator/(const Scalar& a, const Tensor& b) {
  return div(a, b);
}

}  // namespace kiln
