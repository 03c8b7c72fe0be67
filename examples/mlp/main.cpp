// Trains the classic 2->5->1 MLP for 1000 epochs and prints loss and accuracy.
//   mlp [--device cpu|cuda] [--logdir DIR]
// --logdir writes loss, learning rate and accuracy for TensorBoard
// (`tensorboard --logdir DIR`).
#include <cstring>
#include <iostream>
#include <string>

#include "example_main.h"
#include "mlp.h"

int main(int argc, char** argv) {
  kiln::Device device = kiln::Device::cpu();
  std::string logdir;
  for (int i = 1; i < argc; ++i) {
    if (kiln::examples::take_device_option(argc, argv, i, device)) {
    } else if (!std::strcmp(argv[i], "--logdir") && i + 1 < argc) {
      logdir = argv[++i];
    } else {
      std::cerr << "usage: mlp " << kiln::examples::kDeviceUsage << " [--logdir DIR]\n";
      return 2;
    }
  }
  return kiln::examples::run_example(
      device,
      [&] {
        kiln::examples::train_mlp(1000, std::cout, 0.01, device, logdir);
        return 0;
      },
      std::cerr);
}
