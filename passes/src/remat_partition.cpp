// The partition choice of a joint forward+backward graph (backward_recompute
// in remat.h): which forward values the backward computes again instead of
// the forward saving them, AOTAutograd's min-cut partitioner in the terms of
// remat.cpp's rules 3 and 4.
//
// Rules, and why:
// 1. Needed: the forward values backward nodes read (and backward outputs the
//    forward makes). Graph inputs, constants, their views and the forward's
//    own outputs are free: alive anyway, available to both sides.
// 2. The network: each needed value's forward ancestors, value v split into
//    in -> out with capacity 2 * bytes (+1 unless needed: ties save what is
//    read); data edges and needed -> sink infinite; src -> in(v) at 2 * cost
//    of recomputing v's producer at rate 1 (cheap elementwise 1 per element,
//    costly math 16, matmuls K/4), infinite if it may never be recomputed
//    (random ops, collectives, multi-output ops). A node no forward output
//    needs is only moved, not duplicated: it costs nothing (the gradient
//    formulas' forward-only terms, GELU's exp(-x^2/2), go to the backward
//    instead of being saved).
// 3. Nodes whose in side is on the sink side of the minimum cut run in the
//    backward; the forward keeps what its outputs need (DCE drops the rest).
#include <algorithm>
#include <cmath>

#include "kiln/error.h"
#include "kiln/passes/remat.h"
#include "remat_internal.h"

namespace kiln::passes {

std::vector<char> backward_recompute(const ir::Graph& g, const std::vector<char>& backward,
                                     const std::vector<char>& forward_output) {
  using ir::Node;
  using ir::Value;
  const auto nodes = g.nodes();
  KILN_CHECK(backward.size() == nodes.size() && forward_output.size() == g.outputs().size(),
             "backward_recompute: ", backward.size(), " node marks for ", nodes.size(), " nodes, ",
             forward_output.size(), " output marks for ", g.outputs().size());
  std::vector<char> moved(nodes.size(), 0);
  const detail::Model m = detail::simulate(g, {});
  const size_t ids = m.root.size();
  std::vector<char> fwd_value(ids, 0), fwd_out(ids, 0);
  for (size_t p = 0; p < nodes.size(); ++p)
    if (!backward[p])
      for (const Value* v : nodes[p]->outputs) fwd_value[static_cast<size_t>(v->id())] = 1;
  for (size_t o = 0; o < g.outputs().size(); ++o)
    if (forward_output[o]) fwd_out[static_cast<size_t>(g.outputs()[o]->id())] = 1;
  auto is_free = [&](const Value* v) {
    const auto id = static_cast<size_t>(v->id());
    return m.root[id] < 0 || fwd_out[id] || fwd_out[static_cast<size_t>(m.root[id])];
  };
  // Rule 1.
  std::vector<char> needed(ids, 0);
  std::vector<Value*> needs;
  auto need = [&](Value* v) {
    const auto id = static_cast<size_t>(v->id());
    if (!fwd_value[id] || is_free(v) || needed[id]) return;
    needed[id] = 1;
    needs.push_back(v);
  };
  for (size_t p = 0; p < nodes.size(); ++p)
    if (backward[p])
      for (Value* v : nodes[p]->inputs) need(v);
  for (size_t o = 0; o < g.outputs().size(); ++o)
    if (!forward_output[o]) need(g.outputs()[o]);
  if (needs.empty()) return moved;
  // What the forward's outputs need (moving anything else costs nothing).
  std::vector<char> fwd_required(ids, 0);
  for (size_t o = 0; o < g.outputs().size(); ++o)
    if (forward_output[o]) fwd_required[static_cast<size_t>(g.outputs()[o]->id())] = 1;
  for (size_t p = nodes.size(); p-- > 0;) {
    if (backward[p]) continue;
    bool req = false;
    for (const Value* v : nodes[p]->outputs)
      req = req || fwd_required[static_cast<size_t>(v->id())];
    if (req)
      for (const Value* u : nodes[p]->inputs) fwd_required[static_cast<size_t>(u->id())] = 1;
  }
  // Rule 2.
  const auto c = detail::min_value_cut(m, needs, needed, is_free, [&](Value* v) -> int64_t {
    const Node* n = v->producer;
    const double cost = detail::recompute_cost(*n);
    if (cost < 0) return detail::ValueCut::kPinned;
    bool required = false;
    for (const Value* o : n->outputs)
      required = required || fwd_required[static_cast<size_t>(o->id())];
    return required && cost > 0 ? std::min<int64_t>(detail::kInf, std::llround(2 * cost)) : 0;
  });
  // Rule 3.
  for (Value* v : c.values)
    if (c.recomputed(v)) moved[g.position(v->producer)] = 1;
  return moved;
}

}  // namespace kiln::passes
