// Tests of passes/src/fold_constants.cpp.
#include "kiln/passes/fold_constants.h"

#include "kiln/dispatch.h"
#include "passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using testing::expect_pass;
using testing::expect_unchanged;

// These graphs run on the CPU (fold_constants_device_test.cpp: without a known
// device, and on another).
class FoldConstants : public ::testing::Test {
 private:
  FoldDeviceScope cpu_{Device::cpu()};
};

TEST_F(FoldConstants, FoldsArangeAndArithmetic) {
  // arange, then i64 * wrapped 2, then + f32 constant fold into constants with
  // the eager values (the inputs are left for dce).
  expect_pass(fold_constants, R"(
graph() {
  %0 = arange() {start=0.0, end=4.0, step=1.0, dtype=i64} : i64[4]
  %1 = constant wrapped i64[] 2
  %2 = mul(%0, %1) : i64[4]
  %3 = constant f32[4] [0.5, 0.5, 0.5, 0.5]
  %4 = add(%2, %3) : f32[4]
  return %4 "out0"
}
)",
              R"(
graph() {
  %0 = constant i64[4] [0, 1, 2, 3]
  %1 = constant wrapped i64[] 2
  %2 = constant i64[4] [0, 2, 4, 6]
  %3 = constant f32[4] [0.5, 0.5, 0.5, 0.5]
  %4 = constant f32[4] [0.5, 2.5, 4.5, 6.5]
  return %4 "out0"
}
)",
              true);
}

TEST_F(FoldConstants, FullAloneIsNotFolded) {
  // A lone full stays a full (as cheap as a constant, possibly huge).
  expect_unchanged(fold_constants, R"(
graph() {
  %0 = full() {shape=[1000, 1000], value=0.0, dtype=f32} : f32[1000, 1000]
  return %0 "zeros"
}
)");
}

TEST_F(FoldConstants, FullCountsAsConstantInput) {
  // A full feeding an op is evaluated for it; the full itself stays.
  expect_pass(fold_constants, R"(
graph() {
  %0 = full() {shape=[3], value=2.0, ivalue=2, dtype=i32} : i32[3]
  %1 = constant i32[3] [1, 2, 3]
  %2 = mul(%0, %1) : i32[3]
  return %2 "out0", %0 "twos"
}
)",
              R"(
graph() {
  %0 = full() {shape=[3], value=2.0, ivalue=2, dtype=i32} : i32[3]
  %1 = constant i32[3] [1, 2, 3]
  %2 = constant i32[3] [2, 4, 6]
  return %2 "out0", %0 "twos"
}
)",
              true);
}

TEST_F(FoldConstants, HugeFullInputIsNotEvaluated) {
  // A full above the size limit is not materialised, even for a small result.
  expect_unchanged(fold_constants, R"(
graph() {
  %0 = full() {shape=[2048, 1024], value=1.0, dtype=f32} : f32[2048, 1024]
  %1 = sum(%0) {dims=[], keepdim=false} : f32[]
  return %1 "out0"
}
)");
}

TEST_F(FoldConstants, OutputSizeLimit) {
  // 2^20 output elements fold, one more does not.
  ir::Graph g;
  Attrs at;
  at.set("start", 0.0).set("end", static_cast<double>(1 << 20)).set("step", 1.0);
  at.set("dtype", DType::f32);
  ir::Value* ok = testing::op(g, OpId::arange, {}, at);
  at.set("end", static_cast<double>((1 << 20) + 1));
  ir::Value* big = testing::op(g, OpId::arange, {}, at);
  g.add_output(ok, "ok");
  g.add_output(big, "big");
  EXPECT_TRUE(fold_constants(g));
  ir::verify(g);
  EXPECT_EQ(testing::node_ops(g), (std::vector<std::string>{"constant", "arange"}));
  const Tensor& c = g.outputs()[0]->producer->constant;
  EXPECT_EQ(c.numel(), 1 << 20);
  EXPECT_EQ(element_as_double(c, (1 << 20) - 1), static_cast<double>((1 << 20) - 1));
}

TEST_F(FoldConstants, KernelErrorLeavesNode) {
  // index_select with an out-of-range index passes the shape rule but its
  // kernel throws: the node stays for the executor to report.
  expect_unchanged(fold_constants, R"(
graph() {
  %0 = constant f32[3] [1.0, 2.0, 3.0]
  %1 = constant i64[1] [5]
  %2 = index_select(%0, %1) {dim=0} : f32[1]
  return %2 "out0"
}
)");
}

