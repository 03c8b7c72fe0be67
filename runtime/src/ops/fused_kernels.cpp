// Single-pass CPU kernels of the fused eager composites (see fused_kernels.h).
// They follow the composites' formulas and evaluation order (the same float
// roundings per step), with the primitives' own f32 exp and sigmoid (vec_math.h,
// inlined so the loops vectorize): results differ from the unfused composites
// only by summation order.
//
// GCC only if-converts (and so vectorizes) the branch-free math with
// -fno-trapping-math: the kernels never test floating-point exception flags.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include "ops/fused_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <type_traits>
#include <vector>

#include "kiln/thread_pool.h"
#include "ops/gelu_const.h"
#include "ops/vec_math.h"

namespace kiln::ops::fused {
namespace {

// Independent partial results per lane: the compiler keeps them in vector
// registers (16 floats = two AVX2 or one AVX-512 register).
constexpr int64_t kLanes = 16;

// Sum of f(i) over [0, n), in kLanes partial sums combined pairwise. They
// start at +0 like the eager sum's, so an exactly zero sum is +0 as there.
template <typename T, typename F>
T lane_sum(int64_t n, F&& f) {
  T acc[kLanes];
  std::fill(acc, acc + kLanes, T(0));
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
// the previous one's store). The exp runs at the target's width
// (math::kLanes): 16-lane vectors on AVX2 left GCC's per-lane fma and rint
// unvectorized (scalar code; the harness row 5x PyTorch's time).
template <bool Store>
float exp_sum_row(const float* x, float* y, int64_t n, float m) {
  constexpr int kW = std::min<int>(math::kLanes, kLanes);
  constexpr int kParts = kLanes / kW;  // lane j of the 16 is part j / kW's lane j % kW
  using B = math::Simd<kW>;
  using V = B::F;
  B b;
  const V mv = B::splat<V>(m);
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
    const float e = vec::exp_f32(x[i] - m);
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

// Rows per task: about 16K elements of work each.
int64_t row_grain(int64_t n) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1));
}

}  // namespace

template <typename T>
void softmax_fwd(const T* x, T* y, int64_t rows, int64_t n, bool log, bool safe) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  parallel_for(0, rows, row_grain(n), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* xr = x + r * n;
      T* yr = y + r * n;
      T m = row_max(xr, n);
      if (safe && m == kNegInf) m = T(0);  // all -inf: every term e^-inf = 0
      if (log) {
        // shifted - log(sum(exp(shifted))), shifted = x - max.
        T s;
        if constexpr (std::is_same_v<T, float>)
          s = exp_sum_row<false>(xr, nullptr, n, m);
        else
          s = lane_sum<T>(n, [&](int64_t i) { return vec::exp<T>(xr[i] - m); });
        const T ls = std::log(s);
        for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - m) - ls;
      } else {
        T s;
        if constexpr (std::is_same_v<T, float>)
          s = exp_sum_row<true>(xr, yr, n, m);
        else
          s = lane_sum<T>(n, [&](int64_t i) {
            const T ev = vec::exp<T>(xr[i] - m);
            yr[i] = ev;
            return ev;
          });
        if (safe && s == T(0)) s = T(1);
        for (int64_t i = 0; i < n; ++i) yr[i] = yr[i] / s;
      }
    }
  });
}

template <typename T>
void softmax_bwd(const T* y, const T* g, T* gx, int64_t rows, int64_t n, bool log) {
  parallel_for(0, rows, row_grain(n), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* yr = y + r * n;
      const T* gr = g + r * n;
      T* o = gx + r * n;
      if (log) {
        // g + softmax * sum(-g), softmax = exp(log_softmax): the composite's
        // terms, so exact zeros get its signs.
        const T s = lane_sum<T>(n, [&](int64_t i) { return -gr[i]; });
        for (int64_t i = 0; i < n; ++i) o[i] = gr[i] + vec::exp<T>(yr[i]) * s;
      } else {
        // y * (g - sum(g * y)).
        const T s = lane_sum<T>(n, [&](int64_t i) { return gr[i] * yr[i]; });
        for (int64_t i = 0; i < n; ++i) o[i] = yr[i] * (gr[i] - s);
      }
    }
  });
}

template <typename T>
void layer_norm_fwd(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, int64_t rows,
                    int64_t n, T eps) {
  parallel_for(0, rows, row_grain(n), [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
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
      const T rs = T(1) / std::sqrt(var + eps);
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
  });
}

