// The names of the POSIX shared-memory segments of a job. Every segment kiln
// creates in /dev/shm (a group's shared-memory transport, DDP's comm buffers)
// carries the job's id, a hash of its store token, so a launcher can remove
// what a torn-down job left behind. A segment's name exists only while its
// ranks map it; a process that receives SIGTERM, SIGINT or SIGHUP meanwhile
// unlinks its own names first (then the signal's previous action runs).
#pragma once

#include <string>

namespace kiln::dist {

/// "kiln.<16 hex digits>.": how the names (in /dev/shm) of every segment of
/// the job whose store token is `token` begin.
std::string job_segment_prefix(const std::string& token);

/// Unlinks every /dev/shm segment of the job whose store token is `token` and
/// whose creating process is gone (a launcher calls it once its workers are);
/// returns how many. An empty token names no job (tokenless jobs share one
/// hash): nothing is removed.
int remove_job_segments(const std::string& token);

}  // namespace kiln::dist
