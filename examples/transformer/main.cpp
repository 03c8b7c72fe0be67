// Trains a small TransformerEncoder to reverse digit sequences.
//   transformer [--steps N]
#include <cstdlib>
#include <iostream>
#include <string>

#include "transformer.h"

int main(int argc, char** argv) {
  kiln::examples::ReverseOptions opts;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc) {
      opts.steps = std::atoi(argv[++i]);
    } else {
      std::cerr << "usage: transformer [--steps N]\n";
      return a == "--help" ? 0 : 2;
    }
  }
  try {
    kiln::examples::train_reverse(opts, std::cout);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
