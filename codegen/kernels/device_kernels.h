// Internal: fused kernels for devices other than the CPU. The executor runs a
// compiled graph on the device of its inputs; a backend (the CUDA one,
// codegen/kernels/cuda/cuda_device.cpp) registers how it compiles and launches a
// kernel IR kernel there. Without one, graphs on that device are refused.
#pragma once

#include <memory>
#include <string>

#include "kernels/kernel_ir.h"
#include "kiln/device.h"

namespace kiln::detail {

/// One kernel IR kernel compiled for one device.
class DeviceKernel {
 public:
  virtual ~DeviceKernel() = default;
  /// Queues the kernel over its whole iteration space: `ptrs` holds one device
  /// address per kernel argument, `sizes` the iteration sizes (kernel rank).
  virtual void launch(void* const* ptrs, const int64_t* sizes) const = 0;
};

/// Compiles kernel IR for devices of one type.
class DeviceKernelCompiler {
 public:
  virtual ~DeviceKernelCompiler() = default;
  /// The kernel ready to launch on `device`; kiln::Error naming the kernel and
  /// why when it cannot run there (a column sum on CUDA, a compile error).
  virtual std::shared_ptr<const DeviceKernel> compile(const kir::Kernel& k, Device device) = 0;
};

/// Makes `c` compile the kernels of devices of `type` (a backend, once).
void register_device_kernel_compiler(DeviceType type, DeviceKernelCompiler* c);
/// The compiler for devices of `type`; kiln::Error "[compile] ..." when no
/// backend registered one.
DeviceKernelCompiler& device_kernel_compiler(DeviceType type);

}  // namespace kiln::detail
