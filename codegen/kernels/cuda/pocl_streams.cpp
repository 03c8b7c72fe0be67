// The emulated device's streams and events (see pocl_internal.h): streams are
// in-order queues, events markers.
#include "kernels/cuda/pocl_internal.h"

#include "kiln/error.h"

#ifdef KILN_HAVE_OPENCL
namespace kiln::cuda::pocl::emu {

// ---------------- streams and events ----------------
CUresult CUDAAPI cuStreamCreateWithPriority(CUstream* out, unsigned flags, int) {
  cl_int e = CL_SUCCESS;
  const cl_queue_properties props[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0};
  cl_command_queue q = g->cl.clCreateCommandQueueWithProperties(g->ctx, g->dev, props, &e);
  if (e != CL_SUCCESS) return cl_fail(e, "clCreateCommandQueueWithProperties");
  auto* st = new Stream;
  st->q = q;
  st->blocking = (flags & CU_STREAM_NON_BLOCKING) == 0;
  std::lock_guard<std::mutex> lock(g->mu);
  g->streams.insert(st);
  *out = reinterpret_cast<CUstream>(st);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamDestroy(CUstream s) {
  auto* st = reinterpret_cast<Stream*>(s);
  if (!exiting() && capturing(s))
    return fail(CUDA_ERROR_ILLEGAL_STATE,
                "emulated device: cuStreamDestroy of a stream that is capturing a CUDA graph");
  {
    std::lock_guard<std::mutex> lock(g->mu);
    if (!g->streams.erase(st)) return CUDA_ERROR_INVALID_HANDLE;
  }
  if (!exiting()) {
    if (st->last) g->cl.clReleaseEvent(st->last);
    g->cl.clReleaseCommandQueue(st->q);  // queued work still completes
  }
  delete st;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamSynchronize(CUstream s) {
  if (CUresult r = sync_with(s, "cuStreamSynchronize")) return r;
  const cl_int e = g->cl.clFinish(stream_of(s)->q);
  return e == CL_SUCCESS ? CUDA_SUCCESS : cl_fail(e, "clFinish");
}
// Idle when the newest command (commands run in order) has completed.
CUresult CUDAAPI cuStreamQuery(CUstream s) {
  if (CUresult r = sync_with(s, "cuStreamQuery")) return r;
  Stream* st = stream_of(s);
  g->cl.clFlush(st->q);  // submitted, so polling sees it progress
  std::lock_guard<std::mutex> lock(st->mu);
  if (!st->last) return CUDA_SUCCESS;
  cl_int status = CL_QUEUED;
  g->cl.clGetEventInfo(st->last, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status,
                       nullptr);
  if (status < 0) return CUDA_ERROR_LAUNCH_FAILED;
  return status == CL_COMPLETE ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult CUDAAPI cuEventCreate(CUevent* out, unsigned flags) {
  *out = reinterpret_cast<CUevent>(new Event{nullptr, (flags & CU_EVENT_DISABLE_TIMING) == 0});
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventRecord(CUevent ev, CUstream s) {
  auto* e = reinterpret_cast<Event*>(ev);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  // In a capture: recorded when the graph runs; until the capture ends, not usable.
  if (record_event(s, *e)) return CUDA_SUCCESS;
  e->capture = 0;
  e->on = nullptr;
  cl_event m = nullptr;
  cl_command_queue q = enqueue_point(s);
  const cl_int r = g->cl.clEnqueueMarkerWithWaitList(q, 0, nullptr, &m);
  if (r != CL_SUCCESS) return cl_fail(r, "clEnqueueMarkerWithWaitList");
  g->cl.clFlush(q);  // submitted, so a query without a wait can see it complete
  if (e->ev) g->cl.clReleaseEvent(e->ev);
  e->ev = m;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamWaitEvent(CUstream s, CUevent ev, unsigned) {
  auto* e = reinterpret_cast<Event*>(ev);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = wait_in_capture(s, *e)) return r == CUDA_ERROR_NOT_READY ? CUDA_SUCCESS : r;
  if (!e->ev) return CUDA_SUCCESS;  // never recorded: nothing to wait for
  cl_event barrier = nullptr;
  const cl_int r = g->cl.clEnqueueBarrierWithWaitList(stream_of(s)->q, 1, &e->ev, &barrier);
  return enqueued(s, r, barrier, "clEnqueueBarrierWithWaitList");
}
CUresult CUDAAPI cuEventSynchronize(CUevent ev) {
  auto* e = reinterpret_cast<Event*>(ev);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = event_usable(*e, "cuEventSynchronize")) return r;
  if (CUresult r = unsafe_call("cuEventSynchronize")) return r;
  if (!e->ev) return CUDA_SUCCESS;
  const cl_int r = g->cl.clWaitForEvents(1, &e->ev);
  return r == CL_SUCCESS ? CUDA_SUCCESS : cl_fail(r, "clWaitForEvents");
}
namespace {
// Whether the work before `e` has completed (CUDA_SUCCESS) or not (NOT_READY).
CUresult event_status(const Event& e) {
  if (!e.ev) return CUDA_SUCCESS;
  cl_int status = CL_QUEUED;
  g->cl.clGetEventInfo(e.ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr);
  return status == CL_COMPLETE ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
}  // namespace
CUresult CUDAAPI cuEventQuery(CUevent ev) {
  auto* e = reinterpret_cast<Event*>(ev);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = event_usable(*e, "cuEventQuery")) return r;
  // A GPU refuses it during a capture too (2026-11-27, H200: the constant
  // pool's query inside a user's thread-local capture).
  if (CUresult r = unsafe_call("cuEventQuery")) return r;
  return event_status(*e);
}
CUresult CUDAAPI cuEventElapsedTime(float* ms, CUevent a, CUevent b) {
  auto* x = reinterpret_cast<Event*>(a);
  auto* y = reinterpret_cast<Event*>(b);
  if (!x || !y || !x->ev || !y->ev || !x->timing || !y->timing) return CUDA_ERROR_INVALID_HANDLE;
  if (event_status(*x) != CUDA_SUCCESS || event_status(*y) != CUDA_SUCCESS)
    return CUDA_ERROR_NOT_READY;
  cl_ulong t0 = 0, t1 = 0;
  g->cl.clGetEventProfilingInfo(x->ev, CL_PROFILING_COMMAND_END, sizeof t0, &t0, nullptr);
  g->cl.clGetEventProfilingInfo(y->ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, nullptr);
  *ms = static_cast<float>((static_cast<double>(t1) - static_cast<double>(t0)) * 1e-6);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventDestroy(CUevent ev) {
  auto* e = reinterpret_cast<Event*>(ev);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  if (e->ev && !exiting()) g->cl.clReleaseEvent(e->ev);
  delete e;
  return CUDA_SUCCESS;
}

}  // namespace kiln::cuda::pocl::emu
#endif
