// One-entry scatters into a fill become selects. The backward of gather is a
// scatter_add into zeros; for a cross-entropy's gather of each row's label
// that is a one-hot: a `full` writing the whole [rows, classes] tensor, a
// scatter_add copying it all again to add one entry per row (neither fuses:
// scatter_add's writes are not dense in an iteration space), and every reader
// of the one-hot reading it back (a [8192, 1000] step on an H200: 43 + 54 us
// of the two, a row-sum kernel of 13 us, and the loss gradient's kernel
// reading 32 MB). As a select the one-hot is computed where it is read.
//
// Rule: scatter_add(x, d, index, src) -> where(eq(r, index), add(x, src), x)
// with r = arange(0, n) reshaped to [1, .., n, .., 1] (n = x's size along d,
// at d), when
// - x is a `full` of static shape (every element c) with no sym_attrs;
// - the output's dtype is f32 or f64 and src has it (no cast inside), and
//   every shape is static (fusion takes no f16/bf16 node: unfused, the select
//   would be three full-size tensors where the scatter writes one);
// - index has one entry per line (size 1 along d) and covers every line
//   (its other sizes are x's), and src has index's shape: each element of the
//   output then receives at most one entry, so eager's c + src (in the
//   dtype) is exactly add(x, src) there, and c elsewhere;
// - another node gathers with the same index value along d from a tensor of
//   size n there. Eager scatter_add fails on an entry outside [0, n); the
//   select would not look at it. The gather's kernel checks the same entries
//   against the same bound, so a bad index still fails with a clear error
//   (the gather's, which eager also raises first: the gather is the forward
//   op this scatter is the gradient of).
// Bit for bit equal to eager, NaN and -0.0 included (c + src is computed by
// the same add). The full, left to the select, is an immediate in kernels;
// arange and its reshape fold to a constant; the scatter is erased.
#include "kiln/passes/scatter_to_where.h"

#include "kiln/op_table.h"
#include "kiln/passes/pass_manager.h"

namespace kiln::passes {
namespace {

using ir::Node;
using ir::Value;

// d wrapped to [0, rank), or -1.
int64_t wrapped_dim(int64_t d, int64_t rank) {
  if (d < 0) d += rank;
  return d >= 0 && d < rank ? d : -1;
}

// Whether a reader of `index` gathers with it along d from a tensor of n there.
bool gathered(const Value* index, int64_t d, int64_t n) {
  for (const Node* u : index->users) {
    if (!u->is_op(OpId::gather) || u->inputs[1] != index || !u->sym_attrs.empty()) continue;
    const Value* from = u->inputs[0];
    if (wrapped_dim(u->attrs.i("dim"), from->rank()) != d) continue;
    const ir::SymInt& s = from->shape[static_cast<size_t>(d)];
    if (s.is_static() && s.b == n) return true;
  }
  return false;
}

// The select replacing scatter_add node n, or null.
Value* as_where(ir::Graph& g, Node* n) {
  if (!n->sym_attrs.empty()) return nullptr;
  Value *x = n->inputs[0], *index = n->inputs[1], *src = n->inputs[2];
  const Value* out = n->output();
  const Node* fill = x->producer;
  if (fill == nullptr || !fill->is_op(OpId::full) || !fill->sym_attrs.empty()) return nullptr;
  if (!(out->dtype == DType::f32 || out->dtype == DType::f64) || src->dtype != out->dtype)
    return nullptr;
  if (!ir::is_static(out->shape) || !ir::is_static(index->shape) || !ir::is_static(src->shape))
    return nullptr;
  const int64_t rank = out->rank();
  const int64_t d = wrapped_dim(n->attrs.i("dim"), rank);
  if (d < 0 || index->rank() != rank || !(src->shape == index->shape)) return nullptr;
  for (int64_t e = 0; e < rank; ++e) {
    const auto u = static_cast<size_t>(e);
    if (e == d ? index->shape[u].b != 1 : !(index->shape[u] == out->shape[u])) return nullptr;
  }
  const int64_t size = out->shape[static_cast<size_t>(d)].b;
  if (!gathered(index, d, size)) return nullptr;
  Attrs ra;
  ra.set("start", AttrValue(0.0))
      .set("end", AttrValue(static_cast<double>(size)))
      .set("step", AttrValue(1.0))
      .set("dtype", DType::i64);
  Value* r =
      g.add_op(OpId::arange, {}, std::move(ra), {{DType::i64, {ir::SymInt(size)}}}, n)->output();
  Dims at(static_cast<size_t>(rank), 1);
  at[static_cast<size_t>(d)] = size;
  Attrs sa;
  sa.set("shape", at);
  r = g.add_op(OpId::reshape, {r}, std::move(sa), {{DType::i64, ir::to_sym_shape(at)}}, n)
          ->output();
  Value* hit = g.add_op_inferred(OpId::eq, {r, index}, {}, n)->output();
  Value* added = g.add_op_inferred(OpId::add, {x, src}, {}, n)->output();
  Value* sel = g.add_op_inferred(OpId::where, {hit, added, x}, {}, n)->output();
  KILN_ASSERT(sel->dtype == out->dtype && sel->shape == out->shape &&
                  sel->wrapped_number == out->wrapped_number,
              "scatter_to_where: the select's type differs from the scatter's");
  return sel;
}

}  // namespace

bool scatter_to_where(ir::Graph& g) {
  return replace_each(g, OpId::scatter_add, as_where);
}

}  // namespace kiln::passes
