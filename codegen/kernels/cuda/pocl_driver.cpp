// The emulated CUDA device over PoCL (pocl_driver.h): loading PoCL, the
// state and helpers its entry points share (pocl_internal.h), and the driver
// table filled with them. The entry points are in pocl_memory.cpp,
// pocl_launch.cpp, pocl_streams.cpp and pocl_graphs.cpp; device addresses in
// pocl_space.cpp.
#include <dlfcn.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/pocl_internal.h"
#include "kiln/error.h"

namespace kiln::cuda {
namespace pocl {
namespace {
// A plain array, not a std::string: thread-local destructors run before
// static ones at exit, and destroyed statics (cached modules) still call in.
constexpr size_t kDetailMax = 16384;
thread_local char t_detail[kDetailMax];
}  // namespace

void set_detail(const std::string& d) {
  const size_t n = std::min(d.size(), kDetailMax - 1);
  std::memcpy(t_detail, d.data(), n);
  t_detail[n] = '\0';
}
void clear_detail() {
  t_detail[0] = '\0';
}
std::string take_detail() {
  std::string d(t_detail);
  t_detail[0] = '\0';
  return d;
}
}  // namespace pocl

std::string take_emulated_detail() {
  return pocl::take_detail();
}

#ifndef KILN_HAVE_OPENCL
void* emulated_close_gate(CUstream) {
  return nullptr;
}
void emulated_open_gate(void*) {}
bool emulated_record_launch(CUstream, std::function<CUresult(CUstream)>) {
  return false;
}
void* emulated_host_address(CUdeviceptr, size_t) {
  return nullptr;
}
std::vector<DriverCalls> emulated_driver_calls() {
  return {};
}
std::string load_emulated_driver(Driver&) {
  return "kiln was built without the OpenCL headers (Debian: opencl-headers), so the emulated "
         "device is not available";
}
#else
namespace pocl {

Emu* g = nullptr;
// Set at exit before PoCL's own destructors run (the handler is registered
// after PoCL loads). Static objects destroyed later (cached modules, say)
// then get CUDA_ERROR_DEINITIALIZED, as from a real driver shutting down,
// instead of calling into a torn-down PoCL; the destroy calls still free
// kiln's own bookkeeping (no leak reports) but leave PoCL's objects alone.
std::atomic<bool> g_exiting{false};
bool exiting() {
  return g_exiting.load(std::memory_order_relaxed);
}
int g_context_tag = 0;  // the primary context's handle points here
thread_local CUcontext t_current = nullptr;

CUresult fail(CUresult r, const std::string& detail) {
  set_detail(detail);
  return r;
}

// Whether [p, p + n) lies inside one entry of `m` (a base -> size map).
bool inside(const std::map<uintptr_t, size_t>& m, uintptr_t p, size_t n) {
  auto it = m.upper_bound(p);
  if (it == m.begin()) return false;
  --it;
  return p >= it->first && p - it->first <= it->second && n <= it->second - (p - it->first);
}

Stream* stream_of(CUstream s) {
  if (s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) return &g->null_stream;
  return reinterpret_cast<Stream*>(s);
}

// The queue to enqueue on for stream `s`, first ordered as CUDA's legacy null
// stream orders it: the null stream waits for every blocking stream's work so
// far, and a blocking stream for the null stream's (nothing when no stream
// was created).
cl_command_queue enqueue_point(CUstream s) {
  Stream* st = stream_of(s);
  std::vector<Stream*> others;
  {
    std::lock_guard<std::mutex> lock(g->mu);
    if (g->streams.empty()) return st->q;
    if (st == &g->null_stream) {
      for (Stream* o : g->streams)
        if (o->blocking) others.push_back(o);
    } else if (st->blocking) {
      others.push_back(&g->null_stream);
    }
  }
  std::vector<cl_event> evs;
  for (Stream* o : others) {
    cl_event e = nullptr;
    if (g->cl.clEnqueueMarkerWithWaitList(o->q, 0, nullptr, &e) != CL_SUCCESS) continue;
    g->cl.clFlush(o->q);  // OpenCL waits across queues only for submitted commands
    evs.push_back(e);
  }
  if (!evs.empty()) {
    g->cl.clEnqueueBarrierWithWaitList(st->q, static_cast<cl_uint>(evs.size()), evs.data(),
                                       nullptr);
    for (cl_event e : evs) g->cl.clReleaseEvent(e);
  }
  return st->q;
}

CUresult finish_all() {
  std::vector<cl_command_queue> qs = {g->null_stream.q};
  {
    std::lock_guard<std::mutex> lock(g->mu);
    for (Stream* s : g->streams) qs.push_back(s->q);
  }
  for (cl_command_queue q : qs)
    if (g->cl.clFinish(q) != CL_SUCCESS)
      return fail(CUDA_ERROR_LAUNCH_FAILED, "emulated device: clFinish failed");
  return CUDA_SUCCESS;
}

CUresult cl_fail(cl_int e, const char* what);

// The outcome of enqueuing a command on stream `s` (event `ev` when it
// succeeded): the stream's newest command, which cuStreamQuery asks about.
CUresult enqueued(CUstream s, cl_int e, cl_event ev, const char* what) {
  if (e != CL_SUCCESS) return cl_fail(e, what);
  Stream* st = stream_of(s);
  cl_event old = nullptr;
  {
    std::lock_guard<std::mutex> lock(st->mu);
    old = st->last;
    st->last = ev;
  }
  if (old) g->cl.clReleaseEvent(old);
  return CUDA_SUCCESS;
}

CUresult cl_fail(cl_int e, const char* what) {
  const CUresult r = e == CL_OUT_OF_HOST_MEMORY || e == CL_MEM_OBJECT_ALLOCATION_FAILURE
                         ? CUDA_ERROR_OUT_OF_MEMORY
                         : (e == CL_OUT_OF_RESOURCES ? CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
                                                     : CUDA_ERROR_INVALID_VALUE);
  return fail(r, str("emulated device: ", what, " returned OpenCL error ", e));
}

// The entry points, named as the driver table's members (cuda.h's macros map
// some to their _v2 names, as they do the members). Calls among them are

namespace {

// Each entry point as the table holds it: what an earlier call left in the
// detail is cleared first, so a failure's detail is always its own.
template <auto F>
constexpr bool kFreesOwn = false;  // a destroy call that runs at exit too
template <>
constexpr bool kFreesOwn<&emu::cuModuleUnload> = true;
template <>
constexpr bool kFreesOwn<&emu::cuStreamDestroy> = true;
template <>
constexpr bool kFreesOwn<&emu::cuEventDestroy> = true;
template <>
constexpr bool kFreesOwn<&emu::cuMemFreeHost> = true;
template <>
constexpr bool kFreesOwn<&emu::cuGraphExecDestroy> = true;
template <>
constexpr bool kFreesOwn<&emu::cuGraphDestroy> = true;

template <auto F>
struct Fresh;
template <class... A, CUresult(CUDAAPI* F)(A...)>
struct Fresh<F> {
  static inline std::atomic<int64_t> calls{0}, ns{0};  // emulated_driver_calls()
  static CUresult CUDAAPI call(A... a) {
    if (!kFreesOwn<F> && exiting()) return CUDA_ERROR_DEINITIALIZED;
    const auto t0 = std::chrono::steady_clock::now();
    clear_detail();
    const CUresult r = F(a...);
    calls.fetch_add(1, std::memory_order_relaxed);
    ns.fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count(),
        std::memory_order_relaxed);
    return r;
  }
};

// ---------------- loading ----------------
// PoCL runs a work-group's work-items in loops on one worker thread's stack
// (their private values live there across barriers): 512 work-items of a
// float4 row kernel overflowed glibc's 8 MiB default (a SIGSEGV inside the
// kernel). Its workers are created while the platform and device initialize,
// with the process's default thread attributes: larger stacks for those only.
class WorkerStacks {
 public:
  WorkerStacks() {
    pthread_attr_t a;
    if (pthread_getattr_default_np(&a) != 0) return;
    size_t size = 0;
    if (pthread_attr_getstacksize(&a, &size) == 0 && size < kStack) {
      old_ = size;
      if (pthread_attr_setstacksize(&a, kStack) != 0 || pthread_setattr_default_np(&a) != 0)
        old_ = 0;
    }
    pthread_attr_destroy(&a);
  }
  ~WorkerStacks() {
    pthread_attr_t a;
    if (old_ == 0 || pthread_getattr_default_np(&a) != 0) return;
    pthread_attr_setstacksize(&a, old_);
    pthread_setattr_default_np(&a);
    pthread_attr_destroy(&a);
  }
  WorkerStacks(const WorkerStacks&) = delete;
  WorkerStacks& operator=(const WorkerStacks&) = delete;

