// The CUDA device timeline (executor/device_timeline.h): a timed event pair
// around each step in the current stream; at the end of the run the spans go
// on the track "cuda:<i>", placed so the last one ends when the host saw it
// finish. Not with KILN_CUDA_SYNC=1: every launch is then synchronized and
// the host spans already time the device.
#include <string>
#include <vector>

#include "executor/device_timeline.h"
#include "kernels/cuda/module.h"
#include "kiln/cuda.h"
#include "kiln/env.h"
#include "kiln/error.h"
#include "kiln/profiler.h"

namespace kiln::cuda {
namespace {

class CudaTimeline final : public detail::DeviceTimeline {
 public:
  explicit CudaTimeline(Device d) : device_(d.index), stream_(current_stream(d.index)) {}
  ~CudaTimeline() override {
    try {
      flush();
    } catch (const Error&) {  // a failed run already raised its own error
    }
  }
  void begin() override {
    steps_.push_back({Event(true), Event(true), {}, {}});
    steps_.back().start.record(stream_);
  }
  void end(std::string name, std::string args) override {
    KILN_ASSERT(!steps_.empty(), "device timeline: end() without begin()");
    Step& s = steps_.back();
    s.end.record(stream_);
    s.name = std::move(name);
    s.args = std::move(args);
  }
  void flush() override {
    if (steps_.empty()) return;
    std::vector<Step> steps = std::move(steps_);
    steps_.clear();
    steps.back().end.synchronize();
    const int64_t seen = profiler::now_ns();
    const Event& first = steps.front().start;
    auto at = [&](const Event& e) {
      return static_cast<int64_t>(static_cast<double>(first.elapsed_time(e)) * 1e6);
    };
    const int64_t base = seen - at(steps.back().end);
    const std::string track = str("cuda:", device_);
    for (const Step& s : steps)
      profiler::record_track_span(track, "device", s.name, base + at(s.start), base + at(s.end),
                                  s.args);
  }

 private:
  struct Step {
    Event start, end;
    std::string name, args;
  };
  int device_;
  Stream stream_;
  std::vector<Step> steps_;
};

std::unique_ptr<detail::DeviceTimeline> make_timeline(Device d) {
  if (sync_launches()) return nullptr;
  return std::make_unique<CudaTimeline>(d);
}

const bool g_registered = [] {
  detail::register_device_timeline(DeviceType::kCUDA, &make_timeline);
  return true;
}();

}  // namespace
}  // namespace kiln::cuda
