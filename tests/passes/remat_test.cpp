// Tests of passes/src/remat.cpp: the memory model, the default policy's cuts
// (before/after IR text), budgets, and randomized graphs whose results must not
// change.
#include "kiln/passes/remat.h"

#include "kiln/passes/cse.h"
#include "passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using testing::expect_pass;
using testing::expect_unchanged;

// A chain of cheap elementwise ops whose values a late "backward" reads: the
// default policy keeps one and recomputes the rest after the peak (marked).
constexpr const char* kChain = R"(
graph(%0: f32[64, 64] "arg0", %1: f32[64, 64] "arg1") {
  %2 = matmul(%0, %1) : f32[64, 64]
  %3 = abs(%2) : f32[64, 64]
  %4 = neg(%3) : f32[64, 64]
  %5 = relu(%4) : f32[64, 64]
  %6 = matmul(%5, %1) : f32[64, 64]
  %7 = matmul(%6, %1) : f32[64, 64]
  %8 = matmul(%7, %1) : f32[64, 64]
  %9 = mul(%8, %3) : f32[64, 64]
  %10 = mul(%9, %4) : f32[64, 64]
  %11 = mul(%10, %5) : f32[64, 64]
  return %11 "out0"
}
)";

TEST(Remat, PredictedPeakCountsLiveBuffers) {
  // Inputs are free; 16 KiB per buffer; at %8 (matmul) %3 %4 %5 %7 %8 are alive.
  auto g = ir::parse(testing::trim_leading_newline(kChain));
  EXPECT_EQ(predicted_peak_bytes(*g), 5 * 64 * 64 * 4);
}

TEST(Remat, DefaultPolicyRecomputesTheChain) {
  // The cut before the peak (%7's matmul) keeps %3 (as big as %2, and read
  // late itself: a tie goes to saving what is needed) and recomputes neg and
  // relu from it just before their late readers. Predicted peak: 5 -> 3 buffers.
  expect_pass(remat, kChain, R"(
graph(%0: f32[64, 64] "arg0", %1: f32[64, 64] "arg1") {
  %2 = matmul(%0, %1) : f32[64, 64]
  %3 = abs(%2) : f32[64, 64]
  %4 = neg(%3) : f32[64, 64]
  %5 = relu(%4) : f32[64, 64]
  %6 = matmul(%5, %1) : f32[64, 64]
  %7 = matmul(%6, %1) : f32[64, 64]
  %8 = matmul(%7, %1) : f32[64, 64]
  %9 = mul(%8, %3) : f32[64, 64]
  %10 = neg(%3) {recompute=-1} : f32[64, 64]
  %11 = mul(%9, %10) : f32[64, 64]
  %12 = relu(%10) {recompute=-1} : f32[64, 64]
  %13 = mul(%11, %12) : f32[64, 64]
  return %13 "out0"
}
)",
              true);
  auto g = ir::parse(testing::trim_leading_newline(kChain));
  remat(*g);
  EXPECT_EQ(predicted_peak_bytes(*g), 3 * 64 * 64 * 4);
}

TEST(Remat, CopiesSurviveCseAndASecondRun) {
  // CSE must not merge a recomputation back into its original (the classic
  // bug: it would undo the pass); running remat again changes nothing.
  auto g = ir::parse(testing::trim_leading_newline(kChain));
  ASSERT_TRUE(remat(*g));
  const std::string once = ir::print(*g);
  expect_unchanged(cse, once);
  expect_unchanged(remat, once);
  EXPECT_NE(remat_summary(*g).find("remat -1: recompute 2 nodes (neg, relu)"), std::string::npos)
      << remat_summary(*g);
}

