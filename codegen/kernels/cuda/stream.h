// Internal: what kiln's CUDA code needs of streams (kiln/cuda.h has the public
// Stream and Event): the calling thread's current stream of a device, which
// every kernel launch, copy and allocation uses, and the device's context.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>

#include "kiln/cuda.h"

namespace kiln::cuda {

/// The shared state behind Stream handles: destroyed (cuStreamDestroy) with
/// the last handle; blocks of the caching allocator hold one too.
struct Stream::Impl {
  int device = 0;
  int priority = 0;
  uint64_t id = 0;            ///< 0 for the default streams
  CUstream handle = nullptr;  ///< nullptr: the legacy default stream
  ~Impl();
};
using StreamPtr = std::shared_ptr<Stream::Impl>;

/// Makes device `index`'s primary context current on this thread (cheap when it
/// already is).
void use_device(int index);

/// The current stream of `device` on this thread (its default stream unless
/// a StreamGuard or set_current_stream chose another).
StreamPtr current_stream_impl(int device);
/// current_stream_impl(device)->handle without touching a reference count.
CUstream current_cu_stream(int device);

/// True once any non-default stream was created: until then all work is on the
/// default streams and a freed block needs no event to be reused.
bool streams_in_use();

}  // namespace kiln::cuda
