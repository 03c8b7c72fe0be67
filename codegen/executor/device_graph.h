// Internal: compiled graphs replayed from a device's own graph capture (CUDA
// graphs). A backend registers a DeviceGraphRunner for its device type; the
// executor hands it each run with the plain run as a fallback, and keeps the
// runner's state for that executor in a DeviceGraphSlot. The CUDA runner is
// codegen/kernels/cuda/cuda_graph_runner.cpp.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "kiln/device.h"
#include "kiln/tensor.h"

namespace kiln {
class Executor;
struct RunArgs;
}  // namespace kiln

namespace kiln::detail {

/// A runner's state for one executor (its captured graph, buffers, counts).
class DeviceGraphState {
 public:
  virtual ~DeviceGraphState() = default;
};

/// Where an executor keeps that state: made by the runner on first use.
/// Moving an executor moves the state (with a new mutex).
struct DeviceGraphSlot {
  DeviceGraphSlot() = default;
  DeviceGraphSlot(DeviceGraphSlot&& o) noexcept : state(std::move(o.state)) {}
  std::mutex mu;  ///< one run at a time uses the state; a concurrent one runs plainly
  std::unique_ptr<DeviceGraphState> state;
};

/// The executor's plain run of the given arguments.
using PlainRun = std::function<std::vector<Tensor>(const RunArgs&)>;

/// Runs compiled graphs of one device type from captured device graphs.
class DeviceGraphRunner {
 public:
  virtual ~DeviceGraphRunner() = default;
  /// The call's outputs when the runner served it (captured now, or replayed);
  /// nullopt when the executor should run it plainly (first call, graphs off,
  /// a graph that cannot be captured).
  virtual std::optional<std::vector<Tensor>> run(DeviceGraphSlot& slot, Device device,
                                                 const Executor& ex, const RunArgs& args,
                                                 const PlainRun& plain) = 0;
};

/// Makes `r` run the compiled graphs of devices of `type` (a backend, once).
void register_device_graph_runner(DeviceType type, DeviceGraphRunner* r);

/// The registered runner's answer for a run on `device`; nullopt when none is
/// registered for its type.
std::optional<std::vector<Tensor>> run_device_graph(DeviceGraphSlot& slot, Device device,
                                                    const Executor& ex, const RunArgs& args,
                                                    const PlainRun& plain);

}  // namespace kiln::detail
