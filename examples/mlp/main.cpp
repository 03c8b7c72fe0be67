// Trains the classic 2->5->1 MLP for 1000 epochs and prints loss and accuracy.
//   mlp [--device cpu|cuda] [--logdir DIR]
// --logdir writes loss, learning rate and accuracy for TensorBoard
// (`tensorboard --logdir DIR`).
#include <cstring>
#include <iostream>
#include <string>

#include "kiln/cuda.h"
#include "mlp.h"

int main(int argc, char** argv) {
  kiln::Device device = kiln::Device::cpu();
  std::string logdir;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--device") && i + 1 < argc) {
      const std::string d = argv[++i];
      if (d == "cuda") {
        device = kiln::Device::cuda();
      } else if (d != "cpu") {
        std::cerr << "error: --device takes cpu or cuda, got '" << d << "'\n";
        return 2;
      }
    } else if (!std::strcmp(argv[i], "--logdir") && i + 1 < argc) {
      logdir = argv[++i];
    } else {
      std::cerr << "usage: mlp [--device cpu|cuda] [--logdir DIR]\n";
      return 2;
    }
  }
  if (device.is_cuda() && !kiln::cuda::is_available()) {
    std::cerr << "error: --device cuda, but no CUDA device is usable: "
              << kiln::cuda::unavailable_reason() << "\n";
    return 1;
  }
  try {
    kiln::examples::train_mlp(1000, std::cout, 0.01, device, logdir);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
