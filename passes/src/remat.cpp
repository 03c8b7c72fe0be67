// Rematerialization: trade recomputation for memory in a straight-line graph.
//
// Rules, and why:
// 0. Schedule (remat_schedule.cpp): with state writes (a training step), each
//    parameter's update moves to just after its gradient is complete, so a
//    gradient that is no result dies at its update instead of living until
//    the whole backward is done; kept if the predicted peak drops (under a
//    budget: does not grow). The executor runs such an update when it is
//    ready instead of batching it with the others (executor_schedule.cpp).
//    After a budget's cuts it runs again, first with its rule 2b (each
//    gradient's own part, dW's matmul and the operand recomputed for it, right
//    after its inputs instead of after the backward's dX: the transformer's
//    8 MiB GELU copy and dX were alive together), kept if the fused peak drops.
// 1. Memory model (predicted_peak_bytes): the graph runs node by node in its
//    order; a node's output buffer lives from the node to its last reader
//    (graph outputs to the end). Views (kView ops) share their source's buffer
//    and extend its life. Graph inputs (arguments, parameters, optimizer state)
//    and constants exist anyway and are not counted (a view of a constant is),
//    nor are state writes the executor does in place (remat_model.cpp). This is the
//    executor's accounting without fusion (fused temporaries are never stored), in-place reuse or
//    placement, which all lower the measured peak.
// 2. Where to cut: at the predicted peak (the earliest node where it occurs),
//    then just after it. The values made before the cut and read after it are
//    the "needed" ones (in a training step: what the backward reads of the
//    forward). Each cut chooses which values to keep across it ("saved") and
//    which to compute again after it.
// 3. How (after AOTAutograd's min-cut partitioner):
//    a flow network over the needed values' ancestors, each value split into
//    in -> out with capacity = the bytes kept alive by saving it; data edges
//    and needed -> sink are infinite; graph inputs, constants, views of
//    inputs and graph outputs are free (alive anyway) and stay out of the
//    network: available on both sides of the cut. A value whose op may not
//    be recomputed (rule 4) is tied to the source at its input side, so the
//    cut can only save it.
//    The minimum cut is the cheapest set of values to save; every node on the
//    sink side is recomputed. Ties prefer saving a needed value itself (no
//    recomputation for nothing).
// 4. What a recomputation costs (recompute_cost): each recomputable value's
//    in node also hangs off the source with capacity rate * cost, so the min
//    cut weighs the bytes it keeps against the work it adds (a node on the
//    sink side is recomputed and pays its edge). Costs, per output element at
//    rate 1: cheap elementwise 1 (it fuses into the backward's kernel), kCostly
//    math 16, reductions and copies 1 per input element, matmul/conv K/4 (K
//    multiply-adds at BLAS's ~8x scalar rate); views and fills 0. The default
//    policy is rate 1: cheap elementwise chains are recomputed, costly math
//    and matmuls saved. Under a memory budget the rate drops by 4x per tier
//    while the budget is not met (1/4; 1/16: costly math): the cheapest
//    recomputation per byte saved comes first. Opaque ops (matmul, conv)
//    join from rate 1/16 on, all but every (d+1)-th of them (d = 1, 1, 2, 3,
//    in the order they run before the cut), so a recomputed path crosses at
//    most d of them: the every-other-layer and sqrt(n)-style segment schemes.
//    4c. Which of each d+1 opaque ops stays saved (the phase) is chosen per
//    cut by cost: each phase's cut is tried, and another than the last of
//    each run wins if its recomputation costs less than half as much per
//    byte of node-order peak it removes (a transformer block runs QKV,
//    scores, AV, out, ff1, ff2: saving the 2nd of each pair saved the scores,
//    K = 64, and recomputed QKV, K = 256; bench/remat_bench at 50%: now the
//    scores of all 4 blocks and QKV of 3, 3.90 G multiply-adds, 4.16 before).
//    Equal matmuls keep the last (phases mixed across cuts recompute more).
//    4b. The default policy then tries rate 1/16 (costly math, no matmuls)
//    while the recomputation it adds, summed, stays within kDefaultOverhead
//    (3%) of the graph's own work (recompute_cost summed over its nodes),
//    narrowing a cut to the latest window that does (as rule 8): GELU's erf
//    where the step's matmuls dwarf it (bench/remat_bench: all 4 transformer
//    blocks, 145 -> 106 MiB; 2 of 16 MLP layers).
//    Left free, the cut would recompute the whole forward from the input (its
//    cost is no match for a value's bytes at a low rate) and the recomputed
//    activations would pile up again in the backward. Never recomputed:
//    random ops (the IR contract: never duplicated), collectives,
//    multi-output ops.
// 5. Placement: a recomputed node goes just before its earliest reader after
//    the cut (or before the earliest recomputed node that reads it), and those
//    readers read the copy; the original dies at its last use before the cut.
// 6. Marking: copies carry `recompute=<negative id>` (one id per cut;
//    kiln::checkpoint's regions use positive ids), so CSE never merges them
//    with the originals and fusion never pulls them back into a group before
//    them (fuse.cpp rule 11).
// 7. A cut is kept only if the predicted peak of the whole graph drops (the
//    copies' own lifetimes count), by 1% at least under the default policy;
//    otherwise it is undone and the tier ends.
//    Cuts repeat at the new peak (at most kMaxCuts per tier), so a run
//    converges: running the pass again on its result changes nothing. At the
//    end of a run, the peak of the executor's fused schedule
//    (predicted_peak_bytes with plan_fusion's groups: groups run as units,
//    their temporaries are never stored) must not have grown, else the whole
//    run is undone (checked once per run: plan_fusion is the costly part). So
//    the pass never makes either peak worse.
// 8. Budget: the pass stops as soon as the predicted peak of the executor's
//    fused schedule fits (the node-order model picks where and what to cut;
//    it does not see a kernel writing two outputs, the temporaries fusion
//    never stores nor the outputs written over dying inputs, so it may over-
//    or under-count: 2.25 against 1.8 MiB for bench/remat_bench's MLP at 25%). A cut that gets
//    below the budget is narrowed first: values made before a window start are saved, and the
//    latest start that still fits wins (a binary search), so a budget recomputes what it needs, not
//    all a rate allows (16 identical layers: the last few, not all 16). If no tier gets there, the
//    report says budget_met = false with the smallest peak reached and what that peak holds
//    (RematReport::peak_composition, "floor:" in the log); the compile driver warns with both
//    numbers.
// 9. Under a budget, cuts made one after another at different tiers may each
//    recompute the same matmul from the same saved values (a later cut at a
//    later peak recomputes a chain whose head an earlier cut already
//    recomputes, for readers further on). Such duplicate copies (same op,
//    attributes but the id, inputs) are merged into the earlier one, which
//    then lives to the later readers, one unit (an opaque duplicate and the
//    duplicates it reads) at a time, kept only if the budget still holds (or,
//    unmet, the fused peak does not grow) and the node-order peak stays under
//    the graph's own. Elementwise duplicates alone stay: they fuse into their
//    readers' kernels, one computation would be stored longer instead.
//    bench/remat_bench's MLP at 50%: 14 recomputed matmuls -> 12 (the third
//    would break the budget).
// 10. Slack under a met budget (tiers cut whole runs) keeps recomputed matmuls,
//    costliest first, while the fused peak holds (not those a checkpoint recomputes);
//    under an unmet one, while the smallest peak reached does not grow.
// 11. Under a budget, a copy whose forward value is kept anyway (a result, a
//    value another cut saved, or one read after the copy) reads that value
//    where neither peak grows: one cut saved a transformer block's
//    pre-activation z and another recomputed z from the matmul before the bias,
//    so both 8 MiB values lived through the backward. Rules 11 and 10 alternate
//    while rule 10 keeps a matmul. Rules 9 to 11: remat_keep.cpp.
#include "kiln/passes/remat.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <span>
#include <string_view>
#include <unordered_map>

