// Fashion-MNIST classification with kiln's nn, optim and data APIs: an MLP
// and a small CNN (two conv blocks + two linear layers with dropout).
#pragma once

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "kiln/nn/nn.h"

namespace kiln::examples {

/// Builds the model by name: "mlp" or "cnn".
std::shared_ptr<nn::Module> make_fashion_model(const std::string& name);

/// What to train.
struct FashionOptions {
  std::string model = "cnn";
  int epochs = 3;
  int64_t batch_size = 64;
  double lr = 1e-3;         ///< Adam learning rate
  int64_t train_limit = 0;  ///< use only the first N training images (0 = all)
  int64_t test_limit = 0;   ///< evaluate on the first N test images (0 = all)
  std::string root = "";    ///< dataset directory ("" = Debian's package)
  uint64_t seed = 0;
  int num_workers = 1;            ///< background batch-building threads
  bool compile = false;           ///< run the training step through kiln::compile
  std::string logdir;             ///< TensorBoard log directory: loss, accuracy, lr ("" = none)
  Device device = Device::cpu();  ///< where the model trains (batches are moved there)
};

/// One epoch's figures.
struct EpochStats {
  double train_loss = 0;
  double test_accuracy = 0;
  double seconds = 0;
  double samples_per_second = 0;
  double ms_per_step = 0;  ///< wall time per training step (data loading included)
};

/// Trains and evaluates, printing one line per epoch to `log`.
std::vector<EpochStats> train_fashion_mnist(const FashionOptions& opts, std::ostream& log);

/// Trains the same model from the same seed eagerly, then compiled, and prints
/// the side-by-side table (time per step, speedup, accuracy of both) to `out`.
void compare_eager_compiled(FashionOptions opts, std::ostream& log, std::ostream& out);

}  // namespace kiln::examples
