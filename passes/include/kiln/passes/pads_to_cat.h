// Gradients of slices that tile a tensor, summed, become one concatenation.
#pragma once

#include "kiln/ir/graph.h"

namespace kiln::passes {

/// Replaces a sum (a tree of adds) of zero pads that place their inputs in
/// disjoint ranges of one dim, together covering it, by cat of those inputs;
/// the rules are at the top of pads_to_cat.cpp. Returns true if anything changed.
bool pads_to_cat(ir::Graph& g);

}  // namespace kiln::passes
