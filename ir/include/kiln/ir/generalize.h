// Dynamic dims from several traces: C++ sizes are plain integers, so the tracer
// cannot see that a reshape target or mean's divisor came from the batch size.
// Traces of the same function at several sizes show it: every number that
// differs between them must be an integer polynomial in the dynamic sizes (or
// 1/polynomial for doubles), one symbol per dynamic size, that the traces
// determine with at least one trace to spare (see generalize()).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kiln/ir/graph.h"

namespace kiln::ir {

/// One concrete (static) trace and the value of every symbol in it.
struct SymSample {
  const Graph* graph = nullptr;
  std::vector<int64_t> syms;  ///< syms[k]: the size symbol k stands for in this trace
};

/// What generalize() made of the traces.
struct Generalized {
  std::unique_ptr<Graph> graph;  ///< the symbolic graph, or null
  /// Null graph only: the traces agree so far, but some number is not yet
  /// determined with a trace to spare; another trace at other sizes may do it.
  bool need_more = false;
  std::string why;  ///< why the graph is null
};

/// One graph, symbolic in the samples' symbols, equal to every trace at its
/// sizes. A number that differs between traces becomes the polynomial with
/// the fewest terms (at most 3; exponents <= 3, degree <= 4, less with over 4
/// symbols) that reproduces it in every trace, and only if no other polynomial
/// of as few terms does and the traces have more distinct sizes than it has
/// terms (so a line through two points, which always fits, is never taken
/// from two traces). The result is also verified at sizes beyond the traced ones.
Generalized generalize(std::span<const SymSample> traces);

}  // namespace kiln::ir
