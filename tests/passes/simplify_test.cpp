// Tests of passes/src/simplify.cpp: each rule fires, and each "must not fire"
// case (broadcast, promotion, float zeros, symbolic values) is left alone.
#include "kiln/passes/simplify.h"

#include <cmath>
#include <cstring>

#include "executor/executor.h"
#include "passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using testing::expect_pass;
using testing::expect_unchanged;
using testing::trim_leading_newline;

TEST(Simplify, MultiplyAndDivideByOne) {
  // x*1, 1*x and x/1 become x for a wrapped 1 and an all-ones tensor.
  expect_pass(simplify, R"(
graph(%0: f32[4] "arg0") {
  %1 = constant wrapped f64[] 1.0
  %2 = constant f32[4] [1.0, 1.0, 1.0, 1.0]
  %3 = mul(%0, %1) : f32[4]
  %4 = mul(%2, %3) : f32[4]
  %5 = div(%4, %1) : f32[4]
  return %5 "out0"
}
)",
              R"(
graph(%0: f32[4] "arg0") {
  %1 = constant wrapped f64[] 1.0
  %2 = constant f32[4] [1.0, 1.0, 1.0, 1.0]
  return %0 "out0"
}
)",
              true);
}

TEST(Simplify, MultiplyByOneThatBroadcastsOrPromotesStays) {
  // x*1 that broadcasts x, promotes its dtype, or is 1/x is not x.
  expect_unchanged(simplify, R"(
graph(%0: f32[4] "arg0", %1: i64[4] "arg1") {
  %2 = constant f32[2, 4] [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
  %3 = mul(%0, %2) : f32[2, 4]
  %4 = constant f32[] 1.0
  %5 = mul(%1, %4) : f32[4]
  %6 = constant f64[4] [1.0, 1.0, 1.0, 1.0]
  %7 = mul(%0, %6) : f64[4]
  %8 = div(%4, %0) : f32[4]
  %9 = constant f32[4] [1.0, 1.0, 1.0, 2.0]
  %10 = mul(%0, %9) : f32[4]
  return %3 "a", %5 "b", %7 "c", %8 "d", %10 "e"
}
)");
}

TEST(Simplify, AddAndSubtractZeroForIntegers) {
  // x+0, 0+x and x-0 become x for integers, where every zero is neutral.
  expect_pass(simplify, R"(
graph(%0: i64[3] "arg0") {
  %1 = constant wrapped i64[] 0
  %2 = add(%0, %1) : i64[3]
  %3 = add(%1, %2) : i64[3]
  %4 = sub(%3, %1) : i64[3]
  return %4 "out0"
}
)",
              R"(
graph(%0: i64[3] "arg0") {
  %1 = constant wrapped i64[] 0
  return %0 "out0"
}
)",
              true);
}

TEST(Simplify, FloatZerosOnlyWhenSignedZeroIsKept) {
  // For floats x+(-0.0) and x-(+0.0) are exact identities and fold.
  expect_pass(simplify, R"(
graph(%0: f32[3] "arg0") {
  %1 = constant wrapped f64[] -0.0
  %2 = constant f32[3] [0.0, 0.0, 0.0]
  %3 = add(%0, %1) : f32[3]
  %4 = add(%1, %3) : f32[3]
  %5 = sub(%4, %2) : f32[3]
  return %5 "out0"
}
)",
              R"(
graph(%0: f32[3] "arg0") {
  %1 = constant wrapped f64[] -0.0
  %2 = constant f32[3] [0.0, 0.0, 0.0]
  return %0 "out0"
}
)",
              true);
}

TEST(Simplify, FloatPlusPositiveZeroStays) {
  // x+0.0 turns -0.0 into +0.0 and x-(-0.0) likewise: both are kept for floats,
  // as is an integer 0 added to a float.
  expect_unchanged(simplify, R"(
graph(%0: f32[3] "arg0") {
  %1 = constant wrapped f64[] 0.0
  %2 = add(%0, %1) : f32[3]
  %3 = add(%1, %0) : f32[3]
  %4 = constant wrapped f64[] -0.0
  %5 = sub(%0, %4) : f32[3]
  %6 = constant wrapped i64[] 0
  %7 = add(%0, %6) : f32[3]
  return %2 "a", %3 "b", %5 "c", %7 "d"
}
)");
}

