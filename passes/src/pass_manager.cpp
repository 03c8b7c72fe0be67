// The pass manager: the registry generated from pass_list.def and the pipeline
// driver (verify before/after each pass, KILN_DEBUG=2 dumps, KILN_TIME_PASSES
// timings, KILN_DISABLE_PASSES, fixpoint iteration).
#include "kiln/passes/pass_manager.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>

#include "kiln/env.h"
#include "kiln/error.h"
#include "kiln/ir/text.h"
#include "kiln/ir/verify.h"

namespace kiln::passes {

// One declaration per pass, from the list (each header declares the same).
#define KILN_PASS(name, summary) bool name(ir::Graph& g);
#include "pass_list.def"
#undef KILN_PASS

namespace {

// Constant-initialised (no static constructor), in pass_list.def order.
constexpr PassInfo kPasses[] = {
#define KILN_PASS(name, summary) {#name, &name, summary},
#include "pass_list.def"
#undef KILN_PASS
};

// Analyses that KILN_DISABLE_PASSES may name too, fusion's own rewrite
// (split_channel_sums, passes/fuse.h), its rule 12 (fuse_siblings) and rule 13
// (fuse_gemm_bias): not in the pipelines, their users ask pass_disabled()
// before running them.
constexpr const char* kAnalyses[] = {"fuse", "split_channel_sums", "fuse_siblings",
                                     "fuse_gemm_bias"};

std::string valid_names() {
  std::string s;
  for (const PassInfo& p : kPasses) s += (s.empty() ? "" : ", ") + std::string(p.name);
  for (const char* a : kAnalyses) s += str(", ", a);
  return s;
}

bool is_analysis(std::string_view name) {
  for (const char* a : kAnalyses)
    if (name == a) return true;
  return false;
}

// The pass called `name`; unknown names are a user error listing the valid ones.
const PassInfo& lookup(std::string_view name, const char* where) {
  const PassInfo* p = find_pass(name);
  KILN_CHECK(p != nullptr, "[pass manager] unknown pass '", std::string(name), "'", where,
             "; valid passes: ", valid_names());
  return *p;
}

// Names listed in KILN_DISABLE_PASSES (comma separated, blanks ignored).
std::vector<std::string> disabled_passes() {
  std::vector<std::string> out;
  std::string list = env::get("KILN_DISABLE_PASSES");
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = std::min(list.find(',', start), list.size());
    std::string item = list.substr(start, end - start);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) {
      // A typo would silently disable nothing.
      if (!is_analysis(item)) lookup(item, " in KILN_DISABLE_PASSES");
      out.push_back(item);
    }
    start = end + 1;
  }
  return out;
}

// Prints the accumulated time of each pass (first-run order) and the total.
void print_times(const PipelineStats& stats) {
  std::vector<std::string> order;
  for (const auto& e : stats.runs)
    if (std::find(order.begin(), order.end(), e.pass) == order.end()) order.push_back(e.pass);
  double total = 0;
  std::fprintf(stderr, "=== pass times ===\n");
  for (const std::string& name : order) {
    double ms = 0;
    int runs = 0, changed = 0;
    for (const auto& e : stats.runs) {
      if (e.pass != name) continue;
      ms += e.ms;
      ++runs;
      changed += e.changed ? 1 : 0;
    }
    total += ms;
    std::fprintf(stderr, "%-16s %9.3f ms  (%d runs, %d changed)\n", name.c_str(), ms, runs,
                 changed);
  }
  std::fprintf(stderr, "%-16s %9.3f ms\n", "total", total);
}

// Process-wide totals for pass_totals(): one lock per pipeline run.
std::mutex totals_mu;
std::vector<PassTotal> totals;

void add_to_totals(const PipelineStats& stats, double verify_ms, int verifies) {
  std::lock_guard<std::mutex> lock(totals_mu);
  auto slot = [](const std::string& name) -> PassTotal& {
    for (PassTotal& t : totals)
      if (t.pass == name) return t;
    totals.push_back({name, 0, 0});
    return totals.back();
  };
  for (const auto& e : stats.runs) {
    PassTotal& t = slot(e.pass);
    ++t.runs;
    t.ms += e.ms;
  }
  if (verifies > 0) {
    PassTotal& t = slot("verify");
    t.runs += verifies;
    t.ms += verify_ms;
  }
}

}  // namespace

