// Tests of passes/src/cse.cpp.
#include "kiln/passes/cse.h"

#include <cmath>

#include "passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using testing::expect_pass;
using testing::expect_unchanged;

TEST(Cse, MergesIdenticalNodes) {
  // Two identical adds become one; uses (including graph outputs) move to the first.
  expect_pass(cse, R"(
graph(%0: f32[4] "arg0", %1: f32[4] "arg1") {
  %2 = add(%0, %1) : f32[4]
  %3 = add(%0, %1) : f32[4]
  %4 = mul(%2, %3) : f32[4]
  return %4 "out0", %3 "out1"
}
)",
              R"(
graph(%0: f32[4] "arg0", %1: f32[4] "arg1") {
  %2 = add(%0, %1) : f32[4]
  %3 = mul(%2, %2) : f32[4]
  return %3 "out0", %2 "out1"
}
)",
              true);
}

TEST(Cse, CommutativeInputsAreUnordered) {
  // add(a, b) and add(b, a) merge (kCommutative); sub(a, b) and sub(b, a) do not.
  expect_pass(cse, R"(
graph(%0: f32[4] "arg0", %1: f32[4] "arg1") {
  %2 = add(%0, %1) : f32[4]
  %3 = add(%1, %0) : f32[4]
  %4 = sub(%0, %1) : f32[4]
  %5 = sub(%1, %0) : f32[4]
  return %2 "a", %3 "b", %4 "c", %5 "d"
}
)",
              R"(
graph(%0: f32[4] "arg0", %1: f32[4] "arg1") {
  %2 = add(%0, %1) : f32[4]
  %3 = sub(%0, %1) : f32[4]
  %4 = sub(%1, %0) : f32[4]
  return %2 "a", %2 "b", %3 "c", %4 "d"
}
)",
              true);
}

// Verifies floating maximum/minimum with swapped operands stay apart (signed zeros differ).
TEST(Cse, FloatMaximumMinimumKeepOperandOrder) {
  // maximum(-0.0, +0.0) is +0.0 but maximum(+0.0, -0.0) is -0.0 (ties return
  // the second operand); integer maximum/minimum still merge.
  expect_pass(cse, R"(
graph(%0: f32[4] "arg0", %1: f32[4] "arg1", %2: i64[4] "arg2", %3: i64[4] "arg3") {
  %4 = maximum(%0, %1) : f32[4]
  %5 = maximum(%1, %0) : f32[4]
  %6 = minimum(%0, %1) : f32[4]
  %7 = minimum(%1, %0) : f32[4]
  %8 = maximum(%2, %3) : i64[4]
  %9 = maximum(%3, %2) : i64[4]
  %10 = maximum(%0, %1) : f32[4]
  return %4 "a", %5 "b", %6 "c", %7 "d", %8 "e", %9 "f", %10 "g"
}
)",
              R"(
graph(%0: f32[4] "arg0", %1: f32[4] "arg1", %2: i64[4] "arg2", %3: i64[4] "arg3") {
  %4 = maximum(%0, %1) : f32[4]
  %5 = maximum(%1, %0) : f32[4]
  %6 = minimum(%0, %1) : f32[4]
  %7 = minimum(%1, %0) : f32[4]
  %8 = maximum(%2, %3) : i64[4]
  return %4 "a", %5 "b", %6 "c", %7 "d", %8 "e", %8 "f", %4 "g"
}
)",
              true);
}

// Verifies the signed-zero ties of maximum/minimum that make their operand order matter.
TEST(Cse, MaximumOfSignedZerosDependsOnOperandOrder) {
  const Tensor neg0 = full({1}, -0.0), pos0 = full({1}, 0.0);
  EXPECT_FALSE(std::signbit(maximum(neg0, pos0).item<float>()));
  EXPECT_TRUE(std::signbit(maximum(pos0, neg0).item<float>()));
  EXPECT_FALSE(std::signbit(minimum(neg0, pos0).item<float>()));
  EXPECT_TRUE(std::signbit(minimum(pos0, neg0).item<float>()));
}

