// Rematerialization: trade recomputation for memory in a straight-line graph.
//
// Rules, and why:
// 1. Memory model (predicted_peak_bytes): the graph runs node by node in its
//    order; a node's output buffer lives from the node to its last reader
//    (graph outputs to the end). Views (kView ops) share their source's buffer
//    and extend its life. Graph inputs (arguments, parameters, optimizer state)
//    and constants exist anyway and are not counted (a view of a constant is). This is the
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
// 4. What may be recomputed, by tier. Default policy: cheap elementwise ops
//    (add, mul, compares, where, casts... not the kCostly ops of ops.def),
//    views and fills: the recomputation fuses into the backward's kernels, so
//    it costs little beyond bandwidth already paid. Under a memory budget,
//    tiers escalate while the budget is not met: + costly math; + reductions
//    and the other movement ops; then matmul/conv/pooling, all but every
//    (d+1)-th of them (d = 1, 2, 3, in the order they run before the cut), so
//    a recomputed path crosses at most d of them: the every-other-layer and
//    sqrt(n)-style segment schemes. Left free, the cut would recompute the
//    whole forward from the input (saving nothing: it costs no bytes) and the
//    recomputed activations would pile up again in the backward. Never:
//    random ops (the IR contract: never duplicated), collectives, multi-output
//    ops.
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
// 8. Budget: the pass stops as soon as the predicted peak fits. If no tier
//    gets there, the report says budget_met = false with the smallest peak
//    reached; the compile driver warns with both numbers.
#include "kiln/passes/remat.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <memory>
#include <set>
#include <span>
#include <unordered_map>

#include "kiln/env.h"
#include "kiln/error.h"
#include "kiln/passes/dce.h"

