// The segments this process created and has not unlinked yet (private to
// kiln_distributed; see kiln/distributed/shm_segments.h).
#pragma once

#include <string>

namespace kiln::dist::detail {

/// The name ("/kiln.<job>.<what>.<pid>") of a new segment of this job.
std::string new_segment_name(const std::string& what);

/// Records `name` (as given to shm_open) as created by this process: until
/// unlink_segment, SIGTERM, SIGINT or SIGHUP unlink it before the signal's
/// previous action runs (the handler goes in front of whatever handles the
/// signal at this call; an ignored signal stays ignored). The handler reads
/// a fixed table and makes async-signal-safe calls only.
void track_segment(const std::string& name);
/// shm_unlink(name) and stop tracking it.
void unlink_segment(const std::string& name);
/// Stops tracking `name` without unlinking it (its shm_open failed).
void untrack_segment(const std::string& name);

}  // namespace kiln::dist::detail
