// Internal: the part every caching allocator shares (the CPU one in
// allocator.cpp, CUDA's device and pinned ones in the CUDA backend): the
// counters under one mutex, and the stats(), reset_peak() and empty_cache()
// built on them. Not in kiln/allocator.h, which every tensor user includes.
#pragma once

#include <mutex>
#include <vector>

#include "kiln/allocator.h"

namespace kiln {

/// An allocator keeping AllocatorStats under its mutex.
class CachingAllocator : public Allocator {
 public:
  AllocatorStats stats() const override;
  void reset_peak() override;
  void empty_cache() override;

 protected:
  /// Gives every cached free block back (mu_ held).
  virtual void release_cached() = 0;
  // Counting, with mu_ held:
  /// A block of `size` bytes popped from `list` (a free list of that size)
  /// and counted as a cache hit; nullptr when the list is empty.
  void* take_free(std::vector<void*>& list, size_t size);
  /// A block of `size` bytes handed out: current and peak bytes.
  void count_handed_out(size_t size);
  /// A block of `size` bytes back in the cache.
  void count_returned(size_t size);
  mutable std::mutex mu_;
  AllocatorStats stats_;
};

}  // namespace kiln