TEST(Remat, RowDivisionIsRecomputedByDefault) {
  // Softmax from primitives, p = e / rowsum(e), with e and p both read late
  // (as its traced backward reads them): a division by a broadcast row sum
  // is a multiplication by a reciprocal in the kernel, cheap, so the default
  // recomputes p from e and the sum instead of keeping both (16 MiB of the
  // 4-block transformer's peak). The peak is at %8 (e, p, %5, %7, %8); the
  // late readers are a kernel begun by p's copy (it fuses there).
  auto g = ir::parse(testing::trim_leading_newline(R"(
graph(%0: f32[64, 64] "arg0", %1: f32[64, 64] "arg1") {
  %2 = exp(%0) : f32[64, 64]
  %3 = sum(%2) {dims=[1], keepdim=true} : f32[64, 1]
  %4 = div(%2, %3) : f32[64, 64]
  %5 = matmul(%4, %1) : f32[64, 64]
  %6 = matmul(%5, %1) : f32[64, 64]
  %7 = matmul(%6, %1) : f32[64, 64]
  %8 = matmul(%7, %1) : f32[64, 64]
  %9 = add(%8, %5) : f32[64, 64]
  %10 = matmul(%9, %1) : f32[64, 64]
  %11 = mul(%10, %4) : f32[64, 64]
  %12 = mul(%11, %2) : f32[64, 64]
  %13 = sum(%12) {dims=[], keepdim=false} : f32[]
  return %13 "out0"
}
)"));
  const int64_t before = predicted_peak_bytes(*g);
  const int64_t fused_before = predicted_peak_bytes(*g, plan_fusion(*g));
  EXPECT_TRUE(remat(*g));
  EXPECT_NO_THROW(ir::verify(*g));
  EXPECT_NE(remat_summary(*g).find("recompute 1 nodes (div)"), std::string::npos)
      << remat_summary(*g);
  // At %8: e, the row sum, %5, %7 and %8; p is no longer among them.
  EXPECT_EQ(predicted_peak_bytes(*g), 4 * 64 * 64 * 4 + 64 * 4);
  EXPECT_LT(predicted_peak_bytes(*g), before);
  EXPECT_LT(predicted_peak_bytes(*g, plan_fusion(*g)), fused_before);
}

TEST(Remat, NothingToGainIsUnchanged) {
  // No value is read late: the peak is the working set itself.
  expect_unchanged(remat, R"(
graph(%0: f32[64, 64] "arg0") {
  %1 = exp(%0) : f32[64, 64]
  %2 = neg(%1) : f32[64, 64]
  %3 = mul(%2, %1) : f32[64, 64]
  return %3 "out0"
}
)");
}

TEST(Remat, EmptyGraphIsUnchanged) {
  // Regression: a graph without nodes (a function returning its argument) crashed.
  expect_unchanged(remat, R"(
graph(%0: f32[4] "arg0") {
  return %0 "out0"
}
)");
}

TEST(Remat, RandomOpsAreNeverRecomputed) {
  // A draw read late stays saved (the IR contract: random nodes are never
  // duplicated); its elementwise consumer is still recomputed from it.
  auto g = ir::parse(testing::trim_leading_newline(R"(
graph(%0: f32[64, 64] "arg0") {
  %1 = rand_uniform() {shape=[64, 64], dtype=f32, seed=1, offset=0} : f32[64, 64]
  %2 = exp(%1) : f32[64, 64]
  %3 = exp(%2) : f32[64, 64]
  %4 = matmul(%3, %0) : f32[64, 64]
  %5 = matmul(%4, %0) : f32[64, 64]
  %6 = mul(%5, %2) : f32[64, 64]
  %7 = mul(%6, %1) : f32[64, 64]
  return %7 "out0"
}
)"));
  RematScope scope({.memory_budget = 1});
  remat(*g);
  int draws = 0;
  for (const ir::Node* n : g->nodes()) draws += n->is_op(OpId::rand_uniform);
  EXPECT_EQ(draws, 1);
  EXPECT_NO_THROW(ir::verify(*g));
}

// The executor's fused schedule's predicted peak: what a budget is met by.
int64_t fused_peak(const ir::Graph& g) {
  return predicted_peak_bytes(g, plan_fusion(g));
}

// GELU's shape: a pre-activation %3 and its erf %4, both read late (after a
// peak of 5 buffers at %7); `k` is the first matmul's depth, most of the work.
std::string erf_text(int k) {
  return str("graph(%0: f32[64, ", k, "] \"arg0\", %1: f32[", k,
             R"(, 64] "arg1", %2: f32[64, 64] "arg2") {
  %3 = matmul(%0, %1) : f32[64, 64]
  %4 = erf(%3) : f32[64, 64]
  %5 = matmul(%4, %2) : f32[64, 64]
  %6 = matmul(%5, %2) : f32[64, 64]
  %7 = add(%5, %6) : f32[64, 64]
  %8 = matmul(%7, %2) : f32[64, 64]
  %9 = mul(%8, %4) : f32[64, 64]
  %10 = mul(%9, %3) : f32[64, 64]
  return %10 "out0"
}
)");
}

// erf_text(k) after the default policy recomputed its erf: from the saved %3
// after the peak instead of kept (5 -> 4 buffers).
std::string erf_recomputed_text(int k) {
  return str("graph(%0: f32[64, ", k, "] \"arg0\", %1: f32[", k,
             R"(, 64] "arg1", %2: f32[64, 64] "arg2") {
  %3 = matmul(%0, %1) : f32[64, 64]
  %4 = erf(%3) : f32[64, 64]
  %5 = matmul(%4, %2) : f32[64, 64]
  %6 = matmul(%5, %2) : f32[64, 64]
  %7 = add(%5, %6) : f32[64, 64]
  %8 = matmul(%7, %2) : f32[64, 64]
  %9 = erf(%3) {recompute=-1} : f32[64, 64]
  %10 = mul(%8, %9) : f32[64, 64]
  %11 = mul(%10, %3) : f32[64, 64]
  return %11 "out0"
}
)");
}

