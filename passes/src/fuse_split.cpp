// Channel sums as two sums, so the large one fuses (BatchNorm's statistics).
//
// A sum over dims [0, 2, 3] of an NCHW value (BatchNorm's mean and variance, and
// in its backward sum(gy) and sum(gy * xhat)) keeps a dim in the middle. A
// fusion group reduces only the trailing dims of its iteration space (fuse.cpp,
// rule 3), so such a sum ran unfused: one strided pass of the eager reduction
// over a tensor its producer kernel had to store first. Rule: a floating sum
// whose reduced dims end with a trailing block T (here [2, 3]) and also reduce
// dims L before a kept dim (here [0]), T and L each with a dim not statically 1,
// becomes sum(sum(x, T, keepdim), all its dims, its keepdim). The inner sum
// reduces trailing dims, so it joins its producer's kernel as a row reduction
// (x is then never stored when nothing else reads it); the outer one reduces
// the small [N, C, 1, 1] result (its T dims are 1). Results differ from one sum
// by rounding only (the row sums are rounded to the dtype before the outer sum).
#include <algorithm>
#include <vector>

#include "kiln/passes/fuse.h"

namespace kiln::passes {
namespace {

using ir::Node;
using ir::Value;

bool unit(const ir::SymInt& s) {
  return s.is_static() && s.b == 1;
}

// The trailing reduced block and the other reduced dims of sum node n, or
// false when n is not a sum to split.
bool split_dims(const Node& n, Dims& trailing, Dims& leading) {
  if (!n.is_op(OpId::sum) || !n.sym_attrs.empty() || n.inputs.size() != 1) return false;
  const Value* x = n.inputs[0];
  if (x->dtype != DType::f32 && x->dtype != DType::f64) return false;
  if (n.output()->dtype != x->dtype) return false;
  const int64_t rank = x->rank();
  std::vector<int64_t> ds;
  if (n.attrs.has("dims")) {
    const Dims& a = n.attrs.dims("dims");
    ds.assign(a.begin(), a.end());
  }
  if (ds.empty()) return false;  // a sum over everything has no kept dim
  for (int64_t& d : ds)
    if (d < 0) d += rank;
  std::sort(ds.begin(), ds.end());
  ds.erase(std::unique(ds.begin(), ds.end()), ds.end());
  // From the last dim down: the reduced dims adjacent to the end are trailing.
  std::vector<int64_t> t, l;
  int64_t next = rank - 1;
  for (size_t i = ds.size(); i-- > 0;) {
    if (ds[i] == next) {
      t.push_back(ds[i]);
      --next;
    } else {
      l.push_back(ds[i]);
    }
  }
  trailing = Dims(t.rbegin(), t.rend());
  leading = Dims(l.rbegin(), l.rend());
  auto all_unit = [&](const Dims& dims) {
    for (int64_t d : dims)
      if (!unit(x->shape[static_cast<size_t>(d)])) return false;
    return true;
  };
  return !trailing.empty() && !leading.empty() && !all_unit(trailing) && !all_unit(leading);
}

}  // namespace

bool split_channel_sums(ir::Graph& g) {
  bool changed = false;
  for (Node* n : g.nodes()) {
    Dims trailing, leading;
    if (!split_dims(*n, trailing, leading)) continue;
    Value* x = n->inputs[0];
    ir::SymShape rows = x->shape;
    for (int64_t d : trailing) rows[static_cast<size_t>(d)] = ir::SymInt(1);
    Attrs inner = n->attrs;
    inner.set("dims", trailing).set("keepdim", true);
    Node* s1 = g.add_op(OpId::sum, {x}, std::move(inner), {{x->dtype, rows}}, n);
    Node* s2 = g.add_op(OpId::sum, {s1->output()}, n->attrs,
                        {{n->output()->dtype, n->output()->shape}}, n);
    g.replace_all_uses(n->output(), s2->output());
    g.erase(n);
    changed = true;
  }
  return changed;
}

}  // namespace kiln::passes
