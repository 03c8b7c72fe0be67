// Devices other than the CPU, as the runtime sees them. The runtime knows no
// CUDA: a backend (kiln's codegen library for CUDA) registers a DeviceRuntime
// that owns the device's memory, copies and eager kernels, and dispatch sends
// every op whose inputs live on that device there.
#pragma once

#include <span>
#include <string>

#include "kiln/allocator.h"
#include "kiln/attrs.h"
#include "kiln/device.h"
#include "kiln/op_table.h"

namespace kiln {

class Tensor;

/// One kind of device (all devices of one DeviceType).
class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  /// "" when devices of this type can be used, else why not (no driver, ...).
  virtual std::string unavailable_reason() = 0;
  /// The number of devices of this type.
  virtual int device_count() = 0;
  /// The allocator of device `index` (memory the CPU cannot address).
  virtual Allocator& allocator(int index) = 0;
  /// dst = src elementwise (cast, broadcast, any strides) where dst, src or
  /// both are on this device type, ordered on the device's current stream; the
  /// host may reuse or read the host side when it returns.
  virtual void copy(const Tensor& dst, const Tensor& src) = 0;
  /// copy(dst, src), but a copy between pinned host memory (pinned_allocator())
  /// and the device, either way, may still be in flight when it returns
  /// (Tensor::to's non_blocking); every other copy is synchronous as copy()'s.
  virtual void copy_non_blocking(const Tensor& dst, const Tensor& src) { copy(dst, src); }
  /// The allocator of page-locked host memory that copies to this device type
  /// read asynchronously (Tensor::pin_memory), or nullptr if it has none. Its
  /// blocks are CPU memory.
  virtual Allocator* pinned_allocator() { return nullptr; }
  /// Runs the eager kernel of `op` on the device of its inputs into the
  /// preallocated `out` (not called for view ops); kiln::Error naming the op
  /// for ops the device cannot run.
  virtual void run(OpId op, std::span<const Tensor> in, const Attrs& attrs,
                   std::span<Tensor> out) = 0;
  /// `cpu_scalar` (a CPU 0-d tensor) on device `d` as an operand kernels read
  /// and never write: a runtime may hand every use of equal bits the same
  /// memory instead of copying per op. The default copies (Tensor::to).
  virtual Tensor scalar_operand(const Tensor& cpu_scalar, Device d);
  /// Waits until all work queued on device `index` has finished.
  virtual void synchronize(int index) = 0;
};

/// Makes `rt` serve devices of `type` (called once by a backend when it loads).
void register_device_runtime(DeviceType type, DeviceRuntime* rt);
/// The runtime serving `d`, checked usable and `d` existing; otherwise a
/// kiln::Error "[op] ..." saying why (no backend linked, no driver, ...).
DeviceRuntime& device_runtime(Device d, const char* op);
/// Whether `a` is the pinned_allocator() of a registered runtime (never loads
/// a driver: a CPU tensor's storage asks this for Tensor::is_pinned).
bool is_pinned_allocator(const Allocator* a);

}  // namespace kiln