TEST(Remat, DefaultRecomputesErfWithinItsShareOfTheWork) {
  // Rule 4b: erf costs 0.5% of this graph's work (the first matmul's K is
  // 4096), under the default's 3%: it is recomputed. Rate 1 alone keeps it.
  expect_pass(remat, erf_text(4096), erf_recomputed_text(4096), true);
}

TEST(Remat, DefaultRecomputesErfAtItsF32Price) {
  // erf is priced 5 per element since its f32 expansion (16 before): with
  // K = 1024 it is 1.6% of the work (4.9% at 16, kept before), so the default
  // recomputes it as with K = 4096.
  expect_pass(remat, erf_text(1024), erf_recomputed_text(1024), true);
}

TEST(Remat, DefaultKeepsErfThatWouldCostTooMuch) {
  // With K = 64 the erf is 7% of the graph's work: the default keeps it (nor
  // does the default rate alone recompute it: it costs more than its bytes).
  expect_unchanged(remat, erf_text(64));
}

TEST(Remat, OnAGpuTheDefaultRateRecomputesErf) {
  // A GPU prices costly math 2 per element (RematOptions::gpu), below the 4
  // bytes it saves: the default rate recomputes the erf that the CPU's price
  // keeps (7% of the work with K = 64, above rule 4b's share).
  RematScope scope({.gpu = true});
  expect_pass(remat, erf_text(64), erf_recomputed_text(64), true);
  ASSERT_FALSE(scope.report().log.empty());
  EXPECT_NE(scope.report().log[0].find("[rate 1]"), std::string::npos) << scope.report().log[0];
}

// Eight layers y = tanh(x W), then a backward-like tail that reads every
// activation in reverse order, a matmul after each read (as IR text; a tail
// of elementwise ops only would fuse into one kernel reading them all at once).
std::string layers_text() {
  std::string s = "graph(%0: f32[128, 64] \"arg0\", %1: f32[64, 64] \"arg1\") {\n";
  int v = 2;
  std::vector<int> acts;
  int x = 0;
  for (int l = 0; l < 8; ++l) {
    s += str("  %", v, " = matmul(%", x, ", %1) : f32[128, 64]\n");
    s += str("  %", v + 1, " = tanh(%", v, ") : f32[128, 64]\n");
    x = v + 1;
    acts.push_back(x);
    v += 2;
  }
  int acc = x;
  for (auto it = acts.rbegin(); it != acts.rend(); ++it) {
    s += str("  %", v, " = mul(%", acc, ", %", *it, ") : f32[128, 64]\n");
    s += str("  %", v + 1, " = matmul(%", v, ", %1) : f32[128, 64]\n");
    acc = v + 1;
    v += 2;
  }
  return s + str("  return %", acc, " \"out0\"\n}\n");
}

TEST(Remat, BudgetRecomputesMatmulsAndReports) {
  // The default policy cannot help (every late value is a tanh of a matmul);
  // a budget lets matmuls be recomputed, marked like the rest.
  auto g = ir::parse(layers_text());
  const int64_t before = fused_peak(*g);
  EXPECT_FALSE(remat(*g));
  RematScope scope({.memory_budget = before * 3 / 4});
  EXPECT_TRUE(remat(*g));
  EXPECT_NO_THROW(ir::verify(*g));
  const RematReport& r = scope.report();
  EXPECT_EQ(r.peak_before, before);
  EXPECT_EQ(r.peak_after, fused_peak(*g));
  EXPECT_TRUE(r.budget_met) << r.peak_after << " > " << r.budget;
  EXPECT_GT(r.splits, 0);
  ASSERT_FALSE(r.log.empty());
  EXPECT_NE(r.log[0].find("rate 1/"), std::string::npos) << r.log[0];
  int marked_matmuls = 0;
  for (const ir::Node* n : g->nodes())
    marked_matmuls += n->is_op(OpId::matmul) && n->attrs.has("recompute");
  EXPECT_GT(marked_matmuls, 0);
}

