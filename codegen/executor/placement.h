// Placement: a matmul computes its output straight into part of a later
// value's buffer.
//
// Attention merges heads with a permute and a reshape, which copies, and its
// backward concatenates the q/k/v gradients, which copies again. When an
// unfused matmul's output reaches such a cat or copying reshape (the host)
// through permutes and reshapes only, the executor allocates the host's buffer
// when the matmul runs and hands the matmul the view of that buffer its output
// is. The reshapes on the way then return views, and the cat finds its inputs
// already in place. BLAS writes any view whose matrices have a unit row or
// column stride (see the matmul kernel).
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/ir/graph.h"

namespace kiln::detail {

/// How one matmul's output sits inside a host.
struct Placement {
  const ir::Node* host = nullptr;  ///< the cat or reshape whose output buffer is shared
  /// From the host down to the matmul: each node with the input that continues
  /// the chain; the last link's input is the matmul's output.
  std::vector<std::pair<const ir::Node*, int>> links;
};

/// A strided layout in elements.
struct Layout {
  Dims shape, strides;
  int64_t offset = 0;
};

/// Placements for the unfused matmul nodes of `g` (keyed by node) whose output
/// and every value on the way are used only by unfused permutes, reshapes,
/// cats and matmuls, and are not graph outputs. `fused` tells nodes a fusion
/// group computes.
std::unordered_map<const ir::Node*, Placement> plan_placements(
    const ir::Graph& g, const std::function<bool(const ir::Node*)>& fused);

/// The matmul output's layout inside a contiguous host buffer for symbol values
/// `syms`, when placing it there saves a copy: a view all along the chain that
/// BLAS can write, with a cat host or a reshape host that would copy otherwise.
std::optional<Layout> placed_layout(const Placement& p, std::span<const int64_t> syms);

}  // namespace kiln::detail
