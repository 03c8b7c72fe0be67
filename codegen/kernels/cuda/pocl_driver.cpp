// The emulated CUDA device over PoCL (pocl_driver.h). Each cuXxx below has
// the signature of the driver table's member of the same name; state lives in
// one process-wide Emu object created by load_emulated_driver.
#include "kernels/cuda/pocl_driver.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "kernels/cuda/gpu_printer.h"
#include "kiln/error.h"

#if __has_include(<CL/cl.h>)
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#define KILN_HAVE_OPENCL 1
#endif

namespace kiln::cuda {
namespace {
// A plain array, not a std::string: thread-local destructors run before
// static ones at exit, and destroyed statics (cached modules) still call in.
constexpr size_t kDetailMax = 16384;
thread_local char t_detail[kDetailMax];

void set_detail(const std::string& d) {
  const size_t n = std::min(d.size(), kDetailMax - 1);
  std::memcpy(t_detail, d.data(), n);
  t_detail[n] = '\0';
}
}  // namespace

std::string take_emulated_detail() {
  std::string d(t_detail);
  t_detail[0] = '\0';
  return d;
}

#ifndef KILN_HAVE_OPENCL
void* emulated_close_gate(CUstream) {
  return nullptr;
}
void emulated_open_gate(void*) {}
std::string load_emulated_driver(Driver&) {
  return "kiln was built without the OpenCL headers (Debian: opencl-headers), so the emulated "
         "device is not available";
}
#else
namespace {

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
  X(clCreateUserEvent) X(clSetUserEventStatus)
// clang-format on

struct Cl {
#define KILN_CL_MEMBER(name) decltype(&::name) name = nullptr;
  KILN_OPENCL_FUNCS(KILN_CL_MEMBER)
#undef KILN_CL_MEMBER
};

// The largest block the printed kernels' shuffle scratch holds (CUDA's limit).
constexpr size_t kMaxBlock = 1024;

struct Stream {
  cl_command_queue q = nullptr;
  bool blocking = true;     // orders against the null stream (not CU_STREAM_NON_BLOCKING)
  std::mutex mu;            // guards last
  cl_event last = nullptr;  // the newest command: done means the stream is idle
};

struct Event {
  cl_event ev = nullptr;
  bool timing = true;
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
  std::map<std::string, std::unique_ptr<Function> > fns;
  std::mutex mu;
};

struct Emu {
  Cl cl;
  cl_device_id dev = nullptr;
  cl_context ctx = nullptr;
  Stream null_stream;
  std::string name;
  size_t total = 0, local_mem = 0, l2 = 0;
  int units = 1;
  std::mutex mu;  // the maps below
  std::map<uintptr_t, size_t> allocs, pinned;
  size_t allocated = 0;
  std::set<Stream*> streams;
};

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

CUresult check_device_range(CUdeviceptr p, size_t n, const char* what) {
  std::lock_guard<std::mutex> lock(g->mu);
  if (inside(g->allocs, static_cast<uintptr_t>(p), n)) return CUDA_SUCCESS;
  return fail(CUDA_ERROR_INVALID_VALUE,
              str("emulated device: ", what, " touches ", n, " bytes at ",
                  reinterpret_cast<void*>(p), ", outside every device allocation"));
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
// qualified: ADL on the CUDA handle types would also find cuda.h's.
namespace emu {

// ---------------- device, context ----------------
CUresult CUDAAPI cuInit(unsigned) {
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDriverGetVersion(int* v) {
  *v = CUDA_VERSION;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetCount(int* n) {
  *n = 1;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGet(CUdevice* d, int ordinal) {
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *d = 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice d) {
  if (d != 0) return CUDA_ERROR_INVALID_DEVICE;
  if (len <= 0) return CUDA_ERROR_INVALID_VALUE;
  const size_t n = std::min(g->name.size(), static_cast<size_t>(len - 1));
  std::memcpy(name, g->name.data(), n);
  name[n] = '\0';
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice d) {
  if (d != 0) return CUDA_ERROR_INVALID_DEVICE;
  auto clamp = [](size_t x) { return static_cast<int>(std::min<size_t>(x, 0x7fffffff)); };
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *v = 8;
      break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *v = g->units;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
      *v = static_cast<int>(kMaxBlock);
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
      *v = 64;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
      *v = 0x7fffffff;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
      *v = 65535;
      break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
      *v = 32;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
      *v = clamp(g->local_mem);
      break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
      *v = clamp(g->l2);
      break;
    default:
      *v = 0;  // clocks, bus width and the rest have no meaning here
  }
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceTotalMem(size_t* bytes, CUdevice d) {
  if (d != 0) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = g->total;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice d) {
  if (d != 0) return CUDA_ERROR_INVALID_DEVICE;
  *ctx = reinterpret_cast<CUcontext>(&g_context_tag);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice d) {
  return d == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}
CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  t_current = ctx;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxGetCurrent(CUcontext* ctx) {
  *ctx = t_current;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxSynchronize() {
  return finish_all();
}

// ---------------- memory ----------------
CUresult CUDAAPI cuMemAlloc(CUdeviceptr* p, size_t bytes) {
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  {
    std::lock_guard<std::mutex> lock(g->mu);
    if (bytes > g->total - g->allocated) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  void* m = g->cl.clSVMAlloc(g->ctx, CL_MEM_READ_WRITE, bytes, 128);  // PoCL's largest
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(g->mu);
  g->allocs[reinterpret_cast<uintptr_t>(m)] = bytes;
  g->allocated += bytes;
  *p = reinterpret_cast<CUdeviceptr>(m);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemFree(CUdeviceptr p) {
  {
    std::lock_guard<std::mutex> lock(g->mu);
    auto it = g->allocs.find(static_cast<uintptr_t>(p));
    if (it == g->allocs.end())
      return fail(CUDA_ERROR_INVALID_VALUE,
                  "emulated device: cuMemFree of a pointer that is not "
                  "the start of a device allocation");
    g->allocated -= it->second;
    g->allocs.erase(it);
  }
  // Work queued on the block may still run: CUDA's free waits for it too.
  const CUresult r = finish_all();
  g->cl.clSVMFree(g->ctx, reinterpret_cast<void*>(p));
  return r;
}
CUresult CUDAAPI cuMemGetInfo(size_t* free_b, size_t* total_b) {
  std::lock_guard<std::mutex> lock(g->mu);
  *free_b = g->total - g->allocated;
  *total_b = g->total;
  return CUDA_SUCCESS;
}

// A host buffer from cuMemHostAlloc: async copies with it do not wait.
bool pinned(const void* h, size_t n) {
  std::lock_guard<std::mutex> lock(g->mu);
  return inside(g->pinned, reinterpret_cast<uintptr_t>(h), n);
}

CUresult copy(void* dst, const void* src, size_t n, CUstream s, bool blocking) {
  if (n == 0) return CUDA_SUCCESS;
  cl_event ev = nullptr;
  const cl_int e = g->cl.clEnqueueSVMMemcpy(enqueue_point(s), blocking ? CL_TRUE : CL_FALSE, dst,
                                            src, n, 0, nullptr, &ev);
  return enqueued(s, e, ev, "clEnqueueSVMMemcpy");
}
CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr d, const void* h, size_t n) {
  if (CUresult r = check_device_range(d, n, "cuMemcpyHtoD")) return r;
  return copy(reinterpret_cast<void*>(d), h, n, nullptr, true);
}
CUresult CUDAAPI cuMemcpyDtoH(void* h, CUdeviceptr d, size_t n) {
  if (CUresult r = check_device_range(d, n, "cuMemcpyDtoH")) return r;
  return copy(h, reinterpret_cast<const void*>(d), n, nullptr, true);
}
CUresult CUDAAPI cuMemcpyDtoD(CUdeviceptr d, CUdeviceptr s, size_t n) {
  if (CUresult r = check_device_range(d, n, "cuMemcpyDtoD")) return r;
  if (CUresult r = check_device_range(s, n, "cuMemcpyDtoD")) return r;
  return copy(reinterpret_cast<void*>(d), reinterpret_cast<const void*>(s), n, nullptr, false);
}
// Async copies from pageable memory complete before returning, as CUDA's do.
CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr d, const void* h, size_t n, CUstream s) {
  if (CUresult r = check_device_range(d, n, "cuMemcpyHtoDAsync")) return r;
  return copy(reinterpret_cast<void*>(d), h, n, s, !pinned(h, n));
}
CUresult CUDAAPI cuMemcpyDtoHAsync(void* h, CUdeviceptr d, size_t n, CUstream s) {
  if (CUresult r = check_device_range(d, n, "cuMemcpyDtoHAsync")) return r;
  return copy(h, reinterpret_cast<const void*>(d), n, s, !pinned(h, n));
}
CUresult CUDAAPI cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n) {
  if (n == 0) return CUDA_SUCCESS;
  if (CUresult r = check_device_range(d, n, "cuMemsetD8")) return r;
  cl_event ev = nullptr;
  const cl_int e = g->cl.clEnqueueSVMMemFill(enqueue_point(nullptr), reinterpret_cast<void*>(d), &v,
                                             1, n, 0, nullptr, &ev);
  return enqueued(nullptr, e, ev, "clEnqueueSVMMemFill");
}
CUresult CUDAAPI cuMemHostAlloc(void** p, size_t bytes, unsigned) {
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  *p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (!*p) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(g->mu);
  g->pinned[reinterpret_cast<uintptr_t>(*p)] = bytes;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemFreeHost(void* p) {
  {
    std::lock_guard<std::mutex> lock(g->mu);
    if (!g->pinned.erase(reinterpret_cast<uintptr_t>(p))) return CUDA_ERROR_INVALID_VALUE;
  }
  std::free(p);
  return CUDA_SUCCESS;
}

// ---------------- modules and launches ----------------
// A module image is OpenCL C source (opencl_prelude() + printed kernels).
CUresult CUDAAPI cuModuleLoadData(CUmodule* m, const void* image) {
  const char* src = static_cast<const char*>(image);
  cl_int e = CL_SUCCESS;
  cl_program prog = g->cl.clCreateProgramWithSource(g->ctx, 1, &src, nullptr, &e);
  if (e != CL_SUCCESS) return cl_fail(e, "clCreateProgramWithSource");
  // Division and sqrt correctly rounded, as CUDA's defaults (prec-div/-sqrt).
  e = g->cl.clBuildProgram(prog, 1, &g->dev,
                           "-cl-std=CL1.2 -cl-kernel-arg-info -cl-opt-disable -w "
                           "-cl-fp32-correctly-rounded-divide-sqrt",
                           nullptr, nullptr);
  if (e != CL_SUCCESS) {
    size_t n = 0;
    g->cl.clGetProgramBuildInfo(prog, g->dev, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
    std::string log(n, '\0');
    g->cl.clGetProgramBuildInfo(prog, g->dev, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
    g->cl.clReleaseProgram(prog);
    return fail(CUDA_ERROR_INVALID_SOURCE,
                str("emulated device: OpenCL C build failed (", e, "):\n", log.c_str()));
  }
  auto* mod = new Mod;
  mod->prog = prog;
  *m = reinterpret_cast<CUmodule>(mod);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleUnload(CUmodule m) {
  auto* mod = reinterpret_cast<Mod*>(m);
  if (!mod) return CUDA_ERROR_INVALID_HANDLE;
  if (!exiting()) {
    for (auto& [name, f] : mod->fns) g->cl.clReleaseKernel(f->k);  // queued launches keep theirs
    g->cl.clReleaseProgram(mod->prog);
  }
  delete mod;
  return CUDA_SUCCESS;
}

// The bytes of a by-value kernel parameter of OpenCL type `type`.
size_t value_size(const std::string& type) {
  if (type == "kiln_i64" || type == "kiln_u64" || type == "long" || type == "ulong" ||
      type == "double")
    return 8;
  if (type == "int" || type == "uint" || type == "float") return 4;
  if (type == "KilnStrides" || type == "struct KilnStrides") return sizeof(KilnStrides);
  if (type == "KilnIndexGeom" || type == "struct KilnIndexGeom") return sizeof(KilnIndexGeom);
  return 0;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction* out, CUmodule m, const char* name) {
  auto* mod = reinterpret_cast<Mod*>(m);
  if (!mod) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> lock(mod->mu);
  auto& slot = mod->fns[name];
  if (!slot) {
    cl_int e = CL_SUCCESS;
    cl_kernel k = g->cl.clCreateKernel(mod->prog, name, &e);
    if (e != CL_SUCCESS) {
      mod->fns.erase(name);
      return CUDA_ERROR_NOT_FOUND;
    }
    auto f = std::make_unique<Function>();
    f->k = k;
    f->name = name;
    cl_uint nargs = 0;
    g->cl.clGetKernelInfo(k, CL_KERNEL_NUM_ARGS, sizeof nargs, &nargs, nullptr);
    for (cl_uint i = 0; i < nargs; ++i) {
      cl_kernel_arg_address_qualifier aq = 0;
      g->cl.clGetKernelArgInfo(k, i, CL_KERNEL_ARG_ADDRESS_QUALIFIER, sizeof aq, &aq, nullptr);
      char type[256] = {};
      g->cl.clGetKernelArgInfo(k, i, CL_KERNEL_ARG_TYPE_NAME, sizeof type - 1, type, nullptr);
      ArgKind a;
      a.pointer = aq == CL_KERNEL_ARG_ADDRESS_GLOBAL;
      a.size = a.pointer ? sizeof(void*) : value_size(type);
      if (a.size == 0) {
        g->cl.clReleaseKernel(k);
        mod->fns.erase(name);
        return fail(CUDA_ERROR_NOT_SUPPORTED,
                    str("emulated device: kernel '", name, "' parameter ", i, " has type '", type,
                        "', which launches do not know"));
      }
      f->args.push_back(a);
    }
    slot = std::move(f);
  }
  *out = reinterpret_cast<CUfunction>(slot.get());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncGetAttribute(int* v, CUfunction_attribute a, CUfunction fn) {
  auto* f = reinterpret_cast<Function*>(fn);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  size_t x = 0;
  switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      g->cl.clGetKernelWorkGroupInfo(f->k, g->dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof x, &x,
                                     nullptr);
      *v = static_cast<int>(std::min(x, kMaxBlock));
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: {
      cl_ulong l = 0;
      g->cl.clGetKernelWorkGroupInfo(f->k, g->dev, CL_KERNEL_LOCAL_MEM_SIZE, sizeof l, &l, nullptr);
      *v = static_cast<int>(l);
      return CUDA_SUCCESS;
    }
    default:
      *v = 0;  // registers, spills, binary versions: nothing to report
      return CUDA_SUCCESS;
  }
}

CUresult CUDAAPI cuLaunchKernel(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                unsigned by, unsigned bz, unsigned shared, CUstream s,
                                void** params, void** extra) {
  auto* f = reinterpret_cast<Function*>(fn);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  if (extra || (!params && !f->args.empty()))
    return fail(CUDA_ERROR_NOT_SUPPORTED, "emulated device: launches take kernelParams only");
  if (shared) return fail(CUDA_ERROR_NOT_SUPPORTED, "emulated device: no dynamic shared memory");
  if (gx * gy * gz == 0 || bx * by * bz == 0 || size_t{bx} * by * bz > kMaxBlock)
    return fail(CUDA_ERROR_INVALID_VALUE,
                str("emulated device: launch of '", f->name, "' with grid ", gx, "x", gy, "x", gz,
                    " and block ", bx, "x", by, "x", bz));
  std::lock_guard<std::mutex> lock(f->mu);
  for (size_t i = 0; i < f->args.size(); ++i) {
    cl_int e;
    const auto idx = static_cast<cl_uint>(i);
    if (f->args[i].pointer) {
      const CUdeviceptr p = *static_cast<CUdeviceptr*>(params[i]);
      if (p == 0) {
        e = g->cl.clSetKernelArg(f->k, idx, sizeof(cl_mem), nullptr);
      } else {
        if (CUresult r = check_device_range(p, 0, "a kernel argument")) return r;
        e = g->cl.clSetKernelArgSVMPointer(f->k, idx, reinterpret_cast<void*>(p));
      }
    } else {
      e = g->cl.clSetKernelArg(f->k, idx, f->args[i].size, params[i]);
    }
    if (e != CL_SUCCESS) return cl_fail(e, "clSetKernelArg");
  }
  const size_t local[3] = {bx, by, bz};
  const size_t global[3] = {size_t{gx} * bx, size_t{gy} * by, size_t{gz} * bz};
  cl_event ev = nullptr;
  const cl_int e = g->cl.clEnqueueNDRangeKernel(enqueue_point(s), f->k, 3, nullptr, global, local,
                                                0, nullptr, &ev);
  return enqueued(s, e, ev, "clEnqueueNDRangeKernel");
}

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
  const cl_int e = g->cl.clFinish(stream_of(s)->q);
  return e == CL_SUCCESS ? CUDA_SUCCESS : cl_fail(e, "clFinish");
}
// Idle when the newest command (commands run in order) has completed.
CUresult CUDAAPI cuStreamQuery(CUstream s) {
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
  if (!e->ev) return CUDA_SUCCESS;  // never recorded: nothing to wait for
  cl_event barrier = nullptr;
  const cl_int r = g->cl.clEnqueueBarrierWithWaitList(stream_of(s)->q, 1, &e->ev, &barrier);
  return enqueued(s, r, barrier, "clEnqueueBarrierWithWaitList");
}
CUresult CUDAAPI cuEventSynchronize(CUevent ev) {
  auto* e = reinterpret_cast<Event*>(ev);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  if (!e->ev) return CUDA_SUCCESS;
  const cl_int r = g->cl.clWaitForEvents(1, &e->ev);
  return r == CL_SUCCESS ? CUDA_SUCCESS : cl_fail(r, "clWaitForEvents");
}
CUresult CUDAAPI cuEventQuery(CUevent ev) {
  auto* e = reinterpret_cast<Event*>(ev);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  if (!e->ev) return CUDA_SUCCESS;
  cl_int status = CL_QUEUED;
  g->cl.clGetEventInfo(e->ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr);
  return status == CL_COMPLETE ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult CUDAAPI cuEventElapsedTime(float* ms, CUevent a, CUevent b) {
  auto* x = reinterpret_cast<Event*>(a);
  auto* y = reinterpret_cast<Event*>(b);
  if (!x || !y || !x->ev || !y->ev || !x->timing || !y->timing) return CUDA_ERROR_INVALID_HANDLE;
  if (emu::cuEventQuery(a) != CUDA_SUCCESS || emu::cuEventQuery(b) != CUDA_SUCCESS)
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

}  // namespace emu

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

template <auto F>
struct Fresh;
template <class... A, CUresult(CUDAAPI* F)(A...)>
struct Fresh<F> {
  static CUresult CUDAAPI call(A... a) {
    if (!kFreesOwn<F> && exiting()) return CUDA_ERROR_DEINITIALIZED;
    t_detail[0] = '\0';
    return F(a...);
  }
};

// ---------------- loading ----------------
std::string open_pocl(Emu& e) {
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
  cl_int err = CL_SUCCESS;
  e.ctx = e.cl.clCreateContext(nullptr, 1, &e.dev, nullptr, nullptr, &err);
  if (err != CL_SUCCESS) return str("clCreateContext failed (OpenCL error ", err, ")");
  const cl_queue_properties props[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0};
  e.null_stream.q = e.cl.clCreateCommandQueueWithProperties(e.ctx, e.dev, props, &err);
  if (err != CL_SUCCESS) return str("clCreateCommandQueue failed (OpenCL error ", err, ")");
  return "";
}

}  // namespace

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

std::string load_emulated_driver(Driver& d) {
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [] {
    auto* e = new Emu;  // never freed: the device lives until exit, as the driver does
    error = open_pocl(*e);
    if (error.empty()) {
      g = e;
      std::atexit([] { g_exiting = true; });
    }
  });
  if (!error.empty()) return "the emulated CUDA device (PoCL) is unusable: " + error;
#define KILN_EMU_FILL(name, version) d.name = &Fresh<&emu::name>::call;
  KILN_CUDA_DRIVER_FUNCS(KILN_EMU_FILL)
#undef KILN_EMU_FILL
  d.version = CUDA_VERSION;
  d.devices = 1;
  d.emulated = true;
  return "";
}
#endif

}  // namespace kiln::cuda
