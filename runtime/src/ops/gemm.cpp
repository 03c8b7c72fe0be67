// parallel_gemms (ops/gemm.h): independent GEMM items spread over kiln's pool.
#include <mutex>

#include "ops/gemm.h"

namespace kiln::ops {
namespace {

// OpenBLAS's thread count is process-wide: one caller at a time changes it.
std::mutex g_blas_threads_mu;

// OpenBLAS single-threaded for the scope, if this caller may change that.
class SingleThreadedBlas {
 public:
  SingleThreadedBlas() : lock_(g_blas_threads_mu, std::try_to_lock) {
    if (active()) openblas_set_num_threads(1);
  }
  ~SingleThreadedBlas() {
    if (active()) openblas_set_num_threads(num_threads());
  }
  bool active() const { return lock_.owns_lock(); }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace

void parallel_gemms(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
  if (n < 2 || num_threads() == 1 || in_parallel_region()) {
    body(0, n);
    return;
  }
  SingleThreadedBlas one;
  if (!one.active()) {
    body(0, n);
    return;
  }
  parallel_for(0, n, grain, body);
}

void single_threaded_gemm(const std::function<void()>& call) {
  if (num_threads() == 1 || in_parallel_region()) {
    call();
    return;
  }
  SingleThreadedBlas one;
  call();
}

}  // namespace kiln::ops
