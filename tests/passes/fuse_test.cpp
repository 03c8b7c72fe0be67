// Tests of passes/src/fuse.cpp: IR text in, fusion groups out (the plan's text
// form), plus structural checks on random graphs (every plan convex and acyclic,
// no value computed in two groups, external uses are group outputs).
#include "kiln/passes/fuse.h"

#include <algorithm>
#include <cstdlib>
#include <unordered_set>

#include "passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using testing::trim_leading_newline;

std::string plan_text(std::string_view text, const FusionOptions& opts = {}) {
  std::unique_ptr<ir::Graph> g = ir::parse(trim_leading_newline(text));
  FusionPlan plan = plan_fusion(*g, opts);
  EXPECT_EQ(check_plan(plan, *g), "");
  return to_string(plan, *g);
}

// An elementwise chain with a broadcast, a wrapped scalar and a cast is one pointwise group.
TEST(Fuse, ElementwiseChainIsOneGroup) {
  EXPECT_EQ(plan_text(R"(
graph(%0: f32[4, 8] "arg0", %1: f32[8] "arg1", %2: i64[4, 1] "arg2") {
  %3 = constant wrapped f64[] 2.0
  %4 = mul(%0, %3) : f32[4, 8]
  %5 = add(%4, %1) : f32[4, 8]
  %6 = exp(%5) : f32[4, 8]
  %7 = cast(%2) {dtype=f32} : f32[4, 1]
  %8 = sub(%6, %7) : f32[4, 8]
  %9 = gt(%8, %3) : bool[4, 8]
  return %8 "a", %9 "b"
}
)"),
            "group 0 pointwise [4, 8]: mul %4, add %5, exp %6, cast %7, sub %8, gt %9 ; "
            "in %0 %1 %2 ; out %8 %9\n");
}

// Dense-only groups coalesce into one dim; a graph output in the middle is stored too.
TEST(Fuse, DenseChainCoalescesAndKeepsMiddleOutputs) {
  EXPECT_EQ(plan_text(R"(
graph(%0: f32[2, 3, 4] "arg0") {
  %1 = neg(%0) : f32[2, 3, 4]
  %2 = tanh(%1) : f32[2, 3, 4]
  return %2 "a", %1 "b"
}
)"),
            "group 0 pointwise [2*3*4]: neg %1, tanh %2 ; in %0 ; out %1 %2\n");
}

// softmax (max, sub, exp, sum, div over the last dim) is one reduction group.
TEST(Fuse, SoftmaxIsOneGroup) {
  EXPECT_EQ(plan_text(R"(
graph(%0: f32[4, 8] "arg0") {
  %1 = max(%0) {dims=[1], keepdim=true} : f32[4, 1]
  %2 = sub(%0, %1) : f32[4, 8]
  %3 = exp(%2) : f32[4, 8]
  %4 = sum(%3) {dims=[1], keepdim=true} : f32[4, 1]
  %5 = div(%3, %4) : f32[4, 8]
  return %5 "out0"
}
)"),
            "group 0 reduction [4 | 8]: max %1, sub %2, exp %3, sum %4, div %5 ; in %0 ; out %5\n");
}

// A symbolic batch dim stays a run-time size of the group.
TEST(Fuse, SymbolicRowsAreKept) {
  EXPECT_EQ(plan_text(R"(
graph(%0: f32[s0, 8] "arg0") syms=1 {
  %1 = max(%0) {dims=[1], keepdim=false} : f32[s0]
  %2 = reshape(%1) {shape=[s0, 1]} : f32[s0, 1]
  %3 = sub(%0, %2) : f32[s0, 8]
  return %3 "out0", %1 "m"
}
)"),
            "group 0 reduction [s0 | 8]: max %1, reshape %2, sub %3 ; in %0 ; out %1 %3\n");
}

