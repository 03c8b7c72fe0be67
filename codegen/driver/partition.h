// Splits a joint forward+backward graph (traced forward, then its traced
// gradients) into a forward graph that also returns the values the backward
// needs ("saved") and a backward graph over (saved..., grad outputs...).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/ir/graph.h"

namespace kiln::detail {

struct Split {
  std::unique_ptr<ir::Graph> fwd;   ///< inputs: the joint inputs minus the gradient inputs
  std::unique_ptr<ir::Graph> bwd;   ///< inputs: saved values, then the gradient inputs
  std::vector<size_t> fwd_outputs;  ///< joint output index of each forward output (before saved)
  std::vector<size_t> bwd_outputs;  ///< joint output index of each backward output
  std::vector<size_t> fwd_inputs;   ///< joint input index of each forward input
  std::vector<size_t> grad_inputs;  ///< joint input index of each backward gradient input
  size_t num_saved = 0;
};

/// `is_grad_input[i]`: joint input i is a gradient of a result; `is_bwd_output[o]`:
/// joint output o is a gradient w.r.t. a differentiable input. Nodes that do not
/// depend on gradient inputs run in the forward (their results are saved), except,
/// with `recompute`, those remat's min cut (passes::backward_recompute) gives
/// the backward to compute again: cheap elementwise chains, forward-only terms;
/// under `memory_budget` (> 0: bytes of the forward's and backward's peak) as
/// much more as that needs.
Split partition(const ir::Graph& joint, const std::vector<bool>& is_grad_input,
                const std::vector<bool>& is_bwd_output, bool recompute = true,
                int64_t memory_budget = 0);

}  // namespace kiln::detail
