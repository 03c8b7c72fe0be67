// The caching CPU allocator behind every tensor's storage. Freed blocks are
// kept in size-class free lists and handed out again, so steady-state loops
// never return big blocks to the OS (and never pay page faults for them).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln {

/// Byte and call counters of an allocator.
struct AllocatorStats {
  int64_t current_bytes = 0;   ///< bytes held by live tensors
  int64_t peak_bytes = 0;      ///< maximum of current_bytes since the last reset
  int64_t cached_bytes = 0;    ///< bytes kept in free lists for reuse
  int64_t num_allocs = 0;      ///< allocate() calls
  int64_t num_cache_hits = 0;  ///< allocate() calls served from a free list
  int64_t num_os_allocs = 0;   ///< allocate() calls that went to the OS
};

/// Interface for allocators: the caching CPU allocator here; CUDA's device and pinned
/// allocators live in the CUDA backend (codegen/kernels/cuda/cuda_allocator.cpp).
class Allocator {
 public:
  virtual ~Allocator() = default;
  /// Returns at least `nbytes` bytes, 64-byte aligned. Never returns null.
  virtual void* allocate(size_t nbytes) = 0;
  /// Returns a block obtained from allocate(nbytes) with the same nbytes.
  virtual void deallocate(void* p, size_t nbytes) = 0;
  /// Counters since start (peak since the last reset_peak()).
  virtual AllocatorStats stats() const = 0;
  /// Sets peak_bytes to current_bytes.
  virtual void reset_peak() = 0;
  /// Gives every cached free block back to the OS.
  virtual void empty_cache() = 0;
};

/// The process-wide caching CPU allocator.
Allocator& cpu_allocator();

}  // namespace kiln
