// Algebraic simplification: identities that hold exactly under IEEE semantics.
#pragma once

#include "kiln/ir/graph.h"

namespace kiln::passes {

/// Rewrites x*1, x/1, x+0 and x-0 (floats: only the exact signed-zero cases),
/// integer x-x, neg(neg(x)), chains of permute/reshape/expand, and no-op
/// movements and casts; the rules are at the top of simplify.cpp. A rewritten
/// node is erased; inputs it leaves unused are dce's job. Returns true if
/// anything was rewritten.
bool simplify(ir::Graph& g);

}  // namespace kiln::passes
