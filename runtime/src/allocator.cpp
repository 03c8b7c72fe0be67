// Caching CPU allocator: sizes are rounded to classes (powers of two up to
// 1 MiB, then multiples of 2 MiB), freed blocks go to a per-class free list and
// are reused. Big blocks therefore stay mapped: a steady-state training loop
// allocates from the OS only in its first iteration.
#include "kiln/allocator.h"

#include <sys/mman.h>

#include <bit>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "kiln/error.h"
#include "kiln/profiler.h"

namespace kiln {
namespace {

constexpr size_t kAlign = 64;
constexpr size_t kSmallLimit = size_t{1} << 20;
constexpr size_t kLargeQuantum = size_t{2} << 20;

size_t size_class(size_t n) {
  if (n == 0) n = 1;
  if (n <= kSmallLimit) {
    size_t c = kAlign;
    while (c < n) c <<= 1;
    return c;
  }
  return (n + kLargeQuantum - 1) / kLargeQuantum * kLargeQuantum;
}

class CachingCpuAllocator final : public Allocator {
 public:
  ~CachingCpuAllocator() override {
    // Intentionally leak cached blocks at exit: static destruction order with
    // tensors held in other statics is unknown.
  }

  void* allocate(size_t nbytes) override {
    size_t c = size_class(nbytes);
    void* p = allocate_class(c, nbytes);
    if (profiler::enabled() && profiler::profile_memory()) [[unlikely]]
      profiler::on_alloc(p, c, stats().current_bytes);
    return p;
  }

  void deallocate(void* p, size_t nbytes) override {
    if (!p) return;
    size_t c = size_class(nbytes);
    int64_t current = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.current_bytes -= static_cast<int64_t>(c);
      stats_.cached_bytes += static_cast<int64_t>(c);
      free_list(c).push_back(p);
      current = stats_.current_bytes;
    }
    if (profiler::enabled() && profiler::profile_memory()) [[unlikely]]
      profiler::on_free(p, c, current);
  }

  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_bytes = stats_.current_bytes;
  }
  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mu_);
    release_all_locked();
  }

 private:
  void* allocate_class(size_t c, size_t nbytes) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.num_allocs;
    auto& list = free_list(c);
    void* p = nullptr;
    if (!list.empty()) {
      p = list.back();
      list.pop_back();
      stats_.cached_bytes -= static_cast<int64_t>(c);
      ++stats_.num_cache_hits;
    } else {
      p = os_alloc(c);
      if (!p) {
        release_all_locked();
        p = os_alloc(c);
      }
      if (!p) throw Error(str("[allocator] out of memory allocating ", nbytes, " bytes"));
      ++stats_.num_os_allocs;
    }
    stats_.current_bytes += static_cast<int64_t>(c);
    if (stats_.current_bytes > stats_.peak_bytes) stats_.peak_bytes = stats_.current_bytes;
    return p;
  }

  static void* os_alloc(size_t c) {
    void* p = std::aligned_alloc(kAlign, c);
    // Large blocks: ask for transparent huge pages (fewer TLB misses and faults).
    if (p && c >= kLargeQuantum) madvise(p, c, MADV_HUGEPAGE);
    return p;
  }
  void release_all_locked() {
    auto release = [&](size_t c, std::vector<void*>& list) {
      for (void* p : list) std::free(p);
      stats_.cached_bytes -= static_cast<int64_t>(c * list.size());
      list.clear();
    };
    for (size_t k = 0; k < kSmallClasses; ++k) release(kAlign << k, small_[k]);
    for (auto& [c, list] : large_) release(c, list);
  }
  // The free list of class c: small classes by index (no hashing on the
  // per-op path), large ones in a map.
  std::vector<void*>& free_list(size_t c) {
    if (c <= kSmallLimit) return small_[std::countr_zero(c) - std::countr_zero(kAlign)];
    return large_[c];
  }

  static constexpr size_t kSmallClasses =
      std::countr_zero(kSmallLimit) - std::countr_zero(kAlign) + 1;
  mutable std::mutex mu_;
  std::vector<void*> small_[kSmallClasses];
  std::unordered_map<size_t, std::vector<void*>> large_;
  AllocatorStats stats_;
};

}  // namespace

Allocator& cpu_allocator() {
  static CachingCpuAllocator* a = new CachingCpuAllocator();  // never destroyed (see above)
  return *a;
}

}  // namespace kiln
