// Copy elision. Autograd's gradient accumulation clones each gradient into the
// parameter's .grad, and a gradient flowing back through w.t() (every Linear)
// arrives as the transpose of a matmul result, so a traced training step ends
// with copy(permute(matmul(a, b))): a strided, cache-hostile transpose of every
// weight gradient. In a graph the clone is only needed when the value could be
// shared, so:
//
// - copy(x) -> x, when x is produced by a node that allocates its result (no
//   kView trait, not a collective, not a constant) and the copy is x's only
//   use (graph outputs count as uses). Nothing else can see x's buffer, so the
//   copy's result and x are indistinguishable. Exact. Also through a reshape
//   (a bias gradient's sum reshaped to the bias's shape): the reshape of a
//   fresh contiguous buffer is itself contiguous and unshared.
// - copy(permute(matmul(a, b), [1, 0])) -> matmul(permute(b, [1, 0]),
//   permute(a, [1, 0])), for 2-D a and b, when the matmul and the permute each
//   have that single use. (ab)^T = b^T a^T: the same products summed over the
//   same k, but BLAS may block k differently for the two layouts, so results
//   agree to rounding, not bit for bit (like any reassociated sum). The
//   permutes of permutes this leaves (b = w.t()) are simplify's to cancel, and
//   BLAS reads the remaining transposes through its flags, without copies.
#include "kiln/passes/elide_copies.h"

#include <utility>

#include "kiln/op_table.h"
#include "kiln/passes/pass_manager.h"

namespace kiln::passes {
namespace {

using ir::Node;
using ir::Value;

bool is_2d_transpose(const Node* n) {
  if (!n->is_op(OpId::permute) || !n->sym_attrs.empty() || n->inputs[0]->rank() != 2) return false;
  const Dims& d = n->attrs.dims("dims");
  return d.size() == 2 && (d[0] == 1 || d[0] == -1) && (d[1] == 0 || d[1] == -2);
}

// True if v is computed into a buffer of its own that only one use sees.
bool fresh_unshared(const ir::Graph& g, const Value* v) {
  const Node* p = v->producer;
  return p != nullptr && !p->is_constant() && !p->info().has(kView) &&
         !p->info().has(kCollective) && g.num_uses(v) == 1;
}

// The value that replaces copy node n's output, or null.
Value* elided(ir::Graph& g, Node* n) {
  Value* x = n->inputs[0];
  Node* p = x->producer;
  if (p == nullptr || p->is_constant() || g.num_uses(x) != 1) return nullptr;
  if (x->dtype != n->output()->dtype || x->shape != n->output()->shape) return nullptr;
  if (fresh_unshared(g, x)) return x;
  if (p->is_op(OpId::reshape) && fresh_unshared(g, p->inputs[0])) return x;
  if (!is_2d_transpose(p)) return nullptr;
  Value* m = p->inputs[0];
  Node* mm = m->producer;
  if (mm == nullptr || !mm->is_op(OpId::matmul) || g.num_uses(m) != 1) return nullptr;
  Value* a = mm->inputs[0];
  Value* b = mm->inputs[1];
  if (a->rank() != 2 || b->rank() != 2 || a->dtype != b->dtype) return nullptr;
  Attrs t;
  t.set("dims", Dims{1, 0});
  auto transposed = [&](Value* v) {
    ir::SymShape s = v->shape;  // sizes may be symbolic (a dynamic batch)
    std::swap(s[0], s[1]);
    return g.add_op(OpId::permute, {v}, t, {{v->dtype, s}}, n)->output();
  };
  Value* bt = transposed(b);
  Value* at = transposed(a);
  Value* r =
      g.add_op(OpId::matmul, {bt, at}, {}, {{n->output()->dtype, n->output()->shape}}, n)->output();
  return r;
}

}  // namespace

bool elide_copies(ir::Graph& g) {
  return replace_each(g, OpId::copy, elided);
}

}  // namespace kiln::passes
