// Device buffers, modules and launches (module.h).
#include "kernels/cuda/module.h"

#include <algorithm>

#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/nvrtc_lib.h"
#include "kiln/env.h"
#include "kiln/error.h"

namespace kiln::cuda {

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  const CUresult r = driver().cuMemAlloc(&ptr_, bytes);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    size_t free_b = 0, total_b = 0;
    driver().cuMemGetInfo(&free_b, &total_b);
    KILN_CHECK(false, "[cuda] out of memory: asked for ", bytes, " bytes, ", free_b,
               " bytes free of ", total_b);
  }
  check(r, "cuMemAlloc");
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) driver().cuMemFree(ptr_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) driver().cuMemFree(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = 0;
  }
  return *this;
}

void DeviceBuffer::upload(const void* host, size_t bytes) {
  KILN_CHECK(bytes == bytes_, "[cuda] upload of ", bytes, " bytes into a buffer of ", bytes_);
  if (bytes) check(driver().cuMemcpyHtoD(ptr_, host, bytes), "cuMemcpyHtoD");
}

void DeviceBuffer::download(void* host, size_t bytes) const {
  KILN_CHECK(bytes == bytes_, "[cuda] download of ", bytes, " bytes from a buffer of ", bytes_);
  if (bytes) check(driver().cuMemcpyDtoH(host, ptr_, bytes), "cuMemcpyDtoH");
}

Module::Module(const void* image) {
  check(driver().cuModuleLoadData(&mod_, image), "cuModuleLoadData");
}

Module::~Module() {
  if (mod_) driver().cuModuleUnload(mod_);
}

CUfunction Module::function(const std::string& name) const {
  CUfunction f = nullptr;
  const CUresult r = driver().cuModuleGetFunction(&f, mod_, name.c_str());
  if (r == CUDA_ERROR_NOT_FOUND)
    KILN_CHECK(false, "[cuda] module has no kernel '", name, "' (", error_name(r), ")");
  check(r, "cuModuleGetFunction");
  return f;
}

std::string device_prelude() {
  return driver().emulated ? opencl_prelude() : cuda_prelude();
}

std::vector<char> compile_for_device(const std::string& source, const std::string& name,
                                     int device) {
  if (driver().emulated) {  // the emulated device builds OpenCL C source itself
    std::vector<char> image(source.begin(), source.end());
    image.push_back('\0');
    return image;
  }
  const DeviceInfo info = device_info(device);
  const int arch = info.cc_major * 10 + info.cc_minor;
  const std::vector<int> archs = nvrtc_archs();
  if (std::find(archs.begin(), archs.end(), arch) != archs.end())
    return nvrtc_compile(source, name, arch, /*cubin=*/true).cubin;
  // A device newer than this NVRTC: PTX of the newest older architecture.
  int best = 0;
  for (int a : archs)
    if (a <= arch) best = std::max(best, a);
  KILN_CHECK(best > 0, "[cuda] NVRTC ", nvrtc_version(), " cannot compile for device ", device,
             " (", info.name, ", sm_", arch, ")");
  const std::string ptx = nvrtc_compile(source, name, best, /*cubin=*/false).ptx;
  std::vector<char> image(ptx.begin(), ptx.end());
  if (image.empty() || image.back() != '\0') image.push_back('\0');  // cuModuleLoadData's PTX
  return image;
}

void after_launch(const std::string& kernel) {
  static const bool sync = env::get("KILN_CUDA_SYNC") == "1";
  if (!sync) return;
  const CUresult r = driver().cuCtxSynchronize();
  KILN_CHECK(r == CUDA_SUCCESS, "[cuda] kernel '", kernel, "' failed: ", error_name(r), " (",
             static_cast<int>(r), ")");
}

void launch_kernel(CUfunction fn, const kir::Kernel& k, const std::vector<CUdeviceptr>& ptrs,
                   const int64_t* sizes, CUstream stream) {
  KILN_CHECK(ptrs.size() == k.args.size(), "[cuda] kernel '", k.name, "' takes ", k.args.size(),
             " buffers, got ", ptrs.size());
  const int64_t n = kir::work_items(k, sizes);
  if (n <= 0) return;
  for (int d = 0; d + 1 < k.rank; ++d)
    if (sizes[d] <= 0) return;
  std::vector<long long> scalars;
  scalars.push_back(n);
  for (int d = 0; d < k.rank; ++d) scalars.push_back(sizes[d]);
  std::vector<void*> params;
  for (const CUdeviceptr& p : ptrs) params.push_back(const_cast<CUdeviceptr*>(&p));
  for (long long& s : scalars) params.push_back(&s);
  int64_t threads, blocks;
  if (k.has_reductions()) {
    // One block per row; a reassoc = false kernel sums in index order with one
    // thread. About 32 elements per thread, 64 to 256 threads: on an H200 rows
    // of 1024 ran best with 64 and rows of 4096 with 128 (bench/RESULTS.md).
    const int64_t inner = sizes[k.rank - 1];
    threads = 64;
    while (threads < 256 && threads * 32 < inner) threads *= 2;
    if (!k.reassoc) threads = 1;
    blocks = std::min<int64_t>(n, int64_t{1} << 16);
  } else {
    // Each thread takes 4 elements per grid-stride step (the printer's unroll).
    threads = 256;
    blocks = std::min<int64_t>((n + threads * 4 - 1) / (threads * 4), int64_t{1} << 16);
  }
  check(driver().cuLaunchKernel(fn, static_cast<unsigned>(blocks), 1, 1,
                                static_cast<unsigned>(threads), 1, 1, 0, stream, params.data(),
                                nullptr),
        "cuLaunchKernel");
  after_launch(k.name);
}

}  // namespace kiln::cuda