const char* kLayerNormTrain = R"(
graph(%0: f32[4, 8] "arg0", %1: f32[8] "cap0", %2: f32[8] "cap1") {
  %3 = sum(%0) {dims=[1], keepdim=true} : f32[4, 1]
  %4 = constant wrapped f64[] 8.0
  %5 = div(%3, %4) : f32[4, 1]
  %6 = sub(%0, %5) : f32[4, 8]
  %7 = mul(%6, %6) : f32[4, 8]
  %8 = sum(%7) {dims=[1], keepdim=true} : f32[4, 1]
  %9 = div(%8, %4) : f32[4, 1]
  %10 = constant wrapped f64[] 1.0000000000000001e-05
  %11 = add(%9, %10) : f32[4, 1]
  %12 = rsqrt(%11) : f32[4, 1]
  %13 = mul(%6, %12) : f32[4, 8]
  %14 = mul(%13, %1) : f32[4, 8]
  %15 = add(%14, %2) : f32[4, 8]
  %16 = mul(%15, %15) : f32[4, 8]
  %17 = sum(%16) {dims=[], keepdim=false} : f32[]
  %18 = add(%15, %15) : f32[4, 8]
  %19 = sum(%18) {dims=[0], keepdim=true} : f32[1, 8]
  %20 = reshape(%19) {shape=[8]} : f32[8]
  %21 = copy(%20) : f32[8]
  %22 = mul(%18, %1) : f32[4, 8]
  %23 = mul(%18, %13) : f32[4, 8]
  %24 = sum(%23) {dims=[0], keepdim=true} : f32[1, 8]
  %25 = reshape(%24) {shape=[8]} : f32[8]
  %26 = copy(%25) : f32[8]
  %27 = mul(%22, %12) : f32[4, 8]
  %28 = mul(%22, %6) : f32[4, 8]
  %29 = sum(%28) {dims=[1], keepdim=true} : f32[4, 1]
  %30 = mul(%12, %12) : f32[4, 1]
  %31 = mul(%30, %12) : f32[4, 1]
  %32 = mul(%29, %31) : f32[4, 1]
  %33 = constant wrapped f64[] -0.5
  %34 = mul(%32, %33) : f32[4, 1]
  %35 = div(%34, %4) : f32[4, 1]
  %36 = expand(%35) {shape=[4, 8]} : f32[4, 8]
  %37 = mul(%36, %6) : f32[4, 8]
  %38 = add(%27, %37) : f32[4, 8]
  %39 = add(%38, %37) : f32[4, 8]
  %40 = neg(%39) : f32[4, 8]
  %41 = sum(%40) {dims=[1], keepdim=true} : f32[4, 1]
  %42 = div(%41, %4) : f32[4, 1]
  %43 = expand(%42) {shape=[4, 8]} : f32[4, 8]
  %44 = add(%39, %43) : f32[4, 8]
  %45 = copy(%44) : f32[4, 8]
  return %17 "out0", %45 "grad:arg0" gradient, %26 "grad:cap0" gradient, %21 "grad:cap1" gradient
}
)";

// layer_norm forward (two row reductions, rsqrt of the variance, weight and bias) is one group.
TEST(Fuse, LayerNormForwardIsOneGroup) {
  std::string text(kLayerNormTrain);
  text = text.substr(0, text.find("  %16 =")) + "  return %15 \"out0\"\n}\n";
  EXPECT_EQ(plan_text(text),
            "group 0 reduction [4 | 8]: sum %3, div %5, sub %6, mul %7, sum %8, div %9, add %11, "
            "rsqrt %12, mul %13, mul %14, add %15 ; in %0 %1 %2 ; out %15\n");
}

// layer_norm forward + backward: the row-wise backward joins the forward's group, and
// so do the column sums (weight/bias gradients); the full loss sum is separate.
TEST(Fuse, LayerNormBackwardIsFewGroups) {
  std::unique_ptr<ir::Graph> g = ir::parse(trim_leading_newline(kLayerNormTrain));
  FusionPlan plan = plan_fusion(*g);
  EXPECT_EQ(check_plan(plan, *g), "");
  EXPECT_LE(plan.groups.size(), 3u) << to_string(plan, *g);
  const auto nodes = g->nodes();
  size_t unfused_compute = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node* n = nodes[i];
    if (n->is_constant() || plan.group_of[i] >= 0) continue;
    // Only what reshapes/copies the column sums stays unfused.
    EXPECT_TRUE(n->is_op(OpId::reshape) || n->is_op(OpId::copy))
        << "node " << i << " (" << op_name(n->op) << ") is unfused";
    unfused_compute += n->is_op(OpId::sum);
  }
  EXPECT_EQ(unfused_compute, 0u);
  EXPECT_EQ(plan.groups[0].kind, GroupKind::kReduction);
  EXPECT_EQ(plan.groups[0].column_sums.size(), 2u) << to_string(plan, *g);
  EXPECT_GE(plan.groups[0].nodes.size(), 30u);
}