// Layers of two matmuls each, in run order a costly one (K = 256, to
// [128, 64]) and a cheap one (K = 64, to [128, 256]: a quarter of the work per
// byte), each followed by a tanh the "backward" reads in reverse order.
std::string two_matmul_layers_text() {
  std::string s =
      "graph(%0: f32[128, 256] \"arg0\", %1: f32[256, 64] \"arg1\", %2: f32[64, 256] "
      "\"arg2\") {\n";
  int v = 3, x = 0;
  std::vector<int> acts;
  for (int l = 0; l < 6; ++l) {
    s += str("  %", v, " = matmul(%", x, ", %1) : f32[128, 64]\n");
    s += str("  %", v + 1, " = tanh(%", v, ") : f32[128, 64]\n");
    s += str("  %", v + 2, " = matmul(%", v + 1, ", %2) : f32[128, 256]\n");
    s += str("  %", v + 3, " = tanh(%", v + 2, ") : f32[128, 256]\n");
    acts.push_back(v + 1);
    acts.push_back(v + 3);
    x = v + 3;
    v += 4;
  }
  int acc = x;
  for (auto it = acts.rbegin(); it != acts.rend(); ++it) {
    const bool wide = (it - acts.rbegin()) % 2 == 0;  // [128, 256]
    s += str("  %", v, " = mul(%", acc, ", %", *it, ") : f32[128, ", wide ? 256 : 64, "]\n");
    s += str("  %", v + 1, " = matmul(%", v,
             wide ? ", %1) : f32[128, 64]\n" : ", %2) : f32[128, 256]\n");
    acc = v + 1;
    v += 2;
  }
  return s + str("  return %", acc, " \"out0\"\n}\n");
}

TEST(Remat, BudgetRecomputesTheCheaperMatmuls) {
  // Rule 4c. Saving every 2nd matmul in run order saved the cheap ones here
  // (rank 1, 3, ...) and recomputed the costly ones (K = 256) for a quarter of
  // the bytes per unit of work; the phase that saves the costly ones wins.
  auto g = ir::parse(two_matmul_layers_text());
  RematScope scope({.memory_budget = fused_peak(*g) / 2});
  EXPECT_TRUE(remat(*g));
  EXPECT_NO_THROW(ir::verify(*g));
  EXPECT_TRUE(scope.report().budget_met) << scope.report().peak_after;
  int cheap = 0, costly = 0;
  for (const ir::Node* n : g->nodes())
    if (n->is_op(OpId::matmul) && n->attrs.has("recompute"))
      ++(n->inputs[0]->shape.back().b == 64 ? cheap : costly);
  EXPECT_GT(cheap, 0);
  EXPECT_EQ(costly, 0) << ::testing::PrintToString(scope.report().log);
}

TEST(Remat, BudgetSlackKeepsRecomputedMatmuls) {
  // Rule 10. The tier that meets half the peak cuts whole runs of matmuls and
  // leaves slack; one recomputed matmul reads its forward value again, and the
  // budget still holds (5 recomputed instead of 6).
  auto g = ir::parse(two_matmul_layers_text());
  const int64_t budget = fused_peak(*g) / 2;
  RematScope scope({.memory_budget = budget});
  EXPECT_TRUE(remat(*g));
  EXPECT_NO_THROW(ir::verify(*g));
  const RematReport& r = scope.report();
  EXPECT_TRUE(r.budget_met) << r.peak_after;
  EXPECT_LE(fused_peak(*g), budget);
  bool kept = false;
  for (const std::string& l : r.log) kept = kept || l.find("kept instead") != std::string::npos;
  EXPECT_TRUE(kept) << ::testing::PrintToString(r.log);
  int recomputed = 0;
  for (const ir::Node* n : g->nodes())
    if (n->is_op(OpId::matmul) && n->attrs.has("recompute")) ++recomputed;
  EXPECT_EQ(recomputed, 5);
}

