// Algebraic simplification. Every rule is an identity that holds bit for bit
// under IEEE semantics (the IR contract: NaN and infinities are possible, no
// fast-math), so a simplified graph computes exactly what eager computes.
//
// "1" and "0" below mean a constant node without symbolic value whose elements
// (any dtype, wrapped or not, 0-d or not) are all exactly 1 (or 0).
//
// Replacements (the node's output is replaced by an existing value x):
// - x*1, 1*x, x/1              -> x
// - x-0                         -> x  (floats: only +0.0; x - (-0.0) turns -0.0 into +0.0)
// - x+0, 0+x                    -> x  (floats: only when the zero is -0.0)
//   We do NOT fold x + (+0.0) for floats, unlike XLA/Inductor: -0.0 + 0.0 is
//   +0.0, which is visible through 1/x, atan2 or sign, and KILN_CHECK_COMPILED
//   compares compiled against eager bit for bit. Integers and bools have no
//   signed zero, so any zero folds there.
// - neg(neg(x))                 -> x  (also exact for NaN and integer wrap-around)
// - reshape(x) to x's shape, expand(x) to x's shape, permute(x) by the
//   identity, cast(x) to x's dtype -> x
// Only when x has the same dtype, shape and wrapped-number flag as the node's
// output: otherwise the node was also a broadcast, a promotion (x*1 with a
// wider 1) or a change of promotion priority (wrapped numbers do not widen
// their users' dtype), which dropping it would lose.
//
// New values:
// - x-x -> full(0) of the output's dtype and shape, for integer dtypes only
//   (inf-inf and NaN-NaN are NaN) and static shapes (full's shape attr).
//
// Combinations (the outer node is rewired to the inner node's input; the inner
// node is left for dce if nothing else uses it):
// - permute(permute(x, p), q) -> permute(x, r) with r[i] = p[q[i]] (then x if
//   r is the identity); neither node may have sym_attrs.
// - reshape(reshape(x)) -> reshape(x): reshape only depends on the element
//   count, which the inner reshape keeps. The outer node's attrs and sym_attrs
//   stay as they are and stay valid.
// - expand(expand(x)) -> expand(x): every dim of x is 1 or equal to the middle
//   dim, which is 1 or equal to the final dim. A -1 in the outer shape meant
//   "the middle size", so it is replaced by the (static) output size; with
//   sym_attrs and a -1 the rule does not fire.
// - sum(reshape(x)) over a leading run of dims that the reshape only regroups
//   (x = [A..., K...] reshaped to [B..., K...], the sum over the B dims) ->
//   the sum over x's A dims (then a reshape to keepdim's shape): the same rows
//   added in the same order (eager and fused sums coalesce the reduced dims),
//   and the sum can then join the kernel that computes x (fuse rule 9: the
//   output layer's bias gradient, a sum of the loss gradient reshaped).
// - gather(x op1 b1 op2 b2 ..., d, index), each b_k the same along d (size 1
//   there) and where it varies elsewhere, index covering x there -> the chain
//   applied to gather(x, d, index): each gathered element is the same x
//   element with the same b values, in the same operations (add, sub, mul,
//   div). Only when x is made by a node that computes no elements (a matmul,
//   a movement, a graph input): then the gather reads what is stored anyway,
//   and a kernel computing the chain (log_softmax's x - max - log(sum), the
//   cross-entropy's) need not store it for the gather ([8192, 1000] a
//   transformer step).
#include "kiln/passes/simplify.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kiln/op_table.h"

