// Constant folding: evaluates nodes whose inputs are all constants.
#pragma once

#include "kiln/ir/graph.h"

namespace kiln::passes {

/// Replaces nodes whose inputs are all constants (or `full` nodes) by constant
/// nodes computed with the eager kernels; the rules are at the top of
/// fold_constants.cpp. Returns true if a node was folded.
bool fold_constants(ir::Graph& g);

}  // namespace kiln::passes
