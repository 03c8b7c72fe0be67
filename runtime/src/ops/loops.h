// Internal: the loop machinery of eager kernels. A kernel describes its
// operands (base pointer + byte strides over the output's index space) and an
// inner-loop body; strided_loop coalesces dims and splits the work over the
// thread pool. Contiguous operands reach the body with unit strides, where the
// compiler vectorizes it.
#pragma once

#include <array>
#include <cstring>
#include <type_traits>

#include "kiln/tensor.h"
#include "kiln/thread_pool.h"

namespace kiln::ops {

/// The arithmetic type a storage type computes in (f16/bf16 compute in float).
template <typename T>
using compute_t =
    std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;

/// Byte strides of `t` viewed with `out_shape` (NumPy broadcasting: missing or
/// size-1 dims get stride 0).
inline Dims broadcast_byte_strides(const Tensor& t, const Dims& out_shape) {
  Dims st(out_shape.size(), 0);
  const Dims& sh = t.shape();
  const Dims& ts = t.strides();
  int64_t es = static_cast<int64_t>(t.element_size());
  size_t off = out_shape.size() - sh.size();
  for (size_t i = 0; i < sh.size(); ++i) st[off + i] = sh[i] == 1 ? 0 : ts[i] * es;
  return st;
}

/// Runs body(ptrs, inner_strides, n) over every innermost run of `shape`.
template <size_t N, typename F>
void strided_loop(const Dims& shape, std::array<char*, N> base, std::array<Dims, N> strides,
                  F&& body, int64_t grain = kDefaultGrain) {
  // Coalesce: drop size-1 dims, merge a dim into the next when every operand allows it.
  Dims sh;
  std::array<Dims, N> st;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!sh.empty()) {
      bool merge = true;
      for (size_t k = 0; k < N; ++k)
        if (st[k].back() != strides[k][d] * shape[d]) merge = false;
      if (merge) {
        sh.back() *= shape[d];
        for (size_t k = 0; k < N; ++k) st[k].back() = strides[k][d];
        continue;
      }
    }
    sh.push_back(shape[d]);
    for (size_t k = 0; k < N; ++k) st[k].push_back(strides[k][d]);
  }
  int64_t total = numel_of(shape);
  if (total == 0) return;
  if (sh.empty()) {
    sh.push_back(1);
    for (size_t k = 0; k < N; ++k) st[k].push_back(0);
  }
  const size_t rank = sh.size();
  const int64_t inner = sh[rank - 1];
  std::array<int64_t, N> inner_st;
  for (size_t k = 0; k < N; ++k) inner_st[k] = st[k][rank - 1];
  const int64_t outer = total / inner;

  if (outer == 1) {
    parallel_for(0, inner, grain, [&](int64_t b, int64_t e) {
      std::array<char*, N> p;
      for (size_t k = 0; k < N; ++k) p[k] = base[k] + b * inner_st[k];
      body(p.data(), inner_st.data(), e - b);
    });
    return;
  }
  int64_t row_grain = std::max<int64_t>(1, grain / std::max<int64_t>(inner, 1));
  parallel_for(0, outer, row_grain, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      std::array<char*, N> p = base;
      int64_t rem = o;
      for (size_t d = rank - 1; d-- > 0;) {
        int64_t idx = rem % sh[d];
        rem /= sh[d];
        for (size_t k = 0; k < N; ++k) p[k] += idx * st[k][d];
      }
      body(p.data(), inner_st.data(), inner);
    }
  });
}

/// Writes src (broadcast to dst's shape, converted to dst's dtype) into dst.
void copy_into(const Tensor& dst, const Tensor& src);

/// The bytes [lo, hi) of its storage that a tensor's elements span.
std::pair<int64_t, int64_t> byte_extent(const Tensor& t);
/// True if a and b may reach the same bytes (same storage, extents that meet).
bool share_memory(const Tensor& a, const Tensor& b);

/// Makes x's dtype `dt` (returns x itself when it already is), without autograd.
Tensor to_dtype_raw(const Tensor& x, DType dt);

}  // namespace kiln::ops
