// Tests of passes/src/fuse_split.cpp: channel sums (BatchNorm's sums over
// [0, 2, 3]) become a trailing row sum and a small sum, IR before and after,
// and the row sum then fuses with its producer (the fusion plan's text).
#include "kiln/passes/fuse.h"

#include "passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using testing::expect_pass;
using testing::expect_unchanged;
using testing::trim_leading_newline;

// BatchNorm's per-channel sum over N, H, W: a sum over [2, 3], then over [0, 2, 3].
TEST(FuseSplit, ChannelSumBecomesRowSumThenSmallSum) {
  expect_pass(split_channel_sums, R"(
graph(%0: f32[4, 3, 5, 6] "x") {
  %1 = sum(%0) {dims=[0, 2, 3], keepdim=true} : f32[1, 3, 1, 1]
  return %1 "out0"
}
)",
              R"(
graph(%0: f32[4, 3, 5, 6] "x") {
  %1 = sum(%0) {dims=[2, 3], keepdim=true} : f32[4, 3, 1, 1]
  %2 = sum(%1) {dims=[0, 2, 3], keepdim=true} : f32[1, 3, 1, 1]
  return %2 "out0"
}
)",
              true);
}

// keepdim=false and negative dims: the outer sum gives the original shape.
TEST(FuseSplit, WithoutKeepdimAndNegativeDims) {
  expect_pass(split_channel_sums, R"(
graph(%0: f64[2, 7, 9] "x") {
  %1 = sum(%0) {dims=[-1, 0], keepdim=false} : f64[7]
  %2 = neg(%1) : f64[7]
  return %2 "out0"
}
)",
              R"(
graph(%0: f64[2, 7, 9] "x") {
  %1 = sum(%0) {dims=[2], keepdim=true} : f64[2, 7, 1]
  %2 = sum(%1) {dims=[-1, 0], keepdim=false} : f64[7]
  %3 = neg(%2) : f64[7]
  return %3 "out0"
}
)",
              true);
}

// Sums the fusion already handles, or where a split gains nothing, stay.
TEST(FuseSplit, OtherSumsAreUnchanged) {
  // Trailing dims only (a row sum), leading dims only (a column sum), everything.
  expect_unchanged(split_channel_sums, R"(
graph(%0: f32[4, 3, 5, 6] "x") {
  %1 = sum(%0) {dims=[2, 3], keepdim=true} : f32[4, 3, 1, 1]
  %2 = sum(%0) {dims=[0, 1], keepdim=false} : f32[5, 6]
  %3 = sum(%0) {dims=[], keepdim=false} : f32[]
  return %1 "a", %2 "b", %3 "c"
}
)");
  // N = 1 or H * W = 1: the sum is already a row sum or a column sum.
  expect_unchanged(split_channel_sums, R"(
graph(%0: f32[1, 3, 5, 6] "x", %1: f32[4, 3, 1, 1] "y") {
  %2 = sum(%0) {dims=[0, 2, 3], keepdim=true} : f32[1, 3, 1, 1]
  %3 = sum(%1) {dims=[0, 2, 3], keepdim=true} : f32[1, 3, 1, 1]
  return %2 "a", %3 "b"
}
)");
  // Integer and half-precision sums (exact or rounded per op: left to eager).
  expect_unchanged(split_channel_sums, R"(
graph(%0: i64[4, 3, 5] "x", %1: f16[4, 3, 5] "y") {
  %2 = sum(%0) {dims=[0, 2], keepdim=true} : i64[1, 3, 1]
  %3 = sum(%1) {dims=[0, 2], keepdim=true} : f16[1, 3, 1]
  return %2 "a", %3 "b"
}
)");
}

// After the split, BatchNorm's statistics fuse: the centered square and its
// row sum are one reduction kernel, and the square is never stored.
TEST(FuseSplit, RowSumJoinsItsProducersKernel) {
  std::unique_ptr<ir::Graph> g = ir::parse(trim_leading_newline(R"(
graph(%0: f32[4, 3, 5, 6] "x", %1: f32[1, 3, 1, 1] "mean") {
  %2 = sub(%0, %1) : f32[4, 3, 5, 6]
  %3 = mul(%2, %2) : f32[4, 3, 5, 6]
  %4 = sum(%3) {dims=[0, 2, 3], keepdim=true} : f32[1, 3, 1, 1]
  return %4 "var", %2 "centered"
}
)"));
  EXPECT_EQ(to_string(plan_fusion(*g), *g),
            "group 0 pointwise [4, 3, 5*6]: sub %2, mul %3 ; in %0 %1 ; out %2 %3\n");
  ASSERT_TRUE(split_channel_sums(*g));
  FusionPlan plan = plan_fusion(*g);
  EXPECT_EQ(check_plan(plan, *g), "");
  EXPECT_EQ(to_string(plan, *g),
            "group 0 reduction [4, 3 | 5*6]: sub %2, mul %3, sum %4 ; in %0 %1 ; out %2 %4\n");
}

}  // namespace
}  // namespace kiln::passes