std::vector<PassTotal> pass_totals() {
  std::lock_guard<std::mutex> lock(totals_mu);
  return totals;
}

void reset_pass_totals() {
  std::lock_guard<std::mutex> lock(totals_mu);
  totals.clear();
}

std::span<const PassInfo> registered_passes() {
  return kPasses;
}

const PassInfo* find_pass(std::string_view name) {
  for (const PassInfo& p : kPasses)
    if (name == p.name) return &p;
  return nullptr;
}

bool pass_disabled(std::string_view name) {
  const std::vector<std::string> off = disabled_passes();
  return std::find(off.begin(), off.end(), name) != off.end();
}

bool PipelineOptions::verify_by_default() {
#ifdef NDEBUG
  static const bool on = env::get_flag("KILN_VERIFY", false);
  return on;
#else
  return true;
#endif
}

PipelineStats run_pipeline(ir::Graph& g, std::span<const std::string> names,
                           const PipelineOptions& opts) {
  // Resolve every name before running anything: a typo fails fast.
  std::vector<const PassInfo*> passes;
  std::vector<std::string> disabled = disabled_passes();
  for (const std::string& name : names) {
    const PassInfo& p = lookup(name, "");
    if (std::find(disabled.begin(), disabled.end(), name) == disabled.end()) passes.push_back(&p);
  }
  const bool dump = env::get_int("KILN_DEBUG", 0) >= 2;
  const bool time = env::get_flag("KILN_TIME_PASSES", false);

  double verify_ms = 0;
  int verifies = 0;
  // Verifies g, timed into verify_ms; `what` prefixes the error.
  auto checked = [&](const std::string& what) {
    auto t0 = std::chrono::steady_clock::now();
    try {
      ir::verify(g);
    } catch (const Error& e) {
      throw Error(str(what, e.what()));
    }
    verify_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ++verifies;
  };
  if (opts.verify) checked("[pass manager] the graph is invalid before the first pass: ");
  PipelineStats stats;
  const int iterations = opts.fixpoint ? std::max(opts.max_iterations, 1) : 1;
  for (int it = 0; it < iterations; ++it) {
    bool any_changed = false;
    for (const PassInfo* p : passes) {
      auto t0 = std::chrono::steady_clock::now();
      bool changed = p->fn(g);
      auto t1 = std::chrono::steady_clock::now();
      stats.runs.push_back(
          {p->name, changed, std::chrono::duration<double, std::milli>(t1 - t0).count()});
      any_changed |= changed;
      if (dump) {
        std::string text = ir::print(g);
        if (text.empty() || text.back() != '\n') text += '\n';
        std::fprintf(stderr, "=== after %s ===\n%s", p->name, text.c_str());
      }
      if (opts.verify) checked(str("[pass ", p->name, "] broke the graph: "));
    }
    if (!any_changed) break;
  }
  if (time) print_times(stats);
  add_to_totals(stats, verify_ms, verifies);
  return stats;
}

// dce first so the other passes do not spend time (kernel evaluations for
// fold_constants) on dead code; cse before fold_constants so duplicated
// constant subexpressions are evaluated once; simplify after folding so it
// sees the folded constants (the 1 in x*(2-1)); elide_copies before simplify,
// which cancels the permute pairs it leaves; a last dce removes what the
// middle passes left unused. The fixpoint loop repeats the list, which covers
// the remaining interactions (duplicates simplify creates, merged by cse).
std::vector<std::string> standard_pipeline() {
  return {"dce",          "cse",         "fold_constants",
          "elide_copies", "pads_to_cat", "scatter_to_where",
          "simplify",     "dce",         "schedule_collectives"};
}

// remat decides on the final graph, once: the fixpoint loop would let cse and
// simplify rework its copies between runs (merging copies that became equal).
std::vector<std::string> late_pipeline() {
  return {"remat"};
}

}  // namespace kiln::passes
