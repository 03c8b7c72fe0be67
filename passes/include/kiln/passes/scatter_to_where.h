// A scatter_add of one entry per line into a fill becomes a select against
// the positions along the line (the one-hot of a cross-entropy's backward).
#pragma once

#include "kiln/ir/graph.h"

namespace kiln::passes {

/// Replaces scatter_add(full(c), d, index, src) whose index has one entry per
/// line along d, range-checked by a gather of the same index, by
/// where(arange == index, c + src, c), which fuses; the rules are at the top of
/// scatter_to_where.cpp. Returns true if anything changed.
bool scatter_to_where(ir::Graph& g);

}  // namespace kiln::passes
