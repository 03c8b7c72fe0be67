// Fusion planning: which nodes run together as one kernel.
//
// Decision rules, and why:
// 1. Fusible nodes: elementwise ops (kElementwise: unary, binary, comparisons,
//    where, cast, copy), `expand`, `reshape` that only inserts or removes
//    size-1 dims, `full`, and sum/max/min. Never fused, run by their eager
//    kernels: argmax/argmin; opaque ops (matmul and conv stay in BLAS, pooling
//    in its kernel); permute, slice, pad, cat, gather, index_select,
//    scatter_add (their reads are not dense or broadcast in one iteration
//    space); random ops and arange; any node reading or writing f16/bf16 (the
//    eager kernels round to half precision after every op, a fused kernel
//    would not).
// 2. Greedy vertical fusion in evaluation order: a node joins the union of its
//    producers' groups if that is valid, else the largest single producer group
//    for which it is valid, else it starts its own group. Producers come first,
//    so chains, reductions with their elementwise producers (prologues) and the
//    row-wise consumers of a reduction (softmax, layer_norm) end up together.
// 3. A group is valid when it has one iteration space S: the dims of all its
//    values are tied together (broadcasting ties equal dims, expand and size-1
//    reshapes keep dims, reductions keep their unreduced dims), tied dims have
//    equal sizes, and S has an order in which every value's dims increase, so
//    each value's row-major buffer is a dense/broadcast view of S. All
//    reductions of a group reduce the same dims of S; those must be S's last
//    dims and coalesce into one inner dim for every buffer (the kernel IR
//    reduces the inner dim only). Column sums (a reduced dim before a kept
//    one) therefore do not grow groups; rule 9 attaches them. Outputs of a
//    pointwise group are dense in S; outputs of a reduction group are dense
//    along the rows (element or row values), so no two work items store to
//    one address (a column sum's partials are per launch block).
// 4. No recomputation: a node is in at most one group; a value with users
//    outside its group becomes a group output (stored once), never inlined into
//    two kernels. 0-d constants are the exception: every kernel inlines them as
//    immediates, which is free.
// 5. Convexity and a DAG of groups: a merge is refused if a path leaves the
//    group and comes back into it, through unfused nodes or other groups, so
//    the executor can run each group as one step in a topological order.
// 6. FusionOptions::max_group_nodes bounds a kernel's size (LLVM compile time
//    grows with it; the memory traffic saved does not, past a few dozen ops).
// 7. A single compute node is still a group: one compiled loop with no
//    temporaries beats the generic strided eager loop, and the executor can
//    write it in place of a dying input. Groups without compute (only expand,
//    reshape, copy, full) are dropped: unfused they are views or one copy.
// 8. A gradient (a graph output named "grad:...") ends its group: its users
//    (optimizer updates) start new groups. The gradient then exists, and its
//    ready callback (DDP) fires, before any update runs; and the updates, which
//    only write graph outputs, can wait for each other in the executor and run
//    as one multi-tensor launch.
// 9. Column sums (a bias or layer-norm weight gradient: a sum over every row
//    dim of a value a group computes, keeping its inner dims) stay out of the
//    greedy growth (rule 3) and are attached to their producer's group after
//    it: the kernel adds each element into its column's partial sum, so the
//    value is not read back, and not stored at all when nothing else reads it.
//    A pointwise group's coalesced dim is split where the rows end; a row
//    kernel's rows must be exactly the reduced dims.
#include "kiln/passes/fuse.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "kiln/passes/pass_manager.h"

