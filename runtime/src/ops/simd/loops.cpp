// The eager SIMD loops of ops/simd/loops.h at one CPU level. Compiled once
// per level (runtime/CMakeLists.txt: x86-64-v2, -v3 and -v4 on x86-64, the
// build's own target elsewhere) with KILN_SIMD_LEVEL naming it, so each copy
// and every inline function it instantiates (math/level.h) lives in that
// level's namespace. Only raw-pointer loops here, no std containers or
// library templates: anything left as a shared weak symbol could be linked to
// another level's copy (tests/runtime/check_level_symbols.cmake fails then).
// Every level runs the same IEEE operations in the same order, so the results
// are equal bit for bit at every width (EagerMathLevels.*).
#ifndef KILN_SIMD_LEVEL
#error "compile with KILN_SIMD_LEVEL=<level namespace> (runtime/CMakeLists.txt)"
#endif
// A level's code must not use a later level's instructions (flags leaking
// in, such as -march=native's -mavx512f, would make SIGILLs on older CPUs).
#if defined(KILN_SIMD_X86_LEVEL) &&                                              \
    ((KILN_SIMD_X86_LEVEL == 2 && (!defined(__SSE4_2__) || defined(__AVX__))) || \
     (KILN_SIMD_X86_LEVEL == 3 &&                                                \
      (!defined(__AVX2__) || !defined(__FMA__) || defined(__AVX512F__))) ||      \
     (KILN_SIMD_X86_LEVEL == 4 && (!defined(__AVX512F__) || !defined(__AVX512VL__))))
#error "the compiler's target does not match KILN_SIMD_X86_LEVEL (runtime/CMakeLists.txt)"
#endif

#include "ops/simd/loops.h"

#include <cstdint>
#include <cstring>

#include "math/simd_builder.h"
#include "ops/gelu_const.h"

namespace kiln::ops::vec::KILN_SIMD_LEVEL {
namespace {

constexpr int kN = math::kLanes;
using B = math::Simd<kN>;
using V = B::F;

// `cnt` floats at byte stride s (the other lanes 0).
inline V load(const char* p, int64_t s, int64_t cnt) {
  V v{};
  if (s == 4 && cnt == kN) {
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  if (s == 0) {  // a broadcast element (set lane by lane: v + x would turn -0 into +0)
    float t;
    std::memcpy(&t, p, sizeof t);
    for (int k = 0; k < kN; ++k) v[k] = t;
    return v;
  }
  for (int64_t k = 0; k < cnt; ++k) {
    float t;
    std::memcpy(&t, p + k * s, sizeof t);
    v[k] = t;
  }
  return v;
}

inline void store(char* p, int64_t s, int64_t cnt, V v) {
  if (s == 4 && cnt == kN) {
    std::memcpy(p, &v, sizeof v);
    return;
  }
  for (int64_t k = 0; k < cnt; ++k) {
    const float t = v[k];
    std::memcpy(p + k * s, &t, sizeof t);
  }
}

// out[i] = E(x[i]) (Arity 1) or E(x[i], y[i]) (Arity 2), kN at a time.
// flatten: the whole expansion is inlined into the loop (its constants stay
// in registers).
template <class E, int Arity>
[[gnu::flatten]] void run(char* const* p, const int64_t* s, int64_t n) {
  B b;
  for (int64_t i = 0; i < n; i += kN) {
    const int64_t cnt = n - i < kN ? n - i : kN;
    const V x = load(p[1] + i * s[1], s[1], cnt);
    V r;
    if constexpr (Arity == 1)
      r = E::f(b, x);
    else
      r = E::f(b, x, load(p[2] + i * s[2], s[2], cnt));
    store(p[0] + i * s[0], s[0], cnt, r);
  }
}

// Each loop's f32 expansion (sin/cos's exact reduction of huge arguments uses
// i64/f64 lanes, split as needed, only in vectors that hold such an argument).
#define KILN_VEC_UNARY(Name, call)         \
  struct Name {                            \
    static V f(B& b, V x) { return call; } \
  };
KILN_VEC_UNARY(Exp, math::exp_f32(b, x))
KILN_VEC_UNARY(Log, math::log_f32(b, x))
KILN_VEC_UNARY(Log1p, math::log1p_f32(b, x))
KILN_VEC_UNARY(Tanh, math::tanh_f32(b, x))
KILN_VEC_UNARY(Sigmoid, math::sigmoid_f32(b, x))
KILN_VEC_UNARY(Erf, math::erf_f32(b, x))
KILN_VEC_UNARY(Sin, math::sincos_f32(b, x, true))
KILN_VEC_UNARY(Cos, math::sincos_f32(b, x, false))
#undef KILN_VEC_UNARY

struct Pow {
  static V f(B& b, V x, V y) { return math::pow_f32(b, x, y); }
};

// GELU (erf form) and its gradient, the composites' formulas with the shared
// erf and exp (the primitive ops' and compiled kernels' bits).
using K = fused::GeluConst<float>;
struct GeluErf {
  static V f(B& b, V v) { return v * (math::erf_f32(b, v * K::half_sqrt2) + 1.0f) * 0.5f; }
};
struct GeluErfGrad {
  static V f(B& b, V v, V g) {
    const V cdf = 0.5f * (1.0f + math::erf_f32(b, v * K::half_sqrt2));
    return g * (cdf + v * math::exp_f32(b, -0.5f * v * v) * K::inv_sqrt_2pi);
  }
};

// GELU's tanh form and SiLU, and their gradients, as the fused kernels wrote
// them per element (the same operations in the same order: the same bits).
struct GeluTanh {
  static V f(B& b, V v) { return v * math::sigmoid_f32(b, (v + v * v * v * K::c) * K::k2); }
};
struct GeluTanhGrad {
  // d/dx x s(z) = s + x s (1 - s) z', z = k2 (x + c x^3), z' = k2 (1 + 3 c x^2).
  static V f(B& b, V v, V g) {
    const V s = math::sigmoid_f32(b, (v + v * v * v * K::c) * K::k2);
    const V dz = K::k2 * (1.0f + 3.0f * K::c * v * v);
    return g * (s + v * s * (1.0f - s) * dz);
  }
};
struct Silu {
  static V f(B& b, V x) { return x * math::sigmoid_f32(b, x); }
};
struct SiluGrad {
  static V f(B& b, V x, V g) {
    const V s = math::sigmoid_f32(b, x);
    return g * (s * (1.0f + x * (1.0f - s)));
  }
};

// In Loop's order.
constexpr RunFn kLoops[kNumLoops] = {
    &run<Exp, 1>,          &run<Log, 1>,     &run<Log1p, 1>,       &run<Tanh, 1>,
    &run<Sigmoid, 1>,      &run<Erf, 1>,     &run<Sin, 1>,         &run<Cos, 1>,
    &run<Pow, 2>,          &run<GeluErf, 1>, &run<GeluErfGrad, 2>, &run<GeluTanh, 1>,
    &run<GeluTanhGrad, 2>, &run<Silu, 1>,    &run<SiluGrad, 2>,
};
static_assert(static_cast<int>(Loop::kSiluGrad) == kNumLoops - 1);

}  // namespace

const RunFn* loops() {
  return kLoops;
}

}  // namespace kiln::ops::vec::KILN_SIMD_LEVEL
