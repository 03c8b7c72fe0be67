// The memory model of rematerialization (rule 1 of remat.cpp): the predicted
// peak of a graph run node by node, and of the executor's fused schedule.
//
// State writes (RematOptions::writes): the executor writes a new parameter or
// optimizer state into the buffer of the input it replaces when the kernel
// that makes it reads that input elementwise and nothing reads the input (or
// a view of it) afterwards; such an output is then no new buffer. Counting it
// would put a floor of every parameter and state buffer under the model's
// peak that the measured one does not have.
//
// The fused schedule's model also follows two more things the executor does,
// so that predicted == measured where it can (bench/remat_bench: 4.5 and 106
// MiB for the MLP's and the transformer's default plans; it said 4.8 and 120)
// while predicted >= measured stays true: a kernel's output written over a
// dying input of its own (in_place_outputs: only where the executor surely
// does), and a matmul computed into the buffer of an unfused cat it feeds
// through views (the cat's buffer is born with the first such matmul, which
// the model had missed: 2 MiB under the measured peak in the transformer's
// attention backward once the in-place writes were counted).
#include <algorithm>
#include <climits>
#include <cstdio>
#include <optional>

#include "kiln/error.h"
#include "kiln/ir/layout.h"
#include "remat_internal.h"

namespace kiln::passes::detail {
namespace {

using ir::Node;
using ir::Value;

int num_ids(const ir::Graph& g) {
  int ids = 0;
  for (const Value* v : g.inputs()) ids = std::max(ids, v->id() + 1);
  for (const Node* n : g.nodes())
    for (const Value* v : n->outputs) ids = std::max(ids, v->id() + 1);
  return ids;
}

// The last position (by `at`) reading each graph input directly or through views.
template <typename At>
std::vector<int> input_last_use(const ir::Graph& g, const std::vector<Node*>& nodes, int ids,
                                At at) {
  std::vector<int> origin(static_cast<size_t>(ids), -1), last(static_cast<size_t>(ids), -1);
  for (const Value* v : g.inputs()) origin[static_cast<size_t>(v->id())] = v->id();
  for (size_t p = 0; p < nodes.size(); ++p) {
    const Node* n = nodes[p];
    for (const Value* in : n->inputs)
      if (const int r = origin[static_cast<size_t>(in->id())]; r >= 0)
        last[static_cast<size_t>(r)] = std::max(last[static_cast<size_t>(r)], at(p));
    if (!n->is_constant() && n->info().has(kView) && !n->inputs.empty())
      for (const Value* o : n->outputs)
        origin[static_cast<size_t>(o->id())] = origin[static_cast<size_t>(n->inputs[0]->id())];
  }
  return last;
}

std::string mib(int64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(b) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

// Graph inputs a state write may reuse, by value id of the output: the input's
// value id, or -1. An input that is itself (or through a view) a graph output
// is never reused (the executor's rule too).
std::vector<int> write_targets(const ir::Graph& g, std::span<const StateWrite> writes, int ids) {
  std::vector<int> into(static_cast<size_t>(ids), -1);
  if (writes.empty()) return into;
  std::vector<int> origin(static_cast<size_t>(ids), -1);  // input a view chain starts from
  for (const Value* v : g.inputs()) origin[static_cast<size_t>(v->id())] = v->id();
  for (const Node* n : g.nodes())
    if (!n->is_constant() && n->info().has(kView) && !n->inputs.empty())
      for (const Value* o : n->outputs)
        origin[static_cast<size_t>(o->id())] = origin[static_cast<size_t>(n->inputs[0]->id())];
  std::vector<char> returned(static_cast<size_t>(ids), 0);
  for (const Value* o : g.outputs())
    if (const int r = origin[static_cast<size_t>(o->id())]; r >= 0)
      returned[static_cast<size_t>(r)] = 1;
  const auto outs = g.outputs();
  const auto ins = g.inputs();
  for (const StateWrite& w : writes) {
    if (w.output < 0 || w.input < 0 || static_cast<size_t>(w.output) >= outs.size() ||
        static_cast<size_t>(w.input) >= ins.size())
      continue;
    const Value* o = outs[static_cast<size_t>(w.output)];
    const Value* x = ins[static_cast<size_t>(w.input)];
    if (!o->producer || o->producer->is_constant() || returned[static_cast<size_t>(x->id())] ||
        !o->producer->info().has(kElementwise) || o->dtype != x->dtype || o->shape != x->shape)
      continue;
    into[static_cast<size_t>(o->id())] = x->id();
  }
  // An output listed twice (two inputs) reuses neither.
  return into;
}

int64_t bytes_of(const Value* v, std::span<const int64_t> syms) {
  int64_t n = 1;
  for (const ir::SymInt& d : v->shape) n *= d.is_static() ? d.b : d.eval(syms);
  return n * static_cast<int64_t>(dtype_size(v->dtype));
}

int64_t elems_of(const Value* v) {
  int64_t n = 1;
  for (const ir::SymInt& d : v->shape) n *= d.is_static() ? d.b : detail::kNominalDim;
  return n;
}

// The time to compute n again, in byte-equivalents at rate 1: one per element
// of a cheap elementwise op (it fuses into the backward's kernel, costing about
// the bandwidth of one more operand), 16 of a kCostly one (exp, div, pow: tens
// of instructions each; erf 5, below; a division by a broadcast value is a
// multiply by its reciprocal, cheap), one per input element of a reduction or copy,
// and a quarter per multiply-add of a matmul or convolution (BLAS runs about
// eight times the scalar rate). Views and fills are free. -1: never recomputed
// (random ops: the IR contract; collectives; multi-output ops).
double recompute_cost(const Node& n) {
  if (n.is_constant() || n.outputs.size() != 1) return -1;
  const OpInfo& info = n.info();
  if (info.has(kRandom) || info.has(kCollective)) return -1;
  const double out = static_cast<double>(elems_of(n.output()));
  if (info.has(kView) || n.is_op(OpId::full)) return 0;
  // A division by a broadcast value (softmax's row sum) is a multiplication
  // by its reciprocal in the kernel (computed once per row): cheap.
  const bool row_div =
      n.is_op(OpId::div) && n.inputs.size() == 2 && elems_of(n.inputs[1]) < elems_of(n.output());
  // erf runs in f32 lanes since f78447e (runtime/src/math/expansions.h): per
  // element 1/50 to 1/7 of a K = 256 matmul's output element (priced 64) in
  // remat_bench --erf-cost, 2-3 operand units at 4M elements; it was half a
  // matmul's element when it computed in double. Priced 5, not 16: above the
  // 4 bytes it saves, so the default rate alone never recomputes it (at 4, a
  // tie, it did, outside rule 4b's bound).
  // A GPU's arithmetic rate makes tens of instructions per element cost
  // about half the time of the 4 bytes they save (RematOptions::gpu).
  const double costly = pricing_for_gpu() ? 2 : n.is_op(OpId::erf) ? 5 : 16;
  if (info.has(kElementwise)) return out * (info.has(kCostly) && !row_div ? costly : 1);
  double in = 0;
  for (const Value* u : n.inputs) in += static_cast<double>(elems_of(u));
  if (n.is_op(OpId::matmul) && !n.inputs.empty() && !n.inputs[0]->shape.empty()) {
    const ir::SymInt& k = n.inputs[0]->shape.back();
    return out * static_cast<double>(k.is_static() ? k.b : detail::kNominalDim) / 4;
  }
  if (info.has(kOpaque) && n.inputs.size() >= 2 && !n.inputs[1]->shape.empty()) {
    // Convolutions: the weight's elements per output channel are the multiply-adds.
    const ir::SymInt& c = n.inputs[1]->shape[0];
    const int64_t channels = std::max<int64_t>(1, c.is_static() ? c.b : detail::kNominalDim);
    return out * static_cast<double>(elems_of(n.inputs[1]) / channels) / 4;
  }
  return std::max(in, out);
}

Model simulate(const ir::Graph& g, std::span<const StateWrite> writes) {
  return simulate(g, writes, g.nodes());
}

Model simulate(const ir::Graph& g, std::span<const StateWrite> writes, std::vector<Node*> order) {
  Model m;
  m.nodes = std::move(order);
  const int ids = num_ids(g);
  const std::vector<int64_t> syms(static_cast<size_t>(g.num_syms), kNominalDim);
  const auto sz = static_cast<size_t>(ids);
  m.root.assign(sz, -1);
  m.bytes.assign(sz, 0);
  m.birth.assign(sz, -1);
  m.last.assign(sz, -1);
  m.output.assign(sz, 0);
  for (const Value* v : g.outputs()) m.output[static_cast<size_t>(v->id())] = 1;
  const std::vector<int> into = write_targets(g, writes, ids);
  const std::vector<int> input_last =
      writes.empty()
          ? std::vector<int>()
          : input_last_use(g, m.nodes, ids, [](size_t p) { return static_cast<int>(p); });
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
      if (const int x = into[id]; x >= 0 && input_last[static_cast<size_t>(x)] <= p)
        continue;  // written over the input it replaces: no new buffer
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

std::string peak_composition(const ir::Graph& g, const Model& m) {
  if (m.peak == 0) return "";
  int64_t grads = 0, outs = 0, later = 0, work = 0;
  int n_grads = 0, n_outs = 0, n_later = 0, n_work = 0;
  std::vector<char> grad(m.root.size(), 0);
  for (size_t o = 0; o < g.outputs().size(); ++o)
    if (g.is_gradient_output(o)) grad[static_cast<size_t>(g.outputs()[o]->id())] = 1;
  for (size_t r = 0; r < m.root.size(); ++r) {
    if (m.birth[r] < 0 || m.birth[r] > m.at || m.last[r] < m.at) continue;
    const int64_t b = m.bytes[r];
    if (grad[r]) {
      grads += b;
      ++n_grads;
    } else if (m.output[r]) {
      outs += b;
      ++n_outs;
    } else if (m.birth[r] < m.at && m.last[r] > m.at) {
      later += b;
      ++n_later;
    } else {
      work += b;
      ++n_work;
    }
  }
  const Node* at = m.nodes[static_cast<size_t>(m.at)];
  return str("peak ", mib(m.peak), " at node ", m.at, " (", op_name(at->op), "): gradients ",
             mib(grads), " (", n_grads, "), other graph outputs ", mib(outs), " (", n_outs,
             "), values made before and read after it ", mib(later), " (", n_later,
             "), its own inputs and outputs ", mib(work), " (", n_work, ")");
}

namespace {

// The value a chain of views (reshape, permute) starts from.
const Value* source(const Value* v) {
  while (v->producer && !v->producer->is_constant() && v->producer->info().has(kView) &&
         !v->producer->inputs.empty())
    v = v->producer->inputs[0];
  return v;
}

// Whether a node `member` holds reads v, directly or through views.
template <typename Member>
bool feeds(const Value* v, const Member& member) {
  for (const Node* r : v->users) {
    if (member(r)) return true;
    if (!r->is_constant() && r->info().has(kView) && feeds(r->output(), member)) return true;
  }
  return false;
}

}  // namespace

LateCopies::LateCopies(const ir::Graph& g) : g_(g) {
  for (const Node* n : g.nodes())
    if (!n->is_constant() && n->info().has(kOpaque)) opaque_.push_back(n);
}

bool LateCopies::allows(const std::vector<const Node*>& cand) const {
  auto marked = [](const Node* x) { return x->attrs.has("recompute"); };
  if (cand.empty() || std::none_of(cand.begin(), cand.end(), marked)) return true;
  auto at = [&](const Node* x) { return g_.position(x); };
  auto before = [&](const Node* a, const Node* b) { return at(a) < at(b); };
  auto member = [&](const Node* x) {
    return x && std::binary_search(cand.begin(), cand.end(), x, before);
  };
  // Whether an opaque node between a and x neither reads the group nor feeds
  // it: a group holding both would make x's value that far before its use.
  auto apart = [&](const Node* a, const Node* x) {
    auto o = std::upper_bound(opaque_.begin(), opaque_.end(), a, before);
    for (; o != opaque_.end() && at(*o) < at(x); ++o) {
      const Node* m = *o;
      const bool reads = std::any_of(m->inputs.begin(), m->inputs.end(),
                                     [&](const Value* w) { return member(source(w)->producer); });
      if (!reads && !feeds(m->output(), member)) return true;
    }
    return false;
  };
  if (!marked(cand.front())) {  // the backward's own nodes may hold its copies, the forward's not
    for (const Node* x : cand) {
      if (!marked(x)) continue;
      // A copy reads forward values and copies only: an unmarked member it
      // reads is a forward node, whose kernel would make x.
      for (const Value* u : x->inputs)
        if (member(u->producer) && !marked(u->producer)) return false;
      if (apart(cand.front(), x)) return false;
    }
    return true;
  }
  const int64_t first = cand.front()->attrs.i("recompute");
  for (const Node* x : cand) {
    if (!marked(x) || x->attrs.i("recompute") == first) continue;
    for (const Value* u : x->inputs)
      if (member(u->producer) && apart(u->producer, x)) return false;
  }
  return true;
}

bool ValueCut::saved(const ir::Value* v) const {
  const int in = in_node[static_cast<size_t>(v->id())];
  return in >= 0 && side[static_cast<size_t>(in)] && !side[static_cast<size_t>(in + 1)];
}

bool ValueCut::recomputed(const ir::Value* v) const {
  const int in = in_node[static_cast<size_t>(v->id())];
  return in >= 0 && !side[static_cast<size_t>(in)];
}

ValueCut min_value_cut(const Model& m, const std::vector<ir::Value*>& needs,
                       const std::vector<char>& needed,
                       const std::function<bool(const ir::Value*)>& is_free,
                       const std::function<int64_t(ir::Value*)>& recompute) {
  ValueCut c;
  c.in_node.assign(m.root.size(), -1);
  FlowNet net;
  const int src = net.add_node(), sink = net.add_node();
  // The out node of v, created (with its in node) on first sight.
  auto get = [&](ir::Value* v) {
    int& in = c.in_node[static_cast<size_t>(v->id())];
    if (in < 0) {
      in = net.add_node();
      net.add_node();
      c.values.push_back(v);
    }
    return in + 1;
  };
  for (ir::Value* v : needs) net.add_edge(get(v), sink, kInf);
  for (size_t w = 0; w < c.values.size(); ++w) {
    ir::Value* v = c.values[w];
    const auto id = static_cast<size_t>(v->id());
    const int in = c.in_node[id];
    net.add_edge(in, in + 1, 2 * m.bytes[static_cast<size_t>(m.root[id])] + (needed[id] ? 0 : 1));
    const int64_t cap = recompute(v);
    if (cap == ValueCut::kPinned) {
      net.add_edge(src, in, kInf);
      continue;
    }
    if (cap > 0) net.add_edge(src, in, std::min(kInf, cap));
    for (ir::Value* u : v->producer->inputs)  // free values are available on both sides
      if (!is_free(u)) net.add_edge(get(u), in, kInf);
  }
  net.max_flow(src, sink);
  c.side = net.source_side(src);
  return c;
}

}  // namespace kiln::passes::detail

namespace kiln::passes {

int64_t predicted_peak_bytes(const ir::Graph& g, std::span<const StateWrite> writes) {
  return detail::simulate(g, writes).peak;
}

int64_t predicted_peak_bytes(const ir::Graph& g, const FusionPlan& plan,
                             std::span<const StateWrite> writes) {
  return detail::fused_peak(g, plan, writes, nullptr);
}

}  // namespace kiln::passes

namespace kiln::passes::detail {

namespace {

// The kernel outputs the executor writes over a dying input of their group
// (Executor::Run::kernel_output, lower()'s in_place lists): by value id of the
// output, the input; null if none. Only where it surely does: a group without
// reductions, an output that is no column sum, state write nor graph output
// (a program returning the sum of a scalar kernel's output and more measured
// 8 bytes above the prediction with it), dense, that reads the input (within
// the group); the input dense, of the same dtype and
// size, a materialized value (no graph input nor constant) that is no graph
// output, whose other readers ran at earlier steps (`step_of` a node
// position), so it dies there read by one kernel; inputs in the group's
// order, each claimed once, outputs in theirs. An unfused view, or a value an
// earlier view or cat read (another handle on its buffer, a matmul placed
// into a cat's), the executor may or may not write over: no credit for that
// output at all.
template <typename StepOf>
std::vector<const ir::Value*> in_place_outputs(const ir::Graph& g, const FusionPlan& plan,
                                               const std::vector<int>& into, int ids,
                                               StepOf step_of) {
  std::vector<const ir::Value*> over(static_cast<size_t>(ids), nullptr);
  auto group_of = [&](const ir::Node* x) { return plan.group_of[g.position(x)]; };
  auto dense = [](const std::vector<bool>& d) {
    return std::all_of(d.begin(), d.end(), [](bool b) { return b; });
  };
  for (size_t gi = 0; gi < plan.groups.size(); ++gi) {
    const FusionGroup& G = plan.groups[gi];
    if (G.reduces() || G.in_dense.size() != G.inputs.size() ||
        G.out_dense.size() != G.outputs.size())
      continue;
    std::vector<char> claimed(G.inputs.size(), 0);
    const size_t plain = G.outputs.size() - std::min(G.outputs.size(), G.column_sums.size());
    for (size_t j = 0; j < plain; ++j) {
      const ir::Value* v = G.outputs[j];
      if (into[static_cast<size_t>(v->id())] >= 0 || !dense(G.out_dense[j]) || !v->producer ||
          g.is_output(v))
        continue;
      // The group's inputs v reads, through members.
      std::vector<const ir::Value*> reads, work{v};
      std::vector<const ir::Node*> seen;
      while (!work.empty()) {
        const ir::Value* w = work.back();
        work.pop_back();
        const ir::Node* x = w->producer;
        if (!x || x->is_constant() || group_of(x) != static_cast<int>(gi)) {
          reads.push_back(w);
          continue;
        }
        if (std::find(seen.begin(), seen.end(), x) != seen.end()) continue;
        seen.push_back(x);
        work.insert(work.end(), x->inputs.begin(), x->inputs.end());
      }
      for (size_t i = 0; i < G.inputs.size(); ++i) {
        const ir::Value* u = G.inputs[i];
        const ir::Node* x = u->producer;
        if (claimed[i] || !dense(G.in_dense[i]) || u->dtype != v->dtype ||
            std::find(reads.begin(), reads.end(), u) == reads.end() || !x || x->is_constant() ||
            g.is_output(u))
          continue;  // not the executor's candidate, or never written over
        const int at = step_of(g.position(v->producer));
        bool later = false, handle = group_of(x) < 0 && x->info().has(kView);
        for (const ir::Node* r : u->users) {
          if (group_of(r) == static_cast<int>(gi)) continue;
          later = later || step_of(g.position(r)) >= at;
          handle = handle || r->info().has(kView) || r->is_op(OpId::cat);
        }
        if (later) continue;  // it does not die here
        // The executor writes over the first candidate whose buffer it holds
        // alone (Executor::Run::kernel_output): unknown for a view or a value
        // another handle shared, so no credit at all (seed 41 of the random
        // programs: written over a dying slice, 8 bytes above the prediction).
        if (handle) break;
        const int64_t nu = elems_of(u), nv = elems_of(v);
        const bool fixed = ir::is_static(u->shape) && ir::is_static(v->shape);
        if (u->shape != v->shape && fixed && nu != nv) continue;  // another size
        if (u->shape != v->shape && !fixed) break;
        claimed[i] = 1;
        over[static_cast<size_t>(v->id())] = u;
        break;
      }
    }
  }
  return over;
}

// The executor computes a matmul whose output reaches an unfused cat through
// views into the cat's buffer (codegen/executor/placement.cpp), made when the
// first such matmul runs: the cat's buffer is born then (`birth` by value id;
// the matmuls' own outputs stay counted: the placement may fail at run time).
template <typename StepOf, typename RootOf>
void placed_cat_births(const ir::Graph& g, const FusionPlan& plan, StepOf step_of, RootOf root_of,
                       std::vector<int>& birth) {
  const auto nodes = g.nodes();
  for (size_t p = 0; p < nodes.size(); ++p) {
    const ir::Node* c = nodes[p];
    if (plan.group_of[p] >= 0 || !c->is_op(OpId::cat) || root_of(c->output()) != c->output())
      continue;
    int& b = birth[static_cast<size_t>(c->output()->id())];
    for (const ir::Value* w : c->inputs) {
      const ir::Node* x = w->producer;
      while (x && !x->is_constant() && plan.group_of[g.position(x)] < 0 &&
             (x->is_op(OpId::permute) || x->is_op(OpId::reshape)))
        x = x->inputs[0]->producer;
      if (x && x->is_op(OpId::matmul) && plan.group_of[g.position(x)] < 0)
        b = std::min(b, step_of(g.position(x)));
    }
  }
}

// The layouts (strides in elements, by value id) of the unfused view chains'
// values, to tell the reshapes that copy (ir::view_output_strides, the
// runtime's rule: a reshape of a permuted kernel output usually copies; the
// randomized compiled test's seed 86 measured 144 bytes above the prediction
// when the model took it for a view). Materialized values (kernel and unfused
// outputs) are contiguous; so are graph inputs and constants, as assumed here
// (the executor does not make them so: a strided input's copies go uncounted).
class ViewLayouts {
 public:
  ViewLayouts(const ir::Graph& g, const FusionPlan& plan, std::span<const int64_t> syms, int ids)
      : g_(g), plan_(plan), syms_(syms), strides_(static_cast<size_t>(ids)) {}

  // Records the layout of x's (an unfused view node's) output; true if the
  // runtime's kernel copies instead (a reshape the layout cannot view).
  bool copies(const ir::Node* x) {
    const ir::Value* in = x->inputs[0];
    const Dims out = ir::eval_shape(x->output()->shape, syms_);
    Attrs evaluated;  // a dynamic slice's bounds
    const Attrs& a = x->sym_attrs.empty() ? x->attrs : (evaluated = x->eval_attrs(syms_));
    std::optional<Dims>& o = strides_[static_cast<size_t>(x->output()->id())];
    o = ir::view_output_strides(*x, a, ir::eval_shape(in->shape, syms_), strides_of(in), out);
    if (o) return false;
    o = contiguous_strides(out);
    return !placed(in);
  }

 private:
  Dims strides_of(const ir::Value* v) const {
    const std::optional<Dims>& s = strides_[static_cast<size_t>(v->id())];
    return s ? *s : contiguous_strides(ir::eval_shape(v->shape, syms_));
  }
  bool unfused(const ir::Node* x) const { return plan_.group_of[g_.position(x)] < 0; }
  // Whether v is read only through views by unfused movement nodes, cats and
  // matmuls down from an unfused matmul's output, none a graph output: the
  // executor then computes the matmul into the copying reshape's (or a cat's)
  // buffer and the reshape views it (codegen/executor/placement.cpp; the model
  // counts the matmul's output as that buffer).
  bool placed(const ir::Value* v) const {
    for (;; v = v->producer->inputs[0]) {
      if (g_.is_output(v)) return false;
      for (const ir::Node* u : v->users)
        if (!unfused(u) || !(u->is_op(OpId::permute) || u->is_op(OpId::reshape) ||
                             u->is_op(OpId::cat) || u->is_op(OpId::matmul)))
          return false;
      const ir::Node* p = v->producer;
      if (!p || p->is_constant() || !unfused(p)) return false;
      if (p->is_op(OpId::matmul)) return true;
      if (!p->is_op(OpId::permute) && !p->is_op(OpId::reshape)) return false;
    }
  }

  const ir::Graph& g_;
  const FusionPlan& plan_;
  std::span<const int64_t> syms_;
  std::vector<std::optional<Dims>> strides_;
};

}  // namespace

int64_t fused_peak(const ir::Graph& g, const FusionPlan& plan, std::span<const StateWrite> writes,
                   std::string* composition) {
  using ir::Node;
  using ir::Value;
  const auto nodes = g.nodes();
  const size_t n = nodes.size(), ng = plan.groups.size();
  if (plan.group_of.size() != n) return detail::simulate(g, writes).peak;
  auto pos = [&](const Node* x) { return g.position(x); };
  auto unit = [&](size_t p) {
    const int gi = plan.group_of[p];
    return gi >= 0 ? static_cast<size_t>(gi) : ng + p;
  };
  // The executor's order (unit_steps, fuse_order.cpp): a unit's step.
  std::vector<int> step(ng + n, 0);
  int t = 0;
  for (const std::vector<size_t>& units : unit_steps(g, plan)) {
    for (size_t u : units) step[u] = t;
    ++t;
  }
  // Buffers: materialized values (group outputs, unfused nodes' outputs) from
  // their unit's step to the last step reading them (or one of their views).
  const int ids = detail::num_ids(g);
  const std::vector<int> into = detail::write_targets(g, writes, ids);
  const std::vector<int> input_last =
      writes.empty()
          ? std::vector<int>()
          : detail::input_last_use(g, nodes, ids, [&](size_t p) { return step[unit(p)]; });
  std::vector<const Value*> root(static_cast<size_t>(ids), nullptr);  // by value id
  std::vector<int> birth(static_cast<size_t>(ids), -1), last(static_cast<size_t>(ids), -1);
  auto root_of = [&](const Value* v) { return root[static_cast<size_t>(v->id())]; };
  const std::vector<const Value*> over =
      in_place_outputs(g, plan, into, ids, [&](size_t p) { return step[unit(p)]; });
  const std::vector<int64_t> syms(static_cast<size_t>(g.num_syms), detail::kNominalDim);
  ViewLayouts views(g, plan, syms, ids);
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
      }
      if (const int w = into[id]; w >= 0 && input_last[static_cast<size_t>(w)] <= s)
        continue;  // written over the input it replaces
      if (gi >= 0 && over[id] && root_of(over[id])) {
        root[id] = root_of(over[id]);  // written over a dying input of its kernel
        continue;
      }
      if (gi < 0 && x->info().has(kView) && !x->inputs.empty() && !views.copies(x)) {
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
  placed_cat_births(
      g, plan, [&](size_t p) { return step[unit(p)]; }, root_of, birth);
  std::vector<const Value*> by_id(static_cast<size_t>(ids), nullptr);
  for (const Value* v : g.inputs()) by_id[static_cast<size_t>(v->id())] = v;
  for (const Node* x : nodes)
    for (const Value* v : x->outputs) by_id[static_cast<size_t>(v->id())] = v;
  std::vector<int64_t> diff(static_cast<size_t>(t) + 2, 0);
  for (size_t id = 0; id < by_id.size(); ++id) {
    if (birth[id] < 0) continue;
    const int64_t b = detail::bytes_of(by_id[id], syms);
    diff[static_cast<size_t>(birth[id])] += b;
    diff[static_cast<size_t>(last[id]) + 1] -= b;
  }
  int64_t live = 0, peak = 0;
  int at = 0;
  for (size_t k = 0; k < diff.size(); ++k)
    if ((live += diff[k]) > peak) {
      peak = live;
      at = static_cast<int>(k);
    }
  if (composition) {  // the buffers alive at the peak's step, largest first
    std::vector<std::pair<int64_t, const Value*>> alive;
    for (size_t id = 0; id < by_id.size(); ++id)
      if (birth[id] >= 0 && birth[id] <= at && last[id] >= at)
        alive.emplace_back(detail::bytes_of(by_id[id], syms), by_id[id]);
    std::sort(alive.begin(), alive.end(),
              [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<int> num(static_cast<size_t>(ids), 0);  // values numbered as ir::print does
    int next = 0;
    for (const Value* v : g.inputs()) num[static_cast<size_t>(v->id())] = next++;
    for (const Node* x : nodes)
      for (const Value* v : x->outputs) num[static_cast<size_t>(v->id())] = next++;
    *composition = str("fused peak ", mib(peak), " at step ", at, ":");
    for (const auto& [b, v] : alive) {
      const Node* p = v->producer;
      const int gi = p ? plan.group_of[pos(p)] : -1;
      *composition +=
          str(" %", num[static_cast<size_t>(v->id())], " ", p ? op_name(p->op) : "input",
              gi >= 0 ? str(" (group ", gi, ")") : "", " ", mib(b), ";");
    }
  }
  return peak;
}

}  // namespace kiln::passes::detail
