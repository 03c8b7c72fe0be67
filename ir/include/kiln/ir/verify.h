// The IR verifier: checks what the contract in graph.h promises.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "kiln/ir/graph.h"

namespace kiln::ir {

/// Checks arity against the op table, dtype/shape rules (re-running each op's
/// infer rule on static shapes), SSA dominance, use lists, dangling uses and
/// outputs. Throws kiln::Error naming the node and the broken rule.
void verify(const Graph& g);
/// verify(g), also checking the symbolic nodes' rules at these symbol values
/// (one vector of num_syms values per point).
void verify(const Graph& g, std::span<const std::vector<int64_t>> extra_points);
/// "" if every symbolic node's dtype/shape rule holds with the symbols at `syms`
/// (a graph that verifies); else the verifier's message for the first that fails.
std::string check_sizes_at(const Graph& g, std::span<const int64_t> syms);

}  // namespace kiln::ir
