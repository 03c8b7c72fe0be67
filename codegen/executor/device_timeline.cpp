// The registry of device timelines (device_timeline.h).
#include "executor/device_timeline.h"

#include <array>
#include <atomic>

#include "kiln/profiler.h"

namespace kiln::detail {
namespace {
// One per device type; written once by a backend as it loads.
std::array<std::atomic<DeviceTimelineFactory>, 8> g_factories{};
}  // namespace

void register_device_timeline(DeviceType type, DeviceTimelineFactory make) {
  g_factories.at(static_cast<size_t>(type)).store(make);
}

std::unique_ptr<DeviceTimeline> device_timeline(Device device) {
  if (!profiler::enabled()) return nullptr;
  const auto i = static_cast<size_t>(device.type);
  const DeviceTimelineFactory make = i < g_factories.size() ? g_factories[i].load() : nullptr;
  return make ? make(device) : nullptr;
}

}  // namespace kiln::detail
