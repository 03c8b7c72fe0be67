// Trains a small TransformerEncoder to reverse digit sequences.
//   transformer [--steps N] [--device cpu|cuda]
#include <cstdlib>
#include <iostream>
#include <string>

#include "example_main.h"
#include "transformer.h"

int main(int argc, char** argv) {
  kiln::examples::ReverseOptions opts;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc) {
      opts.steps = std::atoi(argv[++i]);
    } else if (kiln::examples::take_device_option(argc, argv, i, opts.device)) {
    } else {
      std::cerr << "usage: transformer [--steps N] " << kiln::examples::kDeviceUsage << "\n";
      return a == "--help" ? 0 : 2;
    }
  }
  return kiln::examples::run_example(
      opts.device,
      [&] {
        kiln::examples::train_reverse(opts, std::cout);
        return 0;
      },
      std::cerr);
}
