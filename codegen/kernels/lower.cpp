// Lowering a fusion group to kernel IR.
//
// Each graph value of the group becomes one SSA expression, in node order:
// - group inputs are loads of their argument; 0-d constants are immediates;
// - expand, reshape and copy are the same expression (their buffers are views
//   of the iteration space, see fuse.cpp); `full` is an immediate;
// - an elementwise op casts its operands to the dtype its eager kernel computes
//   in (the output dtype; for comparisons and logical ops the promoted operand
//   dtype, taken from the op table's own promotion rule), then applies the op;
// - sum/max/min become reductions over the inner dim, in the phase after the
//   last reduction they read; their value is a `reduced` expression. A
//   reduction over size-1 dims only is the identity (sum: a cast to its dtype).
// Each group output is stored once; outputs broadcast along the inner dim are
// row stores (the kernel IR places them after the phase that makes them).
// Column sums (fuse.cpp, rule 9) are accumulating stores of the summed value,
// in f64, into per-launch partials.
#include "kernels/lower.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "kiln/error.h"

namespace kiln::detail {
namespace {

using ir::Node;
using ir::Value;
using kir::Expr;
using kir::ExprKind;

bool is_unit(const ir::SymInt& s) {
  return s.is_static() && s.b == 1;
}

// A shape-less stand-in with v's dtype, rank class and wrapped flag, for the
// op table's promotion rule.
Tensor meta_of(const Value* v) {
  auto impl = std::make_shared<TensorImpl>();
  impl->dtype = v->dtype;
  impl->shape = Dims(static_cast<size_t>(v->rank()), 1);
  impl->strides = Dims(static_cast<size_t>(v->rank()), 1);
  impl->wrapped_number = v->wrapped_number;
  return Tensor(std::move(impl));
}

// The dtype a binary op over (a, b) computes in: add's result dtype is exactly
// the promoted dtype (runtime/src/ops/binary.cpp, compute_dtype).
DType promoted(const Value* a, const Value* b) {
  const Tensor in[2] = {meta_of(a), meta_of(b)};
  std::vector<TensorMeta> out;
  op_info(OpId::add).infer(std::span<const Tensor>(in, 2), Attrs(), out);
  return out.at(0).dtype;
}

class Builder {
 public:
  explicit Builder(kir::Kernel& k) : k_(k) {}

  int add(Expr e) {
    int ph = -1;
    if (e.kind == ExprKind::kReduced) ph = k_.reductions[static_cast<size_t>(e.arg)].phase;
    for (int o : {e.a, e.b, e.c})
      if (e.kind == ExprKind::kOp && o >= 0) ph = std::max(ph, phase_[static_cast<size_t>(o)]);
    k_.exprs.push_back(e);
    phase_.push_back(ph);
    return static_cast<int>(k_.exprs.size()) - 1;
  }
  int load(int arg, DType t) { return add(Expr::load(arg, t)); }
  int constant(double v, DType t) { return add(Expr::constant(v, t)); }
  int op(OpId op, DType t, int a, int b = -1, int c = -1) {
    return add(Expr::make_op(op, t, a, b, c));
  }
  // Expression e as dtype t (one cast per (e, t)).
  int as(int e, DType t) {
    if (k_.exprs[static_cast<size_t>(e)].dtype == t) return e;
    auto [it, fresh] = casts_.emplace(std::make_pair(e, t), -1);
    if (fresh) it->second = op(OpId::cast, t, e);
    return it->second;
  }
  int reduce(OpId rop, int x, DType t) {
    kir::Reduction r;
    r.op = rop;
    r.expr = x;
    r.phase = phase_[static_cast<size_t>(x)] + 1;
    r.dtype = t;
    k_.reductions.push_back(r);
    Expr e;
    e.kind = ExprKind::kReduced;
    e.dtype = t;
    e.arg = static_cast<int>(k_.reductions.size()) - 1;
    return add(e);
  }
  DType dtype(int e) const { return k_.exprs[static_cast<size_t>(e)].dtype; }