#include "kiln/env.h"
#include "kiln/error.h"
#include "kiln/passes/dce.h"
#include "kiln/passes/pass_manager.h"
#include "remat_internal.h"

namespace kiln::passes {
namespace detail {}
namespace {

using ir::Node;
using ir::Value;

constexpr int kMaxCuts = 32;  // per tier
// Rule 4b: the default policy's recomputation of costly math, at most this
// share of the graph's own work (recompute_cost summed over its nodes).
constexpr double kDefaultOverhead = 0.03;

thread_local RematScope* current_scope = nullptr;

}  // namespace

bool detail::pricing_for_gpu() {
  return current_scope && current_scope->options().gpu;
}

namespace {

// ---- rule 1: the memory model (remat_model.cpp) ----

using detail::Model;

// ---- rule 3: the min cut over values: detail::min_value_cut (remat_model.cpp) ----

using detail::kInf;

// ---- rule 4: what a recomputation costs ----

using detail::Tier;

using detail::recompute_cost;

// ---- rules 2 and 3: one cut ----

struct Cut {
  std::vector<Node*> recompute;  // in graph order
  std::vector<Value*> saved;
  int64_t saved_bytes = 0;
};

// `lo`: values made before position lo are saved, never recomputed (rule 8's
// window: a budget's cut recomputes no more than it needs).
Cut find_cut(const ir::Graph& g, const Model& m, int gap, const Tier& t, int lo = 0) {
  Cut cut;
  const size_t ids = m.root.size();
  gap = std::min(gap, static_cast<int>(m.nodes.size()));
  auto pos = [&](const Node* n) { return static_cast<int>(g.position(n)); };
  // Free: not counted, or alive to the end anyway.
  auto is_free = [&](const Value* v) {
    const auto id = static_cast<size_t>(v->id());
    if (m.root[id] < 0 || m.output[id]) return true;
    return m.output[static_cast<size_t>(m.root[id])] != 0;
  };
  std::vector<char> needed(ids, 0);
  std::vector<Value*> needs;
  std::vector<int> opaque_rank(ids, 0);
  int opaque = 0;
  for (int p = 0; p < gap; ++p) {
    const Node* n = m.nodes[static_cast<size_t>(p)];
    if (!n->is_constant() && n->info().has(kOpaque))
      for (const Value* v : n->outputs) opaque_rank[static_cast<size_t>(v->id())] = opaque++;
    for (Value* v : n->outputs) {
      if (is_free(v)) continue;
      for (const Node* u : v->users)
        if (pos(u) >= gap) {
          needed[static_cast<size_t>(v->id())] = 1;
          needs.push_back(v);
          break;
        }
    }
  }
  if (needs.empty()) return cut;
  // Rule 4: recomputing v's producer (v on the sink side) cuts src -> in at its cost.
  const auto c = detail::min_value_cut(m, needs, needed, is_free, [&](Value* v) -> int64_t {
    const Node* n = v->producer;
    const double cost = recompute_cost(*n);
    const int rank = opaque_rank[static_cast<size_t>(v->id())];
    const bool opaque_kept = n->info().has(kOpaque) && t.pins(rank);
    if (cost < 0 || opaque_kept || pos(n) < lo) return detail::ValueCut::kPinned;
    const double scaled = std::ldexp(2 * cost, -t.shift);
    return scaled > 0 ? std::min<int64_t>(kInf, std::llround(scaled)) : 0;
  });
  std::vector<char> saved(ids, 0), redo(ids, 0);
  for (Value* v : c.values) {
    if (c.saved(v)) saved[static_cast<size_t>(v->id())] = 1;
    if (c.recomputed(v)) redo[static_cast<size_t>(v->id())] = 1;
  }
  for (int p = 0; p < gap; ++p) {
    Node* n = m.nodes[static_cast<size_t>(p)];
    for (Value* v : n->outputs) {
      const auto id = static_cast<size_t>(v->id());
      if (saved[id]) {
        cut.saved.push_back(v);
        cut.saved_bytes += m.bytes[static_cast<size_t>(m.root[id])];
      } else if (redo[id]) {
        cut.recompute.push_back(n);
      }
    }
  }
  // Every recomputed node's inputs must be available after the cut (rule 3
  // guarantees it; a violation would be a bug here, so refuse the cut).
  for (const Node* n : cut.recompute)
    for (const Value* u : n->inputs) {
      const auto id = static_cast<size_t>(u->id());
      if (!is_free(u) && !saved[id] && !redo[id]) return Cut{};
    }
  return cut;
}

// ---- rule 5: the rewrite, and its undo ----

struct Applied {
  std::vector<Node*> copies;
  std::vector<std::tuple<Node*, size_t, Value*>> rewired;  // (reader, slot, original)
};

Applied apply_cut(ir::Graph& g, const Model& m, const Cut& cut, int gap, int64_t id) {
  Applied a;
  std::unordered_map<const Node*, size_t> index;
  for (size_t k = 0; k < cut.recompute.size(); ++k) index[cut.recompute[k]] = k;
  auto pos = [&](const Node* n) { return static_cast<int>(g.position(n)); };
  // Where each copy goes: before its earliest late reader (or reading copy).
  const int none = std::numeric_limits<int>::max();
  std::vector<int> target(cut.recompute.size(), none);
  for (size_t k = cut.recompute.size(); k-- > 0;) {
    for (const Node* u : cut.recompute[k]->output()->users) {
      auto it = index.find(u);
      if (it != index.end())
        target[k] = std::min(target[k], target[it->second]);
      else if (pos(u) >= gap)
        target[k] = std::min(target[k], pos(u));
    }
  }
  std::vector<Value*> copy_of(cut.recompute.size(), nullptr);
  for (size_t k = 0; k < cut.recompute.size(); ++k) {
    if (target[k] == none) continue;  // read by nothing after the cut
    const Node* n = cut.recompute[k];
    std::vector<Value*> ins;
    for (Value* u : n->inputs) {
      auto it = u->producer ? index.find(u->producer) : index.end();
      ins.push_back(it != index.end() && copy_of[it->second] ? copy_of[it->second] : u);
    }
    Attrs at = n->attrs;
    at.set("recompute", AttrValue(id));
    std::vector<ir::OutSpec> outs;
    for (const Value* v : n->outputs) outs.push_back({v->dtype, v->shape});
    Node* c = g.add_op(n->op, std::move(ins), std::move(at), std::move(outs),
                       m.nodes[static_cast<size_t>(target[k])]);
    c->sym_attrs = n->sym_attrs;
    c->output()->wrapped_number = n->output()->wrapped_number;
    copy_of[k] = c->output();
    a.copies.push_back(c);
  }
  // Late readers read the copies. Positions are stale after the inserts: use
  // the model's (the originals' order is unchanged).
  std::unordered_map<const Node*, int> old_pos;
  for (size_t p = 0; p < m.nodes.size(); ++p) old_pos[m.nodes[p]] = static_cast<int>(p);
  for (size_t k = 0; k < cut.recompute.size(); ++k) {
    if (!copy_of[k]) continue;
    Value* v = cut.recompute[k]->output();
    const std::vector<Node*> readers = v->users;
    for (Node* u : readers) {
      auto it = old_pos.find(u);
      if (it == old_pos.end() || it->second < gap) continue;  // a copy, or an early reader
      for (size_t i = 0; i < u->inputs.size(); ++i)
        if (u->inputs[i] == v) {
          g.set_input(u, i, copy_of[k]);
          a.rewired.emplace_back(u, i, v);
        }
    }
  }
  return a;
}

void undo(ir::Graph& g, const Applied& a) {
  for (auto it = a.rewired.rbegin(); it != a.rewired.rend(); ++it)
    g.set_input(std::get<0>(*it), std::get<1>(*it), std::get<2>(*it));
  for (auto it = a.copies.rbegin(); it != a.copies.rend(); ++it) g.erase(*it);
}

// Rule 8: the cut of the latest window start (values made before it are
// saved) that still `fits` (given the applied trial cut); `full` (window 0)
// if none does. Binary search: ~log2(gap) trial cuts.
template <typename Fits>
Cut just_enough(ir::Graph& g, const Model& m, int gap, const Tier& t, int64_t id, Cut full,
                Fits fits) {
  int lo = 0, hi = gap;  // the cut from lo fits; from hi, not known
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    Cut c = find_cut(g, m, gap, t, mid);
    bool ok = false;
    if (!c.recompute.empty()) {
      Applied b = apply_cut(g, m, c, gap, id);
      ok = !b.copies.empty() && fits(b);
      undo(g, b);
    }
    (ok ? lo : hi) = mid;
  }
  return lo > 0 ? find_cut(g, m, gap, t, lo) : full;
}

double cost_of(const std::vector<Node*>& nodes) {
  double c = 0;
  for (const Node* n : nodes) c += std::max(0.0, recompute_cost(*n));
  return c;
}

// Rule 4b's measure of a graph's own work: what computing it once costs.
double graph_cost(const ir::Graph& g) {
  double c = 0;
  for (const Node* n : g.nodes())
    if (!n->is_constant()) c += std::max(0.0, recompute_cost(*n));
  return c;
}

// Rule 4b: the applied cut `a` costs at most `allowance`, else it is narrowed
// to the latest window that does and still gets the node-order peak to `need`;
// false (a undone or empty) if none does.
bool within(ir::Graph& g, std::span<const StateWrite> writes, const Model& m, int gap,
            const Tier& t, int64_t id, Cut& cut, Applied& a, double allowance, int64_t need) {
  if (cost_of(a.copies) <= allowance) return true;
  undo(g, a);
  auto fits = [&](const Applied& b) {
    return cost_of(b.copies) <= allowance && detail::simulate(g, writes).peak <= need;
  };
  cut = just_enough(g, m, gap, t, id, std::move(cut), fits);
  a = apply_cut(g, m, cut, gap, id);
  return !a.copies.empty() && fits(a);
}

// Where a cut at `gap` is, for the log.
std::string where(const Model& m, int gap) {
  const Node* at = m.nodes[std::min<size_t>(static_cast<size_t>(gap), m.nodes.size() - 1)];
  return str("before node ", gap, " (", op_name(at->op), ")");
}

// Rule 4c: the phase of a tier saving every (depth+1)-th opaque op whose cut
// at `gap` recomputes least per byte of node-order peak it removes (to `need`
// at least); `t` itself (the last of each run saved) unless another phase
// costs less than half as much per byte (equal matmuls: phases mixed across
// cuts make recomputed chains cross more of them).
Tier cheapest_phase(ir::Graph& g, std::span<const StateWrite> writes, const Model& m, int gap,
                    const Tier& t, int64_t id, int64_t need) {
  Tier best = t;
  const double inf = std::numeric_limits<double>::infinity();
  double best_rate = inf, own_rate = inf;
  for (int p = t.depth; t.depth > 0 && p >= 0; --p) {
    Tier c = t;
    c.phase = p;
    const Cut cut = find_cut(g, m, gap, c);
    if (cut.recompute.empty()) continue;
    const Applied a = apply_cut(g, m, cut, gap, id);
    const int64_t peak = a.copies.empty() ? kInf : detail::simulate(g, writes).peak;
    const double cost = cost_of(a.copies);
    undo(g, a);
    if (peak > need) continue;
    const double rate = cost / static_cast<double>(m.peak - peak);
    if (p == t.depth) own_rate = rate;
    if (p != t.depth && rate < best_rate) {
      best_rate = rate;
      best = c;
    }
  }
  return 2 * best_rate < own_rate ? best : t;
}

std::string mib(int64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(b) / (1024.0 * 1024.0));
  return buf;
}

