// Dead code elimination: removes nodes none of whose outputs is used.
#pragma once

#include "kiln/ir/graph.h"

namespace kiln::passes {

/// Removes every node whose outputs have no uses (graph outputs count as uses),
/// walking backwards so whole dead chains go in one run. Graph inputs stay.
/// Returns true if a node was removed.
bool dce(ir::Graph& g);

}  // namespace kiln::passes
