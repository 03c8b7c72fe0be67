// Internal: each CUDA device's pool of constant scalars, the device copies of
// CPU 0-d tensors (x * 0.5, an optimizer's hyperparameters) that eager ops and
// compiled kernels read. A value is uploaded on its first use only, not per
// op: an upload from pageable memory may wait for the stream, which
// serializes an eager program that should run ahead of the GPU.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/tensor.h"

namespace kiln::cuda {

/// `cpu_scalar` (a CPU 0-d tensor) on CUDA device `device`, for kernels to
/// read and never to write: one slot per (dtype, bits) — 0.0 and -0.0, NaN
/// payloads stay apart — in memory never freed or reused while the process
/// lives, so a captured CUDA graph may keep reading it. A new value is
/// uploaded on its first use, on the current stream without waiting for it;
/// a use on another stream while it may be in flight makes that stream wait
/// (an event). An undefined tensor where the pool cannot serve: a new or
/// still uploading value while this thread or the current stream captures a
/// graph (an upload would only run at replay; the graph cannot wait for one
/// outside it), the device's pool full, or the pools off; the caller then
/// copies as before.
Tensor pooled_constant(const Tensor& cpu_scalar, int device);

/// The pools' use so far, all devices.
struct ConstantPoolStats {
  int64_t values = 0;   ///< distinct values held (each uploaded once)
  int64_t hits = 0;     ///< uses served by a value already held
  int64_t refused = 0;  ///< uses left to the caller's copy (pool full, or capturing)
};
ConstantPoolStats constant_pool_stats();

/// The most values one device's pool holds (65536 by default: 512 KiB of
/// device memory); tests lower it to reach the full pool (values already
/// held stay and serve). 0 turns the pools off: every use copies, as before
/// them (benchmarks compare both).
void set_constant_pool_capacity(size_t values);

}  // namespace kiln::cuda
