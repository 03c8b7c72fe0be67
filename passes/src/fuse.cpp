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
// 8. A gradient (a graph output of role kGradient) ends its group: its users
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
//    kernel's rows must be exactly the reduced dims. 9b: a sum of a value no
//    group computes (a matmul's output) joins a group that reads all of it,
//    unless that closes a cycle: the value is then read once, not twice.
// 10. FusionOptions::max_group_span bounds the positions between a group's
//    first and last node. In a traced training step a backward node may read
//    a forward group's values only (the GELU derivative reads the forward
//    input), so it could join that group hundreds of layers earlier: the
//    forward kernel would then store a backward temporary for the whole step,
//    and proving each such merge acyclic (rule 5) searches everything between
//    the two, which made planning quadratic in depth. Merges within the span
//    are unaffected.
// 11. A recomputed node (attribute `recompute`: passes/src/remat.cpp, or a
//    kiln::checkpoint region's replay) joins no group of the forward's nodes:
//    it would be computed, and stored, where the original was, which undoes
//    the recomputation; nor one begun by another recomputation where it would
//    be made early (detail::LateCopies). Its chain, the backward's nodes just
//    before it and its later readers fuse.
// 12. Siblings: after rule 2, two groups that both read one value densely
//    over the whole space (no group makes it) become one group when their
//    union is a valid group (rules 3-6, 10, 11): the value is loaded once,
//    and one launch does both. A layer norm's backward is two kernels in a
//    recomputing step: the forward output recomputed for the weight
//    gradient's matmul, and dx; both read dy and the centered input. Groups
//    that read or make a gradient (rule 8) stay as they are.
//    FusionOptions::siblings or KILN_DISABLE_PASSES=fuse_siblings turn it off.
// 13. GEMM bias epilogues (FusionOptions::gemm_bias: CUDA plans): a group
//    that begins with a matmul's bias add and stores the sum (GELU's input,
//    saved for its backward; the logits the loss gathers) leaves the add to
//    a group of its own, which the executor folds into the GEMM: the product
//    is never stored and read back (fuse_gemm_bias.cpp).
#include "kiln/passes/fuse.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "fuse_internal.h"
#include "kiln/passes/pass_manager.h"
#include "remat_internal.h"