// The most negative recompute id in g minus one (ids of earlier runs stay unique).
int64_t next_id(const ir::Graph& g) {
  int64_t id = -1;
  for (const Node* n : g.nodes())
    if (n->attrs.has("recompute")) {
      const int64_t r = n->attrs.i("recompute");
      if (r <= id) id = r - 1;
    }
  return id;
}

// KILN_DEBUG=1: this run's log lines, and what the fused schedule holds at its peak.
void debug_log(const ir::Graph& g, const RematReport& rep, size_t first_log, bool fused,
               std::span<const StateWrite> writes) {
  for (size_t k = first_log; k < rep.log.size(); ++k)
    std::fprintf(stderr, "[kiln] %s\n", rep.log[k].c_str());
  if (!fused) return;
  std::string comp;
  detail::fused_peak(g, plan_fusion(g), writes, &comp);
  std::fprintf(stderr, "[kiln] %s\n", comp.c_str());
}

// After a budget's cuts: rule 0 again with its rule 2b (each gradient's own
// part right after its inputs, not after the backward's dX), kept if the fused
// peak drops; rules 9 to 11 (remat_keep.cpp); rule 0 once more, as before (a
// recomputed matmul reads its weight late, after an update moved before it,
// which then could not write in place), kept if the fused peak stays within
// max(budget, its own).
template <typename FusedPeak>
void after_cuts(ir::Graph& g, std::span<const StateWrite> writes, std::vector<std::string>& log,
                const FusedPeak& fused_peak, int64_t start_peak, int64_t budget) {
  auto node_peak = [&](const ir::Graph& x) { return detail::simulate(x, writes).peak; };
  // Rule 0 on a clone of g, kept if `keep(fused peak before, after)`.
  auto reorder = [&](bool early, const char* what, auto keep) {
    std::unique_ptr<ir::Graph> c = g.clone();
    const int64_t peak = node_peak(g), was = fused_peak(g);
    std::function<bool(std::vector<Node*>)> no_higher = [&](std::vector<Node*> order) {
      return detail::simulate(*c, writes, std::move(order)).peak <= peak;
    };
    if (!detail::schedule_updates(*c, writes, early ? nullptr : no_higher, early)) return false;
    const int64_t now = fused_peak(*c);
    if (!keep(was, now)) return false;
    log.push_back(str("remat: ", what, "; fused peak ", mib(was), " -> ", mib(now)));
    g = std::move(*c);
    return true;
  };
  const bool early = reorder(true, "gradients moved to their inputs",
                             [](int64_t was, int64_t now) { return now < was; });
  detail::after_budget_cuts(g, log, node_peak, fused_peak, start_peak, budget);
  reorder(early, "updates moved after the recomputations reading their inputs",
          [&](int64_t was, int64_t now) { return now <= std::max(was, budget); });
}

}  // namespace

