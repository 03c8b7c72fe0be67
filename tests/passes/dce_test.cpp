// Tests of passes/src/dce.cpp.
#include "kiln/passes/dce.h"

#include "passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using testing::expect_pass;
using testing::expect_unchanged;

TEST(Dce, RemovesDeadChainInOneRun) {
  // A chain of three dead nodes disappears in a single run (reverse walk).
  expect_pass(dce, R"(
graph(%0: f32[4] "arg0") {
  %1 = neg(%0) : f32[4]
  %2 = exp(%1) : f32[4]
  %3 = log(%2) : f32[4]
  %4 = relu(%0) : f32[4]
  return %4 "out0"
}
)",
              R"(
graph(%0: f32[4] "arg0") {
  %1 = relu(%0) : f32[4]
  return %1 "out0"
}
)",
              true);
}

TEST(Dce, KeepsGraphInputsOutputsAndLiveNodes) {
  // Unused graph inputs stay; a node read only by a graph output is live.
  expect_unchanged(dce, R"(
graph(%0: f32[4] "arg0", %1: f32[4] "arg1") {
  %2 = neg(%0) : f32[4]
  %3 = exp(%2) : f32[4]
  return %3 "out0", %2 "out1"
}
)");
}

TEST(Dce, MultiOutputNodeLiveIfAnyOutputUsed) {
  // max_pool2d stays when only its indices output is used.
  expect_unchanged(dce, R"(
graph(%0: f32[1, 4, 4] "arg0") {
  %1, %2 = max_pool2d(%0) {kernel_size=[2, 2]} : f32[1, 2, 2], i64[1, 2, 2]
  return %2 "idx"
}
)");
}

TEST(Dce, RemovesDeadConstantsAndRandomNodes) {
  // Unused constants and unused random draws are removed.
  expect_pass(dce, R"(
graph(%0: f32[2] "arg0") {
  %1 = constant f32[2] [1.0, 2.0]
  %2 = rand_uniform() {shape=[2], dtype=f32, seed=7, offset=0} : f32[2]
  %3 = add(%0, %1) : f32[2]
  return %0 "out0"
}
)",
              R"(
graph(%0: f32[2] "arg0") {
  return %0 "out0"
}
)",
              true);
}

TEST(Dce, NodeUsedTwiceByOneUserIsLive) {
  // A value read twice by a dead user dies with it; a live double use keeps it.
  expect_pass(dce, R"(
graph(%0: f32[3] "arg0") {
  %1 = exp(%0) : f32[3]
  %2 = mul(%1, %1) : f32[3]
  %3 = sin(%0) : f32[3]
  %4 = add(%3, %3) : f32[3]
  return %4 "out0"
}
)",
              R"(
graph(%0: f32[3] "arg0") {
  %1 = sin(%0) : f32[3]
  %2 = add(%1, %1) : f32[3]
  return %2 "out0"
}
)",
              true);
}

TEST(Dce, EmptyGraphUnchanged) {
  // A graph without nodes is left alone and reported unchanged.
  ir::Graph g;
  g.add_output(testing::input(g, DType::f32, {2}, "arg0"), "out0");
  EXPECT_FALSE(dce(g));
  EXPECT_EQ(g.num_nodes(), 0u);
  EXPECT_EQ(g.inputs().size(), 1u);
}

}  // namespace
}  // namespace kiln::passes