// matmul stays unfused; bias add and relu after it form an epilogue group.
TEST(Fuse, MatmulBiasReluEpilogue) {
  EXPECT_EQ(plan_text(R"(
graph(%0: f32[16, 8] "x", %1: f32[8, 4] "w", %2: f32[4] "b") {
  %3 = matmul(%0, %1) : f32[16, 4]
  %4 = add(%3, %2) : f32[16, 4]
  %5 = relu(%4) : f32[16, 4]
  return %5 "out0"
}
)"),
            "group 0 epilogue [16, 4]: add %4, relu %5 ; in %3 %2 ; out %5\n");
}

// A producer with a use outside the group is stored once (a group output), never recomputed.
TEST(Fuse, SharedProducerIsAnOutputNotDuplicated) {
  EXPECT_EQ(plan_text(R"(
graph(%0: f32[4, 4] "x", %1: f32[4, 4] "w") {
  %2 = exp(%0) : f32[4, 4]
  %3 = matmul(%2, %1) : f32[4, 4]
  %4 = tanh(%2) : f32[4, 4]
  %5 = mul(%3, %1) : f32[4, 4]
  return %4 "a", %5 "b"
}
)"),
            "group 0 pointwise [4*4]: exp %2, tanh %4 ; in %0 ; out %2 %4\n"
            "group 1 epilogue [4*4]: mul %5 ; in %3 %1 ; out %5\n");
}

// add(a, matmul(a)) cannot join a's group: the path a -> matmul -> add leaves and re-enters it.
TEST(Fuse, ConvexityRefusesPathsThroughUnfusedNodes) {
  EXPECT_EQ(plan_text(R"(
graph(%0: f32[4, 4] "x", %1: f32[4, 4] "w") {
  %2 = exp(%0) : f32[4, 4]
  %3 = matmul(%2, %1) : f32[4, 4]
  %4 = add(%2, %3) : f32[4, 4]
  return %4 "out0"
}
)"),
            "group 0 pointwise [4*4]: exp %2 ; in %0 ; out %2\n"
            "group 1 epilogue [4*4]: add %4 ; in %2 %3 ; out %4\n");
}

// f16/bf16 values, random ops, argmax, permute and slices are never fused.
TEST(Fuse, HalfPrecisionAndIrregularOpsAreNotFused) {
  EXPECT_EQ(plan_text(R"(
graph(%0: f16[4, 8] "x", %1: f32[4, 8] "y") {
  %2 = exp(%0) : f16[4, 8]
  %3 = mul(%2, %2) : f16[4, 8]
  %4 = cast(%3) {dtype=f32} : f32[4, 8]
  %5 = permute(%1) {dims=[1, 0]} : f32[8, 4]
  %6 = argmax(%1) {dims=[1], keepdim=false} : i64[4]
  return %4 "a", %5 "b", %6 "c"
}
)"),
            "");
}

// A reduction over the leading dims (a column sum) joins its producer's group
// (rule 9): the summed value is not stored when nothing else reads it, and a
// pointwise group's coalesced dim splits where the rows end. Summing a dim
// that is not leading, or keeping a row dim, stays unfused.
TEST(Fuse, ColumnSumsJoinTheirProducer) {
  EXPECT_EQ(plan_text(R"(
graph(%0: f32[4, 8] "x") {
  %1 = exp(%0) : f32[4, 8]
  %2 = sum(%1) {dims=[0], keepdim=false} : f32[8]
  %3 = neg(%2) : f32[8]
  return %3 "out0"
}
)"),
            "group 0 pointwise [4, 8]: exp %1, sum %2 (column) ; in %0 ; out %2\n"
            "group 1 pointwise [8]: neg %3 ; in %2 ; out %3\n");
  // Read elsewhere too: still stored.
  EXPECT_EQ(plan_text(R"(
graph(%0: f32[2, 3, 8] "x") {
  %1 = exp(%0) : f32[2, 3, 8]
  %2 = sum(%1) {dims=[0, 1], keepdim=true} : f32[1, 1, 8]
  return %2 "s", %1 "e"
}
)"),
            "group 0 pointwise [2*3, 8]: exp %1, sum %2 (column) ; in %0 ; out %1 %2\n");
  // Not a leading run of dims: unfused.
  EXPECT_EQ(plan_text(R"(
graph(%0: f32[2, 3, 8] "x") {
  %1 = exp(%0) : f32[2, 3, 8]
  %2 = sum(%1) {dims=[1], keepdim=false} : f32[2, 8]
  return %2 "s"
}
)"),
            "group 0 pointwise [2*3*8]: exp %1 ; in %0 ; out %1\n");
}

