// The emulated device's CUDA graphs (see pocl_internal.h). A capturing stream
// records its kernel launches, copies, host functions and event records
// instead of running them; cuStreamEndCapture turns the record into a graph
// and cuGraphLaunch replays it in order on a stream, each device pointer
// translated (and so checked) again. The capture rules are CUDA's: while a
// thread captures in a mode other than relaxed, its allocations, frees,
// synchronous copies and synchronizations fail with
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidate the capture; so do a synchronization with
// (or query of) the capturing stream from any thread, and uses of an event recorded in a capture
// still running. Not emulated: captures spanning several streams (fork/join through events), graphs
// launched inside a capture, and the legacy stream's implicit synchronization with a capturing
// blocking stream.
#include <algorithm>
#include <atomic>

#include "kernels/cuda/pocl_internal.h"
#include "kiln/error.h"

#ifdef KILN_HAVE_OPENCL
namespace kiln::cuda::pocl {
namespace {

std::mutex g_capture_mu;
std::map<uint64_t, Stream*> g_active;  // running captures by id
uint64_t g_next_capture = 0;
int g_global_captures = 0;                      // running captures begun in global mode
thread_local std::vector<uint64_t> t_captures;  // this thread's non-relaxed captures
thread_local CUstreamCaptureMode t_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

struct Graph {
  std::vector<CaptureOp> ops;
};

// Ends capture `id` as invalid (g_capture_mu held).
void invalidate(uint64_t id, const std::string& why) {
  auto it = g_active.find(id);
  if (it == g_active.end()) return;
  std::lock_guard<std::mutex> lock(it->second->mu);
  Capture* c = it->second->capture.get();
  if (c && c->invalidated.empty()) c->invalidated = why;
}

// Stops tracking capture `c` as running (g_capture_mu held).
void forget(const Capture& c) {
  g_active.erase(c.id);
  if (c.mode == CU_STREAM_CAPTURE_MODE_GLOBAL) --g_global_captures;
  std::erase(t_captures, c.id);
}

struct HostCall {
  CUhostFn fn;
  void* user;
};
void run_host_call(void* args) {
  const auto* h = static_cast<const HostCall*>(args);
  h->fn(h->user);
}

CUresult replay(const CaptureOp& op, CUstream s) {
  switch (op.kind) {
    case CaptureOp::Kind::kKernel: {
      std::vector<void*> params;
      for (const std::vector<char>& a : op.args) params.push_back(const_cast<char*>(a.data()));
      return launch_now(op.f, op.grid, op.block, params.data(), s);
    }
    case CaptureOp::Kind::kCopy: {
      void* dst = op.dst;
      const void* src = op.src;
      if (op.dst_device)
        if (CUresult r = to_host(reinterpret_cast<CUdeviceptr>(op.dst), op.n,
                                 "a copy of a CUDA graph", &dst))
          return r;
      if (op.src_device) {
        void* h = nullptr;
        if (CUresult r =
                to_host(reinterpret_cast<CUdeviceptr>(op.src), op.n, "a copy of a CUDA graph", &h))
          return r;
        src = h;
      }
      return emu::copy(dst, src, op.n, s, false);
    }
    case CaptureOp::Kind::kHostFn:
      return enqueue_host_fn(s, op.fn, op.user);
    case CaptureOp::Kind::kEventRecord:
      return emu::cuEventRecord(reinterpret_cast<CUevent>(op.ev), s);
  }
  return CUDA_ERROR_INVALID_VALUE;
}

}  // namespace

bool capturing(CUstream s) {
  Stream* st = stream_of(s);
  std::lock_guard<std::mutex> lock(st->mu);
  return st->capture != nullptr;
}

bool record_op(CUstream s, CaptureOp&& op) {
  Stream* st = stream_of(s);
  std::lock_guard<std::mutex> lock(st->mu);
  if (!st->capture) return false;
  st->capture->ops.push_back(std::move(op));
  return true;
}

CUresult unsafe_call(const char* what) {
  if (t_mode == CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lock(g_capture_mu);
  const bool local = !t_captures.empty();
  if (!local && !(t_mode == CU_STREAM_CAPTURE_MODE_GLOBAL && g_global_captures > 0))
    return CUDA_SUCCESS;
  const std::string why =
      str(what, " was called while ", local ? "this thread" : "another thread",
          " captures a CUDA graph (allocations, frees, synchronous copies, host reads and "
          "synchronizations are not allowed during a capture)");
  for (uint64_t id : t_captures) invalidate(id, why);
  return fail(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
              "emulated device: " + why + "; the capture is invalidated");
}

CUresult sync_with(CUstream s, const char* what) {
  Stream* st = stream_of(s);
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(st->mu);
    if (!st->capture) return CUDA_SUCCESS;
    id = st->capture->id;
  }
  const std::string why = str(what, " on a stream that is capturing a CUDA graph (a host read or ",
                              "a synchronization during the capture)");
  {
    std::lock_guard<std::mutex> lock(g_capture_mu);
    invalidate(id, why);
  }
  return fail(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
              "emulated device: " + why + "; the capture is invalidated");
}

CUresult event_usable(const Event& e, const char* what) {
  if (e.capture == 0) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lock(g_capture_mu);
  if (!g_active.count(e.capture)) return CUDA_SUCCESS;  // the capture ended: as never recorded
  return fail(CUDA_ERROR_CAPTURED_EVENT,
              str("emulated device: ", what,
                  " of an event recorded in a CUDA graph capture that is still running"));
}

CUresult wait_in_capture(CUstream s, const Event& e) {
  Stream* st = stream_of(s);
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(st->mu);
    id = st->capture ? st->capture->id : 0;
  }
  if (id == 0 && e.capture == 0) return CUDA_SUCCESS;
  if (id != 0 && e.capture == id) return CUDA_ERROR_NOT_READY;  // in order already
  std::lock_guard<std::mutex> lock(g_capture_mu);
  if (id == 0 && !g_active.count(e.capture)) return CUDA_SUCCESS;  // that capture ended
  const std::string why =
      "cuStreamWaitEvent joining captured and uncaptured work (captures over several streams "
      "are not emulated)";
  if (id) invalidate(id, why);
  return fail(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "emulated device: " + why);
}

