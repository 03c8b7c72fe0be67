// A deep model compiled vs eager: a stack of (Linear, LayerNorm, GELU) blocks
// trained with AdamW, the workload of bench/compile_depth_bench. At this depth
// the traced step has thousands of nodes and hundreds of captured tensors, and
// a layer's forward and backward lie far apart: the graph's list order and
// cached positions, fusion's span bound (rule 10), the executor's scheduler
// (batched optimizer updates) and the write-back of captured state all act.
#include <gtest/gtest.h>

#include <memory>

#include "compare.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"

namespace kiln {
namespace {

struct DeepStep {
  std::shared_ptr<nn::Sequential> model = std::make_shared<nn::Sequential>();
  std::unique_ptr<optim::AdamW> opt;
  Tensor x, y;
  explicit DeepStep(int depth) {
    manual_seed(3);
    for (int i = 0; i < depth; ++i) {
      model->push_back(std::make_shared<nn::Linear>(16, 16));
      model->push_back(std::make_shared<nn::LayerNorm>(16));
      model->push_back(std::make_shared<nn::GELU>());
    }
    opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions{.lr = 1e-2});
    x = randn({8, 16});
    y = randn({8, 16});
  }
  Tensor step() {
    opt->zero_grad();
    Tensor loss = mse_loss(model->forward(x), y);
    loss.backward();
    opt->step();
    return loss;
  }
};

TEST(DeepModel, CompiledTrainingStepsMatchEager) {
  constexpr int kDepth = 40;
  DeepStep eager(kDepth), compiled(kDepth);
  auto step = compile([&] { return compiled.step(); }, {.name = "deep_step"});
  for (int i = 0; i < 4; ++i) {
    const Tensor want = eager.step();
    const Tensor got = step();
    EXPECT_EQ(testing::diff_values(want, got, 1e-4), "") << "loss of step " << i;
  }
  EXPECT_EQ(step.stats().traces, 1);
  EXPECT_EQ(step.stats().compiled_calls, 3);
  // The updates of all parameters of a kind run as a few batched launches.
  EXPECT_LT(step.stats().last_kernel_launches, step.stats().fused_kernels);
  const auto pe = eager.model->parameters(), pc = compiled.model->parameters();
  ASSERT_EQ(pe.size(), pc.size());
  for (size_t k = 0; k < pe.size(); ++k) {
    EXPECT_EQ(testing::diff_values(pe[k], pc[k], 1e-4), "") << "parameter " << k;
    EXPECT_EQ(testing::diff_values(pe[k].grad(), pc[k].grad(), 1e-3), "") << "gradient " << k;
  }
}

}  // namespace
}  // namespace kiln
