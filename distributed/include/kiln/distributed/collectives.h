// Process groups behind the traceable collective ops (kiln/collective.h): a
// group gets an id that collective_start/collective_wait nodes carry, so a
// compiled training step holds its all-reduces as IR nodes.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/collective.h"
#include "kiln/distributed/process_group.h"

namespace kiln::dist {

/// The id (>= 1) under which `pg` is known to the collective ops; registers it
/// on first use. The registry holds the group weakly.
int64_t collective_group_id(const std::shared_ptr<ProcessGroup>& pg);

/// A new id for `pg` bound to `buffer` (flat, contiguous: one of pg's comm
/// buffers, such as a DDP bucket, on the CPU or a CUDA device; held weakly): a
/// collective_start of this id whose tensors (on the buffer's device) fill the
/// buffer, each in its slice, in its dtype, copies them into it (none that
/// already is its slice) and reduces it in place, and its collective_wait
/// returns the buffer's slices themselves, not copies, which the next
/// collective of this id overwrites. Other tensors take pg's ring. `offsets`:
/// where each tensor's slice starts (DDP's device buckets align them; the gaps
/// are reduced as they are, zeros); empty: one after another.
int64_t collective_group_id_in(const std::shared_ptr<ProcessGroup>& pg, const Tensor& buffer,
                               std::vector<int64_t> offsets = {});

/// How the tensors of collectives over bound ids reached their buffer since
/// the process started (all threads): already in it (computed there: a
/// compiled step's weight gradients) or copied in.
struct BoundCollectiveStats {
  int64_t in_place = 0;
  int64_t copied = 0;
};
/// The counters above.
BoundCollectiveStats bound_collective_stats();

/// Starts an all-reduce of `tensors` over `pg` through the collective ops
/// (an IR node when tracing); returns the handle for all_reduce_wait.
Tensor all_reduce_start(const std::shared_ptr<ProcessGroup>& pg, const std::vector<Tensor>& tensors,
                        ReduceOp op = ReduceOp::kSum);
/// all_reduce_start over a group id from collective_group_id(_in).
Tensor all_reduce_start(int64_t group, const std::vector<Tensor>& tensors,
                        ReduceOp op = ReduceOp::kSum);
/// Waits for `handle` and returns the reduced tensors (an IR node when tracing).
std::vector<Tensor> all_reduce_wait(const std::shared_ptr<ProcessGroup>& pg, const Tensor& handle,
                                    const std::vector<Tensor>& tensors);

}  // namespace kiln::dist