// Two groups reading a matmul's output, one of them with a column sum.
constexpr const char* kTwoReaders = R"(
graph(%0: f32[4, 8] "x", %1: f32[8, 8] "w", %2: f32[4, 8] "z") {
  %3 = matmul(%0, %1) : f32[4, 8]
  %4 = exp(%3) : f32[4, 8]
  %5 = mul(%3, %2) : f32[4, 8]
  %6 = sum(%5) {dims=[0], keepdim=false} : f32[8]
  %7 = sum(%3) {dims=[0], keepdim=false} : f32[8]
  return %4 "e", %6 "s", %7 "db"
}
)";

// Rule 9b: a column sum of a value no group computes (a matmul's output, as a
// layer-norm bias gradient sums the matmul's dX) joins a group that reads all
// of it, so the value is read once; never where its result leads back into
// that group (a cycle), nor a group that reads it broadcast.
TEST(Fuse, ColumnSumsJoinAReaderOfAMatmulOutput) {
  EXPECT_EQ(plan_text(R"(
graph(%0: f32[4, 8] "x", %1: f32[8, 8] "w", %2: f32[8] "g") {
  %3 = matmul(%0, %1) : f32[4, 8]
  %4 = mul(%3, %2) : f32[4, 8]
  %5 = sum(%3) {dims=[0], keepdim=false} : f32[8]
  return %4 "y", %5 "db"
}
)"),
            "group 0 epilogue [4, 8]: mul %4, sum %5 (column) ; in %3 %2 ; out %4 %5\n");
  // A kernel with column sums already is preferred (its launch form stays);
  // rule 12 off: with it, the two readers are one kernel (Fuse.SiblingsMerge).
  EXPECT_EQ(plan_text(kTwoReaders, {.siblings = false}),
            "group 0 epilogue [4*8]: exp %4 ; in %3 ; out %4\n"
            "group 1 epilogue [4, 8]: mul %5, sum %6 (column), sum %7 (column) ; in %3 %2 ; "
            "out %6 %7\n");
  // The sum feeds its reader: joining would close a cycle, so it stays alone.
  EXPECT_EQ(plan_text(R"(
graph(%0: f32[4, 8] "x", %1: f32[8, 8] "w") {
  %2 = matmul(%0, %1) : f32[4, 8]
  %3 = sum(%2) {dims=[0], keepdim=true} : f32[1, 8]
  %4 = sub(%2, %3) : f32[4, 8]
  return %4 "y"
}
)"),
            "group 0 epilogue [4, 8]: sub %4 ; in %2 %3 ; out %4\n");
  // A reader that broadcasts the value (its rows are another value's) cannot sum it.
  EXPECT_EQ(plan_text(R"(
graph(%0: f32[4, 8] "x", %1: f32[8, 8] "w", %2: f32[3, 4, 8] "z") {
  %3 = matmul(%0, %1) : f32[4, 8]
  %4 = add(%2, %3) : f32[3, 4, 8]
  %5 = sum(%3) {dims=[0], keepdim=false} : f32[8]
  return %4 "y", %5 "s"
}
)"),
            "group 0 epilogue [3, 4*8]: add %4 ; in %2 %3 ; out %4\n");
}

