// Schedules collective nodes for overlap: each collective_start moves up to
// right after the last producer of its inputs, each collective_wait down to
// right before its first user.
#pragma once

#include "kiln/ir/graph.h"

namespace kiln::passes {

/// Moves collective_start nodes as early and collective_wait nodes as late as
/// their data allows (a wait used only by graph outputs goes to the end), so a
/// bucket's all-reduce runs while the rest of the graph computes and an update
/// waits only for its own bucket. Deterministic: every rank gets the same order.
/// Returns true if a node moved.
bool schedule_collectives(ir::Graph& g);

}  // namespace kiln::passes