TEST(Remat, UnreachableBudgetReportsTheSmallestPeak) {
  // One byte cannot be met: the report says so and keeps the best peak found.
  auto g = ir::parse(layers_text());
  const int64_t before = fused_peak(*g);
  RematScope scope({.memory_budget = 1});
  remat(*g);
  const RematReport& r = scope.report();
  EXPECT_FALSE(r.budget_met);
  EXPECT_EQ(r.budget, 1);
  EXPECT_LT(r.peak_after, before);
  EXPECT_EQ(r.peak_after, fused_peak(*g));
  EXPECT_GE(r.peak_after, 2 * 128 * 64 * 4);  // a matmul's input and output
}

TEST(Remat, BudgetRecomputesJustEnough) {
  // A budget one buffer under the peak recomputes a window of the last
  // layers, not every layer the rate allows (rule 8).
  auto all = ir::parse(layers_text());
  const int64_t before = fused_peak(*all);
  int most = 0;
  {
    RematScope scope({.memory_budget = 1});
    remat(*all);
    most = scope.report().recomputed;
  }
  auto g = ir::parse(layers_text());
  RematScope scope({.memory_budget = before - 128 * 64 * 4});
  remat(*g);
  EXPECT_TRUE(scope.report().budget_met) << scope.report().peak_after;
  EXPECT_GT(scope.report().recomputed, 0);
  EXPECT_LT(scope.report().recomputed, most);
  // Two layers' matmul and tanh; the rate's whole cut recomputes every other layer's.
  EXPECT_LE(scope.report().recomputed, 4) << ::testing::PrintToString(scope.report().log);
  EXPECT_NO_THROW(ir::verify(*g));
}

TEST(Remat, BudgetRecomputesAMatmulOnce) {
  // Rule 9. At 50% of the peak two cuts each recomputed the first layer's
  // matmul from the input: cut -2 (%32) for the third layer's activation,
  // cut -1 again for the first layer's own tanh, read last. Now -1's tanh
  // (%42) reads -2's matmul, kept alive to it: one matmul less, the same
  // fused peak (the budget still holds). bench/remat_bench's MLP at 50%:
  // 14 recomputed matmuls, 12 now.
  auto g = ir::parse(layers_text());
  RematScope scope({.memory_budget = fused_peak(*g) / 2});
  expect_pass(remat, layers_text(), R"(
graph(%0: f32[128, 64] "arg0", %1: f32[64, 64] "arg1") {
  %2 = matmul(%0, %1) : f32[128, 64]
  %3 = tanh(%2) : f32[128, 64]
  %4 = matmul(%3, %1) : f32[128, 64]
  %5 = tanh(%4) : f32[128, 64]
  %6 = matmul(%5, %1) : f32[128, 64]
  %7 = tanh(%6) : f32[128, 64]
  %8 = matmul(%7, %1) : f32[128, 64]
  %9 = tanh(%8) : f32[128, 64]
  %10 = matmul(%9, %1) : f32[128, 64]
  %11 = tanh(%10) : f32[128, 64]
  %12 = matmul(%11, %1) : f32[128, 64]
  %13 = tanh(%12) : f32[128, 64]
  %14 = matmul(%13, %1) : f32[128, 64]
  %15 = tanh(%14) : f32[128, 64]
  %16 = matmul(%15, %1) : f32[128, 64]
  %17 = tanh(%16) : f32[128, 64]
  %18 = mul(%17, %17) : f32[128, 64]
  %19 = matmul(%18, %1) : f32[128, 64]
  %20 = matmul(%13, %1) {recompute=-2} : f32[128, 64]
  %21 = tanh(%20) {recompute=-1} : f32[128, 64]
  %22 = mul(%19, %21) : f32[128, 64]
  %23 = matmul(%22, %1) : f32[128, 64]
  %24 = mul(%23, %13) : f32[128, 64]
  %25 = matmul(%24, %1) : f32[128, 64]
  %26 = matmul(%9, %1) {recompute=-1} : f32[128, 64]
  %27 = tanh(%26) {recompute=-1} : f32[128, 64]
  %28 = mul(%25, %27) : f32[128, 64]
  %29 = matmul(%28, %1) : f32[128, 64]
  %30 = mul(%29, %9) : f32[128, 64]
  %31 = matmul(%30, %1) : f32[128, 64]
  %32 = matmul(%0, %1) {recompute=-2} : f32[128, 64]
  %33 = tanh(%32) {recompute=-2} : f32[128, 64]
  %34 = matmul(%33, %1) {recompute=-2} : f32[128, 64]
  %35 = tanh(%34) {recompute=-2} : f32[128, 64]
  %36 = matmul(%35, %1) {recompute=-1} : f32[128, 64]
  %37 = tanh(%36) {recompute=-1} : f32[128, 64]
  %38 = mul(%31, %37) : f32[128, 64]
  %39 = matmul(%38, %1) : f32[128, 64]
  %40 = mul(%39, %35) : f32[128, 64]
  %41 = matmul(%40, %1) : f32[128, 64]
  %42 = tanh(%32) {recompute=-1} : f32[128, 64]
  %43 = mul(%41, %42) : f32[128, 64]
  %44 = matmul(%43, %1) : f32[128, 64]
  return %44 "out0"
}
)",
              true);
  const RematReport& r = scope.report();
  EXPECT_TRUE(r.budget_met) << r.peak_after << " > " << r.budget;
  ASSERT_FALSE(r.log.empty());
  EXPECT_NE(r.log.back().find("1 matmul chain"), std::string::npos) << r.log.back();
}