// Rule 12: groups that read one value densely become one kernel (the value
// is loaded once); a pointwise group joins a row kernel over the same rows
// (a layer norm's backward and its recomputed output); not when one reads it
// broadcast, or when a path between them leads through another node.
TEST(Fuse, SiblingsMerge) {
  EXPECT_EQ(plan_text(kTwoReaders),
            "group 0 epilogue [4, 8]: exp %4, mul %5, sum %6 (column), sum %7 (column) ; in %3 %2 "
            "; out %4 %6 %7\n");
  EXPECT_EQ(plan_text(R"(
graph(%0: f32[4, 8] "dy", %1: f32[4, 8] "xc", %2: f32[4, 1] "r") {
  %3 = mul(%1, %2) : f32[4, 8]
  %4 = mul(%0, %1) : f32[4, 8]
  %5 = sum(%4) {dims=[1], keepdim=true} : f32[4, 1]
  %6 = mul(%5, %2) : f32[4, 1]
  %7 = sub(%0, %6) : f32[4, 8]
  return %3 "y", %7 "dx"
}
)"),
            "group 0 reduction [4 | 8]: mul %3, mul %4, sum %5, mul %6, sub %7 ; in %1 %2 %0 ; out "
            "%3 %7\n");
  const char* apart[] = {
      // %1 is read broadcast by the second group
      R"(
graph(%0: f32[4, 8] "x", %1: f32[8] "b") {
  %2 = exp(%1) : f32[8]
  %3 = add(%0, %1) : f32[4, 8]
  return %2 "e", %3 "y"
}
)",
      // the second group reads the first one's output through a matmul
      R"(
graph(%0: f32[4, 4] "x", %1: f32[4, 4] "w") {
  %2 = exp(%0) : f32[4, 4]
  %3 = matmul(%2, %1) : f32[4, 4]
  %4 = add(%0, %3) : f32[4, 4]
  return %4 "y"
}
)",
  };
  for (const char* text : apart) {
    const std::string on = plan_text(text), off = plan_text(text, {.siblings = false});
    EXPECT_EQ(on, off) << text;
    EXPECT_EQ(std::count(on.begin(), on.end(), '\n'), 2) << on;
  }
}

// Rule 12's cycle check searches past the merged groups' newest node up to a
// position no group spans: a path that enters a group at its later nodes
// leaves it from its earlier ones (random program 303's step; searching up to
// the newest node only, this plan's groups formed a cycle).
// Rule 13 (CUDA plans): a matmul's bias add whose sum the group stores (GELU's
// input, read again by its backward; here by a matmul) runs alone, for the
// GEMM's bias epilogue; a sum the kernel alone reads stays (folding it would
// add a store).
TEST(Fuse, GemmBiasAddWhoseSumIsStoredRunsAlone) {
  const char* stored = R"(
graph(%0: f32[4, 8] "x", %1: f32[8, 16] "w", %2: f32[16] "b", %3: f32[16, 4] "v") {
  %4 = matmul(%0, %1) : f32[4, 16]
  %5 = add(%4, %2) : f32[4, 16]
  %6 = erf(%5) : f32[4, 16]
  %7 = mul(%5, %6) : f32[4, 16]
  %8 = matmul(%5, %3) : f32[4, 4]
  return %7 "y", %8 "z"
}
)";
  EXPECT_EQ(plan_text(stored),
            "group 0 epilogue [4, 16]: add %5, erf %6, mul %7 ; in %4 %2 ; out %5 %7\n");
  EXPECT_EQ(plan_text(stored, {.gemm_bias = true}),
            "group 0 pointwise [4*16]: erf %6, mul %7 ; in %5 ; out %7\n"
            "group 1 epilogue [4, 16]: add %5 ; in %4 %2 ; out %5\n");
  const char* kernel_only = R"(
graph(%0: f32[4, 8] "x", %1: f32[8, 16] "w", %2: f32[16] "b") {
  %3 = matmul(%0, %1) : f32[4, 16]
  %4 = add(%3, %2) : f32[4, 16]
  %5 = erf(%4) : f32[4, 16]
  return %5 "y"
}
)";
  EXPECT_EQ(plan_text(kernel_only, {.gemm_bias = true}), plan_text(kernel_only));
}

