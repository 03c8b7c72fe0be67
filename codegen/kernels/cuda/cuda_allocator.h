// Internal: the CUDA caching allocators. Device memory is stream-ordered, as
// PyTorch's: a block belongs to the stream current when it was allocated; freed,
// it is reusable at once on that stream (later work there runs after the
// earlier users) and on another stream only once an event recorded on its
// stream at free time has completed. record_stream adds streams whose work
// must finish before a freed block is reused at all. Blocks are pieces of
// segments (cuMemAlloc): a cached block larger than a request is split (the
// rest keeps its stream and event), and free neighbours merge back. Pinned
// host memory (cuMemHostAlloc) is cached too, its blocks held back while
// asynchronous copies read them.
#pragma once

#include <cuda.h>

#include <utility>
#include <vector>

#include "kernels/cuda/stream.h"
#include "kiln/allocator.h"

namespace kiln::cuda {

/// The caching allocator of device `device` (made on first use).
Allocator& device_allocator(int device);

/// The process's pinned host allocator (blocks usable with every device).
Allocator& pinned_host_allocator();

/// Device `device`'s segments, each its blocks in address order as
/// {bytes, in use by a tensor} (tests look at splits and merges through it).
std::vector<std::vector<std::pair<size_t, bool>>> device_segments(int device);

/// After queuing an asynchronous copy that reads or writes pinned memory at `p`
/// on `stream`: the block is not handed out again before that work finished.
void pinned_record_use(const void* p, const StreamPtr& stream);

}  // namespace kiln::cuda
