// Internal: the CBLAS GEMM wrapper shared by matmul and convolution, plus a
// raw contiguous-copy helper. OpenBLAS always runs single-threaded (the pool
// sets it so): kiln's pool owns the cores, and gemm() splits a large product
// over it. OpenBLAS's own workers would spin for ~0.1 s after every threaded
// call, sharing a core with the fused kernel that runs next (it took 2x as
// long) and with the next GEMM's half.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <type_traits>

#include "kiln/error.h"
#include "ops/loops.h"

namespace kiln::ops {

/// Below this many multiply-adds a GEMM runs on one core: splitting it costs
/// more in handoffs than it saves (the 10-class layer of an MLP).
inline constexpr int64_t kSplitMacs = int64_t{1} << 22;

namespace detail {
// One CBLAS call (the sizes are checked by gemm()).
template <typename T>
void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
               const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate) {
  if (m == 0 || n == 0) return;
  const CBLAS_TRANSPOSE A = ta ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE B = tb ? CblasTrans : CblasNoTrans;
  const T beta = accumulate ? T(1) : T(0);
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, A, B, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
                1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
                static_cast<int>(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, A, B, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
                1.0, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
                static_cast<int>(ldc));
  }
}
}  // namespace detail

/// Row-major C (m x n) = op(A) op(B), or C += ... when `accumulate`; T is
/// float or double. Empty sizes are handled here (BLAS rejects k == 0 layouts).
/// Above kSplitMacs, outside a parallel region, C is split into one block of
/// rows (or of columns, when C is wider than tall) per pool thread. Each block
/// repacks the other operand, so the split side is the one whose repacked
/// operand is smaller. Like OpenBLAS's own threading, the last bits of a
/// result may depend on the thread count (its edge tiles fall elsewhere).
template <typename T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
          int64_t ldb, T* c, int64_t ldc, bool accumulate, const char* op) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i)
        std::memset(c + i * ldc, 0, static_cast<size_t>(n) * sizeof(T));
    return;
  }
  KILN_CHECK(std::max({m, n, k, lda, ldb, ldc}) <= INT_MAX, "[", op, "] a matrix dimension (", m,
             " x ", k, " times ", k, " x ", n, ") exceeds the BLAS limit of ", INT_MAX);
  const int64_t parts = num_threads();
  if (parts == 1 || in_parallel_region() || m * n * k <= kSplitMacs) {
    detail::blas_gemm(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
    return;
  }
  const bool rows = n <= m;
  const int64_t len = rows ? m : n;
  // Block starts on multiples of 16 (whole register tiles of the BLAS kernels).
  auto start = [&](int64_t p) { return p == parts ? len : (len * p / parts) / 16 * 16; };
  parallel_for(0, parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t s = start(p), e = start(p + 1);
      if (rows)
        detail::blas_gemm(ta, tb, e - s, n, k, ta ? a + s : a + s * lda, lda, b, ldb, c + s * ldc,
                          ldc, accumulate);
      else
        detail::blas_gemm(ta, tb, m, e - s, k, a, lda, tb ? b + s * ldb : b + s, ldb, c + s, ldc,
                          accumulate);
    }
  });
}

/// x as a contiguous tensor of dtype dt (x itself when it already is), without autograd.
inline Tensor contiguous_raw(const Tensor& x, DType dt) {
  if (x.dtype() == dt && x.is_contiguous()) return x;
  Tensor c = make_tensor(x.shape(), dt);
  copy_into(c, x);
  return c;
}

}  // namespace kiln::ops