RematScope::RematScope(RematOptions opts) : opts_(opts), outer_(current_scope) {
  report_.budget = opts.memory_budget;
  current_scope = this;
}

RematScope::~RematScope() {
  current_scope = outer_;
}

bool remat(ir::Graph& g) {
  RematReport local;
  RematReport& rep = current_scope ? current_scope->report() : local;
  const int64_t budget = current_scope ? current_scope->options().memory_budget : 0;
  static const std::vector<StateWrite> kNoWrites;
  const std::vector<StateWrite>& writes =
      current_scope ? current_scope->options().writes : kNoWrites;
  auto simulate = [&](const ir::Graph& x) { return detail::simulate(x, writes); };
  // Rule 8: a budget is met by the executor's fused schedule (the peak it
  // predicts and measures), which the node-order model steering the cuts does
  // not see: a kernel writing two outputs, temporaries that are never stored.
  const bool by_fusion =
      (!current_scope || current_scope->options().fused) && !pass_disabled("fuse");
  auto fused_peak = [&](const ir::Graph& x) {
    return by_fusion ? predicted_peak_bytes(x, plan_fusion(x), writes) : simulate(x).peak;
  };
  Model m = simulate(g);
  int64_t fused = budget > 0 ? fused_peak(g) : 0;
  const int64_t start_peak = m.peak;
  if (rep.peak_before == 0) rep.peak_before = budget > 0 ? fused : m.peak;
  // Rule 7's fused check runs once, over the schedule and all cuts: plan_fusion
  // is the expensive part (a tenth of a second on a 29k-node step).
  std::unique_ptr<ir::Graph> original;
  bool changed = false;
  const size_t first_log = rep.log.size();
  // Rule 0: updates right after their gradients (remat_schedule.cpp); by
  // default only if that lowers the peak (the executor batches the updates it
  // leaves at the end into one launch), under a budget if it does not raise
  // it (the peak the cuts leave may be the gradients').
  // The proposed order is judged before the graph changes (no copy of a
  // graph whose updates stay).
  auto accept = [&](bool at_most) {
    return [&, at_most](std::vector<Node*> order) {
      const int64_t peak = detail::simulate(g, writes, std::move(order)).peak;
      if (at_most ? peak > m.peak : peak >= m.peak) return false;
      if (!original) original = g.clone();
      return true;
    };
  };
  if (detail::schedule_updates(g, writes, accept(budget > 0))) {
    const int64_t was = m.peak;
    m = simulate(g);
    rep.log.push_back(str("remat: updates moved to their gradients; predicted peak ", mib(was),
                          " -> ", mib(m.peak)));
    changed = true;
  }
  // Rule 4: the default rate recomputes cheap elementwise chains (1 per
  // element against a saved f32's 4 bytes), not costly math (16) nor matmuls;
  // a budget lowers the rate until the peak fits: costly math at 1/16,
  // matmuls with k = 256 at 1/64, longer recompute chains at lower rates.
  // Rule 4b: the default policy then recomputes costly math too (GELU's erf)
  // while the recomputation it adds stays within kDefaultOverhead of the
  // graph's own work (the sum of recompute_cost over its nodes).
  static const Tier kDefault[] = {{0, 0, "rate 1"}, {4, 0, "rate 1/16, bounded"}};
  double allowance = budget > 0 ? 0 : kDefaultOverhead * graph_cost(g);
  const std::span<const Tier> tiers =
      budget > 0 ? std::span<const Tier>(detail::kBudgetTiers) : std::span<const Tier>(kDefault);
  int64_t id = next_id(g);
  const int splits_before = rep.splits, recomputed_before = rep.recomputed;
  for (const Tier& tier : m.peak > 0 ? tiers : std::span<const Tier>()) {  // else nothing is stored
    for (int k = 0; k < kMaxCuts && !(budget > 0 && fused <= budget); ++k) {
      bool kept = false;
      // Rule 2: the cut before the peak's node, else just after it.
      for (int gap : {m.at, m.at + 1}) {
        const int64_t before = m.peak;
        // Rule 7, node order (the default policy wants 1% at least: a smaller
        // gain is not worth the recomputation, nor the fused check's cost).
        const int64_t need = budget > 0 ? before - 1 : before - std::max<int64_t>(1, before / 100);
        const Tier t = cheapest_phase(g, writes, m, gap, tier, id, need);
        Cut cut = find_cut(g, m, gap, t);
        if (cut.recompute.empty()) continue;
        Applied a = apply_cut(g, m, cut, gap, id);
        if (a.copies.empty() || simulate(g).peak > need) {
          undo(g, a);
          continue;
        }
        if (budget > 0 && fused_peak(g) <= budget) {
          undo(g, a);
          cut = just_enough(g, m, gap, t, id, std::move(cut),
                            [&](const Applied&) { return fused_peak(g) <= budget; });
          a = apply_cut(g, m, cut, gap, id);
        }
        if (budget <= 0 && t.shift > 0 &&
            !within(g, writes, m, gap, t, id, cut, a, allowance, need)) {
          undo(g, a);
          continue;
        }
        if (!original) {  // the graph as it was, for the fused check (taken once)
          undo(g, a);
          original = g.clone();
          a = apply_cut(g, m, cut, gap, id);
        }
        const std::string at = where(m, gap);
        dce(g);
        m = simulate(g);
        if (budget > 0) fused = fused_peak(g);
        rep.log.push_back(
            str("remat ", id, " [", t.name, t.phase >= 0 ? str(", phase ", t.phase) : "", "] ", at,
                ": save ", cut.saved.size(), " values (", mib(cut.saved_bytes), "), recompute ",
                a.copies.size(), " nodes; predicted peak ", mib(before), " -> ", mib(m.peak),
                budget > 0 ? str(" (fused schedule ", mib(fused), ")") : ""));
        if (budget <= 0 && t.shift > 0) allowance -= cost_of(a.copies);
        ++rep.splits;
        rep.recomputed += static_cast<int>(a.copies.size());
        --id;
        changed = kept = true;
        break;
      }
      if (!kept) break;
    }
  }
  if (budget > 0 && rep.splits > splits_before) {  // the cuts ran
    after_cuts(g, writes, rep.log, fused_peak, start_peak, budget);
    m = simulate(g);
  }
  if (changed) {
    const int64_t was = predicted_peak_bytes(*original, plan_fusion(*original), writes);
    const int64_t now = predicted_peak_bytes(g, plan_fusion(g), writes);
    if (now > was) {  // rule 7, fused schedule: keep the graph as it was
      rep.log.resize(first_log);
      rep.log.push_back(str("remat undone: the fused schedule's predicted peak would grow from ",
                            was, " to ", now, " bytes"));
      rep.splits = splits_before;
      rep.recomputed = recomputed_before;
      g = std::move(*original);
      m = simulate(g);
      changed = false;
    }
  }
  if (budget > 0) fused = fused_peak(g);
  rep.peak_after = budget > 0 ? fused : m.peak;
  rep.budget_met = budget <= 0 || fused <= budget;
  rep.peak_composition = detail::peak_composition(g, m);
  if (!rep.budget_met) rep.log.push_back("floor: " + rep.peak_composition);
  if (env::get_int("KILN_DEBUG", 0) >= 1)
    debug_log(g, rep, first_log, budget > 0 && by_fusion, writes);
  return changed;
}