TEST(Cse, DuplicatedChainMergesInOneRun) {
  // exp(neg(x)) computed twice collapses to one chain in a single run.
  expect_pass(cse, R"(
graph(%0: f32[4] "arg0") {
  %1 = neg(%0) : f32[4]
  %2 = exp(%1) : f32[4]
  %3 = neg(%0) : f32[4]
  %4 = exp(%3) : f32[4]
  %5 = add(%2, %4) : f32[4]
  return %5 "out0"
}
)",
              R"(
graph(%0: f32[4] "arg0") {
  %1 = neg(%0) : f32[4]
  %2 = exp(%1) : f32[4]
  %3 = add(%2, %2) : f32[4]
  return %3 "out0"
}
)",
              true);
}

TEST(Cse, MultiOutputNodesMergeAllOutputs) {
  // Both outputs of a duplicated max_pool2d are redirected to the first node's.
  expect_pass(cse, R"(
graph(%0: f32[1, 4, 4] "arg0") {
  %1, %2 = max_pool2d(%0) {kernel_size=[2, 2]} : f32[1, 2, 2], i64[1, 2, 2]
  %3, %4 = max_pool2d(%0) {kernel_size=[2, 2]} : f32[1, 2, 2], i64[1, 2, 2]
  return %1 "v0", %4 "i1", %3 "v1"
}
)",
              R"(
graph(%0: f32[1, 4, 4] "arg0") {
  %1, %2 = max_pool2d(%0) {kernel_size=[2, 2]} : f32[1, 2, 2], i64[1, 2, 2]
  return %1 "v0", %2 "i1", %1 "v1"
}
)",
              true);
}

TEST(Cse, DifferentAttrsDoNotMerge) {
  // Same op and input but different attributes: both nodes stay.
  expect_unchanged(cse, R"(
graph(%0: f32[2, 3] "arg0") {
  %1 = sum(%0) {dims=[0], keepdim=false} : f32[3]
  %2 = sum(%0) {dims=[1], keepdim=false} : f32[2]
  return %1 "a", %2 "b"
}
)");
}

TEST(Cse, AttrOrderDoesNotMatter) {
  // Attributes are compared by name, not by position in the list.
  expect_pass(cse, R"(
graph() {
  %0 = full() {shape=[2], value=1.5, dtype=f32} : f32[2]
  %1 = full() {dtype=f32, value=1.5, shape=[2]} : f32[2]
  return %0 "a", %1 "b"
}
)",
              R"(
graph() {
  %0 = full() {shape=[2], value=1.5, dtype=f32} : f32[2]
  return %0 "a", %0 "b"
}
)",
              true);
}

TEST(Cse, NanAttrsMergeSignedZerosDoNot) {
  // Doubles compare by bit pattern: NaN == NaN, but 0.0 != -0.0.
  expect_pass(cse, R"(
graph() {
  %0 = full() {shape=[2], value=nan, dtype=f32} : f32[2]
  %1 = full() {shape=[2], value=nan, dtype=f32} : f32[2]
  %2 = full() {shape=[2], value=0.0, dtype=f32} : f32[2]
  %3 = full() {shape=[2], value=-0.0, dtype=f32} : f32[2]
  return %0 "a", %1 "b", %2 "c", %3 "d"
}
)",
              R"(
graph() {
  %0 = full() {shape=[2], value=nan, dtype=f32} : f32[2]
  %1 = full() {shape=[2], value=0.0, dtype=f32} : f32[2]
  %2 = full() {shape=[2], value=-0.0, dtype=f32} : f32[2]
  return %0 "a", %0 "b", %1 "c", %2 "d"
}
)",
              true);
}

TEST(Cse, RandomNodesNeverMerge) {
  // Two rand_uniform nodes with identical attrs stay two draws.
  expect_unchanged(cse, R"(
graph() rng_advance=4 {
  %0 = rand_uniform() {shape=[2], dtype=f32, seed=1, offset=0} : f32[2]
  %1 = rand_uniform() {shape=[2], dtype=f32, seed=1, offset=0} : f32[2]
  %2 = add(%0, %1) : f32[2]
  return %2 "out0"
}
)");
}