 private:
  static constexpr size_t kStack = size_t{64} << 20;
  size_t old_ = 0;
};

std::string open_pocl(Emu& e) {
  const WorkerStacks stacks;
  void* h = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* why = dlerror();
    return str("libOpenCL.so.1 could not be loaded (", why ? why : "?",
               "); install PoCL (Debian: pocl-opencl-icd, see scripts/setup.sh)");
  }
  std::string missing;
#define KILN_CL_RESOLVE(name)                                         \
  e.cl.name = reinterpret_cast<decltype(e.cl.name)>(dlsym(h, #name)); \
  if (!e.cl.name) missing += (missing.empty() ? "" : ", ") + std::string(#name);
  KILN_OPENCL_FUNCS(KILN_CL_RESOLVE)
#undef KILN_CL_RESOLVE
  if (!missing.empty()) return "libOpenCL.so.1 lacks OpenCL 2.0 entry points: " + missing;
  cl_uint np = 0;
  e.cl.clGetPlatformIDs(0, nullptr, &np);
  std::vector<cl_platform_id> ps(np);
  if (np) e.cl.clGetPlatformIDs(np, ps.data(), nullptr);
  for (cl_platform_id p : ps) {
    char name[256] = {};
    e.cl.clGetPlatformInfo(p, CL_PLATFORM_NAME, sizeof name - 1, name, nullptr);
    // PoCL only: the emulation relies on its SVM, barriers and CPU execution.
    if (std::string(name).find("Portable Computing Language") == std::string::npos) continue;
    if (e.cl.clGetDeviceIDs(p, CL_DEVICE_TYPE_CPU, 1, &e.dev, nullptr) == CL_SUCCESS) break;
  }
  if (!e.dev)
    return "no PoCL CPU device among the OpenCL platforms (install pocl-opencl-icd; "
           "OCL_ICD_VENDORS may hide it)";
  cl_device_svm_capabilities svm = 0;
  e.cl.clGetDeviceInfo(e.dev, CL_DEVICE_SVM_CAPABILITIES, sizeof svm, &svm, nullptr);
  if (!(svm & CL_DEVICE_SVM_COARSE_GRAIN_BUFFER))
    return "the PoCL device has no shared virtual memory";
  char dname[256] = {};
  e.cl.clGetDeviceInfo(e.dev, CL_DEVICE_NAME, sizeof dname - 1, dname, nullptr);
  e.name = str("kiln emulated CUDA device (PoCL ", dname, ")");
  cl_ulong total = 0, local = 0, cache = 0;
  cl_uint units = 1;
  e.cl.clGetDeviceInfo(e.dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof total, &total, nullptr);
  e.cl.clGetDeviceInfo(e.dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local, &local, nullptr);
  e.cl.clGetDeviceInfo(e.dev, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE, sizeof cache, &cache, nullptr);
  e.cl.clGetDeviceInfo(e.dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, nullptr);
  e.total = total;
  e.local_mem = local;
  e.l2 = cache;
  e.units = static_cast<int>(std::max<cl_uint>(units, 1));
  if (std::string why = reserve_device_space(e); !why.empty()) return why;
  cl_int err = CL_SUCCESS;
  e.ctx = e.cl.clCreateContext(nullptr, 1, &e.dev, nullptr, nullptr, &err);
  if (err != CL_SUCCESS) return str("clCreateContext failed (OpenCL error ", err, ")");
  const cl_queue_properties props[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0};
  e.null_stream.q = e.cl.clCreateCommandQueueWithProperties(e.ctx, e.dev, props, &err);
  if (err != CL_SUCCESS) return str("clCreateCommandQueue failed (OpenCL error ", err, ")");
  return "";
}

}  // namespace
}  // namespace pocl

using pocl::enqueue_point;
using pocl::enqueued;
using pocl::exiting;
using pocl::g;

void* emulated_close_gate(CUstream s) {  // a user event behind a barrier
  if (!g || exiting()) return nullptr;
  cl_int e = CL_SUCCESS;
  cl_event user = g->cl.clCreateUserEvent(g->ctx, &e), barrier = nullptr;
  cl_command_queue q = e == CL_SUCCESS ? enqueue_point(s) : nullptr;
  if (q) e = g->cl.clEnqueueBarrierWithWaitList(q, 1, &user, &barrier);
  if (enqueued(s, e, barrier, "a gate (clEnqueueBarrierWithWaitList)") == CUDA_SUCCESS) {
    g->cl.clFlush(q);
    return user;
  }
  if (user) emulated_open_gate(user);
  return nullptr;
}

void emulated_open_gate(void* gate) {
  if (!gate || !g || exiting()) return;  // at exit PoCL may be gone: nothing waits any more
  g->cl.clSetUserEventStatus(static_cast<cl_event>(gate), CL_COMPLETE);
  g->cl.clReleaseEvent(static_cast<cl_event>(gate));
}

std::vector<DriverCalls> emulated_driver_calls() {
  std::vector<DriverCalls> r;
#define KILN_EMU_COUNT(name, version)                                \
  if (const int64_t n = pocl::Fresh<&pocl::emu::name>::calls.load()) \
    r.push_back({#name, n, pocl::Fresh<&pocl::emu::name>::ns.load()});
  KILN_CUDA_DRIVER_FUNCS(KILN_EMU_COUNT)
#undef KILN_EMU_COUNT
  return r;
}

std::string load_emulated_driver(Driver& d) {
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [] {
    auto* e = new pocl::Emu;  // never freed: the device lives until exit, as the driver does
    error = pocl::open_pocl(*e);
    if (error.empty()) {
      g = e;
      std::atexit([] { pocl::g_exiting = true; });
    }
  });
  if (!error.empty()) return "the emulated CUDA device (PoCL) is unusable: " + error;
#define KILN_EMU_FILL(name, version) d.name = &pocl::Fresh<&pocl::emu::name>::call;
  KILN_CUDA_DRIVER_FUNCS(KILN_EMU_FILL)
#undef KILN_EMU_FILL
  d.version = CUDA_VERSION;
  d.devices = 1;
  d.emulated = true;
  return "";
}
#endif

}  // namespace kiln::cuda
