// Single-pass CPU kernels of the fused eager composites (see fused_kernels.h).
// They follow the composites' formulas and evaluation order (the same float
// roundings per step), with the primitives' own f32 exp and sigmoid: results
// differ from the unfused composites only by summation order. The per-row
// bodies of softmax, log_softmax, layer_norm and batch_norm and the f32 GELU
// and SiLU loops run at the CPU's level (ops/simd/rows.h, ops/simd/loops.h);
// here the work is split over the thread pool.
//
// GCC only if-converts (and so vectorizes) the branch-free math with
// -fno-trapping-math: the kernels never test floating-point exception flags.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include "ops/fused_kernels.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kiln/thread_pool.h"
#include "ops/cpu_level.h"
#include "ops/gelu_const.h"
#include "ops/simd/rows.h"
#include "ops/vec_math.h"

namespace kiln::ops::fused {
namespace {

// Rows per task: about 16K elements of work each.
int64_t row_grain(int64_t n) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1));
}

// The row kernels of `T` at the CPU level the eager SIMD loops run at.
template <typename T>
const vec::RowFns<T>& row_fns() {
  const vec::Rows& r = vec::row_kernels();
  if constexpr (std::is_same_v<T, float>)
    return r.f32;
  else
    return r.f64;
}

}  // namespace

template <typename T>
void softmax_fwd(const T* x, T* y, int64_t rows, int64_t n, bool log, bool safe) {
  const auto f = row_fns<T>().softmax_fwd;
  parallel_for(0, rows, row_grain(n), [&](int64_t b, int64_t e) { f(x, y, b, e, n, log, safe); });
}

template <typename T>
void softmax_bwd(const T* y, const T* g, T* gx, int64_t rows, int64_t n, bool log) {
  const auto f = row_fns<T>().softmax_bwd;
  parallel_for(0, rows, row_grain(n), [&](int64_t b, int64_t e) { f(y, g, gx, b, e, n, log); });
}

template <typename T>
void layer_norm_fwd(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, int64_t rows,
                    int64_t n, T eps) {
  const auto f = row_fns<T>().layer_norm_fwd;
  parallel_for(0, rows, row_grain(n),
               [&](int64_t rb, int64_t re) { f(x, w, b, y, mean, rstd, rb, re, n, eps); });
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
  const auto f = row_fns<T>().layer_norm_bwd;
  parallel_for(0, blocks, 1, [&](int64_t bb, int64_t be) {
    for (int64_t blk = bb; blk < be; ++blk)
      f(x, g, w, mean, rstd, gx, gw ? pw.data() + blk * n : nullptr,
        gb ? pb.data() + blk * n : nullptr, blk * block, std::min(rows, (blk + 1) * block), n);
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

template <typename T>
void batch_norm_fwd(const T* x, const T* w, const T* b, T* y, T* mean, T* var, T* rstd, int64_t N,
                    int64_t C, int64_t S, T eps, bool batch_stats) {
  const auto f = row_fns<T>().batch_norm_fwd;
  parallel_for(0, C, 1, [&](int64_t cb, int64_t ce) {
    f(x, w, b, y, mean, var, rstd, cb, ce, N, C, S, eps, batch_stats);
  });
}

template <typename T>
void batch_norm_bwd(const T* x, const T* g, const T* w, const T* mean, const T* rstd, T* gx, T* gw,
                    T* gb, int64_t N, int64_t C, int64_t S, bool batch_stats) {
  const auto f = row_fns<T>().batch_norm_bwd;
  parallel_for(0, C, 1, [&](int64_t cb, int64_t ce) {
    f(x, g, w, mean, rstd, gx, gw, gb, cb, ce, N, C, S, batch_stats);
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
