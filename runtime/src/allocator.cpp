// Caching CPU allocator: sizes are rounded to classes (powers of two up to
// 1 MiB, then multiples of 2 MiB), freed blocks go to a per-class free list and
// are reused. Big blocks therefore stay mapped: a steady-state training loop
// allocates from the OS only in its first iteration.
#include "kiln/allocator.h"

#include "caching_allocator.h"

#include <sys/mman.h>

#include <algorithm>
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

class CachingCpuAllocator final : public CachingAllocator {
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
      count_returned(c);
      free_list(c).push_back(p);
      current = stats_.current_bytes;
    }
    if (profiler::enabled() && profiler::profile_memory()) [[unlikely]]
      profiler::on_free(p, c, current);
  }

 private:
  void* allocate_class(size_t c, size_t nbytes) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.num_allocs;
    void* p = take_free(free_list(c), c);
    if (!p) {
      p = os_alloc(c);
      if (!p) {
        release_cached();
        p = os_alloc(c);
      }
      if (!p) throw Error(str("[allocator] out of memory allocating ", nbytes, " bytes"));
      ++stats_.num_os_allocs;
    }
    count_handed_out(c);
    return p;
  }

  static void* os_alloc(size_t c) {
    void* p = std::aligned_alloc(kAlign, c);
    // Large blocks: ask for transparent huge pages (fewer TLB misses and faults).
    if (p && c >= kLargeQuantum) madvise(p, c, MADV_HUGEPAGE);
    return p;
  }
  void release_cached() override {
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
  std::vector<void*> small_[kSmallClasses];
  std::unordered_map<size_t, std::vector<void*>> large_;
};

}  // namespace

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_bytes = stats_.current_bytes;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached();
}

void* CachingAllocator::take_free(std::vector<void*>& list, size_t size) {
  if (list.empty()) return nullptr;
  void* p = list.back();
  list.pop_back();
  stats_.cached_bytes -= static_cast<int64_t>(size);
  ++stats_.num_cache_hits;
  return p;
}

void CachingAllocator::count_handed_out(size_t size) {
  stats_.current_bytes += static_cast<int64_t>(size);
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
}

void CachingAllocator::count_returned(size_t size) {
  stats_.current_bytes -= static_cast<int64_t>(size);
  stats_.cached_bytes += static_cast<int64_t>(size);
}

Allocator& cpu_allocator() {
  static CachingCpuAllocator* a = new CachingCpuAllocator();  // never destroyed (see above)
  return *a;
}

}  // namespace kiln
