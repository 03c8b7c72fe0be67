// The partition of a differentiable compiled function (codegen/driver/
// partition.cpp with passes::backward_recompute): the backward computes cheap
// forward values again instead of the forward saving them, and the gradients
// equal those of the plan without it (a custom pipeline: no remat anywhere)
// and eager's.
#include <gtest/gtest.h>

#include "compare.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/passes/pass_manager.h"
#include "random_program.h"
#include "remat_test_util.h"

namespace kiln {
namespace {

size_t saved_count(const std::string& graph) {
  size_t n = 0;
  for (size_t at = graph.find("\"saved"); at != std::string::npos;
       at = graph.find("\"saved", at + 1))
    ++n;
  return n;
}

struct Grads {
  Tensor loss;
  std::vector<Tensor> grads;
  size_t saved = 0;
  int64_t predicted = 0;
};

// The loss and parameter gradients of a GELU MLP whose forward is compiled
// with `opts` (eager if !compiled); backward runs outside the compiled function.
Grads mlp_grads(bool compiled, CompileOptions opts = {}) {
  manual_seed(21);
  nn::Sequential net;
  for (int i = 0; i < 4; ++i) {
    net.push_back(std::make_shared<nn::Linear>(64, 64));
    net.push_back(std::make_shared<nn::GELU>());
  }
  opts.enabled = compiled;
  opts.warmup = 0;
  auto f = compile([&](const Tensor& x) { return net.forward(x).pow(2).mean(); }, opts);
  Tensor x = randn({128, 64});
  Grads r;
  for (int i = 0; i < 2; ++i) {
    for (Tensor& p : net.parameters()) p.set_grad(Tensor());
    r.loss = f(x);
    r.loss.backward();
  }
  for (Tensor& p : net.parameters()) r.grads.push_back(p.grad().clone());
  if (compiled) {
    r.saved = saved_count(f.graph_text());
    r.predicted = f.stats().predicted_peak_bytes;
  }
  return r;
}

TEST(RematPartition, ForwardSavesLessSameGradients) {
  // Without the joint graph's remat the forward saves GELU's pre-activation,
  // erf, the GELU output and the gradient formula's forward-only terms; with
  // it, the cheap ones are computed again in the backward.
  const Grads eager = mlp_grads(false);
  const Grads plain = mlp_grads(true, {.pipeline = passes::standard_pipeline()});
  const Grads joint = mlp_grads(true);
  EXPECT_LT(joint.saved, plain.saved);
  EXPECT_LT(joint.predicted, plain.predicted);
  ASSERT_EQ(joint.grads.size(), plain.grads.size());
  EXPECT_EQ(testing::diff_values(plain.loss, joint.loss, 1e-6), "");
  for (size_t k = 0; k < joint.grads.size(); ++k) {
    EXPECT_EQ(testing::diff_values(plain.grads[k], joint.grads[k], 1e-5), "") << "grad " << k;
    EXPECT_EQ(testing::diff_values(eager.grads[k], joint.grads[k], 1e-4), "") << "grad " << k;
  }
  std::printf("saved values: %zu -> %zu, forward predicted peak %lld -> %lld bytes\n", plain.saved,
              joint.saved, static_cast<long long>(plain.predicted),
              static_cast<long long>(joint.predicted));
}

// A memory budget reaches the partition: the forward saves fewer bytes than
// the default plan's (every other matmul and GELU's erf are computed again in
// the backward), so its predicted peak drops, and the gradients stay the plan
// without remat's.
TEST(RematPartition, BudgetSavesLessSameGradients) {
  const Grads plain = mlp_grads(true, {.pipeline = passes::standard_pipeline()});
  const Grads joint = mlp_grads(true);
  const Grads tight = mlp_grads(true, {.memory_budget = joint.predicted / 4});
  EXPECT_LT(tight.predicted, joint.predicted);
  EXPECT_EQ(testing::diff_values(plain.loss, tight.loss, 1e-6), "");
  ASSERT_EQ(tight.grads.size(), plain.grads.size());
  for (size_t k = 0; k < tight.grads.size(); ++k)
    EXPECT_EQ(testing::diff_values(plain.grads[k], tight.grads[k], 1e-5), "") << "grad " << k;
  std::printf("saved values: %zu -> %zu, forward predicted peak %lld -> %lld bytes\n", joint.saved,
              tight.saved, static_cast<long long>(joint.predicted),
              static_cast<long long>(tight.predicted));
}

// Random programs (f64, every input a leaf) compiled as a forward, backward
// outside: results and gradients of the partitioned plan with and without the
// joint remat, and eager's, are equal within rounding.
TEST(RematPartition, RandomProgramsSameGradients) {
  int fewer = 0;
  testing::for_each_random_program(
      [&](const testing::Program& p, const std::vector<Tensor>& w, testing::Rng&) {
        struct Run {
          std::vector<Tensor> outs, grads;
          size_t saved = 0;
        };
        auto run = [&](CompileOptions opts) {
          std::vector<Tensor> leaves = testing::grad_leaves(p);
          opts.warmup = 0;
          auto f = compile([&]() { return p.run(leaves); }, opts);
          Run r;
          for (int i = 0; i < 2; ++i) {
            for (Tensor& l : leaves) l.set_grad(Tensor());
            if (p.uses_rng) manual_seed(p.seed);
            r.outs = f();
            Tensor loss = testing::weighted_loss(r.outs, w);
            if (loss.defined() && loss.requires_grad()) loss.backward();
          }
          for (const Tensor& l : leaves) r.grads.push_back(l.grad());
          if (opts.enabled) r.saved = saved_count(f.graph_text());
          return r;
        };
        const Run eager = run({.enabled = false});
        const Run plain = run({.pipeline = passes::standard_pipeline()});
        const Run joint = run({});
        fewer += joint.saved < plain.saved;
        for (size_t k = 0; k < eager.outs.size(); ++k) {
          EXPECT_EQ(testing::diff_values(eager.outs[k], joint.outs[k], 1e-9), "") << "output " << k;
          EXPECT_EQ(testing::diff_values(plain.outs[k], joint.outs[k], 1e-9), "") << "output " << k;
        }
        for (size_t k = 0; k < eager.grads.size(); ++k) {
          EXPECT_EQ(testing::diff_values(eager.grads[k], joint.grads[k], 1e-9), "") << "grad " << k;
          EXPECT_EQ(testing::diff_values(plain.grads[k], joint.grads[k], 1e-9), "") << "grad " << k;
        }
      });
  std::printf("%d of %d programs save fewer values with the joint remat\n", fewer,
              static_cast<int>(testing::random_program_count()));
}

}  // namespace
}  // namespace kiln
