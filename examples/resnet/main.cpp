// Trains a small ResNet on Fashion-MNIST (synthetic images when the dataset is
// not installed) with SGD + momentum and OneCycleLR.
//   resnet [--epochs N] [--train N] [--test N] [--blocks N] [--width N]
//          [--batch N] [--max-lr X] [--compile] [--synthetic] [--seed N]
//          [--device cpu|cuda]
// The defaults train on 512 images for seconds; `resnet --train 0 --test 0
// --epochs 3 --blocks 2 --width 16 --compile` trains on the whole dataset.
#include <cstdlib>
#include <iostream>
#include <string>

#include "example_main.h"
#include "resnet.h"

int main(int argc, char** argv) {
  kiln::examples::ResNetOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (kiln::examples::take_device_option(argc, argv, i, o.device)) {
    } else if (a == "--compile") {
      o.compile = true;
    } else if (a == "--synthetic") {
      o.synthetic = true;
    } else if (a == "--epochs" && has_value) {
      o.epochs = std::atoi(argv[++i]);
    } else if (a == "--train" && has_value) {
      o.train_limit = std::atoll(argv[++i]);
    } else if (a == "--test" && has_value) {
      o.test_limit = std::atoll(argv[++i]);
    } else if (a == "--blocks" && has_value) {
      const int64_t n = std::atoll(argv[++i]);
      o.blocks = {n, n};
    } else if (a == "--width" && has_value) {
      o.width = std::atoll(argv[++i]);
    } else if (a == "--batch" && has_value) {
      o.batch_size = std::atoll(argv[++i]);
    } else if (a == "--max-lr" && has_value) {
      o.max_lr = std::atof(argv[++i]);
    } else if (a == "--seed" && has_value) {
      o.seed = std::strtoull(argv[++i], nullptr, 10);
    } else {
      std::cerr << "usage: resnet [--epochs N] [--train N] [--test N] [--blocks N] [--width N] "
                   "[--batch N] [--max-lr X] [--compile] [--synthetic] [--seed N] "
                << kiln::examples::kDeviceUsage << "\n";
      return a == "--help" ? 0 : 2;
    }
  }
  return kiln::examples::run_example(
      o.device,
      [&] {
        auto r = kiln::examples::train_resnet(o, std::cout);
        if (o.compile)
          std::cout << "compiled step: " << r.compile_stats.traces << " trace(s), "
                    << r.compile_stats.compiled_calls << " compiled calls\n";
        return 0;
      },
      std::cerr);
}
