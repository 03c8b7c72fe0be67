// Randomized tests of the remat pass (passes/src/remat.cpp) at the IR level:
// random layered graphs with a backward-like tail, under random budgets. The
// rewritten graph verifies, computes the same values, and neither predicted
// peak (node order, the executor's fused schedule) grows; the executor's
// measured peak of the unfused run stays within the node-order prediction.
#include <cmath>

#include "executor/executor.h"
#include "kiln/kiln.h"
#include "kiln/passes/fuse.h"
#include "kiln/passes/remat.h"
#include "passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using testing::input;
using testing::op;

struct Lcg {
  uint64_t s;
  uint32_t next() {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<uint32_t>(s >> 33);
  }
  int below(int n) { return static_cast<int>(next() % static_cast<uint32_t>(n)); }
};

// Layers of matmul / cheap / costly elementwise / row-sum ops over [rows, 16]
// activations, then a tail that reads them back in reverse order.
std::shared_ptr<ir::Graph> random_graph(uint64_t seed) {
  Lcg r{seed};
  auto g = std::make_shared<ir::Graph>();
  const int64_t rows = 8 + 8 * r.below(4);
  ir::Value* x = input(*g, DType::f32, {rows, 16}, "x");
  ir::Value* w = input(*g, DType::f32, {16, 16}, "w");
  std::vector<ir::Value*> acts{x};
  const int layers = 4 + r.below(8);
  for (int l = 0; l < layers; ++l) {
    ir::Value* h = acts.back();
    ir::Value* other = acts[static_cast<size_t>(r.below(static_cast<int>(acts.size())))];
    switch (r.below(6)) {
      case 0:
        h = op(*g, OpId::matmul, {h, w});
        break;
      case 1:
        h = op(*g, OpId::tanh, {h});
        break;
      case 2:
        h = op(*g, OpId::mul, {h, other});
        break;
      case 3:
        h = op(*g, OpId::add, {op(*g, OpId::abs, {h}), other});
        break;
      case 4:
        h = op(*g, OpId::exp, {op(*g, OpId::neg, {op(*g, OpId::abs, {h})})});
        break;
      default:
        h = op(*g, OpId::add,
               {h, op(*g, OpId::sum, {h}, Attrs().set("dims", Dims{1}).set("keepdim", true))});
    }
    acts.push_back(h);
  }
  ir::Value* acc = acts.back();
  for (size_t k = acts.size() - 1; k-- > 1;)
    acc = r.below(3) == 0 ? op(*g, OpId::matmul, {op(*g, OpId::mul, {acc, acts[k]}), w})
                          : op(*g, OpId::mul, {acc, op(*g, OpId::tanh, {acts[k]})});
  g->add_output(acc, "out0");
  g->add_output(acts[1], "out1");
  return g;
}

std::vector<Tensor> run(const std::shared_ptr<ir::Graph>& g, const std::vector<Tensor>& in,
                        RunStats* stats) {
  RunArgs args;
  args.inputs = in;
  args.stats = stats;
  return Executor(g).run(args);
}

TEST(RematRandom, RandomGraphsUnderRandomBudgets) {
  int met = 0, changed = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    SCOPED_TRACE(str("seed ", seed));
    std::shared_ptr<ir::Graph> g = random_graph(seed);
    std::shared_ptr<ir::Graph> before = g->clone();
    const int64_t peak = predicted_peak_bytes(*g);
    const int64_t fused = predicted_peak_bytes(*g, plan_fusion(*g));
    Lcg r{seed * 7919};
    const int64_t budget = std::max<int64_t>(1, peak * (10 + r.below(80)) / 100);
    RematScope scope({.memory_budget = budget});
    changed += remat(*g);
    ASSERT_NO_THROW(ir::verify(*g));
    const RematReport& rep = scope.report();
    met += rep.budget_met;
    // A budget is met by the fused schedule's peak (rule 8), which never grows (rule 7).
    EXPECT_EQ(rep.peak_after, predicted_peak_bytes(*g, plan_fusion(*g)));
    EXPECT_LE(rep.peak_after, fused);
    EXPECT_EQ(rep.budget_met, rep.peak_after <= budget);
    EXPECT_LE(predicted_peak_bytes(*g), peak);
    manual_seed(seed);
    const std::vector<Tensor> in{randn({before->inputs()[0]->shape[0].b, 16}), randn({16, 16})};
    RunStats st;
    const std::vector<Tensor> want = run(before, in, nullptr);
    const std::vector<Tensor> got = run(g, in, &st);
    // Unfused, the executor runs the graph's order: the node-order model.
    EXPECT_LE(st.peak_bytes, predicted_peak_bytes(*g));
    ASSERT_EQ(got.size(), want.size());
    for (size_t o = 0; o < got.size(); ++o) {
      // The same kernels on the same inputs: recomputation gives the same bits.
      const std::vector<float> a = got[o].to_vector<float>(), b = want[o].to_vector<float>();
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i)
        EXPECT_TRUE(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))
            << "output " << o << "[" << i << "]: " << a[i] << " vs " << b[i];
    }
  }
  std::printf("%d of 60 graphs rematerialized, %d met their budget\n", changed, met);
  EXPECT_GT(changed, 10);
}

}  // namespace
}  // namespace kiln::passes