template <typename T>
void layer_norm_bwd(const T* x, const T* g, const T* w, const T* mean, const T* rstd, T* gx, T* gw,
                    T* gb, int64_t rows, int64_t n) {
  // Weight and bias gradients are column sums over the rows: each block of rows
  // writes its partial sums, then the blocks are added in order (deterministic,
  // independent of the thread count).
  const int64_t block = std::max<int64_t>(1, 32768 / std::max<int64_t>(n, 1));
  const int64_t blocks = (rows + block - 1) / block;
  std::vector<T> pw(gw ? static_cast<size_t>(blocks * n) : 0, T(0));
  std::vector<T> pb(gb ? static_cast<size_t>(blocks * n) : 0, T(0));
  const T inv_n = T(1) / static_cast<T>(n);
  parallel_for(0, blocks, 1, [&](int64_t bb, int64_t be) {
    for (int64_t blk = bb; blk < be; ++blk) {
      T* pwr = gw ? pw.data() + blk * n : nullptr;
      T* pbr = gb ? pb.data() + blk * n : nullptr;
      for (int64_t r = blk * block; r < std::min(rows, (blk + 1) * block); ++r) {
        const T* xr = x + r * n;
        const T* gr = g + r * n;
        const T mu = mean[r], rs = rstd[r];
        if (pwr)
          for (int64_t i = 0; i < n; ++i) pwr[i] += gr[i] * ((xr[i] - mu) * rs);
        if (pbr)
          for (int64_t i = 0; i < n; ++i) pbr[i] += gr[i];
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
  });
  auto reduce = [&](const std::vector<T>& part, T* out) {
    parallel_for(0, n, 4096, [&](int64_t cb, int64_t ce) {
      std::fill(out + cb, out + ce, T(0));
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const T* p = part.data() + blk * n;
        for (int64_t i = cb; i < ce; ++i) out[i] += p[i];
      }
    });
  };
  if (gw) reduce(pw, gw);
  if (gb) reduce(pb, gb);
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
void batch_norm_fwd(const T* x, const T* w, const T* b, T* y, T* mean, T* var, T* rstd, int64_t N,
                    int64_t C, int64_t S, T eps, bool batch_stats) {
  const T count = static_cast<T>(N * S);
  parallel_for(0, C, 1, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) {
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
      const T rs = T(1) / std::sqrt(var[c] + eps);
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
  });
}

template <typename T>
void batch_norm_bwd(const T* x, const T* g, const T* w, const T* mean, const T* rstd, T* gx, T* gw,
                    T* gb, int64_t N, int64_t C, int64_t S, bool batch_stats) {
  const T inv_count = T(1) / static_cast<T>(N * S);
  parallel_for(0, C, 1, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) {
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
  });
}

template <typename T>
void relu_bwd(const T* y, const T* g, T* gx, int64_t n) {
  parallel_for(0, n, 1 << 14, [=](int64_t b, int64_t e) {
    // Local restrict pointers and an unconditional load of g: a select the
    // compiler vectorizes (a branch on the sign mispredicts half the time).
    const T* __restrict yp = y;
    const T* __restrict gp = g;
    T* __restrict o = gx;
    for (int64_t i = b; i < e; ++i) {
      const T gv = gp[i];
      o[i] = yp[i] > T(0) ? gv : T(0);
    }
  });
}

namespace {

template <typename T, typename F>
void pointwise_loop(int64_t n, F&& f) {
  parallel_for(0, n, 1 << 14, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) f(i);
  });
}

// out = op(x) (op(x, g) when g is given) over n contiguous floats, split over
// the pool: GELU (both forms), SiLU and their gradients in the SIMD loops of
// the CPU's level, on the shared erf, exp and sigmoid (the primitives' bits).
void vector_loop(vec::Loop op, float* out, const float* x, const float* g, int64_t n) {
  const vec::RunFn f = vec::f32_loop(op);
  parallel_for(0, n, 1 << 14, [=](int64_t b, int64_t e) {
    char* p[3] = {reinterpret_cast<char*>(out + b),
                  const_cast<char*>(reinterpret_cast<const char*>(x + b)),
                  const_cast<char*>(reinterpret_cast<const char*>(g ? g + b : nullptr))};
    const int64_t s[3] = {4, 4, 4};
    f(p, s, e - b);
  });
}

}  // namespace

