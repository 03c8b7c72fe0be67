// Internal autograd entry points used by dispatch and in-place ops.
#pragma once

#include <span>
#include <vector>

#include "kiln/autograd.h"

namespace kiln::autograd {

/// Records the node of a differentiable primitive call whose inputs need grad.
void record_op(OpId op, std::span<const Tensor> inputs, const Attrs& attrs,
               std::span<Tensor> outputs);

/// The edge a gradient for `t` flows into (its grad_fn slot, or its leaf accumulator).
Edge gradient_edge(const Tensor& t);

/// Inside a kiln::checkpoint region: records a save and returns its region
/// (the data is dropped) with its slot number; null outside (or while a region
/// recomputes, when the save fills that region's next slot instead).
std::shared_ptr<CheckpointFrame> checkpoint_save(const Tensor& t, bool is_output, uint32_t& slot);
/// Whether a kiln::checkpoint region is running on this thread (its saves are
/// dropped and recomputed, never held).
bool in_checkpoint_region();
/// The recomputed value of save `slot` of `frame` (re-runs the region's
/// function on first use); kiln::Error naming `op` if it does not match.
Tensor checkpoint_unpack(CheckpointFrame& frame, uint32_t slot, const char* op);

/// Gives `self` the value of `result` in place (cast to self's dtype), bumps the
/// version counter and moves self's autograd history to result's. `op` names
/// the caller in errors.
void commit_inplace(Tensor& self, const Tensor& result, const char* op);

}  // namespace kiln::autograd
