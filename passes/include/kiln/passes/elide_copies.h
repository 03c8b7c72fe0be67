// Copy elision: drop copies the graph does not need, and compute transposed
// matmul results in the layout they are copied into.
#pragma once

#include "kiln/ir/graph.h"

namespace kiln::passes {

/// Replaces copy(x) by x when x is a fresh (non-view) result used only by the
/// copy, and copy(permute(matmul(a, b), [1, 0])) of 2-D operands by
/// matmul(permute(b), permute(a)); the rules are at the top of elide_copies.cpp.
/// Returns true if anything was rewritten.
bool elide_copies(ir::Graph& g);

}  // namespace kiln::passes
