// Internal: the CBLAS GEMM wrapper shared by matmul and convolution, plus a
// raw contiguous-copy helper. Never call gemm() from inside parallel_for
// (OpenBLAS runs its own threads, sized like kiln's pool) except through
// parallel_gemms, which makes BLAS single-threaded meanwhile.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <functional>
#include <type_traits>

#include "kiln/error.h"
#include "ops/loops.h"

namespace kiln::ops {

/// Row-major C (m x n) = op(A) op(B), or C += ... when `accumulate`; T is
/// float or double. Empty sizes are handled here (BLAS rejects k == 0 layouts).
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

/// Runs body(b, e) over ranges (at least `grain` long) of [0, n) independent
/// items that each call gemm() (the images of a convolution) over kiln's pool,
/// OpenBLAS single-threaded meanwhile: each core runs whole small GEMMs and the
/// work around them instead of every core synchronizing inside each GEMM.
/// Serial, BLAS threads as usual, when n < 2, with one thread, inside a
/// parallel region, or while another call runs this.
void parallel_gemms(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body);

/// Runs `call` (one small gemm) with OpenBLAS single-threaded when this caller
/// may change that: below kSingleThreadMacs multiply-adds the threads' handoff
/// costs more than they save (the 10-class layer of an MLP: 1.7x faster).
void single_threaded_gemm(const std::function<void()>& call);
inline constexpr int64_t kSingleThreadMacs = int64_t{1} << 22;

/// x as a contiguous tensor of dtype dt (x itself when it already is), without autograd.
inline Tensor contiguous_raw(const Tensor& x, DType dt) {
  if (x.dtype() == dt && x.is_contiguous()) return x;
  Tensor c = make_tensor(x.shape(), dt);
  copy_into(c, x);
  return c;
}

}  // namespace kiln::ops
