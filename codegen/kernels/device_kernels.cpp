// The registry of device kernel compilers (device_kernels.h).
#include "kernels/device_kernels.h"

#include <array>

#include "kiln/error.h"

namespace kiln::detail {
namespace {

std::array<DeviceKernelCompiler*, 8>& compilers() {
  static std::array<DeviceKernelCompiler*, 8> c{};
  return c;
}

}  // namespace

void register_device_kernel_compiler(DeviceType type, DeviceKernelCompiler* c) {
  compilers().at(static_cast<size_t>(type)) = c;
}

DeviceKernelCompiler& device_kernel_compiler(DeviceType type) {
  DeviceKernelCompiler* c = compilers().at(static_cast<size_t>(type));
  KILN_CHECK(c != nullptr, "[compile] compiled graphs on ", Device{type, 0},
             " tensors need kiln built with that device's backend (the CUDA toolkit's headers "
             "at configure time)");
  return *c;
}

}  // namespace kiln::detail