TEST(Cse, ConstantsMergeByDtypeShapeWrappedAndBytes) {
  // Equal constants merge; another dtype, shape, wrapped flag or value does not.
  expect_pass(cse, R"(
graph() {
  %0 = constant f32[2] [1.0, 2.0]
  %1 = constant f32[2] [1.0, 2.0]
  %2 = constant f64[2] [1.0, 2.0]
  %3 = constant f32[2, 1] [1.0, 2.0]
  %4 = constant wrapped f64[] 1.0
  %5 = constant f64[] 1.0
  %6 = constant wrapped f64[] 1.0
  %7 = constant f32[2] [1.0, -0.0]
  %8 = constant f32[2] [1.0, 0.0]
  return %0 "a", %1 "b", %2 "c", %3 "d", %4 "e", %5 "f", %6 "g", %7 "h", %8 "i"
}
)",
              R"(
graph() {
  %0 = constant f32[2] [1.0, 2.0]
  %1 = constant f64[2] [1.0, 2.0]
  %2 = constant f32[2, 1] [1.0, 2.0]
  %3 = constant wrapped f64[] 1.0
  %4 = constant f64[] 1.0
  %5 = constant f32[2] [1.0, -0.0]
  %6 = constant f32[2] [1.0, 0.0]
  return %0 "a", %0 "b", %1 "c", %2 "d", %3 "e", %4 "f", %3 "g", %5 "h", %6 "i"
}
)",
              true);
}

TEST(Cse, SymbolicConstantsMergeOnlyWithSameExpression) {
  // A constant's symbolic value is part of its identity.
  expect_pass(cse, R"(
graph(%0: f32[s0] "arg0") syms=1 {
  %1 = constant wrapped f64[] 0.5 {value=1/(s0)}
  %2 = constant wrapped f64[] 0.5 {value=1/(s0)}
  %3 = constant wrapped f64[] 0.5 {value=1/(2*s0)}
  %4 = mul(%0, %1) : f32[s0]
  %5 = mul(%0, %2) : f32[s0]
  %6 = mul(%0, %3) : f32[s0]
  return %4 "a", %5 "b", %6 "c"
}
)",
              R"(
graph(%0: f32[s0] "arg0") syms=1 {
  %1 = constant wrapped f64[] 0.5 {value=1/(s0)}
  %2 = constant wrapped f64[] 0.5 {value=1/(2*s0)}
  %3 = mul(%0, %1) : f32[s0]
  %4 = mul(%0, %2) : f32[s0]
  return %3 "a", %3 "b", %4 "c"
}
)",
              true);
}

TEST(Cse, LargeConstantsAreNotCompared) {
  // Constants above 4096 elements are left alone (bounded hashing cost).
  ir::Graph g;
  Tensor big = zeros({4097});
  Tensor small = zeros({4096});
  ir::Value* a = testing::constant(g, big);
  ir::Value* b = testing::constant(g, big);
  ir::Value* c = testing::constant(g, small);
  ir::Value* d = testing::constant(g, small);
  for (ir::Value* v : {a, b, c, d}) g.add_output(v, "out");
  EXPECT_TRUE(cse(g));
  ir::verify(g);
  EXPECT_EQ(g.num_nodes(), 3u);
  EXPECT_NE(g.outputs()[0], g.outputs()[1]);
  EXPECT_EQ(g.outputs()[2], g.outputs()[3]);
}

TEST(Cse, NoDuplicatesUnchanged) {
  // A graph without duplicates is reported unchanged.
  expect_unchanged(cse, R"(
graph(%0: f32[4] "arg0") {
  %1 = neg(%0) : f32[4]
  %2 = exp(%0) : f32[4]
  return %1 "a", %2 "b"
}
)");
}

}  // namespace
}  // namespace kiln::passes