TEST(Simplify, IntegerSelfDifferenceIsZeros) {
  // x-x becomes a zero-filled full for integer dtypes.
  expect_pass(simplify, R"(
graph(%0: i32[2, 3] "arg0") {
  %1 = sub(%0, %0) : i32[2, 3]
  return %1 "out0"
}
)",
              R"(
graph(%0: i32[2, 3] "arg0") {
  %1 = full() {shape=[2, 3], value=0.0, ivalue=0, dtype=i32} : i32[2, 3]
  return %1 "out0"
}
)",
              true);
}

TEST(Simplify, FloatSelfDifferenceStays) {
  // x-x is NaN for x = inf or NaN: not folded for floats.
  expect_unchanged(simplify, R"(
graph(%0: f32[3] "arg0") {
  %1 = sub(%0, %0) : f32[3]
  return %1 "out0"
}
)");
}

TEST(Simplify, DoubleNegation) {
  // neg(neg(x)) becomes x (the inner neg is left for dce).
  expect_pass(simplify, R"(
graph(%0: f32[3] "arg0") {
  %1 = neg(%0) : f32[3]
  %2 = neg(%1) : f32[3]
  %3 = exp(%2) : f32[3]
  return %3 "out0"
}
)",
              R"(
graph(%0: f32[3] "arg0") {
  %1 = neg(%0) : f32[3]
  %2 = exp(%0) : f32[3]
  return %2 "out0"
}
)",
              true);
}

TEST(Simplify, PermuteChainsCompose) {
  // permute(permute(x)) becomes one permute, or x when the composition is the
  // identity (negative dims included).
  expect_pass(simplify, R"(
graph(%0: f32[2, 3, 4] "arg0") {
  %1 = permute(%0) {dims=[1, 0, 2]} : f32[3, 2, 4]
  %2 = permute(%1) {dims=[0, 2, 1]} : f32[3, 4, 2]
  %3 = permute(%0) {dims=[1, -1, 0]} : f32[3, 4, 2]
  %4 = permute(%3) {dims=[2, 0, 1]} : f32[2, 3, 4]
  return %2 "a", %4 "b"
}
)",
              R"(
graph(%0: f32[2, 3, 4] "arg0") {
  %1 = permute(%0) {dims=[1, 0, 2]} : f32[3, 2, 4]
  %2 = permute(%0) {dims=[1, 2, 0]} : f32[3, 4, 2]
  %3 = permute(%0) {dims=[1, -1, 0]} : f32[3, 4, 2]
  return %2 "a", %0 "b"
}
)",
              true);
}

TEST(Simplify, IdentityPermuteOnlyForIdentityDims) {
  // permute by [0, 1] is x; a transpose of a square matrix is not.
  expect_pass(simplify, R"(
graph(%0: f32[3, 3] "arg0") {
  %1 = permute(%0) {dims=[0, 1]} : f32[3, 3]
  %2 = permute(%0) {dims=[1, 0]} : f32[3, 3]
  return %1 "a", %2 "b"
}
)",
              R"(
graph(%0: f32[3, 3] "arg0") {
  %1 = permute(%0) {dims=[1, 0]} : f32[3, 3]
  return %0 "a", %1 "b"
}
)",
              true);
}

TEST(Simplify, ReshapeChainsCollapse) {
  // reshape(reshape(x)) becomes one reshape (a -1 still resolves the same),
  // and a reshape back to x's shape is x.
  expect_pass(simplify, R"(
graph(%0: f32[2, 6] "arg0") {
  %1 = reshape(%0) {shape=[3, 4]} : f32[3, 4]
  %2 = reshape(%1) {shape=[-1, 2]} : f32[6, 2]
  %3 = reshape(%1) {shape=[2, 6]} : f32[2, 6]
  %4 = reshape(%0) {shape=[2, 6]} : f32[2, 6]
  return %2 "a", %3 "b", %4 "c"
}
)",
              R"(
graph(%0: f32[2, 6] "arg0") {
  %1 = reshape(%0) {shape=[3, 4]} : f32[3, 4]
  %2 = reshape(%0) {shape=[-1, 2]} : f32[6, 2]
  return %2 "a", %0 "b", %0 "c"
}
)",
              true);
}

