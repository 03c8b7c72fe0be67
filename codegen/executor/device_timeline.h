// Internal: a plan's steps timed on their device while a profile records.
// Host spans of device work measure its queueing, not its run; a backend's
// timeline brackets each step with events in the device's stream and, at the
// end of the run, records the measured spans on the device's own track of the
// trace (profiler::record_track_span). The CUDA timeline is
// codegen/kernels/cuda/cuda_timeline.cpp. A plan replayed from a device graph
// runs no steps of its own: profile with graphs off (KILN_CUDA_GRAPHS=0).
#pragma once

#include <memory>
#include <string>

#include "kiln/device.h"

namespace kiln::detail {

/// Times steps on one device; one per plan run.
class DeviceTimeline {
 public:
  virtual ~DeviceTimeline() = default;
  /// Marks where the next step's work starts in the device's current stream.
  virtual void begin() = 0;
  /// Marks where it ends; `name` and `args` (JSON members) label its span.
  virtual void end(std::string name, std::string args) = 0;
  /// Waits for the marked work, then records every span (once).
  virtual void flush() = 0;
};

/// Makes a timeline for a device of the registered type.
using DeviceTimelineFactory = std::unique_ptr<DeviceTimeline> (*)(Device);

/// Called once by a backend as it loads.
void register_device_timeline(DeviceType type, DeviceTimelineFactory make);

/// A timeline for `device` while a profile records and its backend has one,
/// else nullptr (the CPU's steps are timed by their host spans).
std::unique_ptr<DeviceTimeline> device_timeline(Device device);

}  // namespace kiln::detail