TEST(Fuse, SiblingMergesMakeNoCycle) {
  std::unique_ptr<ir::Graph> g = ir::parse(trim_leading_newline(R"(
graph(%0: f64[3, 4, 2] "x", %1: f64[3, 8] "a", %2: f64[3, 8] "b", %3: f64[3, 4, 2] "c") {
  %4 = abs(%0) : f64[3, 4, 2]
  %5 = log1p(%4) : f64[3, 4, 2]
  %6 = copy(%5) : f64[3, 4, 2]
  %7 = reshape(%6) {shape=[3, 8]} : f64[3, 8]
  %8 = mul(%7, %1) : f64[3, 8]
  %9 = sum(%8) {dims=[], keepdim=false} : f64[]
  %10 = mul(%7, %2) : f64[3, 8]
  %11 = sum(%10) {dims=[], keepdim=false} : f64[]
  %12 = add(%9, %11) : f64[]
  %13 = mul(%5, %3) : f64[3, 4, 2]
  %14 = sum(%13) {dims=[], keepdim=false} : f64[]
  %15 = add(%12, %14) : f64[]
  %16 = add(%2, %1) : f64[3, 8]
  %17 = reshape(%16) {shape=[3, 4, 2]} : f64[3, 4, 2]
  %18 = add(%3, %17) : f64[3, 4, 2]
  %19 = constant wrapped f64[] 1.0
  %20 = add(%4, %19) : f64[3, 4, 2]
  %21 = div(%18, %20) : f64[3, 4, 2]
  %22 = sign(%0) : f64[3, 4, 2]
  %23 = mul(%21, %22) : f64[3, 4, 2]
  return %7 "out0", %5 "out1", %15 "out2", %23 "out3"
}
)"));
  const FusionPlan plan = plan_fusion(*g);
  EXPECT_EQ(check_plan(plan, *g), "");
  EXPECT_NO_THROW((void)unit_steps(*g, plan)) << to_string(plan, *g);
}

// Reductions over different dims of one space cannot share a kernel.
TEST(Fuse, ReductionsOverOtherDimsSplit) {
  EXPECT_EQ(plan_text(R"(
graph(%0: f32[4, 8] "x") {
  %1 = sum(%0) {dims=[1], keepdim=true} : f32[4, 1]
  %2 = div(%0, %1) : f32[4, 8]
  %3 = sum(%2) {dims=[], keepdim=false} : f32[]
  return %3 "out0"
}
)"),
            "group 0 reduction [4 | 8]: sum %1, div %2 ; in %0 ; out %2\n"
            "group 1 reduction [4*8]: sum %3 ; in %2 ; out %3\n");
}

// Groups of only movement (expand, reshape, copy, full) are left to the eager views.
TEST(Fuse, MovementOnlyGroupsAreDropped) {
  EXPECT_EQ(plan_text(R"(
graph(%0: f32[4] "x") {
  %1 = reshape(%0) {shape=[1, 4]} : f32[1, 4]
  %2 = expand(%1) {shape=[3, 4]} : f32[3, 4]
  %3 = copy(%2) : f32[3, 4]
  return %3 "out0"
}
)"),
            "");
}

// FusionOptions::enabled = false and KILN_DISABLE_PASSES=fuse give no groups.
TEST(Fuse, CanBeDisabled) {
  const char* text = R"(
graph(%0: f32[4] "x") {
  %1 = exp(%0) : f32[4]
  %2 = neg(%1) : f32[4]
  return %2 "out0"
}
)";
  EXPECT_NE(plan_text(text), "");
  EXPECT_EQ(plan_text(text, {.enabled = false}), "");
  setenv("KILN_DISABLE_PASSES", "cse, fuse", 1);
  EXPECT_EQ(plan_text(text), "");
  unsetenv("KILN_DISABLE_PASSES");
  EXPECT_NE(plan_text(text), "");
}

// ---------------- random graphs ----------------

// splitmix64, independent of the library's random numbers.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  int pick(int n) { return static_cast<int>(next() % static_cast<uint64_t>(n)); }
};

