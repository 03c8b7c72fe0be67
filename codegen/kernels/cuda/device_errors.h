// Internal: errors CUDA kernels find in their input (an out-of-range index)
// reported without a host read at the launch, as PyTorch's device-side
// checks. Each device has one error record in device memory, allocated once
// outside every pool and graph, at a fixed address: a kernel that meets a bad
// value skips it and records the first one with its launch's tag (which op,
// dim and size: kept on the host, never freed, so tags in captured CUDA
// graphs stay valid for every replay). The host reads the record (through the
// driver) and resets it when it next synchronizes with the device: copies to
// the host, cuda::synchronize, Stream::synchronize, Event::synchronize.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace kiln::cuda {

/// Where a launch records its first bad index: `record` (an int tag, then the
/// value as a 64-bit integer at byte 8), and the launch's tag (> 0).
struct ErrorSlot {
  CUdeviceptr record = 0;
  int tag = 0;
};

/// The record of `device` and the tag for "[op] index v is out of bounds for
/// dimension `dim` with size `bound`". Allocates the record on the device's
/// first call (allowed during a capture). Tags are shared by equal
/// (op, dim, bound).
ErrorSlot index_error_slot(int device, const char* op, int64_t dim, int64_t bound);

/// check_device_errors' `where` right after a launch (KILN_CUDA_SYNC=1).
inline constexpr const char* kAtLaunch = "the launch (KILN_CUDA_SYNC=1)";

/// Reads device `device`'s record after the host synchronized with it at
/// `where` (what kind of synchronization, for the message); if a kernel
/// recorded a bad index, resets the record and raises kiln::Error naming the
/// op, the index, the dim and its size. Free when no index kernel ever ran on
/// the device; does nothing while this thread captures a CUDA graph.
void check_device_errors(int device, const char* where);

}  // namespace kiln::cuda