template <typename T>
void pointwise_fwd(Pointwise f, const T* x, T* y, int64_t n) {
  using K = GeluConst<T>;
  switch (f) {
    case Pointwise::kGeluTanh:
      if constexpr (std::is_same_v<T, float>) {
        vector_loop(vec::Loop::kGeluTanh, y, x, nullptr, n);
      } else {
        pointwise_loop<T>(n, [&](int64_t i) {
          const T v = x[i];
          y[i] = v * vec::sigmoid<T>((v + v * v * v * K::c) * K::k2);
        });
      }
      break;
    case Pointwise::kGeluErf:
      if constexpr (std::is_same_v<T, float>) {
        vector_loop(vec::Loop::kGeluErf, y, x, nullptr, n);
      } else {
        pointwise_loop<T>(n, [&](int64_t i) {
          const T v = x[i];
          y[i] = v * (std::erf(v * K::half_sqrt2) + T(1)) * T(0.5);
        });
      }
      break;
    case Pointwise::kSilu:
      if constexpr (std::is_same_v<T, float>)
        vector_loop(vec::Loop::kSilu, y, x, nullptr, n);
      else
        pointwise_loop<T>(n, [&](int64_t i) { y[i] = x[i] * vec::sigmoid<T>(x[i]); });
      break;
  }
}

template <typename T>
void pointwise_bwd(Pointwise f, const T* x, const T* g, T* gx, int64_t n) {
  using K = GeluConst<T>;
  switch (f) {
    case Pointwise::kGeluTanh:
      // d/dx x s(z) = s + x s (1 - s) z', z = k2 (x + c x^3), z' = k2 (1 + 3 c x^2).
      if constexpr (std::is_same_v<T, float>) {
        vector_loop(vec::Loop::kGeluTanhGrad, gx, x, g, n);
      } else {
        pointwise_loop<T>(n, [&](int64_t i) {
          const T v = x[i];
          const T s = vec::sigmoid<T>((v + v * v * v * K::c) * K::k2);
          const T dz = K::k2 * (T(1) + T(3) * K::c * v * v);
          gx[i] = g[i] * (s + v * s * (T(1) - s) * dz);
        });
      }
      break;
    case Pointwise::kGeluErf:
      if constexpr (std::is_same_v<T, float>) {
        vector_loop(vec::Loop::kGeluErfGrad, gx, x, g, n);
      } else {
        pointwise_loop<T>(n, [&](int64_t i) {
          const T v = x[i];
          const T cdf = T(0.5) * (T(1) + std::erf(v * K::half_sqrt2));
          gx[i] = g[i] * (cdf + v * std::exp(T(-0.5) * v * v) * K::inv_sqrt_2pi);
        });
      }
      break;
    case Pointwise::kSilu:
      if constexpr (std::is_same_v<T, float>) {
        vector_loop(vec::Loop::kSiluGrad, gx, x, g, n);
      } else {
        pointwise_loop<T>(n, [&](int64_t i) {
          const T s = vec::sigmoid<T>(x[i]);
          gx[i] = g[i] * (s * (T(1) + x[i] * (T(1) - s)));
        });
      }
      break;
  }
}

#define KILN_FUSED_INSTANTIATE(T)                                                                 \
  template void softmax_fwd<T>(const T*, T*, int64_t, int64_t, bool, bool);                       \
  template void softmax_bwd<T>(const T*, const T*, T*, int64_t, int64_t, bool);                   \
  template void layer_norm_fwd<T>(const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t, T); \
  template void layer_norm_bwd<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, T*,   \
                                  int64_t, int64_t);                                              \
  template void pointwise_fwd<T>(Pointwise, const T*, T*, int64_t);                               \
  template void pointwise_bwd<T>(Pointwise, const T*, const T*, T*, int64_t);                     \
  template void batch_norm_fwd<T>(const T*, const T*, const T*, T*, T*, T*, T*, int64_t, int64_t, \
                                  int64_t, T, bool);                                              \
  template void batch_norm_bwd<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, T*,   \
                                  int64_t, int64_t, int64_t, bool);                               \
  template void relu_bwd<T>(const T*, const T*, T*, int64_t);
KILN_FUSED_INSTANTIATE(float)
KILN_FUSED_INSTANTIATE(double)
#undef KILN_FUSED_INSTANTIATE

}  // namespace kiln::ops::fused
