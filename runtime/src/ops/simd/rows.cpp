// The row kernels of ops/simd/rows.h at one CPU level, compiled with the SIMD
// loops (ops/simd/loops.cpp, which checks that the compiler's target is the
// level's) into each level's object library, under the same rules: only
// raw-pointer code in the level namespace, no std containers or library
// templates (tests/runtime/check_level_symbols.cmake). They follow the
// composites' formulas and evaluation order (the same float roundings per
// step) with the primitives' f32 exp (math::exp_f32); sums run in 16 lane
// partial sums combined pairwise at every level, so every level gives the
// same bits (EagerMathLevels.FusedRowKernels*).
//
// GCC only if-converts (and so vectorizes) the branch-free math with
// -fno-trapping-math: the kernels never test floating-point exception flags.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#ifndef KILN_SIMD_LEVEL
#error "compile with KILN_SIMD_LEVEL=<level namespace> (runtime/CMakeLists.txt)"
#endif

#include "ops/simd/rows.h"

#include <cstdint>
#include <cstring>
#include <limits>

#include "math/simd_builder.h"

namespace kiln::ops::vec::KILN_SIMD_LEVEL {
namespace {

// Independent partial results per lane (16 floats: two AVX2 registers or one
// AVX-512 one), the same 16 at every level.
constexpr int64_t kLanes = 16;

// libm's sqrt and log (builtins: no inline std overload that could stay a
// weak symbol shared by the levels); the shared f32 exp, libm's f64 exp.
template <typename T>
inline T sqrt_of(T x) {
  if constexpr (sizeof(T) == 4)
    return __builtin_sqrtf(x);
  else
    return __builtin_sqrt(x);
}
template <typename T>
inline T log_of(T x) {
  if constexpr (sizeof(T) == 4)
    return __builtin_logf(x);
  else
    return __builtin_log(x);
}
template <typename T>
[[gnu::always_inline, gnu::flatten]] inline T exp_of(T x) {
  if constexpr (sizeof(T) == 4) {
    math::Simd<1> b;
    return math::exp_f32(b, x);
  } else {
    return __builtin_exp(x);
  }
}

// Sum of f(i) over [0, n), in kLanes partial sums combined pairwise. They
// start at +0 like the eager sum's, so an exactly zero sum is +0 as there.
template <typename T, typename F>
T lane_sum(int64_t n, F&& f) {
  T acc[kLanes];
  for (int64_t j = 0; j < kLanes; ++j) acc[j] = T(0);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) acc[j] += f(i + j);
  T tail = T(0);
  for (; i < n; ++i) tail += f(i);
  for (int64_t w = kLanes / 2; w > 0; w /= 2)
    for (int64_t j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0] + tail;
}

// 32-byte vectors (GCC/Clang vector extensions): GCC does not vectorize a
// float max reduction without -ffinite-math-only, whatever the pragma above.
template <typename T>
struct Vec32;
template <>
struct Vec32<float> {
  typedef float V __attribute__((vector_size(32)));
  typedef int32_t M __attribute__((vector_size(32)));
};
template <>
struct Vec32<double> {
  typedef double V __attribute__((vector_size(32)));
  typedef int64_t M __attribute__((vector_size(32)));
};

// Largest element of x[0, n), NaN if any is NaN, -inf for an empty row.
template <typename T>
T row_max(const T* x, int64_t n) {
  using V = typename Vec32<T>::V;
  using M = typename Vec32<T>::M;
  constexpr int64_t kW = sizeof(V) / sizeof(T);
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  V acc = V{} + kNegInf;
  M nan = M{};
  int64_t i = 0;
  for (; i + kW <= n; i += kW) {
    V v;
    std::memcpy(&v, x + i, sizeof v);
    acc = v > acc ? v : acc;
    nan |= v != v;
  }
  T m = kNegInf;
  bool any_nan = false;
  for (int64_t j = 0; j < kW; ++j) {
    m = acc[j] > m ? acc[j] : m;
    any_nan = any_nan || nan[j] != 0;
  }
  for (; i < n; ++i) {
    m = x[i] > m ? x[i] : m;
    any_nan = any_nan || x[i] != x[i];
  }
  return any_nan ? std::numeric_limits<T>::quiet_NaN() : m;
}

// Sum of e^(x[i] - m) over a float row, each term also written to y when Store:
// the terms and the lane order of lane_sum (the same bits), written with
// explicit vectors so that the partial sums stay in registers (the compiler
// kept lane_sum's array on the stack here, and each block's add waited on
// the previous one's store). The exp runs at the level's width
// (math::kLanes): 16-lane vectors on AVX2 left GCC's per-lane fma and rint
// unvectorized (scalar code; the harness row 5x PyTorch's time).
template <bool Store>
float exp_sum_row(const float* x, float* y, int64_t n, float m) {
  constexpr int kW = math::kLanes < kLanes ? math::kLanes : static_cast<int>(kLanes);
  constexpr int kParts = kLanes / kW;  // lane j of the 16 is part j / kW's lane j % kW
  using B = math::Simd<kW>;
  using V = typename B::F;
  B b;
  const V mv = B::template splat<V>(m);
  V acc[kParts] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma GCC unroll 4
    for (int p = 0; p < kParts; ++p) {
      V v;
      std::memcpy(&v, x + i + p * kW, sizeof v);
      const V e = math::exp_f32(b, v - mv);
      if constexpr (Store) std::memcpy(y + i + p * kW, &e, sizeof e);
      acc[p] += e;
    }
  }
  float tail = 0.0f;
  for (; i < n; ++i) {
    const float e = exp_of(x[i] - m);
    if constexpr (Store) y[i] = e;
    tail += e;
  }
  float a[kLanes];
  static_assert(sizeof a == sizeof acc);
  std::memcpy(a, acc, sizeof a);
  for (int64_t w = kLanes / 2; w > 0; w /= 2)
    for (int64_t j = 0; j < w; ++j) a[j] += a[j + w];
  return a[0] + tail;
}

