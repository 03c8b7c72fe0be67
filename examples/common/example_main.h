// What the examples' mains share: the `--device cpu|cuda` option, a clear
// message when the chosen device cannot run the example (no GPU, no driver),
// and the "error: ..." line and exit status 1 for any failure.
#pragma once

#include <functional>
#include <optional>
#include <ostream>
#include <string>

#include "kiln/device.h"

namespace kiln::examples {

/// The option as usage lines show it.
inline constexpr const char* kDeviceUsage = "[--device cpu|cuda]";

/// The device a --device value names: "cpu", "cuda" or "cuda:N"; nullopt for anything else.
std::optional<Device> parse_device(const std::string& value);

/// When argv[i] is "--device": reads the value after it into `device`, moves
/// i onto that value and returns true. A missing or unknown value prints an
/// error to stderr and exits with status 2 (a command-line helper). False for
/// any other argument.
bool take_device_option(int argc, char** argv, int& i, Device& device);

/// "" when `device` can run an example; else why not: no usable CUDA device
/// (with the driver's reason), or a CUDA index past device_count().
std::string device_unusable(const Device& device);

/// An example's main after its options are parsed: prints "error: " and
/// device_unusable(device) to `err` and returns 1 when the device cannot run
/// it; else runs `body` and returns its status, or prints "error: <what>" and
/// returns 1 when it throws.
int run_example(const Device& device, const std::function<int()>& body, std::ostream& err);

}  // namespace kiln::examples
