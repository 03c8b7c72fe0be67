// fold_constants and devices: the IR records none (the plan picks its device
// after the trace), so a fold may not turn a value that lives on the graph's
// device into a CPU constant unless the graph is known to run on the CPU
// (FoldDeviceScope). The CUDA side: tests/codegen/cuda/cuda_fold_test.cpp.
#include "kiln/passes/fold_constants.h"
#include "passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using testing::expect_pass;
using testing::expect_unchanged;

// The regression: arange feeding index_select of a graph input (a CUDA table)
// became a CPU constant. Without a known device, it stays a factory.
constexpr const char* kArangeIndex = R"(
graph(%0: f32[10, 6] "emb") {
  %1 = arange() {start=0.0, end=4.0, step=1.0, dtype=i64} : i64[4]
  %2 = index_select(%0, %1) {dim=0} : f32[4, 6]
  return %2 "out0"
}
)";

TEST(FoldConstantsDevice, WithoutAKnownDeviceAFactoryIsNotMadeACpuConstant) {
  expect_unchanged(fold_constants, kArangeIndex);
}

TEST(FoldConstantsDevice, OnTheCpuTheFactoryFolds) {
  const FoldDeviceScope cpu(Device::cpu());
  expect_pass(fold_constants, kArangeIndex, R"(
graph(%0: f32[10, 6] "emb") {
  %1 = constant i64[4] [0, 1, 2, 3]
  %2 = index_select(%0, %1) {dim=0} : f32[4, 6]
  return %2 "out0"
}
)",
              true);
}

// Without a known device: a fold with a non-scalar constant input is placed
// where that constant lives (the graph's device); one from factories, fulls
// and scalars only becomes a host scalar (0-d, no graph output: valid on every
// device), a `full` if its elements are all equal (made where the graph runs),
// else is not made.
TEST(FoldConstantsDevice, WithoutAKnownDeviceFoldsWhoseDeviceIsImplied) {
  expect_pass(fold_constants, R"(
graph(%0: f32[3] "x") {
  %1 = constant f32[3] [1.0, 2.0, 3.0]
  %2 = full() {shape=[3], value=2.0, dtype=f32} : f32[3]
  %3 = sum(%2) {dims=[0], keepdim=false} : f32[]
  %4 = mul(%2, %2) : f32[3]
  %5 = mul(%1, %2) : f32[3]
  %6 = add(%0, %3) : f32[3]
  %7 = sum(%2) {dims=[0], keepdim=false} : f32[]
  %8 = arange() {start=0.0, end=3.0, step=1.0, dtype=f32} : f32[3]
  %9 = add(%8, %2) : f32[3]
  return %4 "fours", %5 "scaled", %6 "out0", %7 "total", %9 "ramp"
}
)",
              R"(
graph(%0: f32[3] "x") {
  %1 = constant f32[3] [1.0, 2.0, 3.0]
  %2 = full() {shape=[3], value=2.0, dtype=f32} : f32[3]
  %3 = constant f32[] 6.0
  %4 = full() {shape=[3], value=4.0, dtype=f32} : f32[3]
  %5 = constant f32[3] [2.0, 4.0, 6.0]
  %6 = add(%0, %3) : f32[3]
  %7 = full() {shape=[], value=6.0, dtype=f32} : f32[]
  %8 = arange() {start=0.0, end=3.0, step=1.0, dtype=f32} : f32[3]
  %9 = add(%8, %2) : f32[3]
  return %4 "fours", %5 "scaled", %6 "out0", %7 "total", %9 "ramp"
}
)",
              true);
}

// A uniform integer result keeps its exact value (ivalue), beyond 2^53 too.
TEST(FoldConstantsDevice, UniformIntegerResultsBecomeExactFulls) {
  expect_pass(fold_constants, R"(
graph() {
  %0 = full() {shape=[2], value=3.0, ivalue=3, dtype=i64} : i64[2]
  %1 = constant wrapped i64[] 4611686018427387904
  %2 = add(%0, %1) : i64[2]
  return %2 "big"
}
)",
              R"(
graph() {
  %0 = full() {shape=[2], value=3.0, ivalue=3, dtype=i64} : i64[2]
  %1 = constant wrapped i64[] 4611686018427387904
  %2 = full() {shape=[2], value=4.6116860184273879e+18, ivalue=4611686018427387907, dtype=i64} : i64[2]
  return %2 "big"
}
)",
              true);
}

TEST(FoldConstantsDevice, ScopesNestAndRestore) {
  EXPECT_FALSE(FoldDeviceScope::current().has_value());
  {
    const FoldDeviceScope cpu(Device::cpu());
    {
      const FoldDeviceScope gpu(Device::cuda(1));
      EXPECT_EQ(FoldDeviceScope::current(), Device::cuda(1));
    }
    EXPECT_EQ(FoldDeviceScope::current(), Device::cpu());
  }
  EXPECT_FALSE(FoldDeviceScope::current().has_value());
}

}  // namespace
}  // namespace kiln::passes