namespace kiln::passes {
namespace {

using ir::Node;
using ir::SymInt;
using ir::Value;

bool is_unit(const SymInt& s) {
  return s.is_static() && s.b == 1;
}

bool half_precision(DType t) {
  return t == DType::f16 || t == DType::bf16;
}

// The non-size-1 dims of a shape, in order.
std::vector<SymInt> non_unit(const ir::SymShape& s) {
  std::vector<SymInt> r;
  for (const SymInt& d : s)
    if (!is_unit(d)) r.push_back(d);
  return r;
}

bool is_value_reduction(const Node& n) {
  return n.is_op(OpId::sum) || n.is_op(OpId::max) || n.is_op(OpId::min);
}

// The reduced dims of a reduction node (attribute `dims`, empty = all), normalized.
std::vector<int64_t> reduced_dims(const Node& n) {
  const int64_t rank = n.inputs[0]->rank();
  std::vector<int64_t> ds;
  if (n.attrs.has("dims")) {
    const Dims& a = n.attrs.dims("dims");
    ds.assign(a.begin(), a.end());
  }
  if (ds.empty())
    for (int64_t d = 0; d < rank; ++d) ds.push_back(d);
  for (int64_t& d : ds)
    if (d < 0) d += rank;
  std::sort(ds.begin(), ds.end());
  return ds;
}

bool keepdim(const Node& n) {
  return n.attrs.has("keepdim") && n.attrs.b("keepdim");
}

// Rule 1.
bool fusible(const Node& n, const FusionOptions& opts) {
  if (n.is_constant()) return false;
  for (const Value* v : n.inputs)
    if (half_precision(v->dtype)) return false;
  for (const Value* v : n.outputs)
    if (half_precision(v->dtype)) return false;
  if (!n.sym_attrs.empty() && !n.is_op(OpId::reshape) && !n.is_op(OpId::expand)) return false;
  const OpInfo& info = n.info();
  if (info.has(kRandom) || info.has(kOpaque)) return false;
  if (n.is_op(OpId::reshape)) {
    const auto a = non_unit(n.inputs[0]->shape), b = non_unit(n.output()->shape);
    return a == b;
  }
  if (n.is_op(OpId::expand)) return true;
  if (n.is_op(OpId::full)) {
    // The value must be exact as a double (the kernel IR's immediates).
    if (is_floating(n.output()->dtype)) return true;
    const int64_t v =
        n.attrs.has("ivalue") ? n.attrs.i("ivalue") : static_cast<int64_t>(n.attrs.f("value"));
    return v >= -(int64_t{1} << 53) && v <= (int64_t{1} << 53);
  }
  if (is_value_reduction(n)) return opts.reductions;
  return info.has(kElementwise);
}

// Ops that move or fill but compute nothing (rule 7).
bool computes(const Node& n) {
  return !(n.is_op(OpId::expand) || n.is_op(OpId::reshape) || n.is_op(OpId::copy) ||
           n.is_op(OpId::full));
}

// A 0-d constant the kernels take as an immediate (rule 4).
bool inlined_constant(const Value* v) {
  const Node* p = v->producer;
  if (!p || !p->is_constant() || !p->sym_attrs.empty() || v->rank() != 0) return false;
  if (half_precision(v->dtype)) return false;
  if (v->dtype == DType::i64) {
    const int64_t x = p->constant.item<int64_t>();
    return x >= -(int64_t{1} << 53) && x <= (int64_t{1} << 53);
  }
  return true;
}

// Union-find over the dims of the group's values.
struct Dsu {
  std::vector<int> parent;
  int add() {
    parent.push_back(static_cast<int>(parent.size()));
    return parent.back();
  }
  int find(int x) {
    while (parent[static_cast<size_t>(x)] != x) {
      parent[static_cast<size_t>(x)] = parent[static_cast<size_t>(parent[static_cast<size_t>(x)])];
      x = parent[static_cast<size_t>(x)];
    }
    return x;
  }
  void unite(int a, int b) {
    a = find(a);
    b = find(b);
    if (a != b) parent[static_cast<size_t>(std::max(a, b))] = std::min(a, b);
  }
};

// Facts about the graph, and scratch arrays that analyze() and acyclic()
// reuse: an entry is valid while its stamp equals the current epoch, so the
// many small checks of a large graph neither clear nor allocate them.
struct Ctx {
  const ir::Graph& g;
  std::unordered_map<const Node*, int> pos;
  std::unordered_set<const Value*> graph_outputs;
  std::unordered_set<const Value*> gradients;  // rule 8
  mutable int epoch = 0;
  mutable std::vector<int> node_in, node_seen;                  // by position
  mutable std::vector<int> value_stamp, value_base, value_idx;  // by value id
  explicit Ctx(const ir::Graph& graph) : g(graph) {
    const auto nodes = g.nodes();
    int ids = 0;
    for (const Value* v : g.inputs()) ids = std::max(ids, v->id() + 1);
    for (size_t i = 0; i < nodes.size(); ++i) {
      pos[nodes[i]] = static_cast<int>(i);
      for (const Value* v : nodes[i]->outputs) ids = std::max(ids, v->id() + 1);
    }
    for (size_t o = 0; o < g.outputs().size(); ++o) {
      graph_outputs.insert(g.outputs()[o]);
      if (g.output_names()[o].rfind("grad:", 0) == 0) gradients.insert(g.outputs()[o]);
    }
    node_in.assign(nodes.size(), 0);
    node_seen.assign(nodes.size(), 0);
    value_stamp.assign(static_cast<size_t>(ids), 0);
    value_base.assign(static_cast<size_t>(ids), 0);
    value_idx.assign(static_cast<size_t>(ids), 0);
  }
  int at(const Node* n) const { return pos.find(n)->second; }
  // Starts a new epoch with `nodes` as the members.
  int mark(const std::vector<const Node*>& nodes) const {
    ++epoch;
    for (const Node* n : nodes) node_in[static_cast<size_t>(at(n))] = epoch;
    return epoch;
  }
  bool member(const Node* n) const { return node_in[static_cast<size_t>(at(n))] == epoch; }
};

// Rule 3: the iteration space of a node set, or nullopt if it has none.
std::optional<FusionGroup> analyze(const Ctx& ctx, const std::vector<const Node*>& nodes) {
  const int ep = ctx.mark(nodes);
  Dsu dsu;
  std::vector<const Value*> order;  // values in first-seen order
  // The first union-find element of v's dims (allocated on first sight).
  auto elems = [&](const Value* v) {
    const auto id = static_cast<size_t>(v->id());
    if (ctx.value_stamp[id] == ep) return ctx.value_base[id];
    const int b = static_cast<int>(dsu.parent.size());
    for (int64_t d = 0; d < v->rank(); ++d) dsu.add();
    ctx.value_stamp[id] = ep;
    ctx.value_base[id] = b;
    ctx.value_idx[id] = static_cast<int>(order.size());
    order.push_back(v);
    return b;
  };
  // Ties dim a of va to dim b of vb; false if their sizes differ.
  auto tie = [&](const Value* va, int64_t a, const Value* vb, int64_t b) {
    const SymInt& sa = va->shape[static_cast<size_t>(a)];
    const SymInt& sb = vb->shape[static_cast<size_t>(b)];
    if (is_unit(sa) && is_unit(sb)) return true;
    if (!(sa == sb)) return false;
    dsu.unite(elems(va) + static_cast<int>(a), elems(vb) + static_cast<int>(b));
    return true;
  };
  std::vector<std::vector<int>> reduced;  // per non-trivial reduction: reduced elements
  for (const Node* n : nodes) {
    const Value* out = n->output();
    elems(out);
    for (const Value* in : n->inputs) elems(in);
    if (is_value_reduction(*n)) {
      const Value* in = n->inputs[0];
      const std::vector<int64_t> ds = reduced_dims(*n);
      std::vector<int> red;
      int64_t j = 0;
      for (int64_t k = 0; k < in->rank(); ++k) {
        const bool r = std::binary_search(ds.begin(), ds.end(), k);
        if (r) {
          if (!is_unit(in->shape[static_cast<size_t>(k)]))
            red.push_back(elems(in) + static_cast<int>(k));
          if (keepdim(*n)) ++j;
          continue;
        }
        if (!tie(in, k, out, j++)) return std::nullopt;
      }
      if (!red.empty()) reduced.push_back(std::move(red));
    } else if (n->is_op(OpId::reshape)) {
      const Value* in = n->inputs[0];
      std::vector<int64_t> a, b;
      for (int64_t k = 0; k < in->rank(); ++k)
        if (!is_unit(in->shape[static_cast<size_t>(k)])) a.push_back(k);
      for (int64_t k = 0; k < out->rank(); ++k)
        if (!is_unit(out->shape[static_cast<size_t>(k)])) b.push_back(k);
      if (a.size() != b.size()) return std::nullopt;
      for (size_t k = 0; k < a.size(); ++k)
        if (!tie(in, a[k], out, b[k])) return std::nullopt;
    } else {
      // Elementwise and expand: NumPy broadcasting, inputs right-aligned.
      for (const Value* in : n->inputs) {
        const int64_t off = out->rank() - in->rank();
        if (off < 0) return std::nullopt;
        for (int64_t k = 0; k < in->rank(); ++k) {
          if (is_unit(in->shape[static_cast<size_t>(k)])) continue;  // broadcast
          if (!tie(in, k, out, off + k)) return std::nullopt;
        }
      }
    }
  }
  // Classes of non-unit dims, numbered in first-seen order (deterministic).
  std::vector<int> root_cls(dsu.parent.size(), -1);
  std::vector<SymInt> cls_size;
  // Per value (order index i): the classes of its non-unit dims, vcls[voff[i] .. voff[i+1]).
  std::vector<int> vcls, voff{0};
  for (const Value* v : order) {
    const int b = ctx.value_base[static_cast<size_t>(v->id())];
    for (int64_t d = 0; d < v->rank(); ++d) {
      if (is_unit(v->shape[static_cast<size_t>(d)])) continue;
      int& c = root_cls[static_cast<size_t>(dsu.find(b + static_cast<int>(d)))];
      if (c < 0) {
        c = static_cast<int>(cls_size.size());
        cls_size.push_back(v->shape[static_cast<size_t>(d)]);
      }
      vcls.push_back(c);
    }
    voff.push_back(static_cast<int>(vcls.size()));
  }
  const size_t nc = cls_size.size();
  // The reduced classes: equal sets for all reductions.
  std::vector<bool> in_t(nc, false);
  for (size_t r = 0; r < reduced.size(); ++r) {
    std::vector<bool> mine(nc, false);
    for (int e : reduced[r])
      mine[static_cast<size_t>(root_cls[static_cast<size_t>(dsu.find(e))])] = true;
    if (r == 0)
      in_t = mine;
    else if (mine != in_t)
      return std::nullopt;
  }
  const bool reduces = !reduced.empty();
  // Order the classes: every value's dims increase; reduced classes last.
  std::vector<std::vector<int>> succ(nc);
  std::vector<int> indeg(nc, 0);
  for (size_t i = 0; i + 1 < voff.size(); ++i)
    for (int k = voff[i]; k + 1 < voff[i + 1]; ++k) {
      const int a = vcls[static_cast<size_t>(k)], b = vcls[static_cast<size_t>(k) + 1];
      if (a == b) return std::nullopt;
      succ[static_cast<size_t>(a)].push_back(b);
      ++indeg[static_cast<size_t>(b)];
    }
  std::vector<int> sorted;
  std::vector<bool> done(nc, false);
  while (sorted.size() < nc) {
    int pick = -1;
    for (int pass = 0; pass < 2 && pick < 0; ++pass)
      for (size_t c = 0; c < nc && pick < 0; ++c)
        if (!done[c] && indeg[c] == 0 && (pass == 1 || !in_t[c])) pick = static_cast<int>(c);
    if (pick < 0) return std::nullopt;  // cycle: no consistent layout
    done[static_cast<size_t>(pick)] = true;
    sorted.push_back(pick);
    for (int s : succ[static_cast<size_t>(pick)]) --indeg[static_cast<size_t>(s)];
  }
  std::vector<int> rank_of(nc);
  for (size_t k = 0; k < nc; ++k) rank_of[static_cast<size_t>(sorted[k])] = static_cast<int>(k);
  size_t nrows = 0;
  for (size_t k = 0; k < nc; ++k) {
    const bool t = in_t[static_cast<size_t>(sorted[k])];
    if (t && k < nrows) return std::nullopt;
    if (!t) {
      if (k != nrows) return std::nullopt;  // a kept dim after a reduced one
      ++nrows;
    }
  }

  FusionGroup grp;
  grp.nodes = nodes;
  for (const Node* n : nodes)
    for (const Value* v : n->inputs) {
      if ((v->producer && ctx.member(v->producer)) || inlined_constant(v)) continue;
      if (std::find(grp.inputs.begin(), grp.inputs.end(), v) == grp.inputs.end())
        grp.inputs.push_back(v);
    }
  for (const Node* n : nodes)
    for (const Value* v : n->outputs) {
      bool external = ctx.graph_outputs.count(v) > 0;
      for (const Node* u : v->users) external = external || !ctx.member(u);
      if (external) grp.outputs.push_back(v);
    }
  // Dense pattern over the sorted classes.
  auto pattern = [&](const Value* v) {
    std::vector<bool> p(nc, false);
    const auto i = static_cast<size_t>(ctx.value_idx[static_cast<size_t>(v->id())]);
    for (int k = voff[i]; k < voff[i + 1]; ++k)
      p[static_cast<size_t>(rank_of[static_cast<size_t>(vcls[static_cast<size_t>(k)])])] = true;
    return p;
  };
  std::vector<std::vector<bool>> pats;
  for (const Value* v : grp.inputs) pats.push_back(pattern(v));
  for (const Value* v : grp.outputs) {
    std::vector<bool> p = pattern(v);
    for (size_t k = 0; k < nc; ++k)
      if (!p[k] && (k < nrows || !reduces)) return std::nullopt;  // would store twice
    pats.push_back(std::move(p));
  }
  // Coalesce adjacent dims with equal patterns everywhere (never across rows|inner).
  std::vector<std::vector<size_t>> merged;  // kernel dim -> sorted class positions
  for (size_t k = 0; k < nc; ++k) {
    bool join = !merged.empty() && (k < nrows) == (merged.back().back() < nrows);
    for (size_t a = 0; join && a < pats.size(); ++a)
      join = pats[a][k] == pats[a][merged.back().back()];
    if (join)
      merged.back().push_back(k);
    else
      merged.push_back({k});
  }
  if (reduces && (merged.empty() || merged.back().front() < nrows ||
                  (merged.size() >= 2 && merged[merged.size() - 2].back() >= nrows)))
    return std::nullopt;  // the reduced dims do not coalesce into one inner dim
  if (merged.empty()) merged.push_back({});
  for (const auto& m : merged) {
    std::vector<SymInt> f;
    for (size_t k : m) f.push_back(cls_size[static_cast<size_t>(sorted[k])]);
    grp.dims.push_back(std::move(f));
  }
  auto kernel_pattern = [&](const std::vector<bool>& p) {
    std::vector<bool> r;
    for (const auto& m : merged) r.push_back(m.empty() ? true : bool(p[m.front()]));
    return r;
  };
  for (size_t a = 0; a < grp.inputs.size(); ++a) grp.in_dense.push_back(kernel_pattern(pats[a]));
  for (size_t a = 0; a < grp.outputs.size(); ++a)
    grp.out_dense.push_back(kernel_pattern(pats[grp.inputs.size() + a]));
  grp.kind = reduces ? GroupKind::kReduction : GroupKind::kPointwise;
  if (!reduces)
    for (const Value* v : grp.inputs)
      if (v->producer && !v->producer->is_constant() && v->producer->info().has(kOpaque))
        grp.kind = GroupKind::kEpilogue;
  return grp;
}

// The planner's state: groups being grown, node -> group.
struct Planner {
  const Ctx& ctx;
  const FusionOptions& opts;
  std::vector<std::vector<const Node*>> groups;  // empty = merged away
  std::vector<int> group_of;                     // by position, -1: none yet

