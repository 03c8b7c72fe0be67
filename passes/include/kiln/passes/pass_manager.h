// The pass manager: named passes from one list (pass_list.def), pipelines as
// lists of names, verification/logging/timing around every pass.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/ir/graph.h"

namespace kiln::passes {

/// A pass: rewrites the graph, returns true if it changed anything.
using PassFn = bool (*)(ir::Graph&);

/// One registered pass.
struct PassInfo {
  const char* name;
  PassFn fn;
  const char* summary;
};

/// Every registered pass, in pass_list.def order.
std::span<const PassInfo> registered_passes();
/// The pass called `name`, or null.
const PassInfo* find_pass(std::string_view name);

/// How a pipeline runs.
struct PipelineOptions {
  /// Verify before and after every pass: on in debug builds and wherever
  /// KILN_VERIFY=1 (the test suite sets it for every test).
  bool verify = verify_by_default();
  /// Repeat the whole list until no pass changes the graph (bounded).
  bool fixpoint = true;
  int max_iterations = 8;
  /// True in debug builds, or when KILN_VERIFY=1.
  static bool verify_by_default();
};

/// Statistics of one pipeline run.
struct PipelineStats {
  struct Entry {
    std::string pass;
    bool changed = false;
    double ms = 0;
  };
  std::vector<Entry> runs;  ///< in execution order
};

/// Time spent in one pass over every pipeline run in this process since the
/// last reset_pass_totals() (benchmarks). The verifier counts as "verify".
struct PassTotal {
  std::string pass;
  int runs = 0;
  double ms = 0;
};
/// Per-pass totals in first-run order (thread-safe).
std::vector<PassTotal> pass_totals();
/// Clears the totals of pass_totals().
void reset_pass_totals();

/// Runs the named passes in order on `g` (unknown names raise kiln::Error).
/// Honours KILN_DISABLE_PASSES, KILN_DEBUG=2 (print IR after each pass) and
/// KILN_TIME_PASSES=1 (print times to stderr).
PipelineStats run_pipeline(ir::Graph& g, std::span<const std::string> names,
                           const PipelineOptions& opts = {});
/// True if KILN_DISABLE_PASSES lists `name` (a pass, or an analysis such as
/// "fuse"); a name that is neither raises kiln::Error.
bool pass_disabled(std::string_view name);
/// The standard pipeline's pass names.
std::vector<std::string> standard_pipeline();
/// Passes run once, without fixpoint, after the standard pipeline (remat).
std::vector<std::string> late_pipeline();

/// The driver of a rule-based pass: every node of op `op` with one output is
/// replaced by rewrite(g, n) (a Value* of the same meaning, or null to keep
/// n) and erased. Returns true if any node was replaced.
template <typename F>
bool replace_each(ir::Graph& g, OpId op, F rewrite) {
  bool changed = false;
  for (ir::Node* n : g.nodes()) {
    if (!n->is_op(op) || n->outputs.size() != 1) continue;
    ir::Value* to = rewrite(g, n);
    if (to == nullptr) continue;
    g.replace_all_uses(n->output(), to);
    g.erase(n);
    changed = true;
  }
  return changed;
}

}  // namespace kiln::passes
