// Tests of passes/src/scatter_to_where.cpp: a scatter_add of one entry per
// line into a fill, its index checked by a gather, becomes a select that
// equals eager bit for bit; other scatters stay, and a bad index still fails.
#include "kiln/passes/scatter_to_where.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "executor/executor.h"
#include "kiln/error.h"
#include "kiln/ir/text.h"
#include "kiln/passes/pass_manager.h"
#include "passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using testing::expect_pass;
using testing::expect_unchanged;

TEST(ScatterToWhere, OneHotOfAGatheredIndexBecomesASelect) {
  expect_pass(scatter_to_where, R"(
graph(%0: f32[4, 5] "logp", %1: i64[4, 1] "label", %2: f32[4, 1] "g") {
  %3 = gather(%0, %1) {dim=1} : f32[4, 1]
  %4 = full() {shape=[4, 5], value=0.0, ivalue=0, dtype=f32} : f32[4, 5]
  %5 = scatter_add(%4, %1, %2) {dim=-1} : f32[4, 5]
  return %3 "out0", %5 "out1"
}
)",
              R"(
graph(%0: f32[4, 5] "logp", %1: i64[4, 1] "label", %2: f32[4, 1] "g") {
  %3 = gather(%0, %1) {dim=1} : f32[4, 1]
  %4 = full() {shape=[4, 5], value=0.0, ivalue=0, dtype=f32} : f32[4, 5]
  %5 = arange() {start=0.0, end=5.0, step=1.0, dtype=i64} : i64[5]
  %6 = reshape(%5) {shape=[1, 5]} : i64[1, 5]
  %7 = eq(%6, %1) : bool[4, 5]
  %8 = add(%4, %2) : f32[4, 5]
  %9 = where(%7, %8, %4) : f32[4, 5]
  return %3 "out0", %9 "out1"
}
)",
              true);
}

TEST(ScatterToWhere, LeadingDimAndAFillOtherThanZero) {
  // Along dim 0 of a [3, 2] fill of 1.5 (i32 index), gathered from [3, 7].
  expect_pass(scatter_to_where, R"(
graph(%0: f32[3, 7] "x", %1: i32[1, 2] "i", %2: f32[1, 2] "s") {
  %3 = gather(%0, %1) {dim=0} : f32[1, 2]
  %4 = full() {shape=[3, 2], value=1.5, dtype=f32} : f32[3, 2]
  %5 = scatter_add(%4, %1, %2) {dim=0} : f32[3, 2]
  return %3 "out0", %5 "out1"
}
)",
              R"(
graph(%0: f32[3, 7] "x", %1: i32[1, 2] "i", %2: f32[1, 2] "s") {
  %3 = gather(%0, %1) {dim=0} : f32[1, 2]
  %4 = full() {shape=[3, 2], value=1.5, dtype=f32} : f32[3, 2]
  %5 = arange() {start=0.0, end=3.0, step=1.0, dtype=i64} : i64[3]
  %6 = reshape(%5) {shape=[3, 1]} : i64[3, 1]
  %7 = eq(%6, %1) : bool[3, 2]
  %8 = add(%4, %2) : f32[3, 2]
  %9 = where(%7, %8, %4) : f32[3, 2]
  return %3 "out0", %9 "out1"
}
)",
              true);
}

// A gather of index %1 along `gdim` from %0 and a scatter of %2 into a fill
// along `sdim`, as IR text; types as "f32[4, 5]".
struct Case {
  const char *x, *index, *src, *fill;
  int gdim = 1, sdim = 1;
};

std::string shape_of(const std::string& type) {
  return type.substr(type.find('['));
}

std::string dtype_of(const std::string& type) {
  return type.substr(0, type.find('['));
}

std::string graph_text(const Case& c) {
  return str("graph(%0: ", c.x, " \"x\", %1: ", c.index, " \"i\", %2: ", c.src, " \"s\") {\n",
             "  %3 = gather(%0, %1) {dim=", c.gdim, "} : ", dtype_of(c.x), shape_of(c.index), "\n",
             "  %4 = full() {shape=", shape_of(c.fill),
             ", value=0.0, ivalue=0, dtype=", dtype_of(c.fill), "} : ", c.fill, "\n",
             "  %5 = scatter_add(%4, %1, %2) {dim=", c.sdim, "} : ", c.fill, "\n",
             "  return %3 \"out0\", %5 \"out1\"\n}\n");
}

