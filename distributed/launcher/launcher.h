// kilnrun: the launcher of distributed kiln jobs (like torchrun). The testable
// parts live here; main.cpp only parses the command line and calls run().
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::launcher {

/// Everything the command line sets.
struct Options {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;  ///< 0: a free port (single node only)
  int max_restarts = 0;
  std::string log_dir;                ///< empty: no per-rank logs
  double grace_seconds = 5;           ///< SIGTERM -> SIGKILL delay when tearing down
  double rdzv_timeout_seconds = 300;  ///< how long launchers wait for each other
  std::string token;                  ///< KILN_STORE_TOKEN of the job (--token or the env)
  std::string profile_dir;            ///< --profile: per-rank traces here, merged into trace.json
  std::vector<std::string> program;   ///< the program and its arguments
};

/// Parses argv into `o`. Returns an exit code when the launcher must stop now
/// (--help: 0, with the help on `out`; a bad command line: nonzero, on `err`).
std::optional<int> parse_args(int argc, const char* const* argv, Options& o, std::ostream& out,
                              std::ostream& err);

/// The environment of one worker: `base` (NAME=value entries) with the job's
/// variables set or replaced (RANK, LOCAL_RANK, WORLD_SIZE, ...).
std::vector<std::string> worker_env(const std::vector<std::string>& base, const Options& o,
                                    int local_rank, int restart_count);

/// Merges DIR/rank<N>.json (the workers' traces, already on rank 0's clock)
/// into DIR/trace.json, ranks in order. Returns its path, or "" when no rank
/// wrote a trace.
std::string merge_profile_dir(const std::string& dir);

/// The exit code a launcher reports for a wait() status: the code itself, or
/// 128 + signal for a worker killed by a signal (like a shell).
int exit_code_of_status(int status);
/// "exited with code 3" / "was killed by signal 9 (SIGKILL)".
std::string describe_status(int status);

/// Splits a byte stream into lines. Lines longer than `max_line` are cut, so a
/// worker printing without newlines cannot grow the buffer without bound.
class LineBuffer {
 public:
  explicit LineBuffer(size_t max_line = 64 * 1024) : max_line_(max_line) {}
  /// Appends bytes and calls `emit` for each complete line (without '\n').
  void feed(std::string_view data, const std::function<void(std::string_view)>& emit);
  /// Emits the unterminated rest, if any (at end of stream).
  void flush(const std::function<void(std::string_view)>& emit);

 private:
  std::string buf_;
  size_t max_line_;
};

/// "[rank 3] " + line + "\n": what the launcher writes, in one write().
std::string prefixed_line(int rank, std::string_view line);

/// Runs the job: hosts the store (node 0), rendezvouses with the other nodes,
/// spawns and supervises the workers, restarts or tears down. Returns the
/// launcher's exit code (the root-cause worker's code on failure).
int run(const Options& o);

}  // namespace kiln::launcher