TEST_F(FoldConstants, RandomNodesAreNotFolded) {
  // Random draws and their users stay (each call draws anew).
  expect_unchanged(fold_constants, R"(
graph() rng_advance=2 {
  %0 = rand_uniform() {shape=[2], dtype=f32, seed=3, offset=0} : f32[2]
  %1 = constant f32[2] [1.0, 2.0]
  %2 = mul(%0, %1) : f32[2]
  return %2 "out0"
}
)");
}

TEST_F(FoldConstants, GraphInputsAndSymbolicConstantsAreNotConstant) {
  // Inputs are read at each call; a constant with a symbolic value is not known.
  expect_unchanged(fold_constants, R"(
graph(%0: f32[2] "arg0", %1: f32[s0] "arg1") syms=1 {
  %2 = constant f32[2] [1.0, 2.0]
  %3 = add(%0, %2) : f32[2]
  %4 = constant wrapped f64[] 0.5 {value=1/(s0)}
  %5 = constant wrapped f64[] 2.0
  %6 = mul(%4, %5) : f32[]
  return %3 "a", %6 "b"
}
)");
}

TEST_F(FoldConstants, MultiOutputNodeFoldsEveryOutput) {
  // max_pool2d on a constant becomes two constants (values and indices).
  expect_pass(fold_constants, R"(
graph() {
  %0 = constant f32[1, 2, 2] [1.0, 4.0, 3.0, 2.0]
  %1, %2 = max_pool2d(%0) {kernel_size=[2, 2]} : f32[1, 1, 1], i64[1, 1, 1]
  return %1 "v", %2 "i"
}
)",
              R"(
graph() {
  %0 = constant f32[1, 2, 2] [1.0, 4.0, 3.0, 2.0]
  %1 = constant f32[1, 1, 1] [4.0]
  %2 = constant i64[1, 1, 1] [1]
  return %1 "v", %2 "i"
}
)",
              true);
}

TEST_F(FoldConstants, ViewResultsAndWrappedFlagsAreKept) {
  // A reshape (a view in eager) folds to its own contiguous constant; a
  // wrapped-number result stays wrapped (dtype promotion of its users).
  expect_pass(fold_constants, R"(
graph() {
  %0 = constant f32[2, 2] [1.0, 2.0, 3.0, 4.0]
  %1 = permute(%0) {dims=[1, 0]} : f32[2, 2]
  %2 = constant wrapped f64[] 2.0
  %3 = constant wrapped f64[] 3.0
  %4 = mul(%2, %3) : wrapped f32[]
  return %1 "t", %4 "six"
}
)",
              R"(
graph() {
  %0 = constant f32[2, 2] [1.0, 2.0, 3.0, 4.0]
  %1 = constant f32[2, 2] [1.0, 3.0, 2.0, 4.0]
  %2 = constant wrapped f64[] 2.0
  %3 = constant wrapped f64[] 3.0
  %4 = constant wrapped f32[] 6.0
  return %1 "t", %4 "six"
}
)",
              true);
}

TEST_F(FoldConstants, SymbolicShapesAreNotFolded) {
  // A node with sym_attrs (a size known only per call) is not evaluated.
  expect_unchanged(fold_constants, R"(
graph(%0: f32[s0] "arg0") syms=1 {
  %1 = full() {shape=[s0], value=1.0, dtype=f32} : f32[s0]
  %2 = constant f32[] 2.0
  %3 = mul(%1, %2) : f32[s0]
  return %3 "out0"
}
)");
}

// A recorder that counts the calls it receives (folding must not trace).
class CountingRecorder : public Recorder {
 public:
  int calls = 0;
  std::vector<Tensor> record(OpId, std::span<const Tensor>, const Attrs&,
                             const std::vector<TensorMeta>&) override {
    ++calls;
    throw Error("traced during folding");
  }
  void on_value_read(const char*, const std::source_location&) override {}
  void on_inplace(const Tensor&, const Tensor&) override {}
};

TEST_F(FoldConstants, EvaluatesWithoutTheCallersRecorder) {
  // Folding inside a trace computes eagerly and puts the caller's recorder back.
  ir::Graph g;
  Attrs at;
  at.set("start", 0.0).set("end", 3.0).set("step", 1.0).set("dtype", DType::f32);
  g.add_output(testing::op(g, OpId::arange, {}, at), "out0");
  CountingRecorder rec;
  Recorder* prev = set_recorder(&rec);
  bool changed = fold_constants(g);
  Recorder* after = set_recorder(prev);
  EXPECT_TRUE(changed);
  EXPECT_EQ(after, &rec);
  EXPECT_EQ(rec.calls, 0);
  EXPECT_EQ(g.outputs()[0]->producer->constant.to_vector<float>(), (std::vector<float>{0, 1, 2}));
}

}  // namespace
}  // namespace kiln::passes
