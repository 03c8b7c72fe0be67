// Internal: a contiguous tensor over a storage of its own, the one shape of
// construction that make_tensor, from_blob and the pinned results of
// non_blocking copies share.
#pragma once

#include <algorithm>
#include <memory>

#include "kiln/tensor.h"

namespace kiln::detail {

/// A block of n bytes from the calling thread's cache of freed small blocks
/// (TensorImpl and StorageImpl with their shared_ptr control blocks, made and
/// freed once per op); operator new when the cache has none.
void* pool_allocate(size_t n);
/// Returns a block of n bytes from pool_allocate to the calling thread's
/// cache (a bounded number per size; beyond that, and after the thread's
/// cache was torn down, operator delete).
void pool_free(void* p, size_t n);

/// std::allocator-like front of pool_allocate/pool_free for allocate_shared.
template <typename T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <typename U>
  PoolAllocator(const PoolAllocator<U>&) {}  // NOLINT: rebinding, as std::allocator
  T* allocate(size_t n) { return static_cast<T*>(pool_allocate(n * sizeof(T))); }
  void deallocate(T* p, size_t n) { pool_free(p, n * sizeof(T)); }
  friend bool operator==(const PoolAllocator&, const PoolAllocator&) { return true; }
};

/// A new, empty TensorImpl (in one pooled block with its control block).
inline std::shared_ptr<TensorImpl> new_impl() {
  return std::allocate_shared<TensorImpl>(PoolAllocator<TensorImpl>());
}

/// A contiguous tensor of `shape` and `dtype` viewing all of `storage`, on the
/// storage's device (storage->nbytes must hold numel * dtype size).
inline Tensor tensor_over(std::shared_ptr<StorageImpl> storage, const Dims& shape, DType dtype) {
  auto impl = new_impl();
  impl->device = storage->device;
  impl->storage = std::move(storage);
  // Shape and contiguous strides in one loop into the inline slots (no
  // temporary Dims, no memmove call: this runs once per op).
  const size_t rank = shape.size();
  impl->shape.resize(rank);
  impl->strides.resize(rank);
  int64_t acc = 1;
  for (size_t i = rank; i-- > 0;) {
    impl->shape[i] = shape[i];
    impl->strides[i] = acc;
    acc *= std::max<int64_t>(shape[i], 1);
  }
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

/// A fresh storage of `nbytes` from `allocator` on `device` (uninitialized).
inline std::shared_ptr<StorageImpl> allocate_storage(size_t nbytes, Allocator& allocator,
                                                     Device device) {
  auto st = std::allocate_shared<StorageImpl>(PoolAllocator<StorageImpl>());
  st->nbytes = nbytes;
  st->allocator = &allocator;
  st->data = allocator.allocate(nbytes);
  st->device = device;
  return st;
}

/// make_tensor on the CPU for a shape that already passed check_shape (an
/// existing tensor's): dispatch's dense fast path skips the check.
/// `numel` and `element_size` are the shape's and dtype's.
inline Tensor cpu_tensor_unchecked(const Dims& shape, DType dtype, int64_t numel,
                                   size_t element_size) {
  const size_t nbytes = static_cast<size_t>(numel) * element_size;
  return tensor_over(allocate_storage(nbytes, cpu_allocator(), Device::cpu()), shape, dtype);
}

}  // namespace kiln::detail
