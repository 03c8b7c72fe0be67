// Slices back to one tensor. The backward of slice is a zero pad, so a tensor
// split into pieces (the fused QKV projection of attention split into q, k and
// v; chunk; GLU) gets its gradient as pad(g_q) + pad(g_k) + pad(g_v): every
// pad writes the whole tensor, mostly zeros, and the adds read it all again.
// One cat writes it once.
//
// Rule: an add node n whose operands, expanded through adds that have n's
// dtype and shape and no other use, are k >= 2 pad nodes (value 0, static
// pads) that each pad one and the same dim d of n's shape, place their inputs
// in disjoint ranges that together cover d, and have n's dtype and shape
// -> cat of the pads' inputs in the order of their ranges along d.
//
// Exact except for the sign of zero: x + 0.0 turns an element -0.0 into +0.0,
// the cat keeps -0.0 (as PyTorch's split backward, itself a cat, does). The
// pads and adds left without uses are dce's.
#include "kiln/passes/pads_to_cat.h"

#include <algorithm>
#include <optional>

#include "kiln/op_table.h"
#include "kiln/passes/pass_manager.h"

namespace kiln::passes {
namespace {

using ir::Node;
using ir::Value;

struct Piece {
  Value* input;
  int64_t begin, end;  // range along the cat dim
};

// The one padded dim of pad node p (output rank `rank`) and its range, or nullopt.
std::optional<std::pair<int64_t, Piece>> piece_of(const Node* p, int64_t rank) {
  if (!p->is_op(OpId::pad) || !p->sym_attrs.empty()) return std::nullopt;
  if (p->attrs.has("value") && p->attrs.f("value") != 0.0) return std::nullopt;
  const Dims& pads = p->attrs.dims("pads");
  if (pads.size() % 2 != 0 || static_cast<int64_t>(pads.size()) > 2 * rank) return std::nullopt;
  int64_t dim = -1;
  Piece pc{p->inputs[0], 0, 0};
  for (size_t k = 0; k < pads.size(); k += 2) {
    if (pads[k] == 0 && pads[k + 1] == 0) continue;
    if (dim >= 0 || pads[k] < 0 || pads[k + 1] < 0) return std::nullopt;  // two dims, or a crop
    dim = rank - 1 - static_cast<int64_t>(k / 2);
    pc.begin = pads[k];
    pc.end = pads[k] + p->inputs[0]->shape[static_cast<size_t>(dim)].b;
  }
  if (dim < 0 || !p->inputs[0]->shape[static_cast<size_t>(dim)].is_static()) return std::nullopt;
  return std::make_pair(dim, pc);
}

// The pads summed by add node n, or empty if its sum is not only pads.
std::vector<const Node*> summed_pads(const ir::Graph& g, const Node* n) {
  std::vector<const Node*> pads;
  std::vector<const Value*> work{n->inputs[0], n->inputs[1]};
  const Value* out = n->output();
  while (!work.empty()) {
    const Value* v = work.back();
    work.pop_back();
    const Node* p = v->producer;
    if (p == nullptr || v->dtype != out->dtype || v->shape != out->shape) return {};
    if (p->is_op(OpId::add) && g.num_uses(v) == 1 && p->inputs.size() == 2) {
      work.push_back(p->inputs[0]);
      work.push_back(p->inputs[1]);
    } else if (p->is_op(OpId::pad)) {
      pads.push_back(p);
    } else {
      return {};
    }
  }
  return pads;
}

// The cat replacing add node n, or null.
Value* as_cat(ir::Graph& g, Node* n) {
  const Value* out = n->output();
  const int64_t rank = out->rank();
  std::vector<const Node*> pads = summed_pads(g, n);
  if (n->inputs.size() != 2 || pads.size() < 2) return nullptr;
  int64_t dim = -1;
  std::vector<Piece> pieces;
  for (const Node* p : pads) {
    auto pc = piece_of(p, rank);
    if (!pc || (dim >= 0 && pc->first != dim) || pc->second.input->dtype != out->dtype)
      return nullptr;
    dim = pc->first;
    pieces.push_back(pc->second);
  }
  const ir::SymInt& size = out->shape[static_cast<size_t>(dim)];
  if (!size.is_static()) return nullptr;
  std::sort(pieces.begin(), pieces.end(),
            [](const Piece& a, const Piece& b) { return a.begin < b.begin; });
  int64_t at = 0;
  for (const Piece& pc : pieces) {
    if (pc.begin != at) return nullptr;  // a gap or an overlap
    at = pc.end;
  }
  if (at != size.b) return nullptr;
  std::vector<Value*> ins;
  for (const Piece& pc : pieces) ins.push_back(pc.input);
  Attrs a;
  a.set("dim", dim);
  return g.add_op(OpId::cat, std::move(ins), std::move(a), {{out->dtype, out->shape}}, n)->output();
}

}  // namespace

bool pads_to_cat(ir::Graph& g) {
  return replace_each(g, OpId::add, as_cat);
}

}  // namespace kiln::passes
