// The emulated device's address space (see pocl_internal.h). Its memory is
// PoCL's shared virtual memory, ordinary host memory; were a CUdeviceptr the
// SVM address, a host read of device memory (a bug that crashes on a GPU)
// would just work here. So device addresses are handed out inside a large
// PROT_NONE reservation, each allocation a range of it mapped to its SVM
// block: a host dereference of a device pointer faults, as on a GPU, and the
// emulation reaches the bytes only through to_host (copies, fills, kernel
// arguments, graph replays, the emulated NCCL and GEMM).
#include <sys/mman.h>

#include <algorithm>

#include "kernels/cuda/pocl_internal.h"
#include "kiln/error.h"

#ifdef KILN_HAVE_OPENCL
namespace kiln::cuda {
namespace pocl {
namespace {

// Device allocations start at multiples of this (CUDA's cuMemAlloc aligns
// to at least 256 bytes) and are followed by at least this much address space
// in no allocation: a pointer a little past a block's end is refused (an
// out-of-bounds kernel argument or copy), not taken for the next block's.
constexpr size_t kGrain = size_t{64} << 10;
// Address space only (PROT_NONE, no memory behind it): room for the device's
// memory many times over, so fragmentation never runs it out first.
constexpr size_t kSpace = size_t{1} << 40;

// The range a block of `bytes` takes, its guard included.
size_t grains(size_t bytes) {
  return (bytes + kGrain - 1) / kGrain * kGrain + kGrain;
}

}  // namespace

std::string reserve_device_space(Emu& e) {
  for (size_t size = std::max(kSpace, e.total * 4); size >= std::max<size_t>(e.total, 1 << 30);
       size /= 2) {
    void* p = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) continue;
    e.space = reinterpret_cast<uintptr_t>(p);
    e.space_size = size;
    e.space_free[e.space] = size;
    return "";
  }
  return str("no address space for the device's ", e.total,
             " bytes could be reserved (mmap PROT_NONE; ulimit -v?)");
}

uintptr_t take_device_range(size_t bytes) {
  const size_t n = grains(bytes);
  for (auto it = g->space_free.begin(); it != g->space_free.end(); ++it) {  // first fit
    if (it->second < n) continue;
    const uintptr_t p = it->first;
    const size_t left = it->second - n;
    g->space_free.erase(it);
    if (left) g->space_free[p + n] = left;
    return p;
  }
  return 0;
}

void give_device_range(uintptr_t p, size_t bytes) {
  auto it = g->space_free.emplace(p, grains(bytes)).first;
  if (auto next = std::next(it);
      next != g->space_free.end() && it->first + it->second == next->first) {
    it->second += next->second;
    g->space_free.erase(next);
  }
  if (it != g->space_free.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      g->space_free.erase(it);
    }
  }
}

CUresult to_host(CUdeviceptr p, size_t n, const char* what, void** host) {
  const auto d = static_cast<uintptr_t>(p);
  {
    std::lock_guard<std::mutex> lock(g->mu);
    auto it = g->allocs.upper_bound(d);
    if (it != g->allocs.begin()) {
      --it;
      const size_t off = d - it->first, size = it->second.size;
      if (off <= size && n <= size - off) {
        *host = it->second.svm + off;
        return CUDA_SUCCESS;
      }
    }
  }
  return fail(CUDA_ERROR_INVALID_VALUE,
              str("emulated device: ", what, " touches ", n, " bytes at ",
                  reinterpret_cast<void*>(d), ", outside every device allocation"));
}

}  // namespace pocl

void* emulated_host_address(CUdeviceptr p, size_t n) {
  if (!pocl::g) {
    pocl::set_detail("emulated_host_address: the emulated device is not loaded");
    return nullptr;
  }
  void* host = nullptr;
  return pocl::to_host(p, n, "emulated_host_address", &host) == CUDA_SUCCESS ? host : nullptr;
}

}  // namespace kiln::cuda
#endif