TEST(Simplify, SumOverRegroupedLeadingDimsSumsTheReshapeInput) {
  // A sum over the leading dims a reshape only regroups sums its input's
  // leading dims (keepdim: then reshaped), so fusion can attach it to the
  // input's kernel. A reshape that also regroups kept dims, or a sum over
  // dims that are not leading, stays.
  expect_pass(simplify, R"(
graph(%0: f32[64, 50] "x", %1: f32[4, 16, 50] "y") {
  %2 = exp(%0) : f32[64, 50]
  %3 = reshape(%2) {shape=[4, 16, 50]} : f32[4, 16, 50]
  %4 = sum(%3) {dims=[0, 1], keepdim=false} : f32[50]
  %5 = sum(%3) {dims=[0, -2], keepdim=true} : f32[1, 1, 50]
  %6 = sum(%3) {dims=[1], keepdim=false} : f32[4, 50]
  %7 = reshape(%2) {shape=[4, 16, 5, 10]} : f32[4, 16, 5, 10]
  %8 = sum(%7) {dims=[0, 1], keepdim=false} : f32[5, 10]
  %9 = reshape(%1) {shape=[64, 50]} : f32[64, 50]
  %10 = sum(%9) {dims=[0], keepdim=false} : f32[50]
  return %4 "a", %5 "b", %6 "c", %8 "d", %10 "e"
}
)",
              R"(
graph(%0: f32[64, 50] "x", %1: f32[4, 16, 50] "y") {
  %2 = exp(%0) : f32[64, 50]
  %3 = reshape(%2) {shape=[4, 16, 50]} : f32[4, 16, 50]
  %4 = sum(%2) {dims=[0], keepdim=false} : f32[50]
  %5 = sum(%2) {dims=[0], keepdim=false} : f32[50]
  %6 = reshape(%5) {shape=[1, 1, 50]} : f32[1, 1, 50]
  %7 = sum(%3) {dims=[1], keepdim=false} : f32[4, 50]
  %8 = reshape(%2) {shape=[4, 16, 5, 10]} : f32[4, 16, 5, 10]
  %9 = sum(%8) {dims=[0, 1], keepdim=false} : f32[5, 10]
  %10 = reshape(%1) {shape=[64, 50]} : f32[64, 50]
  %11 = sum(%1) {dims=[0, 1], keepdim=false} : f32[50]
  return %4 "a", %6 "b", %7 "c", %9 "d", %11 "e"
}
)",
              true);
}

TEST(Simplify, SymbolicReshapeChainCollapses) {
  // The outer reshape's symbolic shape is carried; back to x's shape is x.
  expect_pass(simplify, R"(
graph(%0: f32[s0, 4] "arg0") syms=1 {
  %1 = reshape(%0) {shape=[4*s0]} : f32[4*s0]
  %2 = reshape(%1) {shape=[2*s0, 2]} : f32[2*s0, 2]
  %3 = reshape(%1) {shape=[s0, 4]} : f32[s0, 4]
  return %2 "a", %3 "b"
}
)",
              R"(
graph(%0: f32[s0, 4] "arg0") syms=1 {
  %1 = reshape(%0) {shape=[4*s0]} : f32[4*s0]
  %2 = reshape(%0) {shape=[2*s0, 2]} : f32[2*s0, 2]
  return %2 "a", %0 "b"
}
)",
              true);
}