 private:
  kir::Kernel& k_;
  std::vector<int> phase_;  // highest reduction phase each expression reads (-1: none)
  std::map<std::pair<int, DType>, int> casts_;
};

// The value of a 0-d constant as the kernel IR's double.
double constant_value(const Node& c) {
  const Tensor& t = c.constant;
  if (is_floating(t.dtype())) return t.item<double>();
  return static_cast<double>(t.item<int64_t>());
}

double full_value(const Node& n) {
  const DType t = n.output()->dtype;
  if (is_floating(t)) return n.attrs.f("value");
  const int64_t v =
      n.attrs.has("ivalue") ? n.attrs.i("ivalue") : static_cast<int64_t>(n.attrs.f("value"));
  if (t == DType::b8)
    return (n.attrs.has("ivalue") ? n.attrs.i("ivalue") != 0 : n.attrs.f("value") != 0) ? 1.0 : 0.0;
  return static_cast<double>(v);
}

// True if the reduction reduces only size-1 dims (it is then the identity).
bool trivial_reduction(const Node& n) {
  const Value* in = n.inputs[0];
  if (in->rank() == 0) return true;  // dims [0] or [-1] of a 0-d tensor
  Dims ds = n.attrs.has("dims") ? n.attrs.dims("dims") : Dims{};
  if (ds.empty())
    for (int64_t d = 0; d < in->rank(); ++d) ds.push_back(d);
  for (int64_t d : ds) {
    const int64_t k = d < 0 ? d + in->rank() : d;
    if (!is_unit(in->shape[static_cast<size_t>(k)])) return false;
  }
  return true;
}

// Per argument: 1 if expression `root` depends on a load of it.
std::vector<char> loads_of(const kir::Kernel& k, int root) {
  std::vector<char> need(k.exprs.size(), 0), args(k.args.size(), 0);
  need[static_cast<size_t>(root)] = 1;
  for (size_t i = k.exprs.size(); i-- > 0;) {
    if (!need[i]) continue;
    const Expr& e = k.exprs[i];
    if (e.kind == ExprKind::kLoad) args[static_cast<size_t>(e.arg)] = 1;
    if (e.kind != ExprKind::kOp) continue;
    for (int o : {e.a, e.b, e.c})
      if (o >= 0) need[static_cast<size_t>(o)] = 1;
  }
  return args;
}

std::string kernel_name(const passes::FusionGroup& g) {
  std::string s = "fused";
  int n = 0;
  for (const Node* node : g.nodes) {
    if (node->is_op(OpId::expand) || node->is_op(OpId::reshape) || node->is_op(OpId::copy))
      continue;
    if (n++ == 4) {
      s += "_etc";
      break;
    }
    s += str("_", op_name(node->op));
  }
  return s;
}

}  // namespace

LoweredGroup lower(const passes::FusionGroup& g, bool reassociate) {
  LoweredGroup lg;
  kir::Kernel& k = lg.kernel;
  k.name = kernel_name(g);
  k.reassoc = reassociate;
  k.rank = static_cast<int>(g.dims.size());
  lg.dims = g.dims;
  lg.num_inputs = g.inputs.size();
  Builder b(k);
  std::unordered_map<const Value*, int> expr;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const Value* v = g.inputs[i];
    k.args.push_back({v->dtype, false, g.in_dense[i]});
    lg.args.push_back(v);
    expr[v] = b.load(static_cast<int>(i), v->dtype);
  }
  auto get = [&](const Value* v) {
    auto it = expr.find(v);
    if (it != expr.end()) return it->second;
    KILN_ASSERT(v->producer && v->producer->is_constant() && v->rank() == 0,
                "lower: value read by a group is neither an input nor computed in it");
    const int e = b.constant(constant_value(*v->producer), v->dtype);
    expr[v] = e;
    return e;
  };
  for (const Node* n : g.nodes) {
    const Value* out = n->output();
    const DType t = out->dtype;
    int e = -1;
    if (n->is_op(OpId::expand) || n->is_op(OpId::reshape) || n->is_op(OpId::copy)) {
      e = get(n->inputs[0]);
    } else if (n->is_op(OpId::full)) {
      e = b.constant(full_value(*n), t);
    } else if (n->is_op(OpId::cast)) {
      e = b.as(get(n->inputs[0]), t);
    } else if (n->is_op(OpId::sum) || n->is_op(OpId::max) || n->is_op(OpId::min)) {
      const int x = get(n->inputs[0]);
      if (trivial_reduction(*n)) {
        e = b.as(x, t);
        // Eager sums start from +0, so a sum of one -0 is +0.
        if (n->is_op(OpId::sum) && is_floating(t)) e = b.op(OpId::add, t, e, b.constant(0.0, t));
      } else {
        // Floats keep their dtype (sums accumulate in double inside the kernel, as
        // eager does); integer and bool sums accumulate in i64.
        e = b.reduce(n->op, x, t);
      }
    } else if (n->is_op(OpId::where)) {
      const int c = get(n->inputs[0]);
      e = b.op(OpId::where, t, c, b.as(get(n->inputs[1]), t), b.as(get(n->inputs[2]), t));
    } else if (n->is_op(OpId::logical_not)) {
      e = b.op(OpId::logical_not, t, get(n->inputs[0]));
    } else if (n->inputs.size() == 1) {
      e = b.op(n->op, t, b.as(get(n->inputs[0]), t));
    } else {
      KILN_ASSERT(n->inputs.size() == 2 && n->info().has(kElementwise), "lower: ", op_name(n->op),
                  " is not fusible");
      const DType c = n->info().has(kPredicate) ? promoted(n->inputs[0], n->inputs[1]) : t;
      e = b.op(n->op, t, b.as(get(n->inputs[0]), c), b.as(get(n->inputs[1]), c));
    }
    KILN_ASSERT(b.dtype(e) == t, "lower: ", op_name(n->op), " made a ", b.dtype(e),
                " expression for a ", t, " value");
    expr[out] = e;
  }
  lg.column_sum.assign(g.outputs.size(), 0);
  for (size_t j = 0; j < g.outputs.size(); ++j) {
    const Value* v = g.outputs[j];
    const int arg = static_cast<int>(k.args.size());
    lg.args.push_back(v);
    const auto cs = std::find_if(g.column_sums.begin(), g.column_sums.end(),
                                 [&](const Node* n) { return n->output() == v; });
    if (cs == g.column_sums.end()) {
      k.args.push_back({v->dtype, true, g.out_dense[j]});
      k.stores.push_back({arg, expr.at(v)});
      continue;
    }
    // A column sum: f64 partials the executor adds up into v (as eager's sums).
    lg.column_sum[j] = 1;
    k.args.push_back({DType::f64, true, g.out_dense[j]});
    k.stores.push_back({arg, b.as(expr.at((*cs)->inputs[0]), DType::f64), true});
  }
  lg.in_place.resize(g.outputs.size());
  if (!k.has_reductions()) {
    auto all_dense = [](const std::vector<bool>& p) {
      for (bool d : p)
        if (!d) return false;
      return true;
    };
    for (size_t j = 0; j < g.outputs.size(); ++j) {
      // Only inputs the stored value reads: the backend then loads them (once, as
      // one SSA value) before this store, whatever order the other stores take.
      const std::vector<char> reads = loads_of(k, k.stores[j].expr);
      for (size_t i = 0; i < g.inputs.size(); ++i)
        if (reads[i] && g.inputs[i]->dtype == g.outputs[j]->dtype && all_dense(g.in_dense[i]) &&
            all_dense(g.out_dense[j]))
          lg.in_place[j].push_back(static_cast<int>(i));
    }
  }
  kir::verify(k);
  return lg;
}

std::vector<int64_t> kernel_sizes(const LoweredGroup& lg, std::span<const int64_t> syms) {
  std::vector<int64_t> sizes;
  sizes.reserve(lg.dims.size());
  for (const auto& f : lg.dims) {
    int64_t n = 1;
    for (const ir::SymInt& s : f) n *= s.eval(syms);
    sizes.push_back(n);
  }
  return sizes;
}

}  // namespace kiln::detail
