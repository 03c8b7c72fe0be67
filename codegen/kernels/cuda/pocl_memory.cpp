// The emulated device's device, context and memory entry points (see
// pocl_internal.h): SVM allocations, copies on in-order queues, pinned host
// memory.
#include "kernels/cuda/pocl_internal.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kiln/error.h"

#ifdef KILN_HAVE_OPENCL
namespace kiln::cuda::pocl::emu {

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
  if (CUresult r = unsafe_call("cuCtxSynchronize")) return r;
  return finish_all();
}

// ---------------- memory ----------------
CUresult CUDAAPI cuMemAlloc(CUdeviceptr* p, size_t bytes) {
  if (CUresult r = unsafe_call("cuMemAlloc")) return r;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  {
    std::lock_guard<std::mutex> lock(g->mu);
    if (bytes > g->total - g->allocated) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  void* m = g->cl.clSVMAlloc(g->ctx, CL_MEM_READ_WRITE, bytes, 128);  // PoCL's largest
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(g->mu);
  const uintptr_t d = take_device_range(bytes);
  if (d == 0) {
    g->cl.clSVMFree(g->ctx, m);
    return fail(CUDA_ERROR_OUT_OF_MEMORY, "emulated device: its address range is full");
  }
  g->allocs[d] = Block{bytes, static_cast<char*>(m)};
  g->allocated += bytes;
  *p = static_cast<CUdeviceptr>(d);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemFree(CUdeviceptr p) {
  if (CUresult r = unsafe_call("cuMemFree")) return r;
  void* svm = nullptr;
  {
    std::lock_guard<std::mutex> lock(g->mu);
    auto it = g->allocs.find(static_cast<uintptr_t>(p));
    if (it == g->allocs.end())
      return fail(CUDA_ERROR_INVALID_VALUE,
                  "emulated device: cuMemFree of a pointer that is not "
                  "the start of a device allocation");
    g->allocated -= it->second.size;
    svm = it->second.svm;
    give_device_range(it->first, it->second.size);
    g->allocs.erase(it);
  }
  // Work queued on the block may still run: CUDA's free waits for it too.
  const CUresult r = finish_all();
  g->cl.clSVMFree(g->ctx, svm);
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
// The host (SVM) addresses of a copy's device sides, in place.
CUresult copy_sides(void*& dst, bool dst_device, const void*& src, bool src_device, size_t n,
                    const char* what) {
  void* h = nullptr;
  if (dst_device) {
    if (CUresult r = to_host(reinterpret_cast<CUdeviceptr>(dst), n, what, &h)) return r;
    dst = h;
  }
  if (src_device) {
    if (CUresult r = to_host(reinterpret_cast<CUdeviceptr>(src), n, what, &h)) return r;
    src = h;
  }
  return CUDA_SUCCESS;
}
// A synchronous copy on the null stream (`wait`: waited for).
CUresult copy_sync(void* dst, bool dst_device, const void* src, bool src_device, size_t n,
                   bool wait, const char* what) {
  if (CUresult r = copy_sides(dst, dst_device, src, src_device, n, what)) return r;
  return copy(dst, src, n, nullptr, wait);
}
// An asynchronous copy on `s`, or recorded when `s` captures (device sides
// as device addresses, translated at each replay): the host side must then be
// pinned (kiln stages host data through pinned memory there).
CUresult copy_async(void* dst, bool dst_device, const void* src, bool src_device, size_t n,
                    CUstream s, const char* what) {
  const void* host = !dst_device ? dst : (!src_device ? src : nullptr);
  const bool pinned_host = host && pinned(host, n);
  if (!capturing(s)) {
    if (CUresult r = copy_sides(dst, dst_device, src, src_device, n, what)) return r;
    return copy(dst, src, n, s, host && !pinned_host);
  }
  void* d = dst;  // checked now, translated again at each replay
  const void* from = src;
  if (CUresult r = copy_sides(d, dst_device, from, src_device, n, what)) return r;
  if (host && !pinned_host)  // a host read (or pageable upload): the capture ends invalid
    return sync_with(s, str(what, " with pageable host memory").c_str());
  CaptureOp op;
  op.kind = CaptureOp::Kind::kCopy;
  op.dst = dst;
  op.src = src;
  op.n = n;
  op.dst_device = dst_device;
  op.src_device = src_device;
  record_op(s, std::move(op));
  return CUDA_SUCCESS;
}
void* dev(CUdeviceptr p) {
  return reinterpret_cast<void*>(p);
}
CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr d, const void* h, size_t n) {
  if (CUresult r = unsafe_call("cuMemcpyHtoD (synchronous)")) return r;
  return copy_sync(dev(d), true, h, false, n, true, "cuMemcpyHtoD");
}
CUresult CUDAAPI cuMemcpyDtoH(void* h, CUdeviceptr d, size_t n) {
  if (CUresult r = unsafe_call("cuMemcpyDtoH (a host read)")) return r;
  return copy_sync(h, false, dev(d), true, n, true, "cuMemcpyDtoH");
}
CUresult CUDAAPI cuMemcpyDtoD(CUdeviceptr d, CUdeviceptr s, size_t n) {
  if (CUresult r = unsafe_call("cuMemcpyDtoD (synchronous)")) return r;
  return copy_sync(dev(d), true, dev(s), true, n, false, "cuMemcpyDtoD");
}
// Async copies from pageable memory complete before returning, as CUDA's do.
CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr d, const void* h, size_t n, CUstream s) {
  return copy_async(dev(d), true, h, false, n, s, "cuMemcpyHtoDAsync");
}
CUresult CUDAAPI cuMemcpyDtoHAsync(void* h, CUdeviceptr d, size_t n, CUstream s) {
  return copy_async(h, false, dev(d), true, n, s, "cuMemcpyDtoHAsync");
}
CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr d, CUdeviceptr src, size_t n, CUstream s) {
  return copy_async(dev(d), true, dev(src), true, n, s, "cuMemcpyDtoDAsync");
}
CUresult CUDAAPI cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n) {
  if (CUresult r = unsafe_call("cuMemsetD8 (synchronous)")) return r;
  if (n == 0) return CUDA_SUCCESS;
  void* h = nullptr;
  if (CUresult r = to_host(d, n, "cuMemsetD8", &h)) return r;
  cl_event ev = nullptr;
  const cl_int e = g->cl.clEnqueueSVMMemFill(enqueue_point(nullptr), h, &v, 1, n, 0, nullptr, &ev);
  return enqueued(nullptr, e, ev, "clEnqueueSVMMemFill");
}
CUresult CUDAAPI cuMemHostAlloc(void** p, size_t bytes, unsigned) {
  if (CUresult r = unsafe_call("cuMemHostAlloc")) return r;
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

}  // namespace kiln::cuda::pocl::emu
#endif
