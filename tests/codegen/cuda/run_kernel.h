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

}  // namespace kiln::cuda::testing
