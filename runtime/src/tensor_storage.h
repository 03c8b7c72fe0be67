// Internal: a contiguous tensor over a storage of its own, the one shape of
// construction that make_tensor, from_blob and the pinned results of
// non_blocking copies share.
#pragma once

#include <memory>

#include "kiln/tensor.h"

namespace kiln::detail {

/// A contiguous tensor of `shape` and `dtype` viewing all of `storage`, on the
/// storage's device (storage->nbytes must hold numel * dtype size).
inline Tensor tensor_over(std::shared_ptr<StorageImpl> storage, const Dims& shape, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->device = storage->device;
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

/// A fresh storage of `nbytes` from `allocator` on `device` (uninitialized).
inline std::shared_ptr<StorageImpl> allocate_storage(size_t nbytes, Allocator& allocator,
                                                     Device device) {
  auto st = std::make_shared<StorageImpl>();
  st->nbytes = nbytes;
  st->allocator = &allocator;
  st->data = allocator.allocate(nbytes);
  st->device = device;
  return st;
}

}  // namespace kiln::detail
