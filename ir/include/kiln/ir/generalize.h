// Dynamic dims from two traces: C++ sizes are plain integers, so the tracer
// cannot see that a reshape target or mean's divisor came from the batch size.
// Two traces of the same function at two sizes show it: every number that
// differs must be affine in a dynamic size (a*s+b, or 1/(a*s+b) for doubles).
#pragma once

#include <memory>
#include <span>
#include <string>

#include "kiln/ir/graph.h"

namespace kiln::ir {

/// Symbol k's value in the first and in the second trace.
struct SymSample {
  int64_t first = 0;
  int64_t second = 0;
};

/// One graph, symbolic in the sampled symbols, equal to `a` and `b` at their
/// samples; null (with `why`) when the traces differ in structure or a differing
/// number fits no symbol with integer a, b.
std::unique_ptr<Graph> generalize(const Graph& a, const Graph& b, std::span<const SymSample> syms,
                                  std::string* why = nullptr);

}  // namespace kiln::ir
