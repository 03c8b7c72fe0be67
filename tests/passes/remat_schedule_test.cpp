// Tests of passes/src/remat_schedule.cpp (remat's rule 0): in a training step
// whose gradients are not results, each parameter's update moves to just
// after its gradient is complete and after the old parameter's last reader.
#include "kiln/passes/remat.h"

#include "passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using testing::expect_pass;

// Three linear layers' forward, backward and SGD updates in the traced order:
// every gradient (%8 %10 %12) is alive until the updates at the end.
constexpr const char* kStep = R"(
graph(%0: f32[64, 64] "w0", %1: f32[64, 64] "w1", %2: f32[64, 64] "w2", %3: f32[64, 64] "x", %4: f32[64, 64] "dy") {
  %5 = matmul(%3, %0) : f32[64, 64]
  %6 = matmul(%5, %1) : f32[64, 64]
  %7 = matmul(%6, %2) : f32[64, 64]
  %8 = matmul(%6, %4) : f32[64, 64]
  %9 = matmul(%4, %2) : f32[64, 64]
  %10 = matmul(%5, %9) : f32[64, 64]
  %11 = matmul(%9, %1) : f32[64, 64]
  %12 = matmul(%3, %11) : f32[64, 64]
  %13 = sub(%2, %8) : f32[64, 64]
  %14 = sub(%1, %10) : f32[64, 64]
  %15 = sub(%0, %12) : f32[64, 64]
  return %7 "out0", %13 "w2", %14 "w1", %15 "w0"
}
)";

const std::vector<StateWrite> kWrites{{1, 2}, {2, 1}, {3, 0}};

TEST(RematSchedule, UpdatesFollowTheirGradients) {
  // w2's gradient and update go after d2 = dy w2 (the old w2's last reader);
  // d1 = d2 w1 only w0's gradient needs reads w1: w1's and w0's families run
  // as one after it, in their order.
  const int64_t before =
      predicted_peak_bytes(*ir::parse(testing::trim_leading_newline(kStep)), kWrites);
  // Under a budget the schedule is kept when the peak does not grow (here it
  // stays 5 buffers: the forward's); by default only when it drops.
  RematScope scope({.memory_budget = before, .writes = kWrites});
  expect_pass(remat, kStep, R"(
graph(%0: f32[64, 64] "w0", %1: f32[64, 64] "w1", %2: f32[64, 64] "w2", %3: f32[64, 64] "x", %4: f32[64, 64] "dy") {
  %5 = matmul(%3, %0) : f32[64, 64]
  %6 = matmul(%5, %1) : f32[64, 64]
  %7 = matmul(%6, %2) : f32[64, 64]
  %8 = matmul(%4, %2) : f32[64, 64]
  %9 = matmul(%6, %4) : f32[64, 64]
  %10 = sub(%2, %9) : f32[64, 64]
  %11 = matmul(%5, %8) : f32[64, 64]
  %12 = matmul(%8, %1) : f32[64, 64]
  %13 = matmul(%3, %12) : f32[64, 64]
  %14 = sub(%1, %11) : f32[64, 64]
  %15 = sub(%0, %13) : f32[64, 64]
  return %7 "out0", %10 "w2", %14 "w1", %15 "w0"
}
)",
              true);
  EXPECT_LE(scope.report().peak_after, before);
  ASSERT_FALSE(scope.report().log.empty());
  EXPECT_NE(scope.report().log[0].find("updates moved"), std::string::npos);
}

