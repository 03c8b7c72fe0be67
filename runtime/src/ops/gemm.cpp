// parallel_gemms (ops/gemm.h): independent GEMM items spread over kiln's pool.
#include <mutex>

#include "ops/gemm.h"

namespace kiln::ops {

void parallel_gemms(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
  // OpenBLAS's thread count is process-wide: one caller at a time changes it.
  static std::mutex mu;
  std::unique_lock<std::mutex> lock(mu, std::try_to_lock);
  if (n < 2 || num_threads() == 1 || in_parallel_region() || !lock.owns_lock()) {
    body(0, n);
    return;
  }
  openblas_set_num_threads(1);
  struct Restore {
    ~Restore() { openblas_set_num_threads(num_threads()); }
  } restore;
  parallel_for(0, n, grain, body);
}

}  // namespace kiln::ops
