// The memory model and the min cut shared by the remat pass (remat.cpp), the
// partition choice (remat_partition.cpp) and the peak functions of remat.h
// (remat_model.cpp). Internal to kiln_passes.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "kiln/ir/graph.h"
#include "kiln/passes/remat.h"

namespace kiln::passes::detail {

constexpr int64_t kNominalDim = 64;  // a symbolic dim's size in the model

constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;

/// Bytes of v with symbolic dims evaluated at `syms`.
int64_t bytes_of(const ir::Value* v, std::span<const int64_t> syms);

/// Rule 1's simulation of g in node order.
struct Model {
  std::vector<ir::Node*> nodes;  // in order
  std::vector<int> root;         // by value id: the value owning its buffer, -1: not counted
  std::vector<int64_t> bytes;    // by value id
  std::vector<int> birth, last;  // by root id: position made, last position alive
  std::vector<char> output;      // by value id: a graph output
  int64_t peak = 0;
  int at = 0;  // earliest position of the peak
};

/// The simulation; `writes` are RematOptions::writes (outputs written into the
/// buffer of the input they replace: not counted where the executor can do it).
Model simulate(const ir::Graph& g, std::span<const StateWrite> writes);
/// The same in another topological `order` of g's nodes.
Model simulate(const ir::Graph& g, std::span<const StateWrite> writes,
               std::vector<ir::Node*> order);

/// An exchange rate of the min cut (rule 4): recomputing n costs
/// 2^-shift * recompute_cost(n) byte-equivalents against the bytes saved.
struct Tier {
  int shift = 0;  ///< rate = 2^-shift
  int depth = 0;  ///< opaque ops (matmul, conv): none if 0, else all but every (depth+1)-th
  const char* name = "";
  /// Which of every (depth+1) opaque ops, in run order, stays saved (rank %
  /// (depth+1) == phase); -1: the last (depth). remat.cpp's rule 4c picks it.
  int phase = -1;
  /// Whether the opaque op of `rank` (in run order) is pinned (saved) here.
  bool pins(int rank) const {
    return depth == 0 || rank % (depth + 1) == (phase < 0 ? depth : phase);
  }
};
/// The tiers a memory budget goes through, highest rate first.
inline constexpr Tier kBudgetTiers[] = {{0, 0, "rate 1"},
                                        {2, 0, "rate 1/4"},
                                        {4, 0, "rate 1/16"},
                                        {4, 1, "rate 1/16, matmuls but every 2nd"},
                                        {6, 1, "rate 1/64, matmuls but every 2nd"},
                                        {8, 2, "rate 1/256, matmuls but every 3rd"},
                                        {10, 3, "rate 1/1024, matmuls but every 4th"}};

/// Graph inputs the state writes may reuse, by value id of the output: the
/// input's value id, or -1 (ids: g.value_id_bound() at least).
std::vector<int> write_targets(const ir::Graph& g, std::span<const StateWrite> writes, int ids);

/// Rule 0 (remat_schedule.cpp): each parameter's update moves to just after
/// its gradient is complete, if `accept` (given the proposed order) agrees;
/// with `early_gradients`, each gradient's own part (dW's matmul, operands
/// recomputed for it) right after its inputs instead (rule 2b there).
/// Returns true if g changed.
bool schedule_updates(ir::Graph& g, std::span<const StateWrite> writes,
                      const std::function<bool(std::vector<ir::Node*>)>& accept,
                      bool early_gradients = false);

/// What the buffers alive at m's peak are (gradients, other graph outputs,
/// values read after the peak, the working set), one line.
std::string peak_composition(const ir::Graph& g, const Model& m);

/// Elements of v (symbolic dims at kNominalDim).
int64_t elems_of(const ir::Value* v);

/// Rule 4: the time to compute n again in byte-equivalents at rate 1; -1:
/// never recomputed (see remat_model.cpp).
double recompute_cost(const ir::Node& n);

/// Whether the innermost RematScope on this thread prices for a GPU
/// (RematOptions::gpu); false without one.
bool pricing_for_gpu();

/// predicted_peak_bytes of the fused schedule; with `composition`, also what
/// is alive at its peak (value, producer, group, MiB), for KILN_DEBUG.
int64_t fused_peak(const ir::Graph& g, const FusionPlan& plan, std::span<const StateWrite> writes,
                   std::string* composition);

/// Fusion's rule 11 (fuse.cpp) for recomputed nodes (attribute `recompute`).
/// A node x of a recomputation joins a group begun by an unmarked node only
/// if it reads no unmarked member (a forward node: x would be made, and
/// stored, where the original was) and no opaque node (matmul, conv) that
/// neither reads the group nor feeds it lies between the group's first node
/// and x: the backward's own nodes just before x may hold it (GELU's
/// derivative: 2 x 8 MiB more at bench/remat_bench's transformer 50% peak
/// when they did not). In a group begun by another recomputation, no such
/// opaque node may lie between x and a member x reads (else the later cut's
/// copy would be made, and stored, with the earlier cut's, layers before its readers:
/// bench/remat_bench's MLP at 25%: one kernel wrote 3 GELUs that 3 cuts
/// recomputed later; measured 3.5 MiB, 1.8 with the rule). A matmul the group
/// reads or feeds (directly or through views) runs before or after it anyway.
class LateCopies {
 public:
  explicit LateCopies(const ir::Graph& g);
  /// Whether `cand` (nodes of one candidate group, in graph order) may fuse.
  bool allows(const std::vector<const ir::Node*>& cand) const;

