// The IR verifier: checks what the contract in graph.h promises.
#pragma once

#include <string>

#include "kiln/ir/graph.h"

namespace kiln::ir {

/// Checks arity against the op table, dtype/shape rules (re-running each op's
/// infer rule on static shapes), SSA dominance, use lists, dangling uses and
/// outputs. Throws kiln::Error naming the node and the broken rule.
void verify(const Graph& g);

}  // namespace kiln::ir
