// The classic MLP: 2 -> 5 -> 1 with ReLU, a sigmoid output and binary cross
// entropy, trained with SGD — written with kiln::nn and kiln::optim.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "kiln/device.h"

namespace kiln::examples {

/// What a training run produced.
struct MlpResult {
  std::vector<double> losses;  ///< loss at every epoch
  double accuracy = 0;         ///< on the training set, after training
};

/// Trains for `epochs` full-batch epochs (lr 0.01) on `device`, printing the
/// loss every 100 epochs and the final accuracy to `log`; with a `logdir`, also
/// writes loss, learning rate and accuracy there for TensorBoard.
MlpResult train_mlp(int epochs, std::ostream& log, double lr = 0.01, Device device = Device::cpu(),
                    const std::string& logdir = "");

}  // namespace kiln::examples