CUresult enqueue_host_fn(CUstream s, CUhostFn fn, void* user) {
  HostCall h{fn, user};
  cl_event ev = nullptr;
  const cl_int e = g->cl.clEnqueueNativeKernel(enqueue_point(s), run_host_call, &h, sizeof h, 0,
                                               nullptr, nullptr, 0, nullptr, &ev);
  const CUresult r = enqueued(s, e, ev, "clEnqueueNativeKernel (a host function)");
  if (r == CUDA_SUCCESS) g->cl.clFlush(stream_of(s)->q);  // runs without a later wait too
  return r;
}

namespace emu {

CUresult CUDAAPI cuLaunchHostFunc(CUstream s, CUhostFn fn, void* user) {
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  CaptureOp op;
  op.kind = CaptureOp::Kind::kHostFn;
  op.fn = fn;
  op.user = user;
  if (record_op(s, std::move(op))) return CUDA_SUCCESS;
  return enqueue_host_fn(s, fn, user);
}

CUresult CUDAAPI cuStreamBeginCapture(CUstream s, CUstreamCaptureMode mode) {
  if (s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
    return fail(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                "emulated device: the legacy default stream cannot be captured (capture on a "
                "created stream)");
  Stream* st = stream_of(s);
  std::lock_guard<std::mutex> glock(g_capture_mu);
  std::lock_guard<std::mutex> lock(st->mu);
  if (st->capture)
    return fail(CUDA_ERROR_ILLEGAL_STATE, "emulated device: the stream is already capturing");
  auto c = std::make_unique<Capture>();
  c->id = ++g_next_capture;
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  g_active[c->id] = st;
  if (mode == CU_STREAM_CAPTURE_MODE_GLOBAL) ++g_global_captures;
  if (mode != CU_STREAM_CAPTURE_MODE_RELAXED) t_captures.push_back(c->id);
  st->capture = std::move(c);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamEndCapture(CUstream s, CUgraph* graph) {
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  *graph = nullptr;
  if (s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
    return CUDA_ERROR_ILLEGAL_STATE;
  Stream* st = stream_of(s);
  std::unique_ptr<Capture> c;
  {
    std::lock_guard<std::mutex> glock(g_capture_mu);
    std::lock_guard<std::mutex> lock(st->mu);
    if (!st->capture)
      return fail(CUDA_ERROR_ILLEGAL_STATE, "emulated device: the stream is not capturing");
    if (st->capture->mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
        st->capture->thread != std::this_thread::get_id())
      return fail(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,
                  "emulated device: the capture must end on the thread that began it");
    c = std::move(st->capture);
    forget(*c);
  }
  if (!c->invalidated.empty())
    return fail(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                "emulated device: the capture was invalidated: " + c->invalidated);
  *graph = reinterpret_cast<CUgraph>(new Graph{std::move(c->ops)});
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* status) {
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  Stream* st = stream_of(s);
  std::lock_guard<std::mutex> lock(st->mu);
  *status = !st->capture                       ? CU_STREAM_CAPTURE_STATUS_NONE
            : st->capture->invalidated.empty() ? CU_STREAM_CAPTURE_STATUS_ACTIVE
                                               : CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  std::swap(*mode, t_mode);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long) {
  if (!exec || !graph) return CUDA_ERROR_INVALID_VALUE;
  *exec = reinterpret_cast<CUgraphExec>(new Graph(*reinterpret_cast<Graph*>(graph)));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec exec, CUstream s) {
  auto* graph = reinterpret_cast<Graph*>(exec);
  if (!graph) return CUDA_ERROR_INVALID_HANDLE;
  if (capturing(s))
    return fail(CUDA_ERROR_NOT_SUPPORTED,
                "emulated device: launching a graph inside a capture is not emulated");
  for (const CaptureOp& op : graph->ops)
    if (CUresult r = replay(op, s)) return r;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec exec) {
  delete reinterpret_cast<Graph*>(exec);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphDestroy(CUgraph graph) {
  delete reinterpret_cast<Graph*>(graph);
  return CUDA_SUCCESS;
}

}  // namespace emu
}  // namespace kiln::cuda::pocl
#endif
