// Trains a small TransformerEncoder to reverse digit sequences.
//   transformer [--steps N] [--device cpu|cuda]
#include <cstdlib>
#include <iostream>
#include <string>

#include "kiln/cuda.h"
#include "transformer.h"

int main(int argc, char** argv) {
  kiln::examples::ReverseOptions opts;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc) {
      opts.steps = std::atoi(argv[++i]);
    } else if (a == "--device" && i + 1 < argc &&
               (std::string(argv[i + 1]) == "cpu" || std::string(argv[i + 1]) == "cuda")) {
      opts.device = std::string(argv[++i]) == "cuda" ? kiln::Device::cuda() : kiln::Device::cpu();
    } else {
      std::cerr << "usage: transformer [--steps N] [--device cpu|cuda]\n";
      return a == "--help" ? 0 : 2;
    }
  }
  if (opts.device.is_cuda() && !kiln::cuda::is_available()) {
    std::cerr << "error: --device cuda, but no CUDA device is usable: "
              << kiln::cuda::unavailable_reason() << "\n";
    return 1;
  }
  try {
    kiln::examples::train_reverse(opts, std::cout);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
