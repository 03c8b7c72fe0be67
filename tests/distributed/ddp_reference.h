// The reference the DDP tests compare against, parameterized by sizes: an MLP,
// seeded batches, and one process training the MLP on every whole batch.
// ddp_test.cpp (ranks as threads) and nccl/ (forked ranks on the emulated CUDA
// device) share it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"

namespace kiln::testing {

/// An input batch and its class labels.
struct Batch {
  Tensor x, y;
};

/// Linear layers of widths sizes[0] -> sizes[1] -> ... with ReLU between them,
/// initialized after manual_seed(seed).
inline std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed, const std::vector<int64_t>& sizes) {
  manual_seed(seed);
  auto m = std::make_shared<nn::Sequential>();
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    if (i > 0) m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::Linear>(sizes[i], sizes[i + 1]));
  }
  return m;
}

/// `steps` batches of 2 * b examples of `features` inputs, labels in [0, classes).
inline std::vector<Batch> make_batches(int steps, int64_t b, int64_t features, int64_t classes) {
  manual_seed(42);
  std::vector<Batch> out;
  for (int s = 0; s < steps; ++s)
    out.push_back({randn({2 * b, features}), randint(0, classes, {2 * b})});
  return out;
}

/// One process on the CPU trains `m` on every whole batch (cross entropy, SGD
/// with lr 0.1 and momentum 0.9); its parameters after the last step.
inline std::vector<Tensor> train_single(const std::shared_ptr<nn::Sequential>& m,
                                        const std::vector<Batch>& data) {
  optim::SGD opt(m->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (const auto& b : data) {
    opt.zero_grad();
    cross_entropy(m->forward(b.x), b.y).backward();
    opt.step();
  }
  return m->parameters();
}

}  // namespace kiln::testing