// A random graph over [3, 5]-shaped values with broadcasts, row and column
// reductions (keepdim or not), reshapes, expands, casts, matmuls and permutes.
std::unique_ptr<ir::Graph> random_graph(uint64_t seed) {
  Rng r{seed};
  auto g = std::make_unique<ir::Graph>();
  std::vector<ir::Value*> vals;
  vals.push_back(testing::input(*g, DType::f32, {3, 5}, "x"));
  vals.push_back(testing::input(*g, DType::f32, {5}, "b"));
  vals.push_back(testing::input(*g, DType::f32, {3, 1}, "c"));
  const int steps = 6 + r.pick(20);
  for (int s = 0; s < steps; ++s) {
    ir::Value* a = vals[static_cast<size_t>(r.pick(static_cast<int>(vals.size())))];
    ir::Value* b = vals[static_cast<size_t>(r.pick(static_cast<int>(vals.size())))];
    const Dims sa = ir::eval_shape(a->shape, {});
    ir::Value* out = nullptr;
    try {
      switch (r.pick(9)) {
        case 0:
          out = testing::op(*g, r.pick(2) ? OpId::exp : OpId::neg, {a});
          break;
        case 1:
          out = testing::op(*g, r.pick(2) ? OpId::add : OpId::mul, {a, b});
          break;
        case 2: {
          Dims ds;
          if (!sa.empty()) ds.push_back(r.pick(static_cast<int>(sa.size())));
          out = testing::op(*g, r.pick(2) ? OpId::sum : OpId::max, {a},
                            Attrs().set("dims", ds).set("keepdim", r.pick(2) == 1));
          break;
        }
        case 3: {
          Dims shape{1};
          for (int64_t d : sa) shape.push_back(d);
          out = testing::op(*g, OpId::reshape, {a}, Attrs().set("shape", shape));
          break;
        }
        case 4:
          out = testing::op(*g, OpId::expand, {a}, Attrs().set("shape", Dims{3, 5}));
          break;
        case 5:
          out = testing::op(*g, OpId::cast, {a}, Attrs().set("dtype", DType::f64));
          break;
        case 6:
          if (sa.size() == 2)
            out = testing::op(*g, OpId::permute, {a}, Attrs().set("dims", Dims{1, 0}));
          break;
        case 7:
          out = testing::op(*g, OpId::matmul, {a, b});
          break;
        case 8:
          out = testing::op(*g, OpId::gt, {a, b});
          break;
      }
    } catch (const Error&) {
      out = nullptr;  // shapes that do not fit: skip the step
    }
    if (out) vals.push_back(out);
  }
  for (size_t i = 3; i < vals.size(); ++i)
    if (vals[i]->users.empty() || r.pick(4) == 0) g->add_output(vals[i], str("o", i));
  if (g->outputs().empty()) g->add_output(vals.back(), "o");
  return g;
}

// Verifies 400 random graphs: plans are convex and acyclic, every value with a user
// outside its group is an output of it, and inputs come from outside.
TEST(Fuse, RandomGraphPlansAreValid) {
  int grouped = 0;
  for (uint64_t seed = 1; seed <= 400; ++seed) {
    std::unique_ptr<ir::Graph> g = random_graph(seed);
    ASSERT_NO_THROW(ir::verify(*g)) << ir::print(*g);
    FusionPlan plan = plan_fusion(*g, {.max_group_nodes = 1 + static_cast<int>(seed % 12)});
    ASSERT_EQ(check_plan(plan, *g), "") << ir::print(*g) << to_string(plan, *g);
    for (size_t k = 0; k < plan.groups.size(); ++k) {
      const FusionGroup& grp = plan.groups[k];
      std::unordered_set<const ir::Node*> in(grp.nodes.begin(), grp.nodes.end());
      in.insert(grp.column_sums.begin(), grp.column_sums.end());
      std::unordered_set<const ir::Value*> outs(grp.outputs.begin(), grp.outputs.end());
      for (const ir::Node* n : in)
        for (const ir::Value* v : n->outputs) {
          bool external = g->is_output(v);
          for (const ir::Node* u : v->users) external = external || !in.count(u);
          EXPECT_EQ(external, outs.count(v) > 0) << "seed " << seed << ", group " << k;
        }
      for (const ir::Value* v : grp.inputs)
        EXPECT_TRUE(!v->producer || !in.count(v->producer)) << "seed " << seed;
      EXPECT_EQ(grp.in_dense.size(), grp.inputs.size());
      EXPECT_EQ(grp.out_dense.size(), grp.outputs.size());
      // Column sums come last, broadcast along every row dim; the rest are dense.
      const size_t plain = grp.outputs.size() - grp.column_sums.size();
      for (size_t o = 0; o < grp.out_dense.size(); ++o) {
        const auto& p = grp.out_dense[o];
        ASSERT_EQ(p.size(), grp.dims.size());
        for (size_t d = 0; d + 1 < p.size(); ++d) EXPECT_EQ(p[d], o < plain) << "seed " << seed;
      }
      ++grouped;
    }
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << ir::print(*g) << to_string(plan, *g);
      return;
    }
  }
  EXPECT_GT(grouped, 400);
}

}  // namespace
}  // namespace kiln::passes
