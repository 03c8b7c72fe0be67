// The MLP training step the compile benchmarks share: 784-1024-1024-10,
// batch 128, ReLU, cross-entropy, SGD with momentum 0.9.
#pragma once

#include <memory>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"

namespace kiln::bench {

struct MlpStep {
  std::shared_ptr<nn::Sequential> model = std::make_shared<nn::Sequential>();
  std::unique_ptr<optim::SGD> opt;
  Tensor x, y;
  /// `fused`: the optimizer's fused eager step (SGDOptions::fused).
  explicit MlpStep(bool fused = true) {
    manual_seed(0);
    model->push_back(std::make_shared<nn::Linear>(784, 1024));
    model->push_back(std::make_shared<nn::ReLU>());
    model->push_back(std::make_shared<nn::Linear>(1024, 1024));
    model->push_back(std::make_shared<nn::ReLU>());
    model->push_back(std::make_shared<nn::Linear>(1024, 10));
    opt = std::make_unique<optim::SGD>(
        model->parameters(), optim::SGDOptions{.lr = 0.01, .momentum = 0.9, .fused = fused});
    x = randn({128, 784});
    y = randint(0, 10, {128});
  }
  /// One step on (xb, yb); returns the loss.
  Tensor step(const Tensor& xb, const Tensor& yb) {
    opt->zero_grad();
    Tensor loss = cross_entropy(model->forward(xb), yb);
    loss.backward();
    opt->step();
    return loss;
  }
  /// One step on the fixed batch, the loss as a result list.
  std::vector<Tensor> operator()() { return {step(x, y)}; }
};

}  // namespace kiln::bench