std::string remat_summary(const ir::Graph& g) {
  std::unordered_map<const Value*, int> num;
  int next = 0;
  for (const Value* v : g.inputs()) num[v] = next++;
  const auto nodes = g.nodes();
  for (const Node* n : nodes)
    for (const Value* v : n->outputs) num[v] = next++;
  // Groups by recompute id, in order of first appearance.
  std::vector<int64_t> order;
  std::unordered_map<int64_t, std::vector<const Node*>> groups;
  for (const Node* n : nodes) {
    if (!n->attrs.has("recompute")) continue;
    const int64_t r = n->attrs.i("recompute");
    if (!groups.count(r)) order.push_back(r);
    groups[r].push_back(n);
  }
  auto list = [&](const std::vector<const Value*>& vs) {
    std::string s;
    const size_t shown = std::min<size_t>(vs.size(), 12);
    for (size_t k = 0; k < shown; ++k) s += str(" %", num.at(vs[k]));
    if (vs.size() > shown) s += str(" (+", vs.size() - shown, " more)");
    return s;
  };
  std::string out;
  for (int64_t r : order) {
    const auto& ns = groups[r];
    std::vector<const Value*> made, saved;
    std::vector<std::string> kinds;  // distinct ops, first few
    for (const Node* n : ns) {
      made.push_back(n->output());
      const std::string op = op_name(n->op);
      if (kinds.size() < 6 && std::find(kinds.begin(), kinds.end(), op) == kinds.end())
        kinds.push_back(op);
      for (const Value* u : n->inputs) {
        const Node* p = u->producer;
        if (!p || p->is_constant() || std::find(ns.begin(), ns.end(), p) != ns.end()) continue;
        if (std::find(saved.begin(), saved.end(), u) == saved.end()) saved.push_back(u);
      }
    }
    std::string ops;
    for (const std::string& k : kinds) ops += str(ops.empty() ? "" : ", ", k);
    out += str(r < 0 ? "remat " : "checkpoint region ", r, ": recompute ", ns.size(), " nodes (",
               ops, ") ->", list(made), "; from saved", saved.empty() ? " (inputs only)" : "",
               list(saved), "\n");
  }
  return out;
}

}  // namespace kiln::passes
