// kiln::checkpoint inside kiln::compile: the traced backward recomputes the
// region (its ops appear again in the backward part of the graph), and the
// compiled step matches eager exactly as the uncheckpointed step does.
#include <gtest/gtest.h>

#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"
#include "kiln/passes/pass_manager.h"

namespace kiln {
namespace {

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct Model {
  std::vector<std::shared_ptr<nn::Sequential>> blocks;
  nn::Sequential all;
  explicit Model(uint64_t seed) {
    manual_seed(seed);
    for (int i = 0; i < 3; ++i) {
      auto b = std::make_shared<nn::Sequential>();
      b->push_back(std::make_shared<nn::Linear>(8, 16));
      b->push_back(std::make_shared<nn::GELU>());
      b->push_back(std::make_shared<nn::Dropout>(0.2));
      b->push_back(std::make_shared<nn::Linear>(16, 8));
      blocks.push_back(b);
      all.push_back(b);
    }
  }
  Tensor forward(const Tensor& x, bool ck) {
    Tensor h = x;
    for (auto& b : blocks) {
      Fn fn = [b](const std::vector<Tensor>& in) -> std::vector<Tensor> {
        return {b->forward(in[0]) + in[0]};
      };
      h = ck ? checkpoint(fn, {h})[0] : fn({h})[0];
    }
    return h;
  }
};

TEST(CheckpointCompiled, TrainingStepMatchesEager) {
  for (bool ck : {false, true}) {
    SCOPED_TRACE(ck ? "checkpointed" : "plain");
    Model me(1), mc(1);
    optim::SGD oe(me.all.parameters(), {.lr = 0.05, .momentum = 0.9});
    optim::SGD oc(mc.all.parameters(), {.lr = 0.05, .momentum = 0.9});
    auto step = [ck](Model& m, optim::SGD& opt, const Tensor& x) {
      opt.zero_grad();
      Tensor loss = m.forward(x, ck).pow(2).mean();
      loss.backward();
      opt.step();
      return loss.detach();
    };
    auto f = compile([&](const Tensor& x) { return step(mc, oc, x); });
    for (int i = 0; i < 4; ++i) {
      manual_seed(100 + i);
      Tensor x = randn({4, 8});
      manual_seed(200 + i);
      Tensor le = step(me, oe, x);
      manual_seed(200 + i);
      Tensor lc = f(x);
      EXPECT_TRUE(allclose(lc, le, 1e-5, 1e-6)) << "step " << i;
    }
    auto pe = me.all.parameters(), pc = mc.all.parameters();
    for (size_t k = 0; k < pe.size(); ++k)
      EXPECT_TRUE(allclose(pc[k], pe[k], 1e-5, 1e-6)) << "parameter " << k;
    EXPECT_GE(f.stats().compiled_calls, 2);
    // The recomputation survives the passes (CSE would merge it back into the
    // forward): each block's first matmul appears again, marked, for GELU's
    // backward (the second one's output is not needed, so DCE drops it).
    const std::string g = f.graph_text();
    size_t marked_matmuls = 0;
    for (size_t at = g.find("matmul("); at != std::string::npos; at = g.find("matmul(", at + 1)) {
      const size_t eol = g.find('\n', at);
      if (g.substr(at, eol - at).find("recompute=") != std::string::npos) ++marked_matmuls;
    }
    EXPECT_EQ(marked_matmuls, ck ? 3u : 0u);
  }
}

// A compiled step over checkpointed blocks needs less memory than the plain
// compiled step (the executor's measured peak). Both run without the remat
// pass (an explicit pipeline), whose default policy recomputes GELU's chain by itself.
TEST(CheckpointCompiled, PeakMemoryDrops) {
  const std::vector<std::string> no_remat = passes::standard_pipeline();
  auto peak = [&](bool ck) {
    manual_seed(3);
    std::vector<std::shared_ptr<nn::Sequential>> blocks;
    nn::Sequential all;
    for (int i = 0; i < 6; ++i) {
      auto b = std::make_shared<nn::Sequential>();
      b->push_back(std::make_shared<nn::Linear>(128, 512));
      b->push_back(std::make_shared<nn::GELU>());
      b->push_back(std::make_shared<nn::Linear>(512, 128));
      blocks.push_back(b);
      all.push_back(b);
    }
    auto f = compile(
        [&](const Tensor& x) {
          all.zero_grad(false);
          Tensor h = x;
          for (auto& b : blocks) {
            Fn fn = [b](const std::vector<Tensor>& in) -> std::vector<Tensor> {
              return {b->forward(in[0])};
            };
            h = ck ? checkpoint(fn, {h})[0] : b->forward(h);
          }
          h.pow(2).mean().backward();
        },
        {.pipeline = no_remat});
    Tensor x = randn({256, 128});
    for (int i = 0; i < 3; ++i) f(x);
    EXPECT_GE(f.stats().compiled_calls, 1);
    return f.stats().last_peak_bytes;
  };
  const int64_t plain = peak(false), ck = peak(true);
  EXPECT_LT(static_cast<double>(ck), 0.75 * static_cast<double>(plain))
      << "checkpointed " << ck << " bytes, plain " << plain;
}

}  // namespace
}  // namespace kiln