 private:
  const ir::Graph& g_;
  std::vector<const ir::Node*> opaque_;  // opaque nodes, in order
};

/// Rules 9 to 11 of remat.cpp after a budget's cuts (remat_keep.cpp): copies
/// two cuts made of one value merge (rule 9: the fused peak within
/// max(budget, its own), `node_peak` within `start_peak`); copies whose forward
/// value a cut keeps anyway read it (rule 11: neither peak grows); recomputed
/// matmuls read their forward values while the fused peak stays within the
/// budget, or, unmet, within the floor reached (rule 10). Log lines for what
/// changed; true if g changed.
bool after_budget_cuts(ir::Graph& g, std::vector<std::string>& log,
                       const std::function<int64_t(const ir::Graph&)>& node_peak,
                       const std::function<int64_t(const ir::Graph&)>& fused_peak,
                       int64_t start_peak, int64_t budget);

/// Rule 3's max flow (Dinic) and min cut.
class FlowNet {
 public:
  int add_node() {
    adj_.emplace_back();
    return static_cast<int>(adj_.size()) - 1;
  }
  void add_edge(int u, int v, int64_t cap) {
    adj_[static_cast<size_t>(u)].push_back(static_cast<int>(edges_.size()));
    edges_.push_back({v, cap});
    adj_[static_cast<size_t>(v)].push_back(static_cast<int>(edges_.size()));
    edges_.push_back({u, 0});
  }
  int64_t max_flow(int s, int t) {
    int64_t flow = 0;
    while (levels(s, t)) {
      iter_.assign(adj_.size(), 0);
      while (int64_t f = push(s, t, kInf)) flow += f;
    }
    return flow;
  }
  // Nodes reachable from s in the residual graph (the source side of a min cut).
  std::vector<char> source_side(int s) const {
    std::vector<char> seen(adj_.size(), 0);
    std::vector<int> stack{s};
    seen[static_cast<size_t>(s)] = 1;
    while (!stack.empty()) {
      const int u = stack.back();
      stack.pop_back();
      for (int e : adj_[static_cast<size_t>(u)]) {
        const Edge& ed = edges_[static_cast<size_t>(e)];
        if (ed.cap > 0 && !seen[static_cast<size_t>(ed.to)]) {
          seen[static_cast<size_t>(ed.to)] = 1;
          stack.push_back(ed.to);
        }
      }
    }
    return seen;
  }

 private:
  struct Edge {
    int to;
    int64_t cap;
  };
  bool levels(int s, int t) {
    level_.assign(adj_.size(), -1);
    std::vector<int> queue{s};
    level_[static_cast<size_t>(s)] = 0;
    for (size_t q = 0; q < queue.size(); ++q) {
      const int u = queue[q];
      for (int e : adj_[static_cast<size_t>(u)]) {
        const Edge& ed = edges_[static_cast<size_t>(e)];
        if (ed.cap > 0 && level_[static_cast<size_t>(ed.to)] < 0) {
          level_[static_cast<size_t>(ed.to)] = level_[static_cast<size_t>(u)] + 1;
          queue.push_back(ed.to);
        }
      }
    }
    return level_[static_cast<size_t>(t)] >= 0;
  }
  // One augmenting path in the level graph, iteratively (cones can be deep).
  int64_t push(int s, int t, int64_t limit) {
    std::vector<int> path;  // edges taken
    int u = s;
    while (true) {
      if (u == t) {
        int64_t f = limit;
        for (int e : path) f = std::min(f, edges_[static_cast<size_t>(e)].cap);
        for (int e : path) {
          edges_[static_cast<size_t>(e)].cap -= f;
          edges_[static_cast<size_t>(e ^ 1)].cap += f;
        }
        return f;
      }
      auto& it = iter_[static_cast<size_t>(u)];
      const auto& out = adj_[static_cast<size_t>(u)];
      bool advanced = false;
      for (; it < out.size(); ++it) {
        const int e = out[it];
        const Edge& ed = edges_[static_cast<size_t>(e)];
        if (ed.cap > 0 &&
            level_[static_cast<size_t>(ed.to)] == level_[static_cast<size_t>(u)] + 1) {
          path.push_back(e);
          u = ed.to;
          advanced = true;
          break;
        }
      }
      if (advanced) continue;
      // Dead end: never visit u again in this phase; step back.
      level_[static_cast<size_t>(u)] = -1;
      if (path.empty()) return 0;
      const int e = path.back();
      path.pop_back();
      u = edges_[static_cast<size_t>(e ^ 1)].to;
      ++iter_[static_cast<size_t>(u)];
    }
  }
  std::vector<Edge> edges_;
  std::vector<std::vector<int>> adj_;
  std::vector<int> level_;
  std::vector<size_t> iter_;
};

/// Rule 3's network over values, as both remat passes build it: each value
/// reached from `needs` through its producer's non-free inputs is split into
/// in -> out with capacity 2 * bytes (+1 unless `needed`: ties keep what is
/// read); needs -> sink and data edges are infinite. `recompute(v)` gives
/// src -> in(v): kPinned (infinite, inputs not followed), 0 (no edge) or a capacity.
struct ValueCut {
  static constexpr int64_t kPinned = -1;
  std::vector<ir::Value*> values;  // every value in the network, first seen first
  std::vector<int> in_node;        // by value id: its in node, -1 if absent
  std::vector<char> side;          // by network node: on the source side of the min cut
  /// v's in node is on the source side and its out node on the sink side: v is saved.
  bool saved(const ir::Value* v) const;
  /// v's in node is on the sink side: its producer runs again.
  bool recomputed(const ir::Value* v) const;
};
ValueCut min_value_cut(const Model& m, const std::vector<ir::Value*>& needs,
                       const std::vector<char>& needed,
                       const std::function<bool(const ir::Value*)>& is_free,
                       const std::function<int64_t(ir::Value*)>& recompute);

}  // namespace kiln::passes::detail