namespace kiln::passes {
namespace {

using ir::Node;
using ir::Value;

constexpr int64_t kNominalDim = 64;  // a symbolic dim's size in the model
constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;
constexpr int kMaxCuts = 32;  // per tier

thread_local RematScope* current_scope = nullptr;

// ---- rule 1: the memory model ----

int64_t bytes_of(const Value* v, std::span<const int64_t> syms) {
  int64_t n = 1;
  for (const ir::SymInt& d : v->shape) n *= d.is_static() ? d.b : d.eval(syms);
  return n * static_cast<int64_t>(dtype_size(v->dtype));
}

struct Model {
  std::vector<Node*> nodes;      // in order
  std::vector<int> root;         // by value id: the value owning its buffer, -1: not counted
  std::vector<int64_t> bytes;    // by value id
  std::vector<int> birth, last;  // by root id: position made, last position alive
  std::vector<char> output;      // by value id: a graph output
  int64_t peak = 0;
  int at = 0;  // earliest position of the peak
  int id_of(const Value* v) const { return v->id(); }
};

Model simulate(const ir::Graph& g) {
  Model m;
  m.nodes = g.nodes();
  int ids = 0;
  for (const Value* v : g.inputs()) ids = std::max(ids, v->id() + 1);
  for (const Node* n : m.nodes)
    for (const Value* v : n->outputs) ids = std::max(ids, v->id() + 1);
  const std::vector<int64_t> syms(static_cast<size_t>(g.num_syms), kNominalDim);
  const auto sz = static_cast<size_t>(ids);
  m.root.assign(sz, -1);
  m.bytes.assign(sz, 0);
  m.birth.assign(sz, -1);
  m.last.assign(sz, -1);
  m.output.assign(sz, 0);
  for (const Value* v : g.outputs()) m.output[static_cast<size_t>(v->id())] = 1;
  const int end = static_cast<int>(m.nodes.size()) - 1;
  for (int p = 0; p <= end; ++p) {
    const Node* n = m.nodes[static_cast<size_t>(p)];
    for (const Value* in : n->inputs) {
      const int r = m.root[static_cast<size_t>(in->id())];
      if (r >= 0) m.last[static_cast<size_t>(r)] = std::max(m.last[static_cast<size_t>(r)], p);
    }
    for (const Value* v : n->outputs) {
      const auto id = static_cast<size_t>(v->id());
      m.bytes[id] = bytes_of(v, syms);
      if (n->is_constant()) continue;
      if (n->info().has(kView) && !n->inputs.empty()) {
        const Value* src = n->inputs[0];
        int r = m.root[static_cast<size_t>(src->id())];
        if (r < 0 && src->producer && src->producer->is_constant()) {
          // A view of a constant holds that buffer while it lives (the
          // executor counts it from then on; a graph input's, never).
          r = src->id();
          if (m.birth[static_cast<size_t>(r)] < 0)
            m.birth[static_cast<size_t>(r)] = m.last[static_cast<size_t>(r)] = p;
        }
        m.root[id] = r;
        continue;
      }
      m.root[id] = static_cast<int>(id);
      m.birth[id] = p;
      m.last[id] = p;
    }
  }
  for (const Value* v : g.outputs()) {
    const int r = m.root[static_cast<size_t>(v->id())];
    if (r >= 0) m.last[static_cast<size_t>(r)] = end;
  }
  std::vector<int64_t> diff(m.nodes.size() + 1, 0);
  for (size_t r = 0; r < sz; ++r) {
    if (m.birth[r] < 0) continue;
    diff[static_cast<size_t>(m.birth[r])] += m.bytes[r];
    diff[static_cast<size_t>(m.last[r]) + 1] -= m.bytes[r];
  }
  int64_t live = 0;
  for (size_t p = 0; p < m.nodes.size(); ++p) {
    live += diff[p];
    if (live > m.peak) {
      m.peak = live;
      m.at = static_cast<int>(p);
    }
  }
  return m;
}

// ---- rule 3: max flow (Dinic) ----

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

// ---- rule 4: tiers ----

struct Tier {
  bool math = false;        // kCostly elementwise ops (ops.def)
  bool reductions = false;  // reductions and non-view movement ops
  int depth = 0;            // opaque ops (matmul, conv): all but every (depth+1)-th
  const char* name = "";
};

// True if n may be recomputed in tier t; `opaque_rank` is n's number among
// the opaque nodes before the cut (rule 4: every (depth+1)-th one is kept).
bool recomputable(const Node& n, const Tier& t, int opaque_rank) {
  if (n.is_constant() || n.outputs.size() != 1) return false;
  const OpInfo& info = n.info();
  if (info.has(kRandom) || info.has(kCollective)) return false;
  if (info.has(kOpaque)) return t.depth > 0 && opaque_rank % (t.depth + 1) != t.depth;
  // kCostly: recomputing GELU's erf in the backward made a 16-layer MLP step
  // 1.47x slower (bench/remat_bench), so the default policy keeps them saved.
  if (info.has(kElementwise) && info.has(kCostly)) return t.math;
  if (info.has(kElementwise) || info.has(kView) || n.is_op(OpId::full)) return true;
  return t.reductions && (info.has(kReduction) || info.has(kMovement) || info.has(kFactory));
}

// ---- rules 2 and 3: one cut ----

struct Cut {
  std::vector<Node*> recompute;  // in graph order
  std::vector<Value*> saved;
  int64_t saved_bytes = 0;
};

Cut find_cut(const ir::Graph& g, const Model& m, int gap, const Tier& t) {
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
  FlowNet net;
  const int src = net.add_node(), sink = net.add_node();
  std::vector<int> in_node(ids, -1);
  std::vector<Value*> work;
  // The out node of v, created (with its in node) on first sight.
  auto get = [&](Value* v) {
    int& in = in_node[static_cast<size_t>(v->id())];
    if (in < 0) {
      in = net.add_node();
      net.add_node();
      work.push_back(v);
    }
    return in + 1;
  };
  for (Value* v : needs) net.add_edge(get(v), sink, kInf);
  for (size_t w = 0; w < work.size(); ++w) {
    Value* v = work[w];
    const auto id = static_cast<size_t>(v->id());
    const int in = in_node[id], out = in + 1;  // never free (see below)
    const int64_t kept = m.bytes[static_cast<size_t>(m.root[id])];
    net.add_edge(in, out, 2 * kept + (needed[id] ? 0 : 1));
    Node* n = v->producer;
    if (!recomputable(*n, t, opaque_rank[id])) {
      net.add_edge(src, in, kInf);
      continue;
    }
    for (Value* u : n->inputs)  // free values are available on both sides
      if (!is_free(u)) net.add_edge(get(u), in, kInf);
  }
  net.max_flow(src, sink);
  const std::vector<char> side = net.source_side(src);
  std::vector<char> saved(ids, 0), redo(ids, 0);
  for (Value* v : work) {
    const auto in = static_cast<size_t>(in_node[static_cast<size_t>(v->id())]);
    if (side[in] && !side[in + 1]) saved[static_cast<size_t>(v->id())] = 1;
    if (!side[in]) redo[static_cast<size_t>(v->id())] = 1;
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

}  // namespace

int64_t predicted_peak_bytes(const ir::Graph& g) {
  return simulate(g).peak;
}

int64_t predicted_peak_bytes(const ir::Graph& g, const FusionPlan& plan) {
  const auto nodes = g.nodes();
  const size_t n = nodes.size(), ng = plan.groups.size();
  if (plan.group_of.size() != n) return simulate(g).peak;
  auto pos = [&](const Node* x) { return g.position(x); };
  auto unit = [&](size_t p) {
    const int gi = plan.group_of[p];
    return gi >= 0 ? static_cast<size_t>(gi) : ng + p;
  };
  // The executor's order: a unit runs when its producers have, earliest first position first.
  const size_t nu = ng + n;
  std::vector<size_t> first(nu, n);
  std::vector<std::vector<size_t>> succ(nu);
  std::vector<int> indeg(nu, 0);
  for (size_t p = 0; p < n; ++p) {
    const size_t u = unit(p);
    first[u] = std::min(first[u], p);
    for (const Value* v : nodes[p]->inputs) {
      if (!v->producer) continue;
      const size_t w = unit(pos(v->producer));
      if (w == u) continue;
      succ[w].push_back(u);
      ++indeg[u];
    }
  }
  std::set<std::pair<size_t, size_t>> ready;
  for (size_t u = 0; u < nu; ++u)
    if (first[u] < n && indeg[u] == 0) ready.insert({first[u], u});
  std::vector<int> step(nu, 0);
  int t = 0;
  while (!ready.empty()) {
    const size_t u = ready.begin()->second;
    ready.erase(ready.begin());
    step[u] = t++;
    for (size_t w : succ[u])
      if (--indeg[w] == 0) ready.insert({first[w], w});
  }
  // Buffers: materialized values (group outputs, unfused nodes' outputs) from
  // their unit's step to the last step reading them (or one of their views).
  int ids = 0;
  for (const Value* v : g.inputs()) ids = std::max(ids, v->id() + 1);
  for (const Node* x : nodes)
    for (const Value* v : x->outputs) ids = std::max(ids, v->id() + 1);
  std::vector<const Value*> root(static_cast<size_t>(ids), nullptr);  // by value id
  std::vector<int> birth(static_cast<size_t>(ids), -1), last(static_cast<size_t>(ids), -1);
  auto root_of = [&](const Value* v) { return root[static_cast<size_t>(v->id())]; };
  const std::vector<int64_t> syms(static_cast<size_t>(g.num_syms), kNominalDim);
  for (size_t p = 0; p < n; ++p) {
    const Node* x = nodes[p];
    const int s = step[unit(p)];
    for (const Value* v : x->inputs)
      if (const Value* r = root_of(v)) {
        int& l = last[static_cast<size_t>(r->id())];
        l = std::max(l, s);
      }
    if (x->is_constant()) continue;
    const int gi = plan.group_of[p];
    for (const Value* v : x->outputs) {
      const auto id = static_cast<size_t>(v->id());
      if (gi >= 0) {
        const auto& outs = plan.groups[static_cast<size_t>(gi)].outputs;
        if (std::find(outs.begin(), outs.end(), v) == outs.end()) continue;  // in registers
      } else if (x->info().has(kView) && !x->inputs.empty()) {
        const Value* src = x->inputs[0];
        root[id] = root_of(src);
        if (!root[id] && src->producer && src->producer->is_constant()) {
          root[id] = src;  // as in simulate(): the view holds the constant's buffer
          const auto sid = static_cast<size_t>(src->id());
          if (birth[sid] < 0) birth[sid] = last[sid] = s;
        }
        continue;
      }
      root[id] = v;
      birth[id] = last[id] = s;
    }
  }
  for (const Value* v : g.outputs())
    if (const Value* r = root_of(v)) last[static_cast<size_t>(r->id())] = t;
  std::vector<const Value*> by_id(static_cast<size_t>(ids), nullptr);
  for (const Value* v : g.inputs()) by_id[static_cast<size_t>(v->id())] = v;
  for (const Node* x : nodes)
    for (const Value* v : x->outputs) by_id[static_cast<size_t>(v->id())] = v;
  std::vector<int64_t> diff(static_cast<size_t>(t) + 2, 0);
  for (size_t id = 0; id < by_id.size(); ++id) {
    if (birth[id] < 0) continue;
    const int64_t b = bytes_of(by_id[id], syms);
    diff[static_cast<size_t>(birth[id])] += b;
    diff[static_cast<size_t>(last[id]) + 1] -= b;
  }
  int64_t live = 0, peak = 0;
  for (int64_t d : diff) peak = std::max(peak, live += d);
  return peak;
}

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
  Model m = simulate(g);
  if (rep.peak_before == 0) rep.peak_before = m.peak;
  static const Tier kDefault[] = {{false, false, 0, "cheap elementwise"}};
  static const Tier kBudget[] = {{false, false, 0, "cheap elementwise"},
                                 {true, false, 0, "+math"},
                                 {true, true, 0, "+reductions"},
                                 {true, true, 1, "+matmul, every 2nd kept"},
                                 {true, true, 2, "+matmul, every 3rd kept"},
                                 {true, true, 3, "+matmul, every 4th kept"}};
  const std::span<const Tier> tiers =
      budget > 0 ? std::span<const Tier>(kBudget) : std::span<const Tier>(kDefault);
  int64_t id = next_id(g);
  bool changed = false;
  const size_t first_log = rep.log.size();
  const int splits_before = rep.splits, recomputed_before = rep.recomputed;
  // Rule 7's fused check runs once, over all cuts: plan_fusion is the
  // expensive part (a tenth of a second on a 29k-node step).
  std::unique_ptr<ir::Graph> original;
  for (const Tier& t : m.peak > 0 ? tiers : std::span<const Tier>()) {  // else nothing is stored
    for (int k = 0; k < kMaxCuts && !(budget > 0 && m.peak <= budget); ++k) {
      bool kept = false;
      // Rule 2: the cut before the peak's node, else just after it.
      for (int gap : {m.at, m.at + 1}) {
        Cut cut = find_cut(g, m, gap, t);
        if (cut.recompute.empty()) continue;
        const Node* at = m.nodes[static_cast<size_t>(
            std::min<size_t>(static_cast<size_t>(gap), m.nodes.size() - 1))];
        const std::string where = str("before node ", gap, " (", op_name(at->op), ")");
        Applied a = apply_cut(g, m, cut, gap, id);
        const int64_t before = m.peak;
        // Rule 7, node order (the default policy wants 1% at least: a smaller
        // gain is not worth the recomputation, nor the fused check's cost).
        const int64_t need = budget > 0 ? before - 1 : before - std::max<int64_t>(1, before / 100);
        if (a.copies.empty() || simulate(g).peak > need) {
          undo(g, a);
          continue;
        }
        if (!original) {  // the graph as it was, for the fused check (taken once)
          undo(g, a);
          original = g.clone();
          a = apply_cut(g, m, cut, gap, id);
        }
        dce(g);
        m = simulate(g);
        rep.log.push_back(str("remat ", id, " [", t.name, "] ", where, ": save ", cut.saved.size(),
                              " values (", mib(cut.saved_bytes), "), recompute ", a.copies.size(),
                              " nodes; predicted peak ", mib(before), " -> ", mib(m.peak)));
        ++rep.splits;
        rep.recomputed += static_cast<int>(a.copies.size());
        --id;
        changed = kept = true;
        break;
      }
      if (!kept) break;
    }
  }
  if (changed) {
    const int64_t was = predicted_peak_bytes(*original, plan_fusion(*original));
    const int64_t now = predicted_peak_bytes(g, plan_fusion(g));
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
  rep.peak_after = m.peak;
  rep.budget_met = budget <= 0 || m.peak <= budget;
  if (env::get_int("KILN_DEBUG", 0) >= 1)
    for (size_t k = first_log; k < rep.log.size(); ++k)
      std::fprintf(stderr, "[kiln] %s\n", rep.log[k].c_str());
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
