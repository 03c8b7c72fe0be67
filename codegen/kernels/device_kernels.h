// Internal: fused kernels for devices other than the CPU. The executor runs a
// compiled graph on the device of its inputs; a backend (the CUDA one,
// codegen/kernels/cuda/cuda_device.cpp) registers how it compiles and launches a
// kernel IR kernel there. Without one, graphs on that device are refused.
#pragma once

#include <memory>
#include <span>
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
  /// A column-sum argument (an accumulating store) gets the address of the sum
  /// itself: sizes[rank - 1] contiguous values of its entry of `sum_dtypes`
  /// (f32 or f64; one per column-sum argument, in argument order); the backend
  /// keeps the partials and adds them in a fixed order.
  virtual void launch(void* const* ptrs, const int64_t* sizes,
                      std::span<const DType> sum_dtypes) const = 0;
  /// Queues instances of the kernel (one step's; none with column sums):
  /// instance i over sizes[i] with addresses ptrs[i], as launch() would, in
  /// as few launches as the backend can (the CUDA one: a batched kernel, up to
  /// 32 instances per launch). This default launches each in turn.
  virtual void launch_batch(std::span<void* const* const> ptrs,
                            std::span<const int64_t* const> sizes) const {
    for (size_t i = 0; i < ptrs.size(); ++i) launch(ptrs[i], sizes[i], {});
  }
};

/// Compiles kernel IR for devices of one type.
class DeviceKernelCompiler {
 public:
  virtual ~DeviceKernelCompiler() = default;
  /// The kernel ready to launch on `device`; kiln::Error naming the kernel and
  /// why when it cannot run there (a compile error).
  virtual std::shared_ptr<const DeviceKernel> compile(const kir::Kernel& k, Device device) = 0;
};

/// Makes `c` compile the kernels of devices of `type` (a backend, once).
void register_device_kernel_compiler(DeviceType type, DeviceKernelCompiler* c);
/// The compiler for devices of `type`; kiln::Error "[compile] ..." when no
/// backend registered one.
DeviceKernelCompiler& device_kernel_compiler(DeviceType type);

}  // namespace kiln::detail