TEST(Remat, UnmetBudgetLogsTheFloor) {
  // The floor's composition: what the smallest peak holds.
  auto g = ir::parse(layers_text());
  RematScope scope({.memory_budget = 1});
  remat(*g);
  const RematReport& r = scope.report();
  ASSERT_FALSE(r.budget_met);
  EXPECT_NE(r.peak_composition.find("gradients 0.00 MiB"), std::string::npos) << r.peak_composition;
  EXPECT_EQ(r.log.back(), "floor: " + r.peak_composition);
}

// Two cuts' copies (ids -2 and -1) of values of one saved %2, the -1 copy
// stored for a matmul; %5 is a matmul between them; `feeds`: %5 reads the -2
// group's %4 (a layer's own backward matmul), else an unrelated one.
std::string two_cuts_text(bool feeds) {
  return str(R"(graph(%0: f32[64, 64] "arg0", %1: f32[64, 64] "arg1") {
  %2 = matmul(%0, %1) : f32[64, 64]
  %3 = abs(%2) {recompute=-2} : f32[64, 64]
  %4 = neg(%3) {recompute=-2} : f32[64, 64]
  %5 = matmul()",
             feeds ? "%4" : "%0", R"(, %1) : f32[64, 64]
  %6 = tanh(%3) {recompute=-1} : f32[64, 64]
  %7 = matmul(%6, %1) : f32[64, 64]
  %8 = mul(%7, %4) : f32[64, 64]
  %9 = mul(%8, %5) : f32[64, 64]
  return %9 "out0"
}
)");
}

TEST(Remat, FusionKeepsAnotherCutsCopyLate) {
  // Regression (fuse.cpp rule 11): a later cut's copy (%6) joined the group of
  // an earlier cut's copies it reads (%3) across an unrelated matmul, so it was
  // made, and stored, where they were: in bench/remat_bench's MLP at a 25%
  // budget one kernel wrote 6 buffers, 3 of them GELUs that 3 cuts had
  // recomputed layers later (measured 3.5 MiB; 1.8 MiB with the rule).
  auto g = ir::parse(two_cuts_text(false));
  const FusionPlan plan = plan_fusion(*g);
  const auto nodes = g->nodes();
  ASSERT_GE(plan.group_of[1], 0);
  EXPECT_EQ(plan.group_of[1], plan.group_of[2]);  // the -2 chain fuses
  EXPECT_NE(plan.group_of[4], plan.group_of[1]) << nodes[4]->info().name;
}

