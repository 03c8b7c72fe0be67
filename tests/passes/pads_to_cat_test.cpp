// Tests of passes/src/pads_to_cat.cpp: summed zero pads that tile one dim (the
// gradient of q, k, v sliced from one projection) become a cat of their
// inputs; gaps, overlaps, other pad values, two padded dims, or a partial sum
// used elsewhere leave the graph alone.
#include "kiln/passes/pads_to_cat.h"

#include "executor/executor.h"
#include "kiln/ir/text.h"
#include "kiln/passes/pass_manager.h"
#include "passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using testing::expect_pass;
using testing::expect_unchanged;

TEST(PadsToCat, SlicesThatTileBecomeACat) {
  // Pieces in any order along the last dim; the cat takes them by position.
  expect_pass(pads_to_cat, R"(
graph(%0: f32[2, 3] "q", %1: f32[2, 3] "k", %2: f32[2, 2] "v") {
  %3 = pad(%2) {pads=[6, 0, 0, 0], value=0.0} : f32[2, 8]
  %4 = pad(%1) {pads=[3, 2, 0, 0], value=0.0} : f32[2, 8]
  %5 = pad(%0) {pads=[0, 5, 0, 0], value=0.0} : f32[2, 8]
  %6 = add(%3, %4) : f32[2, 8]
  %7 = add(%6, %5) : f32[2, 8]
  return %7 "out0"
}
)",
              R"(
graph(%0: f32[2, 3] "q", %1: f32[2, 3] "k", %2: f32[2, 2] "v") {
  %3 = pad(%2) {pads=[6, 0, 0, 0], value=0.0} : f32[2, 8]
  %4 = pad(%1) {pads=[3, 2, 0, 0], value=0.0} : f32[2, 8]
  %5 = pad(%0) {pads=[0, 5, 0, 0], value=0.0} : f32[2, 8]
  %6 = add(%3, %4) : f32[2, 8]
  %7 = cat(%0, %1, %2) {dim=1} : f32[2, 8]
  return %7 "out0"
}
)",
              true);
}

TEST(PadsToCat, LeadingDimAndSymbolicBatch) {
  // Two halves along dim 1 of a [s0, 4, 5] tensor (chunk(2, dim=1)).
  expect_pass(pads_to_cat, R"(
graph(%0: f32[s0, 2, 5] "a", %1: f32[s0, 2, 5] "b") syms=1 {
  %2 = pad(%0) {pads=[0, 0, 0, 2, 0, 0], value=0.0} : f32[s0, 4, 5]
  %3 = pad(%1) {pads=[0, 0, 2, 0, 0, 0], value=0.0} : f32[s0, 4, 5]
  %4 = add(%2, %3) : f32[s0, 4, 5]
  return %4 "out0"
}
)",
              R"(
graph(%0: f32[s0, 2, 5] "a", %1: f32[s0, 2, 5] "b") syms=1 {
  %2 = pad(%0) {pads=[0, 0, 0, 2, 0, 0], value=0.0} : f32[s0, 4, 5]
  %3 = pad(%1) {pads=[0, 0, 2, 0, 0, 0], value=0.0} : f32[s0, 4, 5]
  %4 = cat(%0, %1) {dim=1} : f32[s0, 4, 5]
  return %4 "out0"
}
)",
              true);
}

TEST(PadsToCat, SumsThatAreNotATilingStay) {
  const char* cases[] = {
      // a gap: [0, 3) and [4, 8)
      R"(
graph(%0: f32[2, 3] "a", %1: f32[2, 4] "b") {
  %2 = pad(%0) {pads=[0, 5, 0, 0], value=0.0} : f32[2, 8]
  %3 = pad(%1) {pads=[4, 0, 0, 0], value=0.0} : f32[2, 8]
  %4 = add(%2, %3) : f32[2, 8]
  return %4 "out0"
}
)",
      // an overlap: [0, 5) and [3, 8)
      R"(
graph(%0: f32[2, 5] "a", %1: f32[2, 5] "b") {
  %2 = pad(%0) {pads=[0, 3, 0, 0], value=0.0} : f32[2, 8]
  %3 = pad(%1) {pads=[3, 0, 0, 0], value=0.0} : f32[2, 8]
  %4 = add(%2, %3) : f32[2, 8]
  return %4 "out0"
}
)",
      // a pad value other than zero
      R"(
graph(%0: f32[2, 4] "a", %1: f32[2, 4] "b") {
  %2 = pad(%0) {pads=[0, 4, 0, 0], value=1.0} : f32[2, 8]
  %3 = pad(%1) {pads=[4, 0, 0, 0], value=0.0} : f32[2, 8]
  %4 = add(%2, %3) : f32[2, 8]
  return %4 "out0"
}
)",
      // pieces along different dims
      R"(
graph(%0: f32[2, 4] "a", %1: f32[4, 2] "b") {
  %2 = pad(%0) {pads=[0, 0, 0, 2], value=0.0} : f32[4, 4]
  %3 = pad(%1) {pads=[2, 0, 0, 0], value=0.0} : f32[4, 4]
  %4 = add(%2, %3) : f32[4, 4]
  return %4 "out0"
}
)",
      // one pad over two dims
      R"(
graph(%0: f32[1, 4] "a", %1: f32[2, 4] "b") {
  %2 = pad(%0) {pads=[0, 4, 0, 1], value=0.0} : f32[2, 8]
  %3 = pad(%1) {pads=[4, 0, 0, 0], value=0.0} : f32[2, 8]
  %4 = add(%2, %3) : f32[2, 8]
  return %4 "out0"
}
)",
      // a partial sum used elsewhere: the tree stops there, leaving a non-pad
      R"(
graph(%0: f32[2, 2] "a", %1: f32[2, 3] "b", %2: f32[2, 3] "c") {
  %3 = pad(%0) {pads=[0, 6, 0, 0], value=0.0} : f32[2, 8]
  %4 = pad(%1) {pads=[2, 3, 0, 0], value=0.0} : f32[2, 8]
  %5 = pad(%2) {pads=[5, 0, 0, 0], value=0.0} : f32[2, 8]
  %6 = add(%3, %4) : f32[2, 8]
  %7 = add(%6, %5) : f32[2, 8]
  return %7 "out0", %6 "out1"
}
)",
  };
  for (const char* text : cases) expect_unchanged(pads_to_cat, text);
}

TEST(PadsToCat, PipelineComputesTheSameValues) {
  // After the standard pipeline only the cat is left, and it equals the sum.
  std::shared_ptr<ir::Graph> g = ir::parse(R"(
graph(%0: f32[3, 2] "q", %1: f32[3, 2] "k", %2: f32[3, 2] "v") {
  %3 = pad(%0) {pads=[0, 4, 0, 0], value=0.0} : f32[3, 6]
  %4 = pad(%1) {pads=[2, 2, 0, 0], value=0.0} : f32[3, 6]
  %5 = pad(%2) {pads=[4, 0, 0, 0], value=0.0} : f32[3, 6]
  %6 = add(%3, %4) : f32[3, 6]
  %7 = add(%6, %5) : f32[3, 6]
  return %7 "out0"
}
)");
  run_pipeline(*g, standard_pipeline());
  EXPECT_EQ(testing::node_ops(*g), (std::vector<std::string>{"cat"}));
  Tensor q = randn({3, 2}), k = randn({3, 2}), v = randn({3, 2});
  std::vector<Tensor> in{q, k, v};
  RunArgs args;
  args.inputs = in;
  EXPECT_TRUE(equal(Executor(g).run(args)[0], cat({q, k, v}, 1)));
}

}  // namespace
}  // namespace kiln::passes
