// Dead code elimination. A node is dead when none of its outputs is used by a
// node or a graph output. Walking the node list backwards visits users before
// their producers, so erasing a dead node can make its producers dead in time
// for their own visit: a whole dead chain goes in one run. Graph inputs are
// part of the call signature and never removed. Random nodes may be removed:
// their draws are keyed by their own (seed, offset) attrs, so dropping one
// changes no other node's numbers. Unused collectives may be removed too: every
// rank traces the same program, so every rank removes the same ones.
#include "kiln/passes/dce.h"

#include <algorithm>

namespace kiln::passes {

bool dce(ir::Graph& g) {
  bool changed = false;
  std::vector<ir::Node*> nodes = g.nodes();
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    ir::Node* n = *it;
    bool used = std::any_of(n->outputs.begin(), n->outputs.end(),
                            [&](const ir::Value* v) { return g.num_uses(v) > 0; });
    if (used) continue;
    g.erase(n);
    changed = true;
  }
  return changed;
}

}  // namespace kiln::passes
