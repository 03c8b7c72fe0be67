// Internal: the emulated CUDA device's shared state (pocl_driver.h), used by
// its entry points, which are split by family: pocl_memory.cpp (device,
// context, memory, copies), pocl_launch.cpp (modules, launches),
// pocl_streams.cpp (streams, events), pocl_graphs.cpp (captures, graphs);
// pocl_space.cpp hands out device addresses; pocl_driver.cpp loads PoCL and
// fills the driver table. Each emu::cuXxx has the signature of the table's member of
// the same name (cuda.h's macros map some to their _v2 names, as they do the
// members).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "kernels/cuda/pocl_driver.h"

#if __has_include(<CL/cl.h>)
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#define KILN_HAVE_OPENCL 1
#endif

namespace kiln::cuda::pocl {

/// Sets what take_emulated_detail() reports next on this thread.
void set_detail(const std::string& d);
/// Clears it (each entry point starts with a clean detail).
void clear_detail();
/// The detail, then cleared.
std::string take_detail();

}  // namespace kiln::cuda::pocl

#ifdef KILN_HAVE_OPENCL
namespace kiln::cuda::pocl {
// The OpenCL entry points used, resolved with dlsym (types from CL/cl.h only).
// clang-format off
#define KILN_OPENCL_FUNCS(X) \
  X(clGetPlatformIDs) X(clGetPlatformInfo) X(clGetDeviceIDs) X(clGetDeviceInfo) \
  X(clCreateContext) X(clCreateCommandQueueWithProperties) X(clReleaseCommandQueue) \
  X(clFlush) X(clFinish) X(clSVMAlloc) X(clSVMFree) X(clEnqueueSVMMemcpy) X(clEnqueueSVMMemFill) \
  X(clCreateProgramWithSource) X(clBuildProgram) X(clGetProgramBuildInfo) X(clReleaseProgram) \
  X(clCreateKernel) X(clReleaseKernel) X(clGetKernelInfo) X(clGetKernelArgInfo) \
  X(clGetKernelWorkGroupInfo) X(clSetKernelArg) X(clSetKernelArgSVMPointer) \
  X(clEnqueueNDRangeKernel) X(clEnqueueMarkerWithWaitList) X(clEnqueueBarrierWithWaitList) \
  X(clWaitForEvents) X(clGetEventInfo) X(clGetEventProfilingInfo) X(clReleaseEvent) \
  X(clCreateUserEvent) X(clSetUserEventStatus) X(clEnqueueNativeKernel)
// clang-format on

struct Cl {
#define KILN_CL_MEMBER(name) decltype(&::name) name = nullptr;
  KILN_OPENCL_FUNCS(KILN_CL_MEMBER)
#undef KILN_CL_MEMBER
};

// The largest block the printed kernels' shuffle scratch holds (CUDA's limit).
constexpr size_t kMaxBlock = 1024;

struct Function;
struct Event;
struct Stream;

// One command recorded by a capture (pocl_graphs.cpp), replayed in order by
// every launch of the graph.
struct CaptureOp {
  enum class Kind { kKernel, kCopy, kHostFn, kEventRecord, kAtLaunch } kind = Kind::kKernel;
  Function* f = nullptr;  // kernel: the function, grid and block, each
  unsigned grid[3] = {}, block[3] = {};
  std::vector<std::vector<char>> args;  // parameter's bytes, copied at capture
  void* dst = nullptr;                  // copy: n bytes; device sides translated at replay
  const void* src = nullptr;
  size_t n = 0;
  bool dst_device = false, src_device = false;
  CUhostFn fn = nullptr;  // host function
  void* user = nullptr;
  Event* ev = nullptr;  // event record
  // Called on the host by each launch of the graph, with the stream it runs
  // on (a library's work captured as a node: emulated_record_launch).
  std::function<CUresult(CUstream)> at_launch;
};

// A stream's capture sequence (cuStreamBeginCapture .. cuStreamEndCapture).
struct Capture {
  uint64_t id = 0;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::thread::id thread;
  std::vector<CaptureOp> ops;
  std::string invalidated;  // why, once a prohibited call ended it ("" = valid)
  // Streams that joined it by waiting for an event recorded in it (a fork),
  // each with the index in `ops` of its newest command; `unjoined`: those
  // whose newest command no other stream of the capture waited for yet (the
  // join CUDA requires before the capture ends).
  std::map<Stream*, size_t> forked;
  std::set<Stream*> unjoined;
};

struct Stream {
  cl_command_queue q = nullptr;
  bool blocking = true;              // orders against the null stream (not CU_STREAM_NON_BLOCKING)
  std::mutex mu;                     // guards last and capture
  cl_event last = nullptr;           // the newest command: done means the stream is idle
  std::unique_ptr<Capture> capture;  // while capturing
  Stream* joined = nullptr;          // while forked into another stream's capture: that stream
};

struct Event {
  cl_event ev = nullptr;
  bool timing = true;
  uint64_t capture = 0;  // the capture it was last recorded in (0: none)
  Stream* on = nullptr;  // there: the stream and the index of its record in the capture's ops
  size_t op = 0;
};

struct ArgKind {
  bool pointer = false;
  size_t size = 0;
};

struct Function {
  cl_kernel k = nullptr;
  std::string name;
  std::vector<ArgKind> args;
  std::mutex mu;  // clSetKernelArg .. enqueue is one step
};

struct Mod {
  cl_program prog = nullptr;
  std::map<std::string, std::unique_ptr<Function>> fns;
  std::mutex mu;
};

// A device allocation: its bytes live in an SVM block (what kernels and
// PoCL's copies address), its CUdeviceptr in the reserved device range.
struct Block {
  size_t size = 0;
  char* svm = nullptr;
};

struct Emu {
  Cl cl;
  cl_device_id dev = nullptr;
  cl_context ctx = nullptr;
  Stream null_stream;
  std::string name;
  size_t total = 0, local_mem = 0, l2 = 0;
  int units = 1;
  std::mutex mu;                      // the maps below
  std::map<uintptr_t, Block> allocs;  // by device address
  std::map<uintptr_t, size_t> pinned;
  size_t allocated = 0;
  // Device addresses are handed out inside a PROT_NONE reservation (never
  // the SVM addresses themselves), so a host dereference of one faults as it
  // would on a GPU (pocl_space.cpp).
  uintptr_t space = 0;
  size_t space_size = 0;
  std::map<uintptr_t, size_t> space_free;  // its free ranges: start -> bytes
  std::set<Stream*> streams;
};

/// The device; set once PoCL loaded (load_emulated_driver).
extern Emu* g;
/// True once the process is exiting (PoCL's destructors may have run).
bool exiting();
/// The primary context's handle points here.
extern int g_context_tag;
/// The context current on this thread.
extern thread_local CUcontext t_current;

/// Returns r after recording `detail` for take_emulated_detail.
CUresult fail(CUresult r, const std::string& detail);
/// Whether [p, p + n) lies inside one entry of `m` (a base -> size map).
bool inside(const std::map<uintptr_t, size_t>& m, uintptr_t p, size_t n);

// ---- the device address space (pocl_space.cpp) ----
/// Reserves the range device addresses are handed out from; "" or why not.
std::string reserve_device_space(Emu& e);
/// A device address for `bytes` bytes (g->mu held); 0 when the range is full.
uintptr_t take_device_range(size_t bytes);
/// Returns [p, p + bytes) from take_device_range (g->mu held).
void give_device_range(uintptr_t p, size_t bytes);
/// The SVM address behind device range [p, p + n) in *host; else
/// CUDA_ERROR_INVALID_VALUE with a detail naming `what` (p is in no live
/// allocation). Every place the emulation touches device memory goes
/// through here: device addresses themselves are not host-addressable.
CUresult to_host(CUdeviceptr p, size_t n, const char* what, void** host);
/// The Stream behind a handle (the null/legacy/per-thread handles: the null stream).
Stream* stream_of(CUstream s);
/// The queue to enqueue on for `s`, ordered as CUDA's legacy null stream orders it.
cl_command_queue enqueue_point(CUstream s);
/// Waits for every queue.
CUresult finish_all();
/// The outcome of enqueuing a command on `s` (event `ev`, its newest command).
CUresult enqueued(CUstream s, cl_int e, cl_event ev, const char* what);
/// The CUresult for an OpenCL error of `what`.
CUresult cl_fail(cl_int e, const char* what);

// ---- graph capture (pocl_graphs.cpp) ----
/// Whether `s` is capturing: then its commands are recorded, not run.
bool capturing(CUstream s);
/// Records `op` in the capture of `s` (its own, or the one it was forked
/// into); false when `s` is not capturing (enqueue it then).
bool record_op(CUstream s, CaptureOp&& op);
/// Records event `e` in the capture of `s` (replayed by each launch); false
/// when `s` is not capturing.
bool record_event(CUstream s, Event& e);
/// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (and every capture of this thread
/// invalidated) for a call CUDA forbids while this thread captures in a
/// non-relaxed mode: allocations, frees, synchronous copies, synchronizations.
CUresult unsafe_call(const char* what);
/// The same for a synchronization with, or a query of, stream `s` while it
/// captures; CUDA_SUCCESS when it does not.
CUresult sync_with(CUstream s, const char* what);
/// CUDA_ERROR_CAPTURED_EVENT while `e` was last recorded in a capture still running.
CUresult event_usable(const Event& e, const char* what);
/// cuStreamWaitEvent's rules in a capture: CUDA_ERROR_NOT_READY when `s`
/// captures and `e` was recorded earlier in the same capture (the graph's
/// commands replay in the order they were recorded: nothing to do; a wait for
/// a forked stream's newest command joins it back), or when `s` does not
/// capture and `e` was recorded in a running capture (a fork: `s` joins that
/// capture until it ends); an isolation error when `s` and `e` belong to two
/// captures; CUDA_SUCCESS when neither side captures.
CUresult wait_in_capture(CUstream s, const Event& e);
/// Queues host function fn(user) on `s` in stream order (a native kernel).
CUresult enqueue_host_fn(CUstream s, CUhostFn fn, void* user);
/// Sets f's arguments from `params` and queues it on `s`.
CUresult launch_now(Function* f, const unsigned grid[3], const unsigned block[3],
                    void* const* params, CUstream s);

namespace emu {
/// n bytes from src to dst queued on `s` (waited for when `blocking`).
CUresult copy(void* dst, const void* src, size_t n, CUstream s, bool blocking);
}  // namespace emu

// The entry points, declared from the table's types. Calls among them are
// qualified: ADL on the CUDA handle types would also find cuda.h's.
namespace emu {
#define KILN_EMU_DECLARE(name, version) std::remove_pointer_t<PFN_##name##_v##version> name;
KILN_CUDA_DRIVER_FUNCS(KILN_EMU_DECLARE)
#undef KILN_EMU_DECLARE
}  // namespace emu

}  // namespace kiln::cuda::pocl
#endif