template <typename T>
void softmax_fwd(const T* x, T* y, int64_t r0, int64_t r1, int64_t n, bool log, bool safe) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  for (int64_t r = r0; r < r1; ++r) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    T m = row_max(xr, n);
    if (safe && m == kNegInf) m = T(0);  // all -inf: every term e^-inf = 0
    if (log) {
      // shifted - log(sum(exp(shifted))), shifted = x - max.
      T s;
      if constexpr (sizeof(T) == 4)
        s = exp_sum_row<false>(xr, nullptr, n, m);
      else
        s = lane_sum<T>(n, [&](int64_t i) { return exp_of(xr[i] - m); });
      const T ls = log_of(s);
      for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - m) - ls;
    } else {
      T s;
      if constexpr (sizeof(T) == 4)
        s = exp_sum_row<true>(xr, yr, n, m);
      else
        s = lane_sum<T>(n, [&](int64_t i) {
          const T ev = exp_of(xr[i] - m);
          yr[i] = ev;
          return ev;
        });
      if (safe && s == T(0)) s = T(1);
      for (int64_t i = 0; i < n; ++i) yr[i] = yr[i] / s;
    }
  }
}

template <typename T>
void softmax_bwd(const T* y, const T* g, T* gx, int64_t r0, int64_t r1, int64_t n, bool log) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* yr = y + r * n;
    const T* gr = g + r * n;
    T* o = gx + r * n;
    if (log) {
      // g + softmax * sum(-g), softmax = exp(log_softmax): the composite's
      // terms, so exact zeros get its signs.
      const T s = lane_sum<T>(n, [&](int64_t i) { return -gr[i]; });
      for (int64_t i = 0; i < n; ++i) o[i] = gr[i] + exp_of(yr[i]) * s;
    } else {
      // y * (g - sum(g * y)).
      const T s = lane_sum<T>(n, [&](int64_t i) { return gr[i] * yr[i]; });
      for (int64_t i = 0; i < n; ++i) o[i] = yr[i] * (gr[i] - s);
    }
  }
}

template <typename T>
void layer_norm_fwd(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, int64_t r0,
                    int64_t r1, int64_t n, T eps) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    // Two passes (mean, then the centered variance), as the composite: no cancellation.
    const T mu = lane_sum<T>(n, [&](int64_t i) { return xr[i]; }) / static_cast<T>(n);
    const T var = lane_sum<T>(n,
                              [&](int64_t i) {
                                const T c = xr[i] - mu;
                                return c * c;
                              }) /
                  static_cast<T>(n);
    const T rs = T(1) / sqrt_of(var + eps);
    mean[r] = mu;
    rstd[r] = rs;
    if (w && b) {
      for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - mu) * rs * w[i] + b[i];
    } else if (w) {
      for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - mu) * rs * w[i];
    } else if (b) {
      for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - mu) * rs + b[i];
    } else {
      for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - mu) * rs;
    }
  }
}