TEST(ScatterToWhere, OtherScattersStay) {
  const Case cases[] = {
      // the gather's bound differs (its tensor has 6 columns, the scatter 5)
      {"f32[4, 6]", "i64[4, 1]", "f32[4, 1]", "f32[4, 5]"},
      // the gather runs along another dim
      {"f32[5, 5]", "i64[5, 1]", "f32[5, 1]", "f32[5, 5]", 0, 1},
      // two entries per line may hit one element: eager adds them in order
      {"f32[4, 5]", "i64[4, 2]", "f32[4, 2]", "f32[4, 5]"},
      // the index covers 3 of the 4 lines
      {"f32[4, 5]", "i64[3, 1]", "f32[3, 1]", "f32[4, 5]"},
      // src wider than the index (eager reads its first column only)
      {"f32[4, 5]", "i64[4, 1]", "f32[4, 3]", "f32[4, 5]"},
      // src of another dtype (eager casts it first)
      {"f32[4, 5]", "i64[4, 1]", "f64[4, 1]", "f32[4, 5]"},
      // an integer scatter (one_hot's counts)
      {"i64[4, 5]", "i64[4, 1]", "i64[4, 1]", "i64[4, 5]"},
      // f16 (fusion takes no half-precision node: the select would not fuse)
      {"f16[4, 5]", "i64[4, 1]", "f16[4, 1]", "f16[4, 5]"},
  };
  for (const Case& c : cases) expect_unchanged(scatter_to_where, graph_text(c));
  // The rewritten form of the same text, for contrast.
  std::unique_ptr<ir::Graph> g =
      ir::parse(graph_text({"f32[4, 5]", "i64[4, 1]", "f32[4, 1]", "f32[4, 5]"}));
  EXPECT_TRUE(scatter_to_where(*g));
  // No gather checks the index: eager's range check would be lost.
  expect_unchanged(scatter_to_where, R"(
graph(%0: i64[4, 1] "label", %1: f32[4, 1] "g") {
  %2 = full() {shape=[4, 5], value=0.0, ivalue=0, dtype=f32} : f32[4, 5]
  %3 = scatter_add(%2, %0, %1) {dim=1} : f32[4, 5]
  return %3 "out0"
}
)");
  // Into a tensor that is not a fill.
  expect_unchanged(scatter_to_where, R"(
graph(%0: f32[4, 5] "logp", %1: i64[4, 1] "label", %2: f32[4, 1] "g") {
  %3 = gather(%0, %1) {dim=1} : f32[4, 1]
  %4 = scatter_add(%0, %1, %2) {dim=1} : f32[4, 5]
  return %3 "out0", %4 "out1"
}
)");
}

const Case kCrossEntropyLike{"f32[6, 5]", "i64[6, 1]", "f32[6, 1]", "f32[6, 5]"};

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor x = a.contiguous(), y = b.contiguous();
  return x.dtype() == y.dtype() && x.shape() == y.shape() &&
         std::memcmp(x.data_ptr(), y.data_ptr(), x.numel() * x.element_size()) == 0;
}

TEST(ScatterToWhere, PipelineEqualsEagerBitForBit) {
  // Labels at both ends; gradients with -0.0, NaN and infinities.
  std::shared_ptr<ir::Graph> g = ir::parse(graph_text(kCrossEntropyLike));
  run_pipeline(*g, standard_pipeline());
  for (const ir::Node* n : g->nodes()) EXPECT_FALSE(n->is_op(OpId::scatter_add));
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = INFINITY;
  Tensor logp = randn({6, 5});
  Tensor label = from_vector(std::vector<int64_t>{0, 4, 2, 4, 0, 1}, {6, 1});
  Tensor grad = from_vector(std::vector<float>{-0.0f, nan, inf, -inf, 0.25f, -3.0f}, {6, 1});
  const std::vector<Tensor> in{logp, label, grad};
  RunArgs args;
  args.inputs = in;
  const std::vector<Tensor> got = Executor(g).run(args);
  EXPECT_TRUE(same_bits(got[0], gather(logp, 1, label)));
  EXPECT_TRUE(same_bits(got[1], scatter_add(zeros({6, 5}), 1, label, grad)));
}

TEST(ScatterToWhere, AnIndexOutOfRangeStillFails) {
  // The gather checks the entries the select no longer looks at.
  std::shared_ptr<ir::Graph> g = ir::parse(graph_text(kCrossEntropyLike));
  run_pipeline(*g, standard_pipeline());
  for (int64_t bad : {int64_t{5}, int64_t{-1}}) {
    const std::vector<Tensor> in{randn({6, 5}),
                                 from_vector(std::vector<int64_t>{0, 1, bad, 3, 4, 0}, {6, 1}),
                                 randn({6, 1})};
    RunArgs args;
    args.inputs = in;
    try {
      (void)Executor(g).run(args);
      ADD_FAILURE() << "index " << bad << " ran";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("out of bounds"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("gather"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace kiln::passes
