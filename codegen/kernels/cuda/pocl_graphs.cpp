// The emulated device's CUDA graphs (see pocl_internal.h). A capturing stream
// records its kernel launches, copies, host functions and event records
// instead of running them; cuStreamEndCapture turns the record into a graph
// and cuGraphLaunch replays it in order on a stream, each device pointer
// translated (and so checked) again. The capture rules are CUDA's: while a
// thread captures in a mode other than relaxed, its allocations, frees,
// synchronous copies and synchronizations fail with
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidate the capture (another
// thread's too, in global mode, unless that thread relaxed its own mode:
// they invalidate every global capture then); so do a synchronization with
// (or query of) the capturing stream from any thread, and uses of an event recorded in a capture
// still running. A capture spans several streams as CUDA's does: a stream that waits for an event
// recorded in it joins it (a fork; its later commands are recorded into it), and the capture ends
// only once every forked stream's newest command was waited for by another of its streams (a
// join). The graph replays every command in the order recorded, on the one stream it is launched
// on: a valid order (a command is recorded after everything it waits for), without the streams'
// concurrency. Not emulated: graphs launched inside a capture, and the legacy stream's implicit
// synchronization with a capturing blocking stream.
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
    case CaptureOp::Kind::kAtLaunch:
      return op.at_launch(s);
  }
  return CUDA_ERROR_INVALID_VALUE;
}

}  // namespace

bool capturing(CUstream s) {
  Stream* st = stream_of(s);
  std::lock_guard<std::mutex> lock(st->mu);
  return st->capture != nullptr || st->joined != nullptr;
}

namespace {

// The id of the capture `st` records into (its own or the one it joined); 0: none.
uint64_t capture_id(Stream* st) {
  Stream* origin = nullptr;
  {
    std::lock_guard<std::mutex> lock(st->mu);
    if (st->capture) return st->capture->id;
    origin = st->joined;
  }
  if (!origin) return 0;
  std::lock_guard<std::mutex> lock(origin->mu);
  return origin->capture ? origin->capture->id : 0;
}

// Appends `op` to the capture `st` records into; its index there, or -1
// when `st` does not capture. `event`: an event record of `op`.
int64_t append(Stream* st, CaptureOp&& op, Event* event) {
  Stream* origin = nullptr;
  {
    std::lock_guard<std::mutex> lock(st->mu);
    if (st->capture) {
      st->capture->ops.push_back(std::move(op));
      const size_t at = st->capture->ops.size() - 1;
      if (event) *event = Event{event->ev, event->timing, st->capture->id, st, at};
      return static_cast<int64_t>(at);
    }
    origin = st->joined;
  }
  if (!origin) return -1;
  std::lock_guard<std::mutex> lock(origin->mu);
  Capture* c = origin->capture.get();
  if (!c) return -1;  // the capture ended meanwhile
  c->ops.push_back(std::move(op));
  const size_t at = c->ops.size() - 1;
  c->forked[st] = at;
  c->unjoined.insert(st);
  if (event) *event = Event{event->ev, event->timing, c->id, st, at};
  return static_cast<int64_t>(at);
}

}  // namespace

bool record_op(CUstream s, CaptureOp&& op) {
  return append(stream_of(s), std::move(op), nullptr) >= 0;
}

bool record_event(CUstream s, Event& e) {
  CaptureOp op;
  op.kind = CaptureOp::Kind::kEventRecord;
  op.ev = &e;
  return append(stream_of(s), std::move(op), &e) >= 0;
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
  if (!local) {
    // Another thread's call ends every capture begun in global mode, as CUDA
    // invalidates the captures such a call is prohibited by.
    std::vector<uint64_t> global;
    for (const auto& [id, st] : g_active) {
      std::lock_guard<std::mutex> slock(st->mu);
      if (st->capture && st->capture->mode == CU_STREAM_CAPTURE_MODE_GLOBAL) global.push_back(id);
    }
    for (uint64_t id : global) invalidate(id, why);
  }
  return fail(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
              "emulated device: " + why + "; the capture is invalidated");
}

CUresult sync_with(CUstream s, const char* what) {
  const uint64_t id = capture_id(stream_of(s));
  if (id == 0) return CUDA_SUCCESS;
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
  const uint64_t id = capture_id(st);
  if (id == 0 && e.capture == 0) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> glock(g_capture_mu);
  auto it = g_active.find(e.capture);
  if (id != 0 &&
      e.capture == id) {  // in order already; a wait for a fork's newest command joins it
    if (it != g_active.end()) {
      std::lock_guard<std::mutex> lock(it->second->mu);
      Capture* c = it->second->capture.get();
      if (c && e.on != st) {
        auto f = c->forked.find(e.on);
        if (f != c->forked.end() && f->second == e.op) c->unjoined.erase(e.on);
      }
    }
    return CUDA_ERROR_NOT_READY;
  }
  if (id == 0 && it == g_active.end()) return CUDA_SUCCESS;  // that capture ended
  if (id == 0) {  // a fork: `s` records into that capture until it ends
    Stream* origin = it->second;
    {
      std::lock_guard<std::mutex> lock(st->mu);
      st->joined = origin;
    }
    std::lock_guard<std::mutex> lock(origin->mu);
    if (origin->capture) origin->capture->forked.emplace(st, 0);
    return CUDA_ERROR_NOT_READY;
  }
  const std::string why = "cuStreamWaitEvent joining the work of two captures";
  invalidate(id, why);
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
    for (const auto& [forked, last] : c->forked) {
      std::lock_guard<std::mutex> flock(forked->mu);
      forked->joined = nullptr;
    }
  }
  if (!c->invalidated.empty())
    return fail(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                "emulated device: the capture was invalidated: " + c->invalidated);
  if (!c->unjoined.empty())
    return fail(CUDA_ERROR_STREAM_CAPTURE_UNJOINED,
                str("emulated device: ", c->unjoined.size(),
                    " stream(s) forked into the capture were not joined back (the capturing "
                    "stream must wait for an event recorded after their last work)"));
  *graph = reinterpret_cast<CUgraph>(new Graph{std::move(c->ops)});
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* status) {
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  Stream* st = stream_of(s);
  std::unique_lock<std::mutex> lock(st->mu);
  if (!st->capture && st->joined) {  // forked into another stream's capture: its state
    Stream* origin = st->joined;
    lock.unlock();
    st = origin;
    lock = std::unique_lock<std::mutex>(st->mu);
  }
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

namespace kiln::cuda {

bool emulated_record_launch(CUstream stream, std::function<CUresult(CUstream)> at_launch) {
  pocl::CaptureOp op;
  op.kind = pocl::CaptureOp::Kind::kAtLaunch;
  op.at_launch = std::move(at_launch);
  return pocl::record_op(stream, std::move(op));
}

}  // namespace kiln::cuda
#endif
