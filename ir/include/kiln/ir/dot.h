// Graphviz export of a graph.
#pragma once

#include <string>

#include "kiln/ir/graph.h"

namespace kiln::ir {

/// The graph in DOT syntax: one node per op/input/output, edges labelled with
/// dtype and shape.
std::string to_dot(const Graph& g);

}  // namespace kiln::ir