  int group(const Node* n) const { return group_of[static_cast<size_t>(ctx.at(n))]; }

  // Rule 5: true if no path leaves `cand` and re-enters it (through unfused
  // nodes or whole other groups). `merged` are the groups cand absorbs; `last`
  // is its newest node (later nodes are all ungrouped and cannot lead back).
  bool acyclic(const std::vector<const Node*>& cand, const std::vector<int>& merged,
               int last) const {
    ctx.mark(cand);
    const int ep = ctx.epoch;
    std::vector<char> seen_groups(groups.size(), 0);
    for (int gi : merged) seen_groups[static_cast<size_t>(gi)] = 1;
    std::vector<const Node*> stack;
    // Pushes u unless seen; false if u is in the candidate (a path came back).
    auto visit = [&](const Node* u) {
      if (ctx.member(u)) return false;
      int& s = ctx.node_seen[static_cast<size_t>(ctx.at(u))];
      if (s != ep) {
        s = ep;
        stack.push_back(u);
      }
      return true;
    };
    for (const Node* n : cand)
      for (const Value* v : n->outputs)
        for (const Node* u : v->users)
          if (!ctx.member(u)) visit(u);
    while (!stack.empty()) {
      const Node* u = stack.back();
      stack.pop_back();
      if (ctx.at(u) > last) continue;
      const int gu = group(u);
      if (gu >= 0 && !seen_groups[static_cast<size_t>(gu)]) {
        seen_groups[static_cast<size_t>(gu)] = 1;
        for (const Node* m : groups[static_cast<size_t>(gu)])
          if (!visit(m)) return false;
      }
      for (const Value* v : u->outputs)
        for (const Node* w : v->users)
          if (!visit(w)) return false;
    }
    return true;
  }

