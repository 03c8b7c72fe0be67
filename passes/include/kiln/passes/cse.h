// Common subexpression elimination: merges identical nodes.
#pragma once

#include "kiln/ir/graph.h"

namespace kiln::passes {

/// Merges each node into the first earlier node with the same op, attributes
/// (doubles by bit pattern), symbolic attributes and inputs (unordered for
/// kCommutative ops), and small constants with equal dtype, shape and bytes.
/// Random nodes are never merged. Returns true if a node was merged.
bool cse(ir::Graph& g);

}  // namespace kiln::passes
