// A fixed pool of workers plus the calling thread. One parallel_for runs at a
// time; a call made while the pool is busy (another user thread, or nested
// inside a chunk) runs inline, so the pool never deadlocks or oversubscribes.
// An idle worker polls for the next job for KILN_POOL_SPIN_US before it
// sleeps, as OpenMP runtimes do: a training step posts a job every few hundred
// microseconds, and a sleeping worker woke tens of microseconds late for each
// (a split GEMM waits for its second half; the MLP step took up to 1.1x as long).
// The caller likewise polls for the workers still running its job's chunks.
#include "kiln/thread_pool.h"

#include <cblas.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "kiln/env.h"
#include "kiln/error.h"
#include "kiln/profiler.h"

namespace kiln {
namespace {

thread_local bool t_in_pool = false;

// One spin-wait step that leaves the core's resources to its sibling.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins (cpu_relax) until done() or `us` microseconds have passed: the poll
// before each sleep on a condition variable, by idle workers and the caller.
template <typename Done>
void poll(int us, Done done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (!done() && std::chrono::steady_clock::now() < until) cpu_relax();
}

// How long an idle worker polls before sleeping: KILN_POOL_SPIN_US, default
// 1000 us; none when the pool has more threads than the machine has cores
// (a polling worker would then take a core from a thread with work).
int spin_us(int threads) {
  const long us = env::get_int("KILN_POOL_SPIN_US", 1000);
  KILN_CHECK(us >= 0, "[thread_pool] KILN_POOL_SPIN_US must be >= 0, got ", us);
  if (threads > static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))) return 0;
  return static_cast<int>(std::min(us, 1000000L));
}

class Pool {
 public:
  explicit Pool(int n) { start(n, spin_us(n)); }
  ~Pool() { stop(); }

  int size() const { return size_; }

  void resize(int n) {
    const int spin = spin_us(n);  // a bad KILN_POOL_SPIN_US throws before anything stops
    std::lock_guard<std::mutex> run(run_mu_);
    stop();
    start(n, spin);
  }

  void run(int64_t begin, int64_t end, int64_t chunk,
           const std::function<void(int64_t, int64_t)>& f) {
    std::unique_lock<std::mutex> run(run_mu_, std::try_to_lock);
    if (!run.owns_lock() || workers_.empty()) {
      f(begin, end);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &f;
      begin_ = begin;
      end_ = end;
      chunk_ = chunk;
      next_.store(begin);
      error_ = nullptr;
      open_ = true;
      ++generation_;
      posted_.store(generation_, std::memory_order_release);
    }
    cv_.notify_all();
    bool was = t_in_pool;
    t_in_pool = true;
    work();
    t_in_pool = was;
    // Every chunk is claimed now: wait only for the workers running one. A
    // worker that has not woken up yet stays out (no wake-up latency on the
    // critical path of a small job the caller finished alone).
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = false;
    }
    // Poll first, as the workers do: a worker finishes its last chunk within
    // microseconds, and sleeping on the condition variable made the caller
    // wake tens of microseconds late in a VM (a 64K-element kernel took
    // longer on 2 threads than on 1).
    poll(spin_us_, [&] { return active_.load(std::memory_order_acquire) == 0; });
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return active_.load(std::memory_order_acquire) == 0; });
    job_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void start(int n, int spin) {
    size_ = std::max(1, n);
    spin_us_ = spin;
    quit_ = false;
    for (int i = 0; i + 1 < size_; ++i)
      workers_.emplace_back([this, i] {
        profiler::set_thread_name(str("pool worker ", i + 1));
        loop();
      });
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
      posted_.fetch_add(1);  // ends the workers' polling now
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }
  void work() {
    for (;;) {
      int64_t b = next_.fetch_add(chunk_);
      if (b >= end_) return;
      int64_t e = std::min(end_, b + chunk_);
      try {
        if (profiler::enabled()) [[unlikely]] {
          profiler::Span span("pool", "chunk");
          span.arg("begin", b);
          span.arg("end", e);
          (*job_)(b, e);
        } else {
          (*job_)(b, e);
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
      }
    }
  }
  void loop() {
    t_in_pool = true;
    uint64_t seen = 0;
    for (;;) {
      // Poll first; the wait below then finds a job posted meanwhile at once.
      poll(spin_us_, [&] { return posted_.load(std::memory_order_acquire) != seen; });
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return quit_ || generation_ != seen; });
        if (quit_) return;
        seen = generation_;
        if (!open_) continue;
        active_.fetch_add(1, std::memory_order_relaxed);
      }
      work();
      if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        // Under mu_: the caller checks active_ under it before it sleeps.
        std::lock_guard<std::mutex> lock(mu_);
        done_cv_.notify_one();
      }
    }
  }

  std::mutex run_mu_;  // one parallel_for at a time
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<std::thread> workers_;
  int size_ = 1;
  bool quit_ = false;
  uint64_t generation_ = 0;
  std::atomic<uint64_t> posted_{0};  // changes on each new job and on quit; read without mu_
  int spin_us_ = 0;
  std::atomic<int> active_{0};  // workers inside work() for the current job
  bool open_ = false;           // the current job still takes workers
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t begin_ = 0, end_ = 0, chunk_ = 1;
  std::atomic<int64_t> next_{0};
  std::exception_ptr error_;
};

int default_threads() {
  long n = env::get_int("KILN_NUM_THREADS", 0);
  KILN_CHECK(n >= 0, "[thread_pool] KILN_NUM_THREADS must be >= 1, got ", n);
  if (n == 0) n = static_cast<long>(std::max(1u, std::thread::hardware_concurrency()));
  return static_cast<int>(n);
}

// Set in a forked child: the parent's workers do not exist there (fork copies
// only the calling thread), so the child gets a fresh pool on first use.
std::atomic<bool> g_forked{false};
void mark_forked() {
  g_forked.store(true);
}

Pool& pool() {
  static Pool* p = [] {
    int n = default_threads();
    // The pool owns the cores; large GEMMs are split over it (ops/gemm.h).
    openblas_set_num_threads(1);
    pthread_atfork(nullptr, nullptr, mark_forked);
    return new Pool(n);  // leaked: workers must outlive static tensors
  }();
  if (g_forked.exchange(false)) {
    // The old pool is leaked, never destroyed: joining threads that do not
    // exist (or destroying joinable handles) would abort.
    p = new Pool(p->size());
  }
  return *p;
}

}  // namespace

int num_threads() {
  return pool().size();
}

void set_num_threads(int n) {
  KILN_CHECK(n >= 1, "[set_num_threads] need at least 1 thread, got ", n);
  pool().resize(n);
  openblas_set_num_threads(1);
}

bool in_parallel_region() {
  return t_in_pool;
}

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& f) {
  if (end <= begin) return;
  int64_t n = end - begin;
  grain = std::max<int64_t>(grain, 1);
  if (n <= grain || t_in_pool || num_threads() == 1) {
    f(begin, end);
    return;
  }
  // A few chunks per thread, claimed dynamically: on a shared machine a thread
  // that loses its core for a while no longer holds the others up at the end.
  constexpr int64_t kChunksPerThread = 4;
  int64_t chunks = std::min<int64_t>(kChunksPerThread * num_threads(), (n + grain - 1) / grain);
  int64_t chunk = (n + chunks - 1) / chunks;
  pool().run(begin, end, chunk, f);
}

}  // namespace kiln
