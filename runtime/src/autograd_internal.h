// Internal autograd entry points used by dispatch and in-place ops.
#pragma once

#include <span>
#include <vector>

#include "kiln/autograd.h"
#include "kiln/op_table.h"

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

// ---- gradient destinations (kiln/grad_destination.h) ----

/// A destination the node that backward is running may compute a leaf's
/// gradient into: its output `slot` reaches the leaf through view nodes only.
struct PendingDestination {
  Tensor dst;
  size_t slot = 0;
  bool claimed = false;
};
/// Set by the engine around one node's backward; null otherwise.
extern constinit thread_local std::vector<PendingDestination>* t_pending_destinations;
/// Whether any leaf has a destination (the engine looks no further if not).
bool any_grad_destination();
/// leaf's destination, or undefined.
Tensor find_grad_destination(const TensorImpl& leaf);
/// Counts a gradient that reached its destination: computed there or copied.
void count_grad_destination(bool computed_in_place);
/// The node input whose gradient a rule is computing (-1: not said), set by
/// DestinationsFor. A rule computing several gradients with the same kernel
/// (matmul's two GEMMs, conv's input and weight) says which one it computes,
/// so an input's gradient never takes a weight's destination by its size.
extern constinit thread_local int t_destination_input;
/// Scope of one input's gradient inside a derivative rule (see t_destination_input).
struct DestinationsFor {
  explicit DestinationsFor(int input) : prev_(t_destination_input) { t_destination_input = input; }
  ~DestinationsFor() { t_destination_input = prev_; }
  DestinationsFor(const DestinationsFor&) = delete;
  DestinationsFor& operator=(const DestinationsFor&) = delete;

 private:
  int prev_;
};
/// Hands a pending destination that fits (same element count, dtype and
/// device as `meta`; an opaque op's single output: matmul, convolution) to
/// dispatch as the output, shaped `meta`. Returns false if none fits.
bool claim_destination_slow(const OpInfo& info, const TensorMeta& meta, Device dev, Tensor& out);
inline bool claim_grad_destination(const OpInfo& info, const TensorMeta& meta, Device dev,
                                   Tensor& out) {
  if (!t_pending_destinations) [[likely]]
    return false;
  return claim_destination_slow(info, meta, dev, out);
}

}  // namespace kiln::autograd
