// Tests of passes/src/pass_manager.cpp: the registry, run_pipeline's checks,
// KILN_DISABLE_PASSES / KILN_DEBUG / KILN_TIME_PASSES, and the fixpoint loop.
#include "kiln/passes/pass_manager.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <unordered_map>

#include "common/scoped_env.h"
#include "kiln/dispatch.h"
#include "kiln/passes/cse.h"
#include "kiln/passes/fold_constants.h"
#include "passes/pass_test_util.h"
#include "runtime/test_util.h"

namespace kiln::passes {
namespace {

using kiln::testing::expect_error;
using testing::trim_leading_newline;

using kiln::testing::ScopedEnv;

std::unique_ptr<ir::Graph> parse(std::string_view text) {
  return ir::parse(trim_leading_newline(text));
}

PipelineOptions verified() {
  PipelineOptions o;
  o.verify = true;
  return o;
}

std::vector<std::string> pass_names(const PipelineStats& s) {
  std::vector<std::string> r;
  for (const auto& e : s.runs) r.push_back(e.pass);
  return r;
}

// Runs g eagerly on `inputs` (a reference interpreter over the kernels).
std::vector<Tensor> evaluate(const ir::Graph& g, const std::vector<Tensor>& inputs) {
  std::unordered_map<const ir::Value*, Tensor> env;
  for (size_t i = 0; i < inputs.size(); ++i) env[g.inputs()[i]] = inputs[i];
  for (const ir::Node* n : g.nodes()) {
    if (n->is_constant()) {
      env[n->output()] = n->constant;
      continue;
    }
    std::vector<Tensor> in;
    for (const ir::Value* v : n->inputs) in.push_back(env.at(v));
    std::vector<Tensor> out = dispatch(n->op, in, n->attrs);
    for (size_t i = 0; i < out.size(); ++i) env[n->outputs[i]] = out[i];
  }
  std::vector<Tensor> r;
  for (const ir::Value* v : g.outputs()) r.push_back(env.at(v).contiguous());
  return r;
}

// arange * 2 + x: folds to one constant plus the add.
constexpr std::string_view kFoldable = R"(
graph(%0: f32[3] "arg0") {
  %1 = arange() {start=0.0, end=3.0, step=1.0, dtype=f32} : f32[3]
  %2 = constant wrapped f64[] 2.0
  %3 = mul(%1, %2) : f32[3]
  %4 = constant wrapped f64[] 1.0
  %5 = mul(%0, %4) : f32[3]
  %6 = add(%5, %3) : f32[3]
  return %6 "out0"
}
)";

TEST(PassManager, RegistryFollowsPassList) {
  // Every pass in pass_list.def is registered, in order, with its function.
  std::vector<std::string> names;
  for (const PassInfo& p : registered_passes()) {
    names.push_back(p.name);
    EXPECT_NE(p.fn, nullptr);
    EXPECT_GT(std::string(p.summary).size(), 0u);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"dce", "cse", "fold_constants", "simplify",
                                             "elide_copies", "pads_to_cat", "scatter_to_where",
                                             "schedule_collectives", "remat"}));
  ASSERT_NE(find_pass("cse"), nullptr);
  EXPECT_EQ(find_pass("cse")->fn, &cse);
  EXPECT_EQ(find_pass("CSE"), nullptr);
  EXPECT_EQ(find_pass(""), nullptr);
  for (const std::string& n : standard_pipeline()) EXPECT_NE(find_pass(n), nullptr) << n;
  for (const std::string& n : late_pipeline()) EXPECT_NE(find_pass(n), nullptr) << n;
}