TEST(RematSchedule, GradientDiesAtItsUpdate) {
  // Before: the first layer's gradient (16 KiB) lives from its matmul to the
  // end with the others; after, every gradient is read by its update next.
  constexpr const char* kDeep = R"(
graph(%0: f32[64, 64] "w0", %1: f32[64, 64] "w1", %2: f32[64, 64] "x", %3: f32[64, 64] "dy") {
  %4 = matmul(%3, %1) : f32[64, 64]
  %5 = matmul(%2, %3) : f32[64, 64]
  %6 = matmul(%4, %3) : f32[64, 64]
  %7 = add(%4, %4) : f32[64, 64]
  %8 = matmul(%7, %3) : f32[64, 64]
  %9 = sub(%1, %5) : f32[64, 64]
  %10 = sub(%0, %6) : f32[64, 64]
  return %8 "out0", %9 "w1", %10 "w0"
}
)";
  const std::vector<StateWrite> writes{{1, 1}, {2, 0}};
  auto g = ir::parse(testing::trim_leading_newline(kDeep));
  const int64_t buf = 64 * 64 * 4;
  // At %8: %5, %6, %7 and %8 itself.
  EXPECT_EQ(predicted_peak_bytes(*g, writes), 4 * buf);
  RematScope scope({.writes = writes});
  EXPECT_TRUE(remat(*g));
  EXPECT_NO_THROW(ir::verify(*g));
  // w1's gradient %5 is read by its update as soon as w1's last reader %4 ran,
  // w0's %6 right after it is made: 2 buffers at most (%4 with one gradient,
  // %7 with %8).
  EXPECT_EQ(predicted_peak_bytes(*g, writes), 2 * buf) << ir::print(*g);
  // Running again changes nothing.
  EXPECT_FALSE(remat(*g));
}

// A tanh MLP's step built in the traced order: forward, backward, then an
// SGD update per weight (output 1 + i replaces input i; no gradient returned).
std::unique_ptr<ir::Graph> tanh_step(int layers) {
  using testing::input;
  using testing::op;
  auto g = std::make_unique<ir::Graph>();
  std::vector<ir::Value*> w;
  for (int i = 0; i < layers; ++i) w.push_back(input(*g, DType::f32, {64, 64}, str("w", i)));
  ir::Value* x = input(*g, DType::f32, {64, 64}, "x");
  ir::Value* dy = input(*g, DType::f32, {64, 64}, "dy");
  std::vector<ir::Value*> h{x};
  for (int i = 0; i < layers; ++i)
    h.push_back(op(*g, OpId::tanh, {op(*g, OpId::matmul, {h.back(), w[i]})}));
  std::vector<ir::Value*> grad(static_cast<size_t>(layers));
  ir::Value* d = dy;
  for (int i = layers; i-- > 0;) {
    ir::Value* hi = h[static_cast<size_t>(i) + 1];
    ir::Value* dz = op(*g, OpId::mul, {d, op(*g, OpId::sub, {op(*g, OpId::mul, {hi, hi}), x})});
    grad[static_cast<size_t>(i)] = op(*g, OpId::matmul, {h[static_cast<size_t>(i)], dz});
    if (i > 0) d = op(*g, OpId::matmul, {dz, w[static_cast<size_t>(i)]});
  }
  g->add_output(h.back(), "out0");
  for (int i = 0; i < layers; ++i)
    g->add_output(op(*g, OpId::sub, {w[static_cast<size_t>(i)], grad[static_cast<size_t>(i)]}),
                  str("w", i));
  return g;
}

TEST(RematSchedule, UpdatesFollowRecomputedReaders) {
  // Under a small budget the cuts recompute forward matmuls in the backward,
  // after the updates rule 0 had moved early; such an update cannot write in
  // place (0.5 MiB of new weights at remat_bench's MLP 25% floor). Rule 0
  // runs again after the cuts where the peak does not grow: the updates
  // follow the recomputed readers of their weights.
  auto g = tanh_step(8);
  std::vector<StateWrite> writes;
  for (int i = 0; i < 8; ++i) writes.push_back({1 + i, i});
  const int64_t before = predicted_peak_bytes(*g, writes);
  RematScope scope({.memory_budget = 1, .writes = writes});
  remat(*g);
  EXPECT_NO_THROW(ir::verify(*g));
  EXPECT_GT(scope.report().recomputed, 0);
  EXPECT_LT(predicted_peak_bytes(*g, writes), before);
  int late = 0;  // updates followed by a reader of the old weight
  for (const StateWrite& w : writes) {
    const ir::Node* update = g->outputs()[static_cast<size_t>(w.output)]->producer;
    bool after = false;
    for (const ir::Node* u : g->inputs()[static_cast<size_t>(w.input)]->users)
      after = after || g->position(u) > g->position(update);
    late += after;
  }
  // The last layer's update may stay before its weight's recomputed reader
  // (the model found the longer-lived gradient costlier than a new weight).
  EXPECT_LE(late, 1) << ir::print(*g);
}

}  // namespace
}  // namespace kiln::passes
