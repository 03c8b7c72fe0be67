// Tests of passes/src/elide_copies.cpp: copies of fresh unshared values go,
// copied transposed matmuls become matmuls of transposes, and copies that
// protect a shared buffer (an input, a view of one, a value with other uses)
// stay.
#include "kiln/passes/elide_copies.h"

#include "executor/executor.h"
#include "kiln/ir/text.h"
#include "kiln/passes/pass_manager.h"
#include "passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using testing::expect_pass;
using testing::expect_unchanged;

TEST(ElideCopies, CopyOfAFreshValueGoes) {
  // exp's result is used only by the copy: the copy's users read it directly,
  // also through a reshape (a bias gradient's sum reshaped to the bias).
  expect_pass(elide_copies, R"(
graph(%0: f32[4, 3] "arg0") {
  %1 = exp(%0) : f32[4, 3]
  %2 = copy(%1) : f32[4, 3]
  %3 = sum(%2) {dims=[0], keepdim=true} : f32[1, 3]
  %4 = reshape(%3) {shape=[3]} : f32[3]
  %5 = copy(%4) : f32[3]
  return %2 "out0", %5 "out1"
}
)",
              R"(
graph(%0: f32[4, 3] "arg0") {
  %1 = exp(%0) : f32[4, 3]
  %2 = sum(%1) {dims=[0], keepdim=true} : f32[1, 3]
  %3 = reshape(%2) {shape=[3]} : f32[3]
  return %1 "out0", %3 "out1"
}
)",
              true);
}

TEST(ElideCopies, CopiesOfSharedBuffersStay) {
  // A copy of an input, of a view of an input, of a value with another use (a
  // graph output counts), or of a reshape whose source is used elsewhere,
  // produces a buffer nobody else sees: all stay.
  expect_unchanged(elide_copies, R"(
graph(%0: f32[4, 3] "arg0") {
  %1 = copy(%0) : f32[4, 3]
  %2 = permute(%0) {dims=[1, 0]} : f32[3, 4]
  %3 = copy(%2) : f32[3, 4]
  %4 = exp(%0) : f32[4, 3]
  %5 = copy(%4) : f32[4, 3]
  %6 = neg(%0) : f32[4, 3]
  %7 = reshape(%6) {shape=[12]} : f32[12]
  %8 = copy(%7) : f32[12]
  return %1 "out0", %3 "out1", %4 "out2", %5 "out3", %6 "out4", %8 "out5"
}
)");
}

TEST(ElideCopies, CopiedTransposedMatmulIsComputedTransposed) {
  // copy((a^T g)^T) -> g^T a: the weight gradient of x @ w.t() in w's layout.
  expect_pass(elide_copies, R"(
graph(%0: f32[8, 5] "a", %1: f32[8, 3] "g") {
  %2 = permute(%0) {dims=[1, 0]} : f32[5, 8]
  %3 = matmul(%2, %1) : f32[5, 3]
  %4 = permute(%3) {dims=[1, 0]} : f32[3, 5]
  %5 = copy(%4) : f32[3, 5]
  return %5 "out0"
}
)",
              R"(
graph(%0: f32[8, 5] "a", %1: f32[8, 3] "g") {
  %2 = permute(%0) {dims=[1, 0]} : f32[5, 8]
  %3 = matmul(%2, %1) : f32[5, 3]
  %4 = permute(%3) {dims=[1, 0]} : f32[3, 5]
  %5 = permute(%1) {dims=[1, 0]} : f32[3, 8]
  %6 = permute(%2) {dims=[1, 0]} : f32[8, 5]
  %7 = matmul(%5, %6) : f32[3, 5]
  return %7 "out0"
}
)",
              true);
}

TEST(ElideCopies, TransposedMatmulWithOtherUsesStays) {
  // The matmul result is also returned: its transpose must be a real copy.
  expect_unchanged(elide_copies, R"(
graph(%0: f32[8, 5] "a", %1: f32[5, 3] "b") {
  %2 = matmul(%0, %1) : f32[8, 3]
  %3 = permute(%2) {dims=[1, 0]} : f32[3, 8]
  %4 = copy(%3) : f32[3, 8]
  return %4 "out0", %2 "out1"
}
)");
}

TEST(ElideCopies, PipelineLeavesNoTransposeCopyAndMatchesValues) {
  // With the standard pipeline the permute pairs cancel: two permutes of
  // inputs feed one matmul, and the graph computes the same values (up to the
  // order BLAS sums in).
  std::shared_ptr<ir::Graph> g = ir::parse(R"(
graph(%0: f32[8, 5] "a", %1: f32[8, 3] "g") {
  %2 = permute(%0) {dims=[1, 0]} : f32[5, 8]
  %3 = matmul(%2, %1) : f32[5, 3]
  %4 = permute(%3) {dims=[1, 0]} : f32[3, 5]
  %5 = copy(%4) : f32[3, 5]
  return %5 "out0"
}
)");
  run_pipeline(*g, standard_pipeline());
  EXPECT_EQ(testing::node_ops(*g), (std::vector<std::string>{"permute", "matmul"}));
  Tensor a = randn({8, 5}), gr = randn({8, 3});
  Tensor want = matmul(a.transpose(0, 1), gr).transpose(0, 1);
  std::vector<Tensor> in{a, gr};
  RunArgs args;
  args.inputs = in;
  Tensor got = Executor(g).run(args)[0];
  EXPECT_TRUE(allclose(got, want, 1e-5, 1e-6));
  EXPECT_TRUE(got.is_contiguous());
}

TEST(ElideCopies, SymbolicBatchKeepsSymbolicShapes) {
  // A dynamic batch dim (s0) moves with the transposes.
  expect_pass(elide_copies, R"(
graph(%0: f32[s0, 5] "a", %1: f32[s0, 3] "g") syms=1 {
  %2 = permute(%0) {dims=[1, 0]} : f32[5, s0]
  %3 = matmul(%2, %1) : f32[5, 3]
  %4 = permute(%3) {dims=[1, 0]} : f32[3, 5]
  %5 = copy(%4) : f32[3, 5]
  return %5 "out0"
}
)",
              R"(
graph(%0: f32[s0, 5] "a", %1: f32[s0, 3] "g") syms=1 {
  %2 = permute(%0) {dims=[1, 0]} : f32[5, s0]
  %3 = matmul(%2, %1) : f32[5, 3]
  %4 = permute(%3) {dims=[1, 0]} : f32[3, 5]
  %5 = permute(%1) {dims=[1, 0]} : f32[3, s0]
  %6 = permute(%2) {dims=[1, 0]} : f32[s0, 5]
  %7 = matmul(%5, %6) : f32[3, 5]
  return %7 "out0"
}
)",
              true);
}

}  // namespace
}  // namespace kiln::passes