TEST(Simplify, ExpandChainsCollapse) {
  // expand(expand(x)) becomes one expand; -1 entries get the size they meant;
  // an expand to x's own shape is x.
  expect_pass(simplify, R"(
graph(%0: f32[3, 1] "arg0") {
  %1 = expand(%0) {shape=[3, 4]} : f32[3, 4]
  %2 = expand(%1) {shape=[2, 3, 4]} : f32[2, 3, 4]
  %3 = expand(%1) {shape=[5, -1, -1]} : f32[5, 3, 4]
  %4 = expand(%0) {shape=[3, 1]} : f32[3, 1]
  return %2 "a", %3 "b", %4 "c"
}
)",
              R"(
graph(%0: f32[3, 1] "arg0") {
  %1 = expand(%0) {shape=[3, 4]} : f32[3, 4]
  %2 = expand(%0) {shape=[2, 3, 4]} : f32[2, 3, 4]
  %3 = expand(%0) {shape=[5, 3, 4]} : f32[5, 3, 4]
  return %2 "a", %3 "b", %0 "c"
}
)",
              true);
}

TEST(Simplify, CastToSameDtype) {
  // cast to x's own dtype is x; a real conversion stays.
  expect_pass(simplify, R"(
graph(%0: f32[2] "arg0") {
  %1 = cast(%0) {dtype=f32} : f32[2]
  %2 = cast(%1) {dtype=f64} : f64[2]
  return %2 "out0"
}
)",
              R"(
graph(%0: f32[2] "arg0") {
  %1 = cast(%0) {dtype=f64} : f64[2]
  return %1 "out0"
}
)",
              true);
}

TEST(Simplify, WrappedNumberFlagIsKept) {
  // cast of a host scalar to its own dtype drops the wrapped flag, which
  // changes promotion in its users: not an identity.
  expect_unchanged(simplify, R"(
graph(%0: wrapped f64[] "host0", %1: f32[2] "arg0") {
  %2 = cast(%0) {dtype=f64} : f64[]
  %3 = mul(%1, %2) : f32[2]
  return %3 "out0"
}
)");
}

TEST(Simplify, SymbolicConstantsAreNotOneOrZero) {
  // A constant whose value is symbolic (1/s0) is not a known 1.
  expect_unchanged(simplify, R"(
graph(%0: f32[s0] "arg0") syms=1 {
  %1 = constant wrapped f64[] 1.0 {value=1/(s0)}
  %2 = mul(%0, %1) : f32[s0]
  return %2 "out0"
}
)");
}

TEST(Simplify, RandomValueTimesOneKeepsTheSingleDraw) {
  // rand*1 becomes the rand node itself: it is neither duplicated nor removed.
  expect_pass(simplify, R"(
graph() rng_advance=2 {
  %0 = rand_uniform() {shape=[2], dtype=f32, seed=1, offset=0} : f32[2]
  %1 = constant wrapped f64[] 1.0
  %2 = mul(%0, %1) : f32[2]
  return %2 "out0"
}
)",
              R"(
graph() rng_advance=2 {
  %0 = rand_uniform() {shape=[2], dtype=f32, seed=1, offset=0} : f32[2]
  %1 = constant wrapped f64[] 1.0
  return %0 "out0"
}
)",
              true);
}

// gather(log_softmax(x)) as cross-entropy's loss takes it: the chain x - max
// - log(sum) moves past the gather, which then reads x (a matmul's output,
// stored anyway) and the kernel computing the chain need not store it.
TEST(Simplify, GatherOfRowShiftedValuesGathersTheValues) {
  expect_pass(simplify, R"(
graph(%0: f32[4, 5] "x", %1: i64[4, 1] "label") {
  %2 = max(%0) {dims=[1], keepdim=true} : f32[4, 1]
  %3 = sub(%0, %2) : f32[4, 5]
  %4 = exp(%3) : f32[4, 5]
  %5 = sum(%4) {dims=[1], keepdim=true} : f32[4, 1]
  %6 = log(%5) : f32[4, 1]
  %7 = sub(%3, %6) : f32[4, 5]
  %8 = gather(%7, %1) {dim=1} : f32[4, 1]
  return %8 "out0", %7 "out1"
}
)",
              R"(
graph(%0: f32[4, 5] "x", %1: i64[4, 1] "label") {
  %2 = max(%0) {dims=[1], keepdim=true} : f32[4, 1]
  %3 = sub(%0, %2) : f32[4, 5]
  %4 = exp(%3) : f32[4, 5]
  %5 = sum(%4) {dims=[1], keepdim=true} : f32[4, 1]
  %6 = log(%5) : f32[4, 1]
  %7 = sub(%3, %6) : f32[4, 5]
  %8 = gather(%0, %1) {dim=1} : f32[4, 1]
  %9 = sub(%8, %2) : f32[4, 1]
  %10 = sub(%9, %6) : f32[4, 1]
  return %10 "out0", %7 "out1"
}
)",
              true);
  const char* stays[] = {
      // the base is computed elementwise (a kernel's temporary)
      R"(
graph(%0: f32[4, 5] "y", %1: i64[4, 1] "label", %2: f32[4, 1] "b") {
  %3 = exp(%0) : f32[4, 5]
  %4 = sub(%3, %2) : f32[4, 5]
  %5 = gather(%4, %1) {dim=1} : f32[4, 1]
  return %5 "out0"
}
)",
      // the operand varies along the gathered dim
      R"(
