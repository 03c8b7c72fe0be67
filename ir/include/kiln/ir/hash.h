// Structural hash of a graph: equal for structurally equal graphs, stable
// across runs and processes (no pointer or address dependence).
#pragma once

#include <cstdint>

#include "kiln/ir/graph.h"

namespace kiln::ir {

/// 64-bit hash of the graph's structure (ops, attrs, constants, shapes, wiring).
uint64_t structural_hash(const Graph& g);

}  // namespace kiln::ir