TEST(PassManager, StandardPipelineOptimizes) {
  // The standard pipeline folds arange*2, drops x*1 and removes the dead nodes
  // (arange folds where the graph's device is known: here the CPU).
  const FoldDeviceScope cpu(Device::cpu());
  auto g = parse(kFoldable);
  PipelineStats s = run_pipeline(*g, standard_pipeline(), verified());
  EXPECT_EQ(ir::print(*g), trim_leading_newline(R"(
graph(%0: f32[3] "arg0") {
  %1 = constant f32[3] [0.0, 2.0, 4.0]
  %2 = add(%0, %1) : f32[3]
  return %2 "out0"
}
)"));
  // The first round changes the graph, the last changes nothing.
  ASSERT_GE(s.runs.size(), 10u);
  for (size_t i = s.runs.size() - 5; i < s.runs.size(); ++i) EXPECT_FALSE(s.runs[i].changed);
}

TEST(PassManager, StandardPipelineKeepsValuesBitForBit) {
  // On NaN, inf and -0.0 inputs the optimized graph gives the same bits as the
  // original (the rules that would not, x+0.0 and float x-x, stay).
  auto g = parse(R"(
graph(%0: f32[4] "arg0", %1: i64[4] "arg1") {
  %2 = constant wrapped f64[] 1.0
  %3 = constant wrapped f64[] 0.0
  %4 = constant wrapped f64[] -0.0
  %5 = mul(%0, %2) : f32[4]
  %6 = add(%5, %3) : f32[4]
  %7 = add(%5, %4) : f32[4]
  %8 = sub(%0, %0) : f32[4]
  %9 = sub(%1, %1) : i64[4]
  %10 = neg(%0) : f32[4]
  %11 = neg(%10) : f32[4]
  %12 = reshape(%11) {shape=[2, 2]} : f32[2, 2]
  %13 = permute(%12) {dims=[1, 0]} : f32[2, 2]
  %14 = permute(%13) {dims=[1, 0]} : f32[2, 2]
  %15 = reshape(%14) {shape=[4]} : f32[4]
  %16 = arange() {start=0.0, end=4.0, step=1.0, dtype=f32} : f32[4]
  %17 = mul(%16, %2) : f32[4]
  %18 = add(%15, %17) : f32[4]
  %19 = add(%5, %0) : f32[4]
  %20 = add(%0, %11) : f32[4]
  %21 = sub(%9, %1) : i64[4]
  return %6 "a", %7 "b", %8 "c", %9 "d", %18 "e", %19 "f", %20 "g", %21 "h"
}
)");
  float inf = std::numeric_limits<float>::infinity();
  float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<Tensor> in{from_vector<float>({-0.0f, nan, inf, 1.5f}, {4}),
                         from_vector<int64_t>({1, -2, INT64_MAX, INT64_MIN}, {4})};
  std::vector<Tensor> want = evaluate(*g, in);
  size_t nodes_before = g->num_nodes();
  run_pipeline(*g, standard_pipeline(), verified());
  EXPECT_LT(g->num_nodes(), nodes_before / 2) << ir::print(*g);
  std::vector<Tensor> got = evaluate(*g, in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].dtype(), want[i].dtype()) << i;
    ASSERT_EQ(got[i].shape(), want[i].shape()) << i;
    size_t bytes = static_cast<size_t>(got[i].numel()) * got[i].element_size();
    EXPECT_EQ(std::memcmp(got[i].data_ptr(), want[i].data_ptr(), bytes), 0)
        << "output " << g->output_names()[i] << ": " << got[i] << " vs " << want[i];
  }
}

TEST(PassManager, UnknownPassNameListsValidNames) {
  // An unknown name fails before any pass runs and lists the valid names.
  auto g = parse(kFoldable);
  std::string before = ir::print(*g);
  std::vector<std::string> names{"dce", "constant_fold"};
  expect_error([&] { run_pipeline(*g, names, verified()); },
               {"unknown pass 'constant_fold'", "dce, cse, fold_constants, simplify"});
  EXPECT_EQ(ir::print(*g), before);
}

TEST(PassManager, DisablePassesSkipsThem) {
  // KILN_DISABLE_PASSES (comma list, blanks ignored) skips the named passes.
  ScopedEnv env("KILN_DISABLE_PASSES", "fold_constants, simplify");
  auto g = parse(kFoldable);
  std::string before = ir::print(*g);
  PipelineStats s = run_pipeline(*g, standard_pipeline(), verified());
  EXPECT_EQ(pass_names(s),
            (std::vector<std::string>{"dce", "cse", "elide_copies", "pads_to_cat",
                                      "scatter_to_where", "dce", "schedule_collectives"}));
  EXPECT_EQ(ir::print(*g), before);
}

TEST(PassManager, DisablingAnUnknownPassIsAnError) {
  // A typo in KILN_DISABLE_PASSES is reported instead of silently ignored.
  ScopedEnv env("KILN_DISABLE_PASSES", "dce,simplfy");
  auto g = parse(kFoldable);
  expect_error([&] { run_pipeline(*g, standard_pipeline(), verified()); },
               {"unknown pass 'simplfy'", "KILN_DISABLE_PASSES"});
}