graph(%0: f32[4, 5] "x", %1: i64[4, 1] "label", %2: f32[1, 5] "b") {
  %3 = sub(%0, %2) : f32[4, 5]
  %4 = gather(%3, %1) {dim=1} : f32[4, 1]
  return %4 "out0"
}
)",
      // the index covers 3 of the 4 rows the operand varies with
      R"(
graph(%0: f32[4, 5] "x", %1: i64[3, 1] "label", %2: f32[4, 1] "b") {
  %3 = mul(%0, %2) : f32[4, 5]
  %4 = gather(%3, %1) {dim=1} : f32[3, 1]
  return %4 "out0"
}
)",
      // x broadcast by the op (its rows are b's)
      R"(
graph(%0: f32[1, 5] "x", %1: i64[4, 1] "label", %2: f32[4, 1] "b") {
  %3 = add(%0, %2) : f32[4, 5]
  %4 = gather(%3, %1) {dim=1} : f32[4, 1]
  return %4 "out0"
}
)",
  };
  for (const char* text : stays) expect_unchanged(simplify, text);
}

TEST(Simplify, GatheredChainEqualsEagerBitForBit) {
  // Rows with infinities and NaN; labels at both ends; a wrapped scalar and
  // a per-row divisor on either side of the ops.
  std::shared_ptr<ir::Graph> g = ir::parse(trim_leading_newline(R"(
graph(%0: f32[3, 6] "x", %1: i64[3, 2] "label", %2: f32[3, 1] "b") {
  %3 = constant wrapped f64[] 0.5
  %4 = mul(%3, %0) : f32[3, 6]
  %5 = div(%2, %4) : f32[3, 6]
  %6 = add(%5, %2) : f32[3, 6]
  %7 = gather(%6, %1) {dim=1} : f32[3, 2]
  return %7 "out0"
}
)"));
  EXPECT_TRUE(simplify(*g));
  const float inf = INFINITY, nan = NAN;
  const Tensor x = from_vector(std::vector<float>{1, -2, inf, 0, -0.0f, 3, nan, 5, 6, -inf, 7, 8,
                                                  0.25f, -1, 2, 9, 10, -0.0f},
                               {3, 6});
  const Tensor label = from_vector(std::vector<int64_t>{0, 5, 2, 3, 4, 1}, {3, 2});
  const Tensor b = from_vector(std::vector<float>{2, -0.0f, inf}, {3, 1});
  const std::vector<Tensor> in{x, label, b};
  RunArgs args;
  args.inputs = in;
  const Tensor got = Executor(std::shared_ptr<ir::Graph>(std::move(g))).run(args)[0];
  const Tensor want = gather(b / (0.5 * x) + b, 1, label);
  EXPECT_EQ(std::memcmp(got.contiguous().data_ptr(), want.contiguous().data_ptr(), 6 * 4), 0);
}

TEST(Simplify, NothingToDoUnchanged) {
  // A graph with no pattern is reported unchanged.
  expect_unchanged(simplify, R"(
graph(%0: f32[2] "arg0", %1: f32[2] "arg1") {
  %2 = mul(%0, %1) : f32[2]
  %3 = neg(%2) : f32[2]
  return %3 "out0"
}
)");
}

}  // namespace
}  // namespace kiln::passes
