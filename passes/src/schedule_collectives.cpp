// Collective scheduling. A traced data-parallel step records each bucket's
// collective_start when autograd accumulates the bucket's last gradient and all
// collective_waits at the end of backward; the optimizer update follows. Moving
// starts up and waits down lets the executor run the all-reduce of bucket k
// while the rest of backward (and the updates of buckets already reduced) runs.
//
// Rules: a start moves to right after the latest node producing one of its
// inputs (the first node if all are graph inputs); a wait moves to right before
// the first node using one of its outputs, or to the end if only graph outputs
// use them. Both moves keep SSA order (a start's inputs are still defined
// before it; a wait's users are still after it). Nodes are moved by re-creating
// them at the new position. The order of starts relative to each other can
// change, but identically on every rank (the pass is deterministic and every
// rank traces the same program), which is all the process group needs.
#include "kiln/passes/schedule_collectives.h"

#include <algorithm>
#include <limits>

namespace kiln::passes {
namespace {

// Re-creates `n` before `before` (null: at the end) and removes the original.
void move_before(ir::Graph& g, ir::Node* n, ir::Node* before) {
  std::vector<ir::OutSpec> outs;
  for (const ir::Value* v : n->outputs) outs.push_back({v->dtype, v->shape});
  ir::Node* m = g.add_op(n->op, n->inputs, n->attrs, std::move(outs), before);
  m->sym_attrs = n->sym_attrs;
  for (size_t i = 0; i < n->outputs.size(); ++i) {
    m->outputs[i]->name = n->outputs[i]->name;
    g.replace_all_uses(n->outputs[i], m->outputs[i]);
  }
  g.erase(n);
}

}  // namespace

bool schedule_collectives(ir::Graph& g) {
  bool changed = false;
  for (ir::Node* n : g.nodes()) {
    if (!n->is_op(OpId::collective_start)) continue;
    const size_t pos = g.position(n);
    size_t latest = 0;  // position just after the latest producer
    for (const ir::Value* v : n->inputs)
      if (v->producer) latest = std::max(latest, g.position(v->producer) + 1);
    if (latest >= pos) continue;
    move_before(g, n, g.nodes()[latest]);
    changed = true;
  }
  std::vector<ir::Node*> waits;
  for (ir::Node* n : g.nodes())
    if (n->is_op(OpId::collective_wait)) waits.push_back(n);
  // In order, so waits that land at the same place keep their relative order.
  for (ir::Node* n : waits) {
    const size_t pos = g.position(n);
    size_t first = std::numeric_limits<size_t>::max();
    for (const ir::Value* v : n->outputs)
      for (const ir::Node* u : v->users) first = std::min(first, g.position(u));
    const size_t count = g.num_nodes();
    if (first == std::numeric_limits<size_t>::max()) {
      if (pos + 1 == count) continue;
      move_before(g, n, nullptr);
    } else {
      if (first <= pos + 1) continue;
      move_before(g, n, g.nodes()[first]);
    }
    changed = true;
  }
  return changed;
}

}  // namespace kiln::passes
