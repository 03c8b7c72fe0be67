// Trains an MLP or the small CNN on Fashion-MNIST and prints per-epoch loss,
// test accuracy and throughput.
//   fashion_mnist [--model cnn|mlp] [--epochs N] [--limit N] [--batch N] [--lr X] [--root DIR]
//                 [--compile | --compare] [--logdir DIR] [--device cpu|cuda]
// --compare trains eagerly and then compiled from the same seed and prints the
// side-by-side table (the README's main demo). --logdir writes loss, test
// accuracy and learning rate for TensorBoard (`tensorboard --logdir DIR`).
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "example_main.h"
#include "fashion_mnist.h"

int main(int argc, char** argv) {
  kiln::examples::FashionOptions opts;
  bool compare = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "missing value after " << a << "\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model")
      opts.model = next();
    else if (a == "--epochs")
      opts.epochs = std::atoi(next().c_str());
    else if (a == "--limit")
      opts.train_limit = std::atoll(next().c_str());
    else if (a == "--batch")
      opts.batch_size = std::atoll(next().c_str());
    else if (a == "--lr")
      opts.lr = std::atof(next().c_str());
    else if (a == "--root")
      opts.root = next();
    else if (a == "--compile")
      opts.compile = true;
    else if (a == "--compare")
      compare = true;
    else if (a == "--logdir")
      opts.logdir = next();
    else if (kiln::examples::take_device_option(argc, argv, i, opts.device))
      continue;
    else {
      std::cerr << "usage: fashion_mnist [--model cnn|mlp] [--epochs N] [--limit N] [--batch N] "
                   "[--lr X] [--root DIR] [--compile | --compare] [--logdir DIR] "
                   "[--device cpu|cuda]\n";
      return a == "--help" ? 0 : 2;
    }
  }
  return kiln::examples::run_example(
      opts.device,
      [&] {
        if (compare)
          kiln::examples::compare_eager_compiled(opts, std::cout, std::cout);
        else
          kiln::examples::train_fashion_mnist(opts, std::cout);
        return 0;
      },
      std::cerr);
}
