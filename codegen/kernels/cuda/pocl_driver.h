// Internal: the emulated CUDA device. A second implementation of the driver
// table (driver.h) over OpenCL on the CPU through PoCL, so machines without a
// GPU (CI) run the CUDA backend's kernels and device tensors through the same
// allocator, copy, module and launch code as a real GPU. libOpenCL.so.1 is
// opened with dlopen, never linked.
//
// What each entry point becomes: device memory is shared virtual memory, but
// a CUdeviceptr is not its SVM address: device addresses lie in a reserved
// PROT_NONE range (pocl_space.cpp), so a host dereference of one faults as on
// a GPU instead of reading the bytes (offsets inside a block are valid device
// pointers, translated where the emulation touches the memory);
// streams are in-order queues (the null stream one of them, with the legacy
// stream's implicit ordering against blocking streams); events are markers;
// modules are OpenCL C source text (the printer's kernels after
// opencl_prelude()); a launch maps grid x block to global x local work sizes
// and each kernel parameter by the kind clGetKernelArgInfo reports; a
// capturing stream records its commands for a CUDA graph, which each graph
// launch replays in order (pocl_graphs.cpp, with CUDA's capture rules). Device
// pointers given to copies and launches must lie inside a live allocation
// (CUDA_ERROR_INVALID_VALUE otherwise, instead of a crash).
//
// It proves the kernels' results (work-group semantics, local memory,
// barriers, shuffles emulated exactly), not their speed or real warp
// scheduling: see the README's "emulated device" notes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/driver.h"

namespace kiln::cuda {

/// Fills `d` with the emulated device (one device, compute capability 8.0).
/// Returns "" when usable, else why not (no libOpenCL.so.1, no PoCL platform,
/// no shared virtual memory, kiln built without the OpenCL headers).
std::string load_emulated_driver(Driver& d);

/// Emulated device only (the emulated NCCL, distributed/nccl/): the work queued
/// on `stream` after this call waits until emulated_open_gate(gate) runs — a
/// completion signalled by a host thread (a collective finished by the comm
/// thread). nullptr when it cannot be enqueued (take_emulated_detail says why).
void* emulated_close_gate(CUstream stream);
/// Lets the work behind `gate` run; every gate must be opened exactly once.
void emulated_open_gate(void* gate);

/// Emulated device only: when `stream` is capturing a CUDA graph, records
/// `at_launch` as a node of it and returns true: each launch of the graph calls
/// it on the host, in order with the graph's other work, with the stream the
/// graph runs on (a library's stream work captured into a graph, as NCCL's
/// kernels are). False when `stream` does not capture (do the work now).
bool emulated_record_launch(CUstream stream, std::function<CUresult(CUstream)> at_launch);

/// Emulated device only: the host address where the emulation keeps device
/// bytes [p, p + n), for the emulation's own host-side work (the emulated
/// NCCL's collectives, the emulated GEMM's host function); nullptr when the
/// range is not inside one live device allocation (take_emulated_detail says
/// why). Device addresses are not host-addressable themselves.
void* emulated_host_address(CUdeviceptr p, size_t n);

/// Calls of one entry point of the driver table.
struct DriverCalls {
  std::string name;  ///< as in KILN_CUDA_DRIVER_FUNCS
  int64_t calls = 0;
  int64_t ns = 0;  ///< time spent in them (the emulation's host work)
};
/// Emulated device only: how many times kiln called each entry point of the
/// driver table in this process and for how long (those called at least
/// once), so tests and benchmarks count the driver calls a piece of work makes
/// and tell the host time outside the driver; empty with the real driver.
std::vector<DriverCalls> emulated_driver_calls();

/// What the emulated device last reported on this thread beyond a CUresult (a
/// kernel's build log, an out-of-bounds pointer), then cleared; "" if nothing.
std::string take_emulated_detail();

}  // namespace kiln::cuda