namespace kiln::passes {
namespace {

using ir::Node;
using ir::Value;

// Which zeros count as the neutral element.
enum class Zero { kAny, kPositive, kNegative };

bool same_meta(const Value* a, const Value* b) {
  return a->dtype == b->dtype && a->shape == b->shape && a->wrapped_number == b->wrapped_number;
}

// The producer of v if it is a plain (non-symbolic) constant node.
const Node* plain_constant(const Value* v) {
  const Node* p = v->producer;
  if (p == nullptr || !p->is_constant() || !p->sym_attrs.empty()) return nullptr;
  return p->constant.defined() ? p : nullptr;
}

bool all_ones(const Value* v) {
  const Node* c = plain_constant(v);
  if (c == nullptr) return false;
  const Tensor h = c->constant.cpu();  // a device constant's values through the host
  for (int64_t i = 0; i < h.numel(); ++i)
    if (element_as_double(h, i) != 1.0) return false;
  return true;
}

bool all_zeros(const Value* v, Zero which) {
  const Node* c = plain_constant(v);
  if (c == nullptr) return false;
  const Tensor h = c->constant.cpu();  // a device constant's values through the host
  for (int64_t i = 0; i < h.numel(); ++i) {
    double x = element_as_double(h, i);  // integers read as +0.0
    if (x != 0.0) return false;
    if (which == Zero::kPositive && std::signbit(x)) return false;
    if (which == Zero::kNegative && !std::signbit(x)) return false;
  }
  return true;
}

// The producer of v if it is op `op` (and, if asked, without sym_attrs).
Node* producer_op(const Value* v, OpId op, bool plain) {
  Node* p = v->producer;
  if (p == nullptr || !p->is_op(op)) return nullptr;
  if (plain && !p->sym_attrs.empty()) return nullptr;
  return p;
}

// Permutation dims wrapped to [0, rank), or empty if malformed.
Dims wrapped_perm(const Dims& dims, int64_t rank) {
  Dims p;
  if (static_cast<int64_t>(dims.size()) != rank) return {};
  for (int64_t d : dims) {
    int64_t w = d < 0 ? d + rank : d;
    if (w < 0 || w >= rank) return {};
    p.push_back(w);
  }
  return p;
}

bool is_identity_perm(const Dims& p) {
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != static_cast<int64_t>(i)) return false;
  return true;
}

// ---- combinations: rewire the outer node n past its inner producer ----

bool combine_permutes(ir::Graph& g, Node* n) {
  if (!n->sym_attrs.empty()) return false;
  Node* inner = producer_op(n->inputs[0], OpId::permute, /*plain=*/true);
  if (inner == nullptr) return false;
  Value* x = inner->inputs[0];
  Dims p = wrapped_perm(inner->attrs.dims("dims"), x->rank());
  Dims q = wrapped_perm(n->attrs.dims("dims"), x->rank());
  if (p.empty() != (x->rank() == 0) || q.size() != p.size()) return false;
  Dims r;
  for (int64_t i : q) r.push_back(p[static_cast<size_t>(i)]);
  n->attrs.set("dims", r);
  g.set_input(n, 0, x);
  return true;
}

bool combine_reshapes(ir::Graph& g, Node* n) {
  Node* inner = producer_op(n->inputs[0], OpId::reshape, /*plain=*/false);
  if (inner == nullptr) return false;
  g.set_input(n, 0, inner->inputs[0]);
  return true;
}

bool combine_expands(ir::Graph& g, Node* n) {
  Node* inner = producer_op(n->inputs[0], OpId::expand, /*plain=*/false);
  if (inner == nullptr) return false;
  const Dims& shape = n->attrs.dims("shape");
  bool has_minus_one = std::find(shape.begin(), shape.end(), -1) != shape.end();
  if (has_minus_one) {
    // The -1 entries meant "the middle size"; spell the sizes out.
    if (!n->sym_attrs.empty() || !ir::is_static(n->output()->shape)) return false;
    n->attrs.set("shape", ir::eval_shape(n->output()->shape, {}));
  }
  g.set_input(n, 0, inner->inputs[0]);
  return true;
}

// ---- replacements: the value n's output equals, or null ----

Value* neutral_operand(const Node* n) {
  if (n->inputs.size() != 2) return nullptr;
  Value* a = n->inputs[0];
  Value* b = n->inputs[1];
  const Value* out = n->output();
  const Zero float_zero_add = is_floating(out->dtype) ? Zero::kNegative : Zero::kAny;
  const Zero float_zero_sub = is_floating(out->dtype) ? Zero::kPositive : Zero::kAny;
  switch (n->op) {
    case OpId::mul:
      if (same_meta(a, out) && all_ones(b)) return a;
      if (same_meta(b, out) && all_ones(a)) return b;
      return nullptr;
    case OpId::div:
      return same_meta(a, out) && all_ones(b) ? a : nullptr;
    case OpId::add:
      if (same_meta(a, out) && all_zeros(b, float_zero_add)) return a;
      if (same_meta(b, out) && all_zeros(a, float_zero_add)) return b;
      return nullptr;
    case OpId::sub:
      return same_meta(a, out) && all_zeros(b, float_zero_sub) ? a : nullptr;
    default:
      return nullptr;
  }
}

Value* replacement(const Node* n) {
  if (n->outputs.size() != 1 || n->inputs.empty()) return nullptr;
  Value* x = n->inputs[0];
  const Value* out = n->output();
  switch (n->op) {
    case OpId::mul:
    case OpId::div:
    case OpId::add:
    case OpId::sub:
      return neutral_operand(n);
    case OpId::neg:
      if (const Node* inner = producer_op(x, OpId::neg, /*plain=*/false)) {
        Value* y = inner->inputs[0];
        return same_meta(y, out) ? y : nullptr;
      }
      return nullptr;
    case OpId::reshape:
    case OpId::expand:
    case OpId::cast:
      return same_meta(x, out) ? x : nullptr;
    case OpId::permute: {
      if (!n->sym_attrs.empty()) return nullptr;
      Dims p = wrapped_perm(n->attrs.dims("dims"), x->rank());
      bool ok = p.size() == static_cast<size_t>(x->rank()) && is_identity_perm(p);
      return ok && same_meta(x, out) ? x : nullptr;
    }
    default:
      return nullptr;
  }
}

// x - x for integers: a zero-filled `full` inserted before n, or null.
Value* integer_self_difference(ir::Graph& g, Node* n) {
  if (!n->is_op(OpId::sub) || n->inputs[0] != n->inputs[1]) return nullptr;
  const Value* out = n->output();
  if (!is_integral(out->dtype) || out->wrapped_number || !ir::is_static(out->shape)) return nullptr;
  Attrs at;
  at.set("shape", ir::eval_shape(out->shape, {}))
      .set("value", AttrValue(0.0))
      .set("ivalue", AttrValue(int64_t{0}))
      .set("dtype", out->dtype);
  return g.add_op(OpId::full, {}, std::move(at), {{out->dtype, out->shape}}, n)->output();
}

// The sum rule above: true if it rewired or replaced n.
bool sum_through_reshape(ir::Graph& g, Node* n) {
  if (!n->is_op(OpId::sum) || !n->sym_attrs.empty() || !n->attrs.has("dims")) return false;
  const Node* r = producer_op(n->inputs[0], OpId::reshape, /*plain=*/true);
  if (r == nullptr) return false;
  Value* x = r->inputs[0];
  const Value* v = n->inputs[0];
  if (!ir::is_static(x->shape) || !ir::is_static(v->shape) || !ir::is_static(n->output()->shape))
    return false;
  const int64_t rank = v->rank();
  Dims ds = n->attrs.dims("dims");
  for (int64_t& d : ds)
    if (d < 0) d += rank;
  std::sort(ds.begin(), ds.end());
  const auto nb = static_cast<int64_t>(ds.size());
  for (int64_t i = 0; i < nb; ++i)
    if (ds[static_cast<size_t>(i)] != i) return false;  // not a leading run
  const int64_t kept = rank - nb, na = x->rank() - kept;
  if (nb == 0 || kept == 0 || na <= 0) return false;
  for (int64_t k = 0; k < kept; ++k)
    if (!(x->shape[static_cast<size_t>(na + k)] == v->shape[static_cast<size_t>(nb + k)]))
      return false;
  Dims xd;
  for (int64_t i = 0; i < na; ++i) xd.push_back(i);
  const bool keep = n->attrs.has("keepdim") && n->attrs.b("keepdim");
  if (!keep) {  // the output is K either way
    n->attrs.set("dims", xd);
    g.set_input(n, 0, x);
    return true;
  }
  Attrs at = n->attrs;
  at.set("dims", xd).set("keepdim", false);
  const ir::SymShape k(x->shape.begin() + na, x->shape.end());
  Value* s = g.add_op(OpId::sum, {x}, std::move(at), {{n->output()->dtype, k}}, n)->output();
  Attrs ra;
  ra.set("shape", ir::eval_shape(n->output()->shape, {}));
  Value* out =
      g.add_op(OpId::reshape, {s}, std::move(ra), {{n->output()->dtype, n->output()->shape}}, n)
          ->output();
  g.replace_all_uses(n->output(), out);
  g.erase(n);
  return true;
}

// Whether operand b of a binary op over `out`'s shape is the same along
// dim d and, where it varies, varies with a dim that `index` covers.
bool row_operand(const Value* b, const Value* out, const Value* index, int64_t d) {
  const int64_t rank = out->rank(), pad = rank - b->rank();
  if (pad < 0) return false;
  for (int64_t e = 0; e < rank; ++e) {
    const ir::SymInt one(1);
    const ir::SymInt& be = e < pad ? one : b->shape[static_cast<size_t>(e - pad)];
    if (be == one) continue;
    const auto u = static_cast<size_t>(e);
    if (e == d || !(be == out->shape[u]) || !(index->shape[u] == out->shape[u])) return false;
  }
  return true;
}

// The gather rule above: true if it replaced gather node n.
bool gather_through_row_ops(ir::Graph& g, Node* n) {
  if (!n->is_op(OpId::gather) || !n->sym_attrs.empty()) return false;
  Value* index = n->inputs[1];
  const Value* v = n->inputs[0];
  if (index->rank() != v->rank() || v->rank() == 0) return false;
  int64_t d = n->attrs.i("dim");
  if (d < 0) d += v->rank();
  struct Step {
    const Node* op;
    int row;  // the operand index of b
  };
  std::vector<Step> chain;  // outermost first
  Value* x = n->inputs[0];
  for (const Node* p = x->producer; p != nullptr; p = x->producer) {
    if (!(p->is_op(OpId::add) || p->is_op(OpId::sub) || p->is_op(OpId::mul) ||
          p->is_op(OpId::div)) ||
        !p->sym_attrs.empty() || p->outputs.size() != 1)
      break;
    int row = -1;
    for (int k : {1, 0})
      if (row < 0 && same_meta(p->inputs[static_cast<size_t>(1 - k)], p->output()) &&
          row_operand(p->inputs[static_cast<size_t>(k)], p->output(), index, d))
        row = k;
    if (row < 0) break;
    chain.push_back({p, row});
    x = p->inputs[static_cast<size_t>(1 - row)];
  }
  if (chain.empty()) return false;
  // x must be stored anyway: an input, a constant, or made by a node that
  // computes no elements of its own (a matmul, a movement).
  if (const Node* p = x->producer)
    if (!p->is_constant() &&
        (p->info().has(kElementwise) || p->info().has(kReduction) || p->info().has(kFactory)))
      return false;
  Value* cur =
      g.add_op(OpId::gather, {x, index}, n->attrs, {{x->dtype, index->shape}}, n)->output();
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const Node* p = it->op;
    std::vector<Value*> ins = {cur, cur};
    ins[static_cast<size_t>(it->row)] = p->inputs[static_cast<size_t>(it->row)];
    cur = g.add_op_inferred(p->op, std::move(ins), p->attrs, n)->output();
  }
  const Value* out = n->output();
  KILN_ASSERT(cur->dtype == out->dtype && cur->shape == out->shape &&
                  cur->wrapped_number == out->wrapped_number,
              "simplify: the gathered chain's type differs from the gather's");
  g.replace_all_uses(n->output(), cur);
  g.erase(n);
  return true;
}

}  // namespace

bool simplify(ir::Graph& g) {
  bool changed = false;
  for (Node* n : g.nodes()) {
    if (n->is_constant()) continue;
    // Combinations first: they can turn n into an identity (permute by p then
    // by p's inverse), which the replacement rules below then remove.
    if (n->is_op(OpId::permute)) changed |= combine_permutes(g, n);
    if (n->is_op(OpId::reshape)) changed |= combine_reshapes(g, n);
    if (n->is_op(OpId::expand)) changed |= combine_expands(g, n);
    if (sum_through_reshape(g, n) || gather_through_row_ops(g, n)) {
      changed = true;
      continue;
    }
    Value* to = replacement(n);
    if (to == nullptr) to = integer_self_difference(g, n);
    if (to == nullptr) continue;
    g.replace_all_uses(n->output(), to);
    g.erase(n);
    changed = true;
  }
  return changed;
}

}  // namespace kiln::passes