TEST(PassManager, InvalidInputGraphIsReportedBeforeAnyPass) {
  // With verify on, a graph that is invalid on entry is blamed on its producer,
  // not on the first pass.
  ir::Graph g;
  ir::Value* x = testing::input(g, DType::f32, {3}, "arg0");
  ir::Node* bad = g.add_op(OpId::neg, {x}, {}, {{DType::f32, ir::to_sym_shape({4})}});
  g.add_output(bad->output(), "out0");
  std::vector<std::string> names{"dce"};
  expect_error([&] { run_pipeline(g, names, verified()); },
               {"invalid before the first pass", "[verify]"});
  PipelineOptions no_verify;
  no_verify.verify = false;
  EXPECT_NO_THROW(run_pipeline(g, names, no_verify));
}

TEST(PassManager, FixpointRepeatsUntilNothingChanges) {
  // simplify makes two reshapes identical; only a second round's cse merges them.
  constexpr std::string_view text = R"(
graph(%0: f32[2, 3] "arg0") {
  %1 = reshape(%0) {shape=[3, 2]} : f32[3, 2]
  %2 = reshape(%1) {shape=[6]} : f32[6]
  %3 = reshape(%0) {shape=[2, 3, 1]} : f32[2, 3, 1]
  %4 = reshape(%3) {shape=[6]} : f32[6]
  %5 = add(%2, %4) : f32[6]
  return %5 "out0"
}
)";
  auto g = parse(text);
  PipelineStats s = run_pipeline(*g, standard_pipeline(), verified());
  EXPECT_EQ(ir::print(*g), trim_leading_newline(R"(
graph(%0: f32[2, 3] "arg0") {
  %1 = reshape(%0) {shape=[6]} : f32[6]
  %2 = add(%1, %1) : f32[6]
  return %2 "out0"
}
)"));
  const size_t rounds = standard_pipeline().size();
  EXPECT_EQ(s.runs.size(), 3 * rounds);  // changed, changed (cse), unchanged
  EXPECT_TRUE(s.runs[rounds + 1].changed) << s.runs[rounds + 1].pass;  // round 2's cse
  EXPECT_EQ(s.runs[rounds + 1].pass, "cse");

  // Without fixpoint (or with one iteration) the list runs once.
  for (bool fixpoint : {false, true}) {
    auto h = parse(text);
    PipelineOptions once = verified();
    once.fixpoint = fixpoint;
    once.max_iterations = 1;
    EXPECT_EQ(run_pipeline(*h, standard_pipeline(), once).runs.size(), rounds);
    EXPECT_EQ(testing::node_ops(*h), (std::vector<std::string>{"reshape", "reshape", "add"}));
  }
}

TEST(PassManager, DebugLevelTwoPrintsIrAfterEachPass) {
  // KILN_DEBUG=2 prints "=== after <pass> ===" and the IR text to stderr.
  ScopedEnv env("KILN_DEBUG", "2");
  auto g = parse(kFoldable);
  std::vector<std::string> names{"fold_constants"};
  PipelineOptions once = verified();
  once.fixpoint = false;
  ::testing::internal::CaptureStderr();
  run_pipeline(*g, names, once);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "=== after fold_constants ===\n" + ir::print(*g));
}

TEST(PassManager, TimePassesPrintsEachPass) {
  // KILN_TIME_PASSES=1 prints one line per pass and a total at the end.
  ScopedEnv env("KILN_TIME_PASSES", "1");
  auto g = parse(kFoldable);
  ::testing::internal::CaptureStderr();
  run_pipeline(*g, standard_pipeline(), verified());
  std::string err = ::testing::internal::GetCapturedStderr();
  for (const char* part :
       {"=== pass times ===", "dce", "cse", "fold_constants", "simplify", "total", " ms"})
    EXPECT_NE(err.find(part), std::string::npos) << err;
}

TEST(PassManager, QuietByDefault) {
  // Without KILN_DEBUG / KILN_TIME_PASSES nothing is printed.
  auto g = parse(kFoldable);
  ::testing::internal::CaptureStderr();
  run_pipeline(*g, standard_pipeline(), verified());
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

TEST(PassManager, EmptyPipelineStillVerifies) {
  // No passes: nothing runs, but the entry check still applies.
  auto g = parse(kFoldable);
  EXPECT_TRUE(run_pipeline(*g, {}, verified()).runs.empty());
}

}  // namespace
}  // namespace kiln::passes
