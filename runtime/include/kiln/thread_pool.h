// The intra-op thread pool shared by eager kernels and compiled (fused)
// kernels. Size: KILN_NUM_THREADS, default = number of cores.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace kiln {

/// Number of threads parallel_for may use (including the caller).
int num_threads();
/// Resizes the pool (n >= 1). OpenBLAS stays single-threaded: large GEMMs are
/// split over this pool instead, so the two never oversubscribe the cores.
void set_num_threads(int n);
/// The OpenBLAS kernels GEMMs run on ("SkylakeX", "Haswell", ...). Where
/// OpenBLAS did not recognize the CPU and fell back to its generic kernels,
/// kiln picks those of the CPU's x86-64 level and says so; OPENBLAS_CORETYPE,
/// when set, is always left to decide.
std::string blas_core();
/// True on a pool worker (nested parallel_for calls then run inline).
bool in_parallel_region();

/// Calls f(b, e) over disjoint chunks covering [begin, end), in parallel when
/// the range has more than `grain` elements. Blocks until all chunks ran;
/// rethrows the first exception a chunk threw.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& f);

/// Default grain: elementwise work below this many elements runs on one thread.
inline constexpr int64_t kDefaultGrain = 32768;

}  // namespace kiln