namespace kiln::passes {
namespace detail {

bool is_unit(const ir::SymInt& s) {
  return s.is_static() && s.b == 1;
}

bool half_precision(DType t) {
  return t == DType::f16 || t == DType::bf16;
}

// The non-size-1 dims of a shape, in order.
std::vector<ir::SymInt> non_unit(const ir::SymShape& s) {
  std::vector<ir::SymInt> r;
  for (const ir::SymInt& d : s)
    if (!is_unit(d)) r.push_back(d);
  return r;
}

bool is_value_reduction(const ir::Node& n) {
  return n.is_op(OpId::sum) || n.is_op(OpId::max) || n.is_op(OpId::min);
}

// The reduced dims of a reduction node (attribute `dims`, empty = all), normalized.
std::vector<int64_t> reduced_dims(const ir::Node& n) {
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

bool keepdim(const ir::Node& n) {
  return n.attrs.has("keepdim") && n.attrs.b("keepdim");
}

}  // namespace detail

namespace {

using detail::half_precision;
using detail::is_unit;
using detail::is_value_reduction;
using detail::keepdim;
using detail::non_unit;
using detail::reduced_dims;
using ir::Node;
using ir::SymInt;
using ir::Value;

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

// Scratch arrays of analyze(), reused by every call (cleared, never shrunk):
// a large graph runs tens of thousands of small checks.
struct Scratch {
  std::vector<int> parent;          // union-find over the dims of the group's values
  std::vector<const Value*> order;  // values in first-seen order
  std::vector<int> red, red_off;    // per non-trivial reduction: its reduced elements
  std::vector<int64_t> a, b;        // a reshape's non-unit dims
  std::vector<int> root_cls;
  std::vector<const SymInt*> cls_size;
  std::vector<int> vcls, voff;
  std::vector<char> in_t, mine, done;
  std::vector<std::pair<int, int>> edges;  // class order constraints
  std::vector<int> indeg, sorted, rank_of;
  std::vector<const Value*> ins, outs;
  std::vector<char> pats;      // per input then output, per class position: dense
  std::vector<size_t> starts;  // kernel dim d covers class positions [starts[d], starts[d+1])
  std::vector<const Node*> stack;
};

int dsu_find(std::vector<int>& parent, int x) {
  while (parent[static_cast<size_t>(x)] != x) {
    parent[static_cast<size_t>(x)] = parent[static_cast<size_t>(parent[static_cast<size_t>(x)])];
    x = parent[static_cast<size_t>(x)];
  }
  return x;
}

void dsu_unite(std::vector<int>& parent, int a, int b) {
  a = dsu_find(parent, a);
  b = dsu_find(parent, b);
  if (a != b) parent[static_cast<size_t>(std::max(a, b))] = std::min(a, b);
}

// Facts about the graph, and scratch arrays that analyze() and acyclic()
// reuse: an entry is valid while its stamp equals the current epoch, so the
// many small checks of a large graph neither clear nor allocate them.
struct Ctx {
  const ir::Graph& g;
  std::vector<char> output_flag, gradient_flag;  // by value id: a graph output, a gradient (rule 8)
  mutable int epoch = 0;
  mutable std::vector<int> node_in, node_seen;                  // by position
  mutable std::vector<int> value_stamp, value_base, value_idx;  // by value id
  mutable std::vector<int> value_input;  // by value id: listed among the group's inputs
  mutable Scratch scratch;
  explicit Ctx(const ir::Graph& graph) : g(graph) {
    // nodes() numbers the nodes now, so at() only reads the graph's cached positions.
    const auto nodes = g.nodes();
    int ids = 0;
    for (const Value* v : g.inputs()) ids = std::max(ids, v->id() + 1);
    for (const Node* n : nodes)
      for (const Value* v : n->outputs) ids = std::max(ids, v->id() + 1);
    output_flag.assign(static_cast<size_t>(ids), 0);
    gradient_flag.assign(static_cast<size_t>(ids), 0);
    for (size_t o = 0; o < g.outputs().size(); ++o) {
      const auto id = static_cast<size_t>(g.outputs()[o]->id());
      output_flag[id] = 1;
      if (g.is_gradient_output(o)) gradient_flag[id] = 1;
    }
    node_in.assign(nodes.size(), 0);
    node_seen.assign(nodes.size(), 0);
    value_stamp.assign(static_cast<size_t>(ids), 0);
    value_base.assign(static_cast<size_t>(ids), 0);
    value_idx.assign(static_cast<size_t>(ids), 0);
    value_input.assign(static_cast<size_t>(ids), 0);
  }
  int at(const Node* n) const { return static_cast<int>(g.position(n)); }
  bool is_output(const Value* v) const { return output_flag[static_cast<size_t>(v->id())] != 0; }
  bool is_gradient(const Value* v) const {
    return gradient_flag[static_cast<size_t>(v->id())] != 0;
  }
  // Starts a new epoch with `nodes` as the members.
  int mark(const std::vector<const Node*>& nodes) const {
    ++epoch;
    for (const Node* n : nodes) node_in[static_cast<size_t>(at(n))] = epoch;
    return epoch;
  }
  bool member(const Node* n) const { return node_in[static_cast<size_t>(at(n))] == epoch; }
};

// The first union-find element of v's dims (allocated on first sight).
int dim_elems(const Ctx& ctx, int ep, const Value* v) {
  Scratch& s = ctx.scratch;
  const auto id = static_cast<size_t>(v->id());
  if (ctx.value_stamp[id] == ep) return ctx.value_base[id];
  const int b = static_cast<int>(s.parent.size());
  for (int64_t d = 0; d < v->rank(); ++d) s.parent.push_back(static_cast<int>(s.parent.size()));
  ctx.value_stamp[id] = ep;
  ctx.value_base[id] = b;
  ctx.value_idx[id] = static_cast<int>(s.order.size());
  s.order.push_back(v);
  return b;
}

// Ties dim a of va to dim b of vb; false if their sizes differ.
bool tie_dims(const Ctx& ctx, int ep, const Value* va, int64_t a, const Value* vb, int64_t b) {
  const SymInt& sa = va->shape[static_cast<size_t>(a)];
  const SymInt& sb = vb->shape[static_cast<size_t>(b)];
  if (is_unit(sa) && is_unit(sb)) return true;
  if (!(sa == sb)) return false;
  dsu_unite(ctx.scratch.parent, dim_elems(ctx, ep, va) + static_cast<int>(a),
            dim_elems(ctx, ep, vb) + static_cast<int>(b));
  return true;
}

// Unites the dims each node maps onto each other (a reduction's kept dims, a
// reshape's non-unit dims in order, broadcasting) and notes the reduced dims.
// False where two tied dims differ in size.
bool unite_dims(const Ctx& ctx, int ep, const std::vector<const Node*>& nodes) {
  Scratch& s = ctx.scratch;
  for (const Node* n : nodes) {
    const Value* out = n->output();
    dim_elems(ctx, ep, out);
    for (const Value* in : n->inputs) dim_elems(ctx, ep, in);
    if (is_value_reduction(*n)) {
      const Value* in = n->inputs[0];
      const std::vector<int64_t> ds = reduced_dims(*n);
      const size_t start = s.red.size();
      int64_t j = 0;
      for (int64_t k = 0; k < in->rank(); ++k) {
        const bool r = std::binary_search(ds.begin(), ds.end(), k);
        if (r) {
          if (!is_unit(in->shape[static_cast<size_t>(k)]))
            s.red.push_back(dim_elems(ctx, ep, in) + static_cast<int>(k));
          if (keepdim(*n)) ++j;
          continue;
        }
        if (!tie_dims(ctx, ep, in, k, out, j++)) return false;
      }
      if (s.red.size() > start) s.red_off.push_back(static_cast<int>(s.red.size()));
    } else if (n->is_op(OpId::reshape)) {
      const Value* in = n->inputs[0];
      s.a.clear();
      s.b.clear();
      for (int64_t k = 0; k < in->rank(); ++k)
        if (!is_unit(in->shape[static_cast<size_t>(k)])) s.a.push_back(k);
      for (int64_t k = 0; k < out->rank(); ++k)
        if (!is_unit(out->shape[static_cast<size_t>(k)])) s.b.push_back(k);
      if (s.a.size() != s.b.size()) return false;
      for (size_t k = 0; k < s.a.size(); ++k)
        if (!tie_dims(ctx, ep, in, s.a[k], out, s.b[k])) return false;
    } else {
      // Elementwise and expand: NumPy broadcasting, inputs right-aligned.
      for (const Value* in : n->inputs) {
        const int64_t off = out->rank() - in->rank();
        if (off < 0) return false;
        for (int64_t k = 0; k < in->rank(); ++k) {
          if (is_unit(in->shape[static_cast<size_t>(k)])) continue;  // broadcast
          if (!tie_dims(ctx, ep, in, k, out, off + k)) return false;
        }
      }
    }
  }
  return true;
}

// The classes of the non-unit dims and, per value, the classes of its dims.
void number_classes(const Ctx& ctx) {
  Scratch& s = ctx.scratch;
  // Classes of non-unit dims, numbered in first-seen order (deterministic).
  s.root_cls.assign(s.parent.size(), -1);
  s.cls_size.clear();
  // Per value (order index i): the classes of its non-unit dims, vcls[voff[i] .. voff[i+1]).
  s.vcls.clear();
  s.voff.assign(1, 0);
  for (const Value* v : s.order) {
    const int b = ctx.value_base[static_cast<size_t>(v->id())];
    for (int64_t d = 0; d < v->rank(); ++d) {
      if (is_unit(v->shape[static_cast<size_t>(d)])) continue;
      int& c = s.root_cls[static_cast<size_t>(dsu_find(s.parent, b + static_cast<int>(d)))];
      if (c < 0) {
        c = static_cast<int>(s.cls_size.size());
        s.cls_size.push_back(&v->shape[static_cast<size_t>(d)]);
      }
      s.vcls.push_back(c);
    }
    s.voff.push_back(static_cast<int>(s.vcls.size()));
  }
}

// Orders the classes so every value's dims increase, reduced classes last
// (one set for every reduction); `nrows` gets the number of kept classes.
// False when no such order exists.
bool order_classes(Scratch& s, size_t& nrows) {
  // The reduced classes: equal sets for all reductions.
  const size_t nc = s.cls_size.size();
  s.in_t.assign(nc, 0);
  const size_t nred = s.red_off.size() - 1;
  for (size_t r = 0; r < nred; ++r) {
    s.mine.assign(nc, 0);
    for (int k = s.red_off[r]; k < s.red_off[r + 1]; ++k) {
      const int e = s.red[static_cast<size_t>(k)];
      s.mine[static_cast<size_t>(s.root_cls[static_cast<size_t>(dsu_find(s.parent, e))])] = 1;
    }
    if (r == 0)
      s.in_t = s.mine;
    else if (s.mine != s.in_t)
      return false;
  }
  // Order the classes: every value's dims increase; reduced classes last.
  s.edges.clear();
  s.indeg.assign(nc, 0);
  for (size_t i = 0; i + 1 < s.voff.size(); ++i)
    for (int k = s.voff[i]; k + 1 < s.voff[i + 1]; ++k) {
      const int a = s.vcls[static_cast<size_t>(k)], b = s.vcls[static_cast<size_t>(k) + 1];
      if (a == b) return false;
      s.edges.emplace_back(a, b);
      ++s.indeg[static_cast<size_t>(b)];
    }
  s.sorted.clear();
  s.done.assign(nc, 0);
  while (s.sorted.size() < nc) {
    int pick = -1;
    for (int pass = 0; pass < 2 && pick < 0; ++pass)
      for (size_t c = 0; c < nc && pick < 0; ++c)
        if (!s.done[c] && s.indeg[c] == 0 && (pass == 1 || !s.in_t[c])) pick = static_cast<int>(c);
    if (pick < 0) return false;  // cycle: no consistent layout
    s.done[static_cast<size_t>(pick)] = 1;
    s.sorted.push_back(pick);
    for (const auto& [x, y] : s.edges)
      if (x == pick) --s.indeg[static_cast<size_t>(y)];
  }
  s.rank_of.assign(nc, 0);
  for (size_t k = 0; k < nc; ++k) s.rank_of[static_cast<size_t>(s.sorted[k])] = static_cast<int>(k);
  nrows = 0;
  for (size_t k = 0; k < nc; ++k) {
    const bool t = s.in_t[static_cast<size_t>(s.sorted[k])];
    if (t && k < nrows) return false;
    if (!t) {
      if (k != nrows) return false;  // a kept dim after a reduced one
      ++nrows;
    }
  }
  return true;
}

// The group's inputs (first-use order) and outputs (used outside the group,
// or graph outputs).
void list_group_io(const Ctx& ctx, int ep, const std::vector<const Node*>& nodes) {
  Scratch& s = ctx.scratch;
  s.ins.clear();
  s.outs.clear();
  for (const Node* n : nodes)
    for (const Value* v : n->inputs) {
      if ((v->producer && ctx.member(v->producer)) || inlined_constant(v)) continue;
      int& listed = ctx.value_input[static_cast<size_t>(v->id())];
      if (listed == ep) continue;
      listed = ep;
      s.ins.push_back(v);
    }
  for (const Node* n : nodes)
    for (const Value* v : n->outputs) {
      bool external = ctx.is_output(v);
      for (const Node* u : v->users) external = external || !ctx.member(u);
      if (external) s.outs.push_back(v);
    }
}

// Each input's and output's dense pattern over the sorted classes, and the
// kernel dims (adjacent classes with equal patterns coalesced). False when an
// output would be stored twice or the reduced dims are not one inner dim.
bool coalesce_patterns(const Ctx& ctx, size_t nrows, bool reduces) {
  Scratch& s = ctx.scratch;
  const size_t nc = s.cls_size.size();
  // Dense pattern over the sorted classes, one row per input, then per output.
  const size_t nrow = s.ins.size() + s.outs.size();
  s.pats.assign(nrow * nc, 0);
  auto pattern = [&](size_t row, const Value* v) {
    const auto i = static_cast<size_t>(ctx.value_idx[static_cast<size_t>(v->id())]);
    for (int k = s.voff[i]; k < s.voff[i + 1]; ++k)
      s.pats[row * nc + static_cast<size_t>(
                            s.rank_of[static_cast<size_t>(s.vcls[static_cast<size_t>(k)])])] = 1;
  };
  for (size_t a = 0; a < s.ins.size(); ++a) pattern(a, s.ins[a]);
  for (size_t a = 0; a < s.outs.size(); ++a) {
    const size_t row = s.ins.size() + a;
    pattern(row, s.outs[a]);
    for (size_t k = 0; k < nc; ++k)
      if (!s.pats[row * nc + k] && (k < nrows || !reduces)) return false;  // would store twice
  }
  // Coalesce adjacent dims with equal patterns everywhere (never across rows|inner).
  s.starts.clear();
  for (size_t k = 0; k < nc; ++k) {
    bool join = k > 0 && (k < nrows) == (k - 1 < nrows);
    for (size_t a = 0; join && a < nrow; ++a) join = s.pats[a * nc + k] == s.pats[a * nc + k - 1];
    if (!join) s.starts.push_back(k);
  }
  const size_t nd = s.starts.size();
  if (reduces &&
      (nd == 0 || s.starts[nd - 1] < nrows || (nd >= 2 && s.starts[nd - 1] - 1 >= nrows)))
    return false;  // the reduced dims do not coalesce into one inner dim
  return true;
}

// The group analyze() found: nodes, inputs, outputs, dims, patterns, kind.
void fill_group(const Ctx& ctx, const std::vector<const Node*>& nodes, bool reduces,
                FusionGroup& grp) {
  Scratch& s = ctx.scratch;
  const size_t nc = s.cls_size.size();
  const size_t nd = s.starts.size();
  grp = FusionGroup{};
  grp.nodes = nodes;
  grp.inputs = s.ins;
  grp.outputs = s.outs;
  s.starts.push_back(nc);
  if (nd == 0) grp.dims.emplace_back();
  for (size_t d = 0; d < nd; ++d) {
    std::vector<SymInt> f;
    for (size_t k = s.starts[d]; k < s.starts[d + 1]; ++k)
      f.push_back(*s.cls_size[static_cast<size_t>(s.sorted[k])]);
    grp.dims.push_back(std::move(f));
  }
  auto kernel_pattern = [&](size_t row) {
    std::vector<bool> r;
    for (size_t d = 0; d < nd; ++d) r.push_back(s.pats[row * nc + s.starts[d]] != 0);
    if (nd == 0) r.push_back(true);
    return r;
  };
  for (size_t a = 0; a < grp.inputs.size(); ++a) grp.in_dense.push_back(kernel_pattern(a));
  for (size_t a = 0; a < grp.outputs.size(); ++a)
    grp.out_dense.push_back(kernel_pattern(grp.inputs.size() + a));
  grp.kind = reduces ? GroupKind::kReduction : GroupKind::kPointwise;
  if (!reduces)
    for (const Value* v : grp.inputs)
      if (v->producer && !v->producer->is_constant() && v->producer->info().has(kOpaque))
        grp.kind = GroupKind::kEpilogue;
}

// Rule 3: true if the node set has an iteration space; then, if `group` is
// given, it receives the group (inputs, outputs, dims and patterns).
bool analyze(const Ctx& ctx, const std::vector<const Node*>& nodes, FusionGroup* group) {
  const int ep = ctx.mark(nodes);
  Scratch& s = ctx.scratch;
  s.parent.clear();
  s.order.clear();
  s.red.clear();
  s.red_off.assign(1, 0);
  if (!unite_dims(ctx, ep, nodes)) return false;
  number_classes(ctx);
  size_t nrows = 0;
  if (!order_classes(s, nrows)) return false;
  const bool reduces = s.red_off.size() > 1;
  list_group_io(ctx, ep, nodes);
  if (!coalesce_patterns(ctx, nrows, reduces)) return false;
  if (group != nullptr) fill_group(ctx, nodes, reduces, *group);
  return true;
}

// The planner's state: groups being grown, node -> group.
struct Planner {
  const Ctx& ctx;
  const FusionOptions& opts;
  std::vector<std::vector<const Node*>> groups;  // empty = merged away
  std::vector<int> group_of;                     // by position, -1: none yet
  mutable std::vector<int> group_seen;           // by group: the acyclic() call that saw it
  mutable int search = 0;
  detail::LateCopies late{ctx.g};  // rule 11
  std::vector<int> cover;          // rule 12 (merge_siblings)

