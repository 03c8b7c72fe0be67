#include "example_main.h"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>

#include "kiln/cuda.h"

namespace kiln::examples {

std::optional<Device> parse_device(const std::string& value) {
  if (value == "cpu") return Device::cpu();
  if (value == "cuda") return Device::cuda();
  const std::string digits = value.size() > 5 ? value.substr(5) : "";
  if (value.rfind("cuda:", 0) != 0 || digits.empty() || digits.size() > 4 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return Device::cuda(std::atoi(digits.c_str()));
}

bool take_device_option(int argc, char** argv, int& i, Device& device) {
  if (std::strcmp(argv[i], "--device") != 0) return false;
  const std::optional<Device> d = i + 1 < argc ? parse_device(argv[i + 1]) : std::nullopt;
  if (!d) {
    std::cerr << "error: --device takes cpu, cuda or cuda:N, got ";
    if (i + 1 < argc)
      std::cerr << "'" << argv[i + 1] << "'\n";
    else
      std::cerr << "nothing\n";
    std::exit(2);
  }
  device = *d;
  ++i;
  return true;
}

std::string device_unusable(const Device& device) {
  if (!device.is_cuda()) return "";
  if (!cuda::is_available())
    return "--device cuda, but no CUDA device is usable: " + cuda::unavailable_reason();
  if (device.index >= cuda::device_count())
    return "--device " + device.str() + ", but there are only " +
           std::to_string(cuda::device_count()) + " CUDA device(s)";
  return "";
}

int run_example(const Device& device, const std::function<int()>& body, std::ostream& err) {
  if (const std::string why = device_unusable(device); !why.empty()) {
    err << "error: " << why << "\n";
    return 1;
  }
  try {
    return body();
  } catch (const std::exception& e) {
    err << "error: " << e.what() << std::endl;
    return 1;
  }
}

}  // namespace kiln::examples
