// The registry of device graph runners (device_graph.h).
#include "executor/device_graph.h"

#include <array>
#include <atomic>

namespace kiln::detail {
namespace {
// One per device type; written once by a backend as it loads.
std::array<std::atomic<DeviceGraphRunner*>, 8> g_runners{};
}  // namespace

void register_device_graph_runner(DeviceType type, DeviceGraphRunner* r) {
  g_runners.at(static_cast<size_t>(type)).store(r);
}

std::optional<std::vector<Tensor>> run_device_graph(DeviceGraphSlot& slot, Device device,
                                                    const Executor& ex, const RunArgs& args,
                                                    const PlainRun& plain) {
  const auto i = static_cast<size_t>(device.type);
  DeviceGraphRunner* r = i < g_runners.size() ? g_runners[i].load() : nullptr;
  if (!r) return std::nullopt;
  return r->run(slot, device, ex, args, plain);
}

}  // namespace kiln::detail
