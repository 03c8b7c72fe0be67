// Rematerialization: which values a straight-line graph (typically a traced
// training step, forward + backward + update) keeps alive until a late use and
// which it computes again just before that use, so the predicted peak memory
// drops — under a memory budget when one is set. The rules and the memory model
// are at the top of passes/src/remat.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kiln/ir/graph.h"
#include "kiln/passes/fuse.h"

namespace kiln::passes {

/// A graph output that replaces graph input `input` (a parameter, optimizer
/// state): the executor writes it into that input's buffer when its
/// elementwise producer is the input's last reader, so it costs no memory then.
struct StateWrite {
  int output = 0;  ///< index in g.outputs()
  int input = 0;   ///< index in g.inputs()
};

/// How the remat pass decides (set for a pipeline run with RematScope).
struct RematOptions {
  /// Peak bytes the graph should fit (the model of predicted_peak_bytes); 0:
  /// the default policy (recompute what costs less than the bytes it frees at
  /// the default exchange rate, when the peak drops 1%: cheap elementwise chains).
  int64_t memory_budget = 0;
  /// The graph's state writes (see StateWrite); the compile driver sets them.
  std::vector<StateWrite> writes = {};
  /// The executor runs the graph fused (plan_fusion): a budget is met by that
  /// schedule's predicted peak; false (fusion off): by the node-order peak.
  bool fused = true;
  /// The graph runs on a GPU: costly elementwise math (exp, erf, ...) is
  /// priced 2 per element, below the 4 bytes a saved f32 costs, so the
  /// default rate recomputes it in the backward instead of storing it (GELU's
  /// 1 + erf); a CPU's scalar rate prices it 5 (erf) to 16.
  bool gpu = false;
};

/// What the remat pass did to one graph (over every run in a RematScope).
struct RematReport {
  int64_t budget = 0;  ///< RematOptions::memory_budget
  /// Predicted peak of the graph the first run saw (under a budget: of the
  /// executor's fused schedule, the model the budget is met by, unless
  /// RematOptions::fused is false; else node order).
  int64_t peak_before = 0;
  int64_t peak_after = 0;        ///< the same model's predicted peak after the last run
  bool budget_met = true;        ///< peak_after <= budget (or no budget)
  int splits = 0;                ///< accepted cuts
  int recomputed = 0;            ///< nodes added as recomputations
  std::vector<std::string> log;  ///< one line per accepted cut
  /// What the buffers alive at the final predicted peak are (gradients, other
  /// graph outputs, values read after the peak, the working set): the floor
  /// when a budget is not met.
  std::string peak_composition;
};

/// Predicted peak bytes of running `g` node by node in its order: each node's
/// output buffer lives from that node to its last use (views share their
/// source's buffer; graph inputs and constants are not counted; graph outputs
/// live to the end, except state writes done in place). Symbolic dims count as 64.
int64_t predicted_peak_bytes(const ir::Graph& g, std::span<const StateWrite> writes = {});
/// The same for the executor's schedule of `g` under a fusion plan: groups run
/// as units in the executor's order, values inside a group are never stored.
int64_t predicted_peak_bytes(const ir::Graph& g, const FusionPlan& plan,
                             std::span<const StateWrite> writes = {});

/// While alive, the remat pass on this thread uses `opts` and records what it
/// does into report() (scopes nest; the innermost wins).
class RematScope {
 public:
  explicit RematScope(RematOptions opts);
  ~RematScope();
  RematScope(const RematScope&) = delete;
  RematScope& operator=(const RematScope&) = delete;
  const RematOptions& options() const { return opts_; }
  /// What the pass did while this scope was active.
  const RematReport& report() const { return report_; }
  RematReport& report() { return report_; }

 private:
  RematOptions opts_;
  RematReport report_;
  RematScope* outer_;
};

/// The pass: rematerializes at the predicted peak while that lowers it (see
/// remat.cpp). Recomputed nodes carry `recompute=<negative id>` so CSE and
/// fusion keep them apart from the originals. Returns true if it changed g.
bool remat(ir::Graph& g);

/// AOTAutograd's partition choice, by the min cut of the pass's rules 3-4 at
/// the default rate (cheap elementwise chains, views): of a joint
/// forward+backward graph whose nodes marked in `backward` (by position) run
/// in the backward, the forward nodes the backward should compute itself
/// instead of reading their values saved (by position). Moving a node that no
/// forward output needs costs nothing. `forward_output[o]`: output o is the
/// forward's (alive anyway). With `memory_budget` > 0 (bytes of the joint
/// peak: the forward, then the backward, as the partitioned plan runs them),
/// the rate drops tier by tier (remat.cpp's rule 4) until that peak fits, else
/// the cut with the smallest peak is taken.
std::vector<char> backward_recompute(const ir::Graph& g, const std::vector<char>& backward,
                                     const std::vector<char>& forward_output,
                                     int64_t memory_budget = 0);

/// What g recomputes, one line per cut ("recompute -1: 4 nodes (mul, erf, add,
/// mul) -> %57 %60 %63 from saved %55"), values numbered as ir::print numbers
/// them; "" if nothing is recomputed.
std::string remat_summary(const ir::Graph& g);

}  // namespace kiln::passes