TEST(Remat, FusionJoinsAnotherCutsCopyAroundItsOwnMatmul) {
  // A matmul that reads the group runs after it anyway: the copy joins it
  // (one backward kernel per layer, as before the rule).
  auto g = ir::parse(two_cuts_text(true));
  const FusionPlan plan = plan_fusion(*g);
  ASSERT_GE(plan.group_of[1], 0);
  EXPECT_EQ(plan.group_of[4], plan.group_of[1]);
  // Also when the matmul reads the group through a view (a transformer's
  // feed-forward reshapes [16, 128, 1024] to [2048, 1024] for its weight
  // gradient): the GELU's backward stays one kernel (fused peak 59 -> 43 MiB
  // in bench/remat_bench's transformer at 25%).
  auto v = ir::parse(R"(graph(%0: f32[64, 64] "arg0", %1: f32[64, 64] "arg1") {
  %2 = matmul(%0, %1) : f32[64, 64]
  %3 = abs(%2) {recompute=-2} : f32[64, 64]
  %4 = neg(%3) {recompute=-2} : f32[64, 64]
  %5 = permute(%4) {dims=[1, 0]} : f32[64, 64]
  %6 = matmul(%5, %1) : f32[64, 64]
  %7 = tanh(%3) {recompute=-1} : f32[64, 64]
  %8 = matmul(%7, %1) : f32[64, 64]
  %9 = mul(%8, %4) : f32[64, 64]
  %10 = mul(%9, %6) : f32[64, 64]
  return %10 "out0"
}
)");
  const FusionPlan pv = plan_fusion(*v);
  ASSERT_GE(pv.group_of[1], 0);
  EXPECT_EQ(pv.group_of[5], pv.group_of[1]);
}

// A parameter update: new = p - g*g, returned as the state that replaces p.
constexpr const char* kUpdate = R"(
graph(%0: f32[64, 64] "arg0", %1: f32[64, 64] "arg1") {
  %2 = mul(%1, %1) : f32[64, 64]
  %3 = sub(%0, %2) : f32[64, 64]
  %4 = mul(%2, %2) : f32[64, 64]
  return %3 "out0", %4 "out1"
}
)";

TEST(Remat, FusedPeakCountsAKernelWritingOverADyingInput) {
  // The kernel {tanh %4, mul %5} writes %5 over %3, which dies there (the
  // executor's in-place output, Executor::Run::kernel_output): 2 buffers at
  // its step, as measured, not 3. Inputs that are graph outputs live on: no
  // buffer is written over (4 buffers at %6).
  const char* text = R"(
graph(%0: f32[64, 64] "arg0", %1: f32[64, 64] "arg1") {
  %2 = matmul(%0, %1) : f32[64, 64]
  %3 = matmul(%1, %0) : f32[64, 64]
  %4 = tanh(%3) : f32[64, 64]
  %5 = mul(%4, %2) : f32[64, 64]
  %6 = matmul(%5, %1) : f32[64, 64]
  return %6 "out0")";
  const int64_t buf = 64 * 64 * 4;
  auto g = ir::parse(str(text, "\n}\n"));
  EXPECT_EQ(predicted_peak_bytes(*g), 3 * buf);  // node order: %2 %3 %4 at %4
  EXPECT_EQ(fused_peak(*g), 2 * buf);
  auto h = ir::parse(str(text, ", %3 \"out1\", %2 \"out2\"\n}\n"));
  EXPECT_EQ(fused_peak(*h), 4 * buf);
}

TEST(Remat, StateWritesInPlaceAreNotCounted) {
  // Regression: the model counted every new parameter and optimizer state as
  // a new buffer alive to the end, while the executor writes it over the
  // input it replaces (a floor of all parameters under every budget).
  auto g = ir::parse(testing::trim_leading_newline(kUpdate));
  const int64_t buf = 64 * 64 * 4;
  EXPECT_EQ(predicted_peak_bytes(*g), 3 * buf);
  const std::vector<StateWrite> writes{{0, 0}};
  EXPECT_EQ(predicted_peak_bytes(*g, writes), 2 * buf);
  // Not when the input is read after the update: then it is a new buffer.
  auto late = ir::parse(testing::trim_leading_newline(R"(
graph(%0: f32[64, 64] "arg0", %1: f32[64, 64] "arg1") {
  %2 = mul(%1, %1) : f32[64, 64]
  %3 = sub(%0, %2) : f32[64, 64]
  %4 = mul(%0, %2) : f32[64, 64]
  return %3 "out0", %4 "out1"
}
)"));
  EXPECT_EQ(predicted_peak_bytes(*late, writes), 3 * buf);
  // Nor when the input is also returned.
  auto kept = ir::parse(testing::trim_leading_newline(R"(
graph(%0: f32[64, 64] "arg0", %1: f32[64, 64] "arg1") {
  %2 = mul(%1, %1) : f32[64, 64]
  %3 = sub(%0, %2) : f32[64, 64]
  return %3 "out0", %0 "out1"
}
)"));
  EXPECT_EQ(predicted_peak_bytes(*kept, writes), 2 * buf);
  EXPECT_EQ(predicted_peak_bytes(*kept), 2 * buf);
}

}  // namespace
}  // namespace kiln::passes
