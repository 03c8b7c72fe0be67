// Aligns this rank's profiler clock with rank 0's through the store, so the
// per-rank traces of a job merge into one timeline.
#pragma once

#include <string>

#include "kiln/distributed/store.h"

namespace kiln::dist::detail {

/// Labels this process "rank N" in profiler traces and, when KILN_PROFILE is
/// set (every rank of the job sees it), measures the offset of its steady
/// clock against rank 0's: each rank r > 0 pings rank 0 through the store a
/// few times; rank 0 answers each ping with its clock; the offset of the round
/// with the shortest round trip, rank0_time - (send + receive) / 2, is
/// recorded (error at most half that round trip). Keys live under `prefix`.
void align_profiler_clock(Store& store, const std::string& prefix, int rank, int world_size);

}  // namespace kiln::dist::detail
