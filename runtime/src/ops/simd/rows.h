// Internal: the per-row and per-channel bodies of the fused softmax,
// log_softmax, layer_norm and batch_norm kernels (f32 and f64), compiled once
// per CPU level like the SIMD loops of ops/simd/loops.h (ops/simd/rows.cpp)
// and picked by ops/fused_kernels.cpp at cpu_level(), which also splits the
// rows over the thread pool. Every level runs the same IEEE operations in the
// same order: the results are equal bit for bit at every level.
#pragma once

#include <cstdint>

namespace kiln::ops::vec {

/// One dtype's row kernels. Each runs rows (batch_norm: channels) [r0, r1)
/// of the whole-tensor kernel of ops/fused_kernels.h with the same name and
/// arguments, except layer_norm_bwd, which adds the rows' terms of the weight
/// and bias gradients to pw and pb (either may be null) and writes the rows
/// of gx (may be null).
template <typename T>
struct RowFns {
  void (*softmax_fwd)(const T* x, T* y, int64_t r0, int64_t r1, int64_t n, bool log, bool safe);
  void (*softmax_bwd)(const T* y, const T* g, T* gx, int64_t r0, int64_t r1, int64_t n, bool log);
  void (*layer_norm_fwd)(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, int64_t r0,
                         int64_t r1, int64_t n, T eps);
  void (*layer_norm_bwd)(const T* x, const T* g, const T* w, const T* mean, const T* rstd, T* gx,
                         T* pw, T* pb, int64_t r0, int64_t r1, int64_t n);
  void (*batch_norm_fwd)(const T* x, const T* w, const T* b, T* y, T* mean, T* var, T* rstd,
                         int64_t c0, int64_t c1, int64_t N, int64_t C, int64_t S, T eps,
                         bool batch_stats);
  void (*batch_norm_bwd)(const T* x, const T* g, const T* w, const T* mean, const T* rstd, T* gx,
                         T* gw, T* gb, int64_t c0, int64_t c1, int64_t N, int64_t C, int64_t S,
                         bool batch_stats);
};

/// A level's row kernels for both dtypes.
struct Rows {
  RowFns<float> f32;
  RowFns<double> f64;
};

// Each level's kernels, in the level namespaces of ops/simd/loops.h.
#if defined(__x86_64__) || defined(_M_X64)
namespace v2 {
const Rows& rows();
}
namespace v3 {
const Rows& rows();
}
namespace v4 {
const Rows& rows();
}
#else
namespace native {
const Rows& rows();
}
#endif

}  // namespace kiln::ops::vec