template <typename T>
void layer_norm_bwd(const T* x, const T* g, const T* w, const T* mean, const T* rstd, T* gx, T* pw,
                    T* pb, int64_t r0, int64_t r1, int64_t n) {
  const T inv_n = T(1) / static_cast<T>(n);
  for (int64_t r = r0; r < r1; ++r) {
    const T* xr = x + r * n;
    const T* gr = g + r * n;
    const T mu = mean[r], rs = rstd[r];
    if (pw)
      for (int64_t i = 0; i < n; ++i) pw[i] += gr[i] * ((xr[i] - mu) * rs);
    if (pb)
      for (int64_t i = 0; i < n; ++i) pb[i] += gr[i];
    if (!gx) continue;
    // gx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat)), gh = g * w.
    const T a = lane_sum<T>(n, [&](int64_t i) { return w ? gr[i] * w[i] : gr[i]; }) * inv_n;
    const T c = lane_sum<T>(n,
                            [&](int64_t i) {
                              const T gh = w ? gr[i] * w[i] : gr[i];
                              return gh * ((xr[i] - mu) * rs);
                            }) *
                inv_n;
    T* o = gx + r * n;
    for (int64_t i = 0; i < n; ++i) {
      const T gh = w ? gr[i] * w[i] : gr[i];
      o[i] = rs * (gh - a - ((xr[i] - mu) * rs) * c);
    }
  }
}

// Sum over the channel's N rows of S elements of f(row pointer offset + i):
// per row in lanes, rows added in order (deterministic at any thread count).
template <typename T, typename F>
T channel_sum(int64_t N, int64_t C, int64_t S, int64_t c, F&& f) {
  T s = T(0);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t off = (n * C + c) * S;
    s += lane_sum<T>(S, [&](int64_t i) { return f(off + i); });
  }
  return s;
}

template <typename T>
void batch_norm_fwd(const T* x, const T* w, const T* b, T* y, T* mean, T* var, T* rstd, int64_t c0,
                    int64_t c1, int64_t N, int64_t C, int64_t S, T eps, bool batch_stats) {
  const T count = static_cast<T>(N * S);
  for (int64_t c = c0; c < c1; ++c) {
    if (batch_stats) {
      // Two passes (mean, then the centered variance), as the composite.
      const T mu = channel_sum<T>(N, C, S, c, [&](int64_t i) { return x[i]; }) / count;
      mean[c] = mu;
      var[c] = channel_sum<T>(N, C, S, c,
                              [&](int64_t i) {
                                const T d = x[i] - mu;
                                return d * d;
                              }) /
               count;
    }
    const T mu = mean[c];
    const T rs = T(1) / sqrt_of(var[c] + eps);
    rstd[c] = rs;
    const T wc = w ? w[c] : T(1), bc = b ? b[c] : T(0);
    for (int64_t n = 0; n < N; ++n) {
      const T* xr = x + (n * C + c) * S;
      T* yr = y + (n * C + c) * S;
      // The composite's steps: centered * rstd, then * w, then + b.
      if (b) {
        for (int64_t i = 0; i < S; ++i) yr[i] = (xr[i] - mu) * rs * wc + bc;
      } else {
        for (int64_t i = 0; i < S; ++i) yr[i] = (xr[i] - mu) * rs * wc;
      }
    }
  }
}

template <typename T>
void batch_norm_bwd(const T* x, const T* g, const T* w, const T* mean, const T* rstd, T* gx, T* gw,
                    T* gb, int64_t c0, int64_t c1, int64_t N, int64_t C, int64_t S,
                    bool batch_stats) {
  const T inv_count = T(1) / static_cast<T>(N * S);
  for (int64_t c = c0; c < c1; ++c) {
    const T mu = mean[c], rs = rstd[c], wc = w ? w[c] : T(1);
    const bool sums = gw || gb || (gx && batch_stats);
    // sum(g) and sum(g * xhat), xhat = (x - mean) * rstd.
    const T sg = sums ? channel_sum<T>(N, C, S, c, [&](int64_t i) { return g[i]; }) : T(0);
    const T sgx =
        sums ? channel_sum<T>(N, C, S, c, [&](int64_t i) { return g[i] * ((x[i] - mu) * rs); })
             : T(0);
    if (gw) gw[c] = sgx;
    if (gb) gb[c] = sg;
    if (!gx) continue;
    // Training: gx = w rstd (g - mean(g) - xhat mean(g xhat)); else g w rstd.
    const T k = wc * rs, a = sg * inv_count, m = sgx * inv_count;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t off = (n * C + c) * S;
      const T* xr = x + off;
      const T* gr = g + off;
      T* o = gx + off;
      if (batch_stats) {
        for (int64_t i = 0; i < S; ++i) o[i] = k * (gr[i] - a - ((xr[i] - mu) * rs) * m);
      } else {
        for (int64_t i = 0; i < S; ++i) o[i] = gr[i] * k;
      }
    }
  }
}

template <typename T>
constexpr RowFns<T> row_fns() {
  return {&softmax_fwd<T>,    &softmax_bwd<T>,    &layer_norm_fwd<T>,
          &layer_norm_bwd<T>, &batch_norm_fwd<T>, &batch_norm_bwd<T>};
}

constexpr Rows kRows = {row_fns<float>(), row_fns<double>()};

}  // namespace

const Rows& rows() {
  return kRows;
}

}  // namespace kiln::ops::vec::KILN_SIMD_LEVEL