  bool try_group(const Node* n, const std::vector<int>& merged) {
    std::vector<const Node*> cand;
    for (int gi : merged)
      for (const Node* m : groups[static_cast<size_t>(gi)]) cand.push_back(m);
    cand.push_back(n);
    if (static_cast<int>(cand.size()) > opts.max_group_nodes) return false;
    std::sort(cand.begin(), cand.end(),
              [&](const Node* a, const Node* b) { return ctx.at(a) < ctx.at(b); });
    if (!analyze(ctx, cand)) return false;
    if (!merged.empty() && !acyclic(cand, merged, ctx.at(n))) return false;
    int target;
    if (merged.empty()) {
      target = static_cast<int>(groups.size());
      groups.emplace_back();
    } else {
      target = *std::min_element(merged.begin(), merged.end());
      for (int gi : merged) groups[static_cast<size_t>(gi)].clear();
    }
    groups[static_cast<size_t>(target)] = cand;
    for (const Node* m : cand) group_of[static_cast<size_t>(ctx.at(m))] = target;
    return true;
  }

  void add(const Node* n) {
    std::vector<int> prods;
    for (const Value* v : n->inputs) {
      const int gi = v->producer && !ctx.gradients.count(v) ? group(v->producer) : -1;
      if (gi >= 0 && std::find(prods.begin(), prods.end(), gi) == prods.end()) prods.push_back(gi);
    }
    if (!prods.empty() && try_group(n, prods)) return;
    if (prods.size() > 1) {
      std::vector<int> by_size = prods;
      std::stable_sort(by_size.begin(), by_size.end(), [&](int a, int b) {
        return groups[static_cast<size_t>(a)].size() > groups[static_cast<size_t>(b)].size();
      });
      for (int gi : by_size)
        if (try_group(n, {gi})) return;
    }
    try_group(n, {});  // always valid for a fusible node with a layout; else unfused
  }
};

// Rule 9 for one unfused sum node; true if it joined its producer's group.
bool attach_column_sum(const Ctx& ctx, FusionPlan& plan, const Node* n) {
  const Value* v = n->inputs[0];
  if (!v->producer || !is_floating(v->dtype) || half_precision(v->dtype) ||
      n->output()->dtype != v->dtype)
    return false;
  const int gi = plan.group_of[static_cast<size_t>(ctx.at(v->producer))];
  if (gi < 0) return false;
  FusionGroup& grp = plan.groups[static_cast<size_t>(gi)];
  const auto it = std::find(grp.outputs.begin(), grp.outputs.end(), v);
  if (it == grp.outputs.end()) return false;
  const auto oi = static_cast<size_t>(it - grp.outputs.begin());
  for (bool d : grp.out_dense[oi])
    if (!d) return false;
  // v's buffer is the iteration space: its non-unit dims are the groups' sizes in order.
  std::vector<SymInt> flat;
  for (const auto& d : grp.dims) flat.insert(flat.end(), d.begin(), d.end());
  if (non_unit(v->shape) != flat) return false;
  // The sum reduces a leading run of those dims and keeps the rest.
  const std::vector<int64_t> ds = reduced_dims(*n);
  size_t p = 0, seen = 0;
  for (int64_t k = 0; k < v->rank(); ++k) {
    if (is_unit(v->shape[static_cast<size_t>(k)])) continue;
    if (std::binary_search(ds.begin(), ds.end(), k)) {
      if (p != seen) return false;
      ++p;
    }
    ++seen;
  }
  if (p == 0 || p == flat.size()) return false;
  size_t d = 0, acc = 0;
  while (acc + grp.dims[d].size() <= p) acc += grp.dims[d++].size();
  // The kept dims must end up as the one inner dim (a split adds a dim before it).
  if (d + 1 != grp.dims.size()) return false;
  if (acc < p) {
    // The rows end inside kernel dim d: split it (pointwise groups only; a row
    // kernel's inner dim is what its reductions reduce).
    if (grp.reduces()) return false;
    const auto cut = static_cast<std::ptrdiff_t>(p - acc);
    std::vector<SymInt> tail(grp.dims[d].begin() + cut, grp.dims[d].end());
    grp.dims[d].resize(static_cast<size_t>(cut));
    grp.dims.insert(grp.dims.begin() + static_cast<std::ptrdiff_t>(d) + 1, std::move(tail));
    for (auto* pats : {&grp.in_dense, &grp.out_dense})
      for (auto& pat : *pats)
        pat.insert(pat.begin() + static_cast<std::ptrdiff_t>(d) + 1, bool(pat[d]));
  }
  grp.column_sums.push_back(n);
  grp.outputs.push_back(n->output());
  std::vector<bool> pat(grp.dims.size(), false);
  pat.back() = true;
  grp.out_dense.push_back(std::move(pat));
  plan.group_of[static_cast<size_t>(ctx.at(n))] = gi;
  // Stored only if something else still reads it.
  bool read = ctx.graph_outputs.count(v) > 0;
  for (const Node* u : v->users) read = read || plan.group_of[static_cast<size_t>(ctx.at(u))] != gi;
  if (!read) {
    const auto k = static_cast<size_t>(std::find(grp.outputs.begin(), grp.outputs.end(), v) -
                                       grp.outputs.begin());
    grp.outputs.erase(grp.outputs.begin() + static_cast<std::ptrdiff_t>(k));
    grp.out_dense.erase(grp.out_dense.begin() + static_cast<std::ptrdiff_t>(k));
  }
  return true;
}

std::string dims_text(const FusionGroup& grp) {
  std::string s = "[";
  for (size_t d = 0; d < grp.dims.size(); ++d) {
    if (d) s += grp.reduces() && d + 1 == grp.dims.size() ? " | " : ", ";
    if (grp.dims[d].empty()) s += "1";
    for (size_t k = 0; k < grp.dims[d].size(); ++k)
      s += str(k ? "*" : "", ir::to_string(grp.dims[d][k]));
  }
  s += "]";
  return s;
}

const char* kind_name(GroupKind k) {
  switch (k) {
    case GroupKind::kPointwise:
      return "pointwise";
    case GroupKind::kReduction:
      return "reduction";
    case GroupKind::kEpilogue:
      return "epilogue";
  }
  return "?";
}

}  // namespace

FusionPlan plan_fusion(const ir::Graph& g, const FusionOptions& opts) {
  FusionPlan plan;
  plan.group_of.assign(g.num_nodes(), -1);
  if (!opts.enabled || pass_disabled("fuse")) return plan;
  Ctx ctx(g);
  Planner p{ctx, opts, {}, std::vector<int>(g.num_nodes(), -1)};
  for (const Node* n : g.nodes())
    if (fusible(*n, opts)) p.add(n);
  for (const auto& nodes : p.groups) {
    if (nodes.empty()) continue;
    if (std::none_of(nodes.begin(), nodes.end(), [](const Node* n) { return computes(*n); }))
      continue;  // rule 7
    std::optional<FusionGroup> grp = analyze(ctx, nodes);
    KILN_ASSERT(grp.has_value(), "fuse: a group lost its iteration space");
    const int id = static_cast<int>(plan.groups.size());
    for (const Node* n : nodes) plan.group_of[static_cast<size_t>(ctx.at(n))] = id;
    plan.groups.push_back(std::move(*grp));
  }
  if (opts.column_sums && opts.reductions)
    for (const Node* n : g.nodes())
      if (n->is_op(OpId::sum) && plan.group_of[static_cast<size_t>(ctx.at(n))] < 0)
        attach_column_sum(ctx, plan, n);
  return plan;
}

std::string to_string(const FusionPlan& plan, const ir::Graph& g) {
  std::unordered_map<const Value*, int> num;
  int next = 0;
  for (const Value* v : g.inputs()) num[v] = next++;
  for (const Node* n : g.nodes())
    for (const Value* v : n->outputs) num[v] = next++;
  auto name = [&](const Value* v) { return str("%", num.count(v) ? num.at(v) : -1); };
  std::string s;
  for (size_t i = 0; i < plan.groups.size(); ++i) {
    const FusionGroup& grp = plan.groups[i];
    s += str("group ", i, " ", kind_name(grp.kind), " ", dims_text(grp), ":");
    for (size_t k = 0; k < grp.nodes.size(); ++k)
      s += str(k ? ", " : " ", op_name(grp.nodes[k]->op), " ", name(grp.nodes[k]->output()));
    for (const Node* n : grp.column_sums) s += str(", sum ", name(n->output()), " (column)");
    s += " ; in";
    for (const Value* v : grp.inputs) s += str(" ", name(v));
    s += " ; out";
    for (const Value* v : grp.outputs) s += str(" ", name(v));
    s += "\n";
  }
  return s;
}

std::string check_plan(const FusionPlan& plan, const ir::Graph& g) {
  const auto nodes = g.nodes();
  if (plan.group_of.size() != nodes.size()) return "group_of has the wrong size";
  std::unordered_map<const Node*, int> gid;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const int k = plan.group_of[i];
    if (k < -1 || k >= static_cast<int>(plan.groups.size())) return str("node ", i, ": bad group");
    if (k >= 0) gid[nodes[i]] = k;
  }
  for (size_t k = 0; k < plan.groups.size(); ++k)
    for (const Node* n : plan.groups[k].nodes)
      if (!gid.count(n) || gid.at(n) != static_cast<int>(k))
        return str("group ", k, " lists a node that group_of puts elsewhere");
  // Condensed graph: units are groups and unfused nodes; it must be acyclic.
  std::unordered_map<const Node*, int> pos;
  for (size_t i = 0; i < nodes.size(); ++i) pos[nodes[i]] = static_cast<int>(i);
  const int ng = static_cast<int>(plan.groups.size());
  auto unit = [&](const Node* n) { return gid.count(n) ? gid.at(n) : ng + pos.at(n); };
  const size_t nu = static_cast<size_t>(ng) + nodes.size();
  std::vector<std::unordered_set<int>> succ(nu);
  std::vector<int> indeg(nu, 0);
  for (const Node* n : nodes)
    for (const Value* v : n->outputs)
      for (const Node* u : v->users) {
        const int a = unit(n), b = unit(u);
        if (a != b && succ[static_cast<size_t>(a)].insert(b).second)
          ++indeg[static_cast<size_t>(b)];
      }
  std::vector<int> ready;
  for (size_t u = 0; u < nu; ++u)
    if (indeg[u] == 0) ready.push_back(static_cast<int>(u));
  size_t visited = 0;
  while (!ready.empty()) {
    const int u = ready.back();
    ready.pop_back();
    ++visited;
    for (int s : succ[static_cast<size_t>(u)])
      if (--indeg[static_cast<size_t>(s)] == 0) ready.push_back(s);
  }
  if (visited != nu) return "the groups are not convex or form a cycle";
  return "";
}

}  // namespace kiln::passes
