// Where a tensor's memory lives: the CPU, or a CUDA device (served by the
// device runtime that kiln's codegen library registers; see device_runtime.h).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace kiln {

/// Kind of device.
enum class DeviceType : uint8_t { kCPU, kCUDA };

/// A device: kind plus index ("cpu", "cuda:1").
struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int i = 0) { return {DeviceType::kCUDA, i}; }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  std::string str() const {
    return type == DeviceType::kCPU ? "cpu" : "cuda:" + std::to_string(index);
  }
  friend bool operator==(const Device&, const Device&) = default;
};

inline std::ostream& operator<<(std::ostream& os, const Device& d) {
  return os << d.str();
}

}  // namespace kiln
