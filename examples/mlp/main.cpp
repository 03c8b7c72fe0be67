// Trains the classic 2->5->1 MLP for 1000 epochs and prints loss and accuracy.
#include <iostream>

#include "mlp.h"

int main() {
  try {
    kiln::examples::train_mlp(1000, std::cout);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