  int group(const Node* n) const { return group_of[static_cast<size_t>(ctx.at(n))]; }

  // Rule 5: true if no path leaves `cand` and re-enters it (through unfused
  // nodes or whole other groups). `merged` are the groups cand absorbs; `last`
  // is a position no group spans (no group has nodes on both sides), at or
  // after cand's newest node: a later node cannot lead back. While groups
  // grow (rule 2), later nodes have none yet: cand's newest node.
  bool acyclic(const std::vector<const Node*>& cand, const std::vector<int>& merged,
               int last) const {
    ctx.mark(cand);
    const int ep = ctx.epoch;
    // Stamps, not a fresh array per call: there are as many groups as nodes.
    group_seen.resize(groups.size(), 0);
    ++search;
    for (int gi : merged) group_seen[static_cast<size_t>(gi)] = search;
    std::vector<const Node*>& stack = ctx.scratch.stack;
    stack.clear();
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
      if (gu >= 0 && group_seen[static_cast<size_t>(gu)] != search) {
        group_seen[static_cast<size_t>(gu)] = search;
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
    if (ctx.at(n) - ctx.at(cand.front()) > opts.max_group_span) return false;  // rule 10
    if (!late.allows(cand)) return false;  // rule 11 (cand is in order)
    if (!analyze(ctx, cand, nullptr)) return false;
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

  // Rule 12: merges groups gi and gj, both reading v; true if merged.
  bool try_merge(int gi, int gj, const Value* v) {
    const auto& a = groups[static_cast<size_t>(gi)];
    const auto& b = groups[static_cast<size_t>(gj)];
    if (a.size() + b.size() > static_cast<size_t>(opts.max_group_nodes)) return false;
    std::vector<const Node*> cand(a);
    cand.insert(cand.end(), b.begin(), b.end());
    std::sort(cand.begin(), cand.end(),
              [&](const Node* x, const Node* y) { return ctx.at(x) < ctx.at(y); });
    const int first = ctx.at(cand.front());
    int last = ctx.at(cand.back());
    if (last - first > opts.max_group_span) return false;  // rule 10
    if (!late.allows(cand)) return false;                  // rule 11
    FusionGroup grp;
    if (!analyze(ctx, cand, &grp)) return false;
    const auto in = std::find(grp.inputs.begin(), grp.inputs.end(), v);
    if (in == grp.inputs.end()) return false;
    for (bool dense : grp.in_dense[static_cast<size_t>(in - grp.inputs.begin())])
      if (!dense) return false;  // a broadcast read: nothing saved
    if (!keeps_column_sums(gi, grp) || !keeps_column_sums(gj, grp)) return false;
    // A path may leave at a group's later nodes and come back from its
    // earlier ones: search up to a position that no group spans.
    const int newest = last;
    while (cover[static_cast<size_t>(last)] > last) last = cover[static_cast<size_t>(last)];
    if (!acyclic(cand, {gi, gj}, last)) return false;
    for (int q = first; q < newest; ++q)
      cover[static_cast<size_t>(q)] = std::max(cover[static_cast<size_t>(q)], newest);
    const int target = std::min(gi, gj);
    groups[static_cast<size_t>(gi)].clear();
    groups[static_cast<size_t>(gj)].clear();
    groups[static_cast<size_t>(target)] = cand;
    for (const Node* m : cand) group_of[static_cast<size_t>(ctx.at(m))] = target;
    return true;
  }

  // Whether every column sum that would join group gi (rule 9) still joins
  // `merged`: a merged space may coalesce its dims otherwise (another input
  // broadcast along some of them), and a sum over the rows of gi would then
  // keep two kernel dims and run alone.
  bool keeps_column_sums(int gi, const FusionGroup& merged) const {
    FusionGroup alone;
    if (!analyze(ctx, groups[static_cast<size_t>(gi)], &alone)) return false;
    for (const auto* values : {&alone.outputs, &alone.inputs})
      for (const Value* w : *values)
        for (const Node* u : w->users) {
          if (group(u) >= 0 || !detail::column_sum_candidate(u)) continue;
          FusionGroup t = alone, m = merged;
          if (detail::attach_sum(t, u) && !detail::attach_sum(m, u)) return false;
        }
    return true;
  }

  // Whether group gi reads or makes a gradient (rule 8: it stays as it is).
  bool touches_gradient(int gi) const {
    for (const Node* m : groups[static_cast<size_t>(gi)]) {
      for (const Value* x : m->inputs)
        if (ctx.is_gradient(x)) return true;
      for (const Value* x : m->outputs)
        if (ctx.is_gradient(x)) return true;
    }
    return false;
  }

  // Rule 12 over every value read by two or more groups, in graph order.
  void merge_siblings() {
    // cover[p]: the newest node of the groups that begin at or before p (p if none).
    cover.resize(group_of.size());
    std::iota(cover.begin(), cover.end(), 0);
    for (const auto& grp : groups) {
      if (grp.empty()) continue;
      const int b = ctx.at(grp.back());
      for (int q = ctx.at(grp.front()); q < b; ++q)
        cover[static_cast<size_t>(q)] = std::max(cover[static_cast<size_t>(q)], b);
    }
    auto readers_of = [&](const Value* v) {
      std::vector<int> r;
      const int maker = v->producer ? group(v->producer) : -1;
      for (const Node* u : v->users) {
        const int gu = group(u);
        if (gu >= 0 && gu != maker && std::find(r.begin(), r.end(), gu) == r.end()) r.push_back(gu);
      }
      return r;
    };
    auto visit = [&](const Value* v) {
      if (v->users.size() < 2 || v->rank() == 0) return;
      std::vector<int> r = readers_of(v);
      if (r.size() < 2) return;
      std::sort(r.begin(), r.end(), [&](int x, int y) {
        return ctx.at(groups[static_cast<size_t>(x)].front()) <
               ctx.at(groups[static_cast<size_t>(y)].front());
      });
      int into = r[0];
      for (size_t k = 1; k < r.size(); ++k) {
        if (touches_gradient(into) || touches_gradient(r[k])) continue;
        if (try_merge(into, r[k], v)) into = std::min(into, r[k]);
      }
    };
    for (const Value* v : ctx.g.inputs()) visit(v);
    for (const Node* n : ctx.g.nodes())
      for (const Value* v : n->outputs) visit(v);
  }

  void add(const Node* n) {
    std::vector<int> prods;
    for (const Value* v : n->inputs) {
      const int gi = v->producer && !ctx.is_gradient(v) ? group(v->producer) : -1;
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

}  // namespace

FusionPlan plan_fusion(const ir::Graph& g, const FusionOptions& opts) {
  if (opts.precomputed) return *opts.precomputed;
  FusionPlan plan;
  plan.group_of.assign(g.num_nodes(), -1);
  if (!opts.enabled || pass_disabled("fuse")) return plan;
  Ctx ctx(g);
  Planner p{ctx, opts, {}, std::vector<int>(g.num_nodes(), -1), {}, 0, detail::LateCopies{g}, {}};
  for (const Node* n : g.nodes())
    if (fusible(*n, opts)) p.add(n);
  if (opts.siblings && !pass_disabled("fuse_siblings")) p.merge_siblings();
  if (opts.gemm_bias && !pass_disabled("fuse_gemm_bias"))
    detail::split_gemm_biases(ctx.output_flag, p.groups, [&](const std::vector<const Node*>& ns) {
      return analyze(ctx, ns, nullptr);
    });
  for (const auto& nodes : p.groups) {
    if (nodes.empty()) continue;
    if (std::none_of(nodes.begin(), nodes.end(), [](const Node* n) { return computes(*n); }))
      continue;  // rule 7
    FusionGroup grp;
    KILN_ASSERT(analyze(ctx, nodes, &grp), "fuse: a group lost its iteration space");
    const int id = static_cast<int>(plan.groups.size());
    for (const Node* n : nodes) plan.group_of[static_cast<size_t>(ctx.at(n))] = id;
    plan.groups.push_back(std::move(grp));
  }
  if (opts.column_sums && opts.reductions)
    for (const Node* n : g.nodes())
      if (n->is_op(OpId::sum) && plan.group_of[static_cast<size_t>(ctx.at(n))] < 0)
        detail::attach_column_sum(g, ctx.output_flag, plan, n);
  return plan;
}

}  // namespace kiln::passes
