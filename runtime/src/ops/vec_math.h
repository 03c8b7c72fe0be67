// Internal: the eager kernels' f32 transcendentals, from the expansions that
// compiled kernels use (math/expansions.h), so eager and compiled results are
// the same bits. Two forms: per element (exp, sigmoid: inlined into loops the
// compiler vectorizes, as in ops/fused_kernels.cpp), and whole runs of an
// elementwise op at the host's SIMD width (the unary primitives and pow).
// f16/bf16 compute in f32 and round once, as compiled kernels do; f64 stays
// libm (as compiled kernels do).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "math/simd_builder.h"

namespace kiln::ops::vec {

/// e^x for f32 (math::exp_f32 on one float). Inlined whole, so that the
/// loops calling it vectorize.
[[gnu::always_inline, gnu::flatten]] inline float exp_f32(float x) {
  math::Simd<1> b;
  return math::exp_f32(b, x);
}

/// e^x: the shared f32 expansion, libm for f64 (gradcheck's dtype).
template <typename T>
[[gnu::always_inline]] inline T exp(T x) {
  if constexpr (sizeof(T) == 4)
    return exp_f32(x);
  else
    return std::exp(x);
}

/// 1 / (1 + e^-x), as the primitive sigmoid computes it (inlined likewise).
template <typename T>
[[gnu::always_inline, gnu::flatten]] inline T sigmoid(T x) {
  if constexpr (sizeof(T) == 4) {
    math::Simd<1> b;
    return math::sigmoid_f32(b, x);
  } else {
    return T(1) / (T(1) + std::exp(-x));
  }
}

// The f32 expansion of each op (E::f32(builder, x[, y])) and the lanes it
// runs on: the host's float width (every expansion computes in f32; sin/cos's
// exact reduction of huge arguments uses i64/f64 lanes, split as needed, only
// in vectors that hold such an argument).
#define KILN_VEC_UNARY(Name, lanes, call)             \
  struct Name {                                       \
    static constexpr int kN = lanes;                  \
    template <class B>                                \
    static typename B::F f32(B& b, typename B::F x) { \
      return call;                                    \
    }                                                 \
  };
KILN_VEC_UNARY(Exp, math::kLanes, math::exp_f32(b, x))
KILN_VEC_UNARY(Log, math::kLanes, math::log_f32(b, x))
KILN_VEC_UNARY(Log1p, math::kLanes, math::log1p_f32(b, x))
KILN_VEC_UNARY(Tanh, math::kLanes, math::tanh_f32(b, x))
KILN_VEC_UNARY(Sigmoid, math::kLanes, math::sigmoid_f32(b, x))
KILN_VEC_UNARY(Erf, math::kLanes, math::erf_f32(b, x))
KILN_VEC_UNARY(Sin, math::kLanes, math::sincos_f32(b, x, true))
KILN_VEC_UNARY(Cos, math::kLanes, math::sincos_f32(b, x, false))
#undef KILN_VEC_UNARY
struct Pow {
  static constexpr int kN = math::kLanes;
  template <class B>
  static typename B::F f32(B& b, typename B::F x, typename B::F y) {
    return math::pow_f32(b, x, y);
  }
};

/// An eager op's functor: S (ops/scalar_ops.h) for f64 and integers, the
/// expansion E for f32, f16 and bf16 (unary_run / binary_run take E's loop).
template <class S, class E>
struct Expanded : S {
  using Expansion = E;
};
template <class F>
concept HasExpansion = requires {
  typename F::Expansion;
};

namespace detail {

template <int N>
using V = typename math::Simd<N>::F;

// `cnt` elements of T at byte stride s, as floats (the other lanes 0).
template <int N, typename T>
inline V<N> load(const char* p, int64_t s, int64_t cnt) {
  V<N> v{};
  if constexpr (std::is_same_v<T, float>) {
    if (s == 4 && cnt == N) {
      std::memcpy(&v, p, sizeof v);
      return v;
    }
  }
  if (s == 0) {  // a broadcast element (set lane by lane: v + x would turn -0 into +0)
    T t;
    std::memcpy(&t, p, sizeof t);
    for (int k = 0; k < N; ++k) v[k] = static_cast<float>(t);
    return v;
  }
  for (int64_t k = 0; k < cnt; ++k) {
    T t;
    std::memcpy(&t, p + k * s, sizeof t);
    v[k] = static_cast<float>(t);
  }
  return v;
}

template <int N, typename T>
inline void store(char* p, int64_t s, int64_t cnt, V<N> v) {
  if constexpr (std::is_same_v<T, float>) {
    if (s == 4 && cnt == N) {
      std::memcpy(p, &v, sizeof v);
      return;
    }
  }
  for (int64_t k = 0; k < cnt; ++k) {
    const T t = static_cast<T>(v[k]);
    std::memcpy(p + k * s, &t, sizeof t);
  }
}

}  // namespace detail

/// out[i] = E(x[i]) for n elements of T (f32, f16, bf16) at byte strides
/// s[0] (out) and s[1] (x), E::kN at a time. flatten: the whole expansion is
/// inlined into the loop (its constants stay in registers).
template <class E, typename T>
[[gnu::flatten]] void unary_run(char* const* p, const int64_t* s, int64_t n) {
  constexpr int N = E::kN;
  math::Simd<N> b;
  for (int64_t i = 0; i < n; i += N) {
    const int64_t cnt = n - i < N ? n - i : N;
    const detail::V<N> x = detail::load<N, T>(p[1] + i * s[1], s[1], cnt);
    detail::store<N, T>(p[0] + i * s[0], s[0], cnt, E::f32(b, x));
  }
}

/// out[i] = E(x[i], y[i]) likewise (strides s[0..2]; 0 broadcasts one element).
template <class E, typename T>
[[gnu::flatten]] void binary_run(char* const* p, const int64_t* s, int64_t n) {
  constexpr int N = E::kN;
  math::Simd<N> b;
  for (int64_t i = 0; i < n; i += N) {
    const int64_t cnt = n - i < N ? n - i : N;
    const detail::V<N> x = detail::load<N, T>(p[1] + i * s[1], s[1], cnt);
    const detail::V<N> y = detail::load<N, T>(p[2] + i * s[2], s[2], cnt);
    detail::store<N, T>(p[0] + i * s[0], s[0], cnt, E::f32(b, x, y));
  }
}

}  // namespace kiln::ops::vec
