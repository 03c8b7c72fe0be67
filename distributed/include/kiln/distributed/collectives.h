// Process groups behind the traceable collective ops (kiln/collective.h): a
// group gets an id that collective_start/collective_wait nodes carry, so a
// compiled training step holds its all-reduces as IR nodes.
#pragma once

#include <cstdint>
#include <memory>

#include "kiln/collective.h"
#include "kiln/distributed/process_group.h"

namespace kiln::dist {

/// The id (>= 1) under which `pg` is known to the collective ops; registers it
/// on first use. The registry holds the group weakly.
int64_t collective_group_id(const std::shared_ptr<ProcessGroup>& pg);

/// Starts an all-reduce of `tensors` over `pg` through the collective ops
/// (an IR node when tracing); returns the handle for all_reduce_wait.
Tensor all_reduce_start(const std::shared_ptr<ProcessGroup>& pg, const std::vector<Tensor>& tensors,
                        ReduceOp op = ReduceOp::kSum);
/// Waits for `handle` and returns the reduced tensors (an IR node when tracing).
std::vector<Tensor> all_reduce_wait(const std::shared_ptr<ProcessGroup>& pg, const Tensor& handle,
                                    const std::vector<Tensor>& tensors);

}  // namespace kiln::dist
