// Internal: the eager kernels' f32 transcendentals, from the expansions that
// compiled kernels use (math/expansions.h), so eager and compiled results are
// the same bits. Two forms: per element (exp, sigmoid: inlined into loops the
// compiler vectorizes at the build's target, as in ops/fused_kernels.cpp), and
// whole runs of an elementwise op (the unary primitives, pow, GELU's erf
// form), which run the SIMD loops of ops/simd/loops.h built for each x86-64
// level and picked at run time (ops/cpu_level.h). f16/bf16 compute in f32 and
// round once, as compiled kernels do; f64 stays libm (as compiled kernels do).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "math/simd_builder.h"
#include "ops/cpu_level.h"

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

/// An eager op's functor: S (ops/scalar_ops.h) for f64 and integers, the
/// f32 loop L for f32, f16 and bf16 (run_loop).
template <class S, Loop L>
struct Expanded : S {
  static constexpr Loop kLoop = L;
};
template <class F>
concept HasExpansion = requires {
  F::kLoop;
};

/// out[i] = op(x[i]) (Arity 1) or op(x[i], y[i]) (Arity 2) for n elements of
/// T (f32, f16, bf16) at byte strides s[0] (out), s[1], s[2] (inputs; 0
/// broadcasts one element). f32 runs go to the level's loop as they are;
/// f16/bf16 ones through f32 buffers in blocks of kBlock (converted here, so
/// the per-level code holds no conversion of its own).
template <int Arity, typename T>
void run_loop(Loop op, char* const* p, const int64_t* s, int64_t n) {
  const RunFn f = f32_loop(op);
  if constexpr (std::is_same_v<T, float>) {
    f(p, s, n);
  } else {
    constexpr int64_t kBlock = 256;
    float buf[Arity + 1][kBlock];
    constexpr int64_t kUnit[3] = {4, 4, 4};
    for (int64_t i = 0; i < n; i += kBlock) {
      const int64_t cnt = n - i < kBlock ? n - i : kBlock;
      char* q[3] = {};
      for (int a = 0; a <= Arity; ++a) q[a] = reinterpret_cast<char*>(buf[a]);
      for (int a = 1; a <= Arity; ++a) {
        if (s[a] == sizeof(T)) {  // contiguous: a loop the compiler vectorizes
          const T* x = reinterpret_cast<const T*>(p[a]) + i;
          for (int64_t k = 0; k < cnt; ++k) buf[a][k] = static_cast<float>(x[k]);
        } else {
          for (int64_t k = 0; k < cnt; ++k)
            buf[a][k] = static_cast<float>(*reinterpret_cast<const T*>(p[a] + (i + k) * s[a]));
        }
      }
      f(q, kUnit, cnt);
      if (s[0] == sizeof(T)) {
        T* o = reinterpret_cast<T*>(p[0]) + i;
        for (int64_t k = 0; k < cnt; ++k) o[k] = static_cast<T>(buf[0][k]);
      } else {
        for (int64_t k = 0; k < cnt; ++k)
          *reinterpret_cast<T*>(p[0] + (i + k) * s[0]) = static_cast<T>(buf[0][k]);
      }
    }
  }
}

}  // namespace kiln::ops::vec
