// Shared by the CUDA kernel tests: one printed kernel run on the device (a GPU,
// or the emulated one in CI) over test buffers (kernel_test_util.h).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "codegen/kernel_test_util.h"
#include "kernels/cuda/driver.h"
#include "kernels/cuda/module.h"

namespace kiln::cuda::testing {

/// Launches a kernel on its device pointers (one per argument).
using Launch = std::function<void(CUfunction, const std::vector<CUdeviceptr>&)>;

/// Launches kernel `fn` of `k` over `sizes` on `blocks` x `threads` (x
/// `rows_per_block`: a row kernel's warp rows) with its buffers at `ptrs`
/// (gpu_printer.h's launch ABI: the pointers, the work-item count, the
/// sizes; no column sums).
inline void launch_on(CUfunction fn, const kir::Kernel& k, std::vector<CUdeviceptr> ptrs,
                      const std::vector<int64_t>& sizes, unsigned blocks, unsigned threads,
                      unsigned rows_per_block = 1) {
  std::vector<long long> scalars = {kir::work_items(k, sizes.data())};
  for (int64_t s : sizes) scalars.push_back(s);
  std::vector<void*> params;
  for (CUdeviceptr& p : ptrs) params.push_back(&p);
  for (long long& s : scalars) params.push_back(&s);
  check(driver().cuLaunchKernel(fn, blocks, 1, 1, threads, rows_per_block, 1, 0, nullptr,
                                params.data(), nullptr),
        "cuLaunchKernel");
}

/// Runs printed kernel `name` of `k` over `sizes` with the inputs of `ref`
/// (outputs start as garbage) and returns every buffer as the device left it.
/// `launch` launches it (empty: launch_kernel's own grid).
inline std::vector<kir::testing::Buffer> run_on_gpu(const Module& mod, const std::string& name,
                                                    const kir::Kernel& k,
                                                    const std::vector<kir::testing::Buffer>& ref,
                                                    const std::vector<int64_t>& sizes,
                                                    const Launch& launch = {}) {
  std::vector<DeviceBuffer> dev;
  std::vector<CUdeviceptr> dptr;
  for (size_t a = 0; a < ref.size(); ++a) {
    dev.emplace_back(ref[a].bytes.size());
    if (!ref[a].bytes.empty()) {
      std::vector<char> junk(ref[a].bytes.size(), 0x5a);
      dev.back().upload(k.args[a].is_output ? junk.data() : ref[a].bytes.data(),
                        ref[a].bytes.size());
    }
    dptr.push_back(dev.back().get());
  }
  if (launch)
    launch(mod.function(name), dptr);
  else
    launch_kernel(mod.function(name), k, dptr, sizes.data());
  check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
  std::vector<kir::testing::Buffer> got = ref;
  for (size_t a = 0; a < ref.size(); ++a)
    if (k.args[a].is_output) dev[a].download(got[a].bytes.data(), got[a].bytes.size());
  return got;
}

/// run_on_gpu of printed kernel `name` launched on `blocks` x `threads` (x
/// `rows_per_block`: warp rows) by launch_on.
inline std::vector<kir::testing::Buffer> run_rows(const Module& mod, const std::string& name,
                                                  const kir::Kernel& k,
                                                  const std::vector<kir::testing::Buffer>& ref,
                                                  const std::vector<int64_t>& sizes,
                                                  unsigned blocks, unsigned threads,
                                                  unsigned rows_per_block = 1) {
  return run_on_gpu(mod, name, k, ref, sizes,
                    [&](CUfunction fn, const std::vector<CUdeviceptr>& ptrs) {
                      launch_on(fn, k, ptrs, sizes, blocks, threads, rows_per_block);
                    });
}

}  // namespace kiln::cuda::testing
