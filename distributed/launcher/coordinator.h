// kilnrun internals: how the launchers of a multi-node job agree through the
// TCP store (rendezvous, the first failure, completion, heartbeats), and the
// helpers supervise.cpp shares with it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/distributed/store.h"
#include "launcher.h"

namespace kiln::launcher::detail {

using Clock = std::chrono::steady_clock;

/// How often the store is polled for other nodes' news.
inline constexpr std::chrono::milliseconds kStorePoll{100};

/// Writes all of s to fd (EINTR/EAGAIN retried; a closed fd drops the output).
void write_all(int fd, std::string_view s);
/// The launcher's own message ("[kilnrun] msg") on stderr, in one write.
void say(const std::string& msg);
/// The first stop signal received (SIGINT, SIGTERM, SIGHUP, SIGQUIT), or 0.
extern int g_stop_signal;
/// Sleeps up to d, waking early for a signal (recorded in g_stop_signal).
void wait_signal_pipe(Clock::duration d);

/// A round's failure, as the store records it for every node.
struct Failure {
  int code = 1;             ///< the launcher's exit code for it
  bool restartable = true;  ///< false: a launcher was stopped or lost
  std::string what;         ///< "rank 3 (local rank 1, node 1, pid 42) exited with code 3"
};

/// The store client of one launcher (nnodes > 1). Keys: kilnrun/config, and
/// per round r kilnrun/<r>/{joined, failed, nfailed, done, ack, beat/<node>}.
class Coordinator {
 public:
  /// Connects to node 0's store, retrying until --rdzv-timeout; returns
  /// unconnected if a stop signal arrives first.
  explicit Coordinator(const Options& o);
  bool connected() const { return store_ != nullptr; }
  /// After a failed call the store is not asked again (reconnecting to a dead
  /// node 0 would only wait out the timeout).
  void mark_lost() { lost_ = true; }

  /// Joins round r and waits for every node. Returns a failure if a node
  /// failed meanwhile; nullopt when all joined or on a stop signal; throws on
  /// a timeout or a configuration that differs from node 0's.
  std::optional<Failure> rendezvous(int r);
  /// Records f as round r's failure unless another node was first; returns the
  /// round's root cause.
  Failure publish_failure(int r, const Failure& f);
  std::optional<Failure> poll_failure(int r);
  void publish_done(int r);
  bool all_done(int r);

  /// Every launcher beats while it supervises; node 0 watches the others, so a
  /// SIGKILLed launcher elsewhere cannot leave the job waiting forever.
  void beat(int r);
  /// Node 0: a failure naming a node whose heartbeat stopped, if any.
  std::optional<Failure> check_beats(int r);
  void reset_beats() { beats_.clear(); }

  /// Non-zero nodes acknowledge the outcome; node 0 keeps the store up until
  /// they have (bounded), so nobody mistakes a finished job for a lost store.
  void finish(int r);

 private:
  std::string config() const;

  const Options& o_;
  std::unique_ptr<dist::TCPStore> store_;
  bool lost_ = false;
  std::vector<std::pair<int64_t, Clock::time_point>> beats_;  // node 0: last beat, since when
  Clock::time_point next_beat_check_{};
};

}  // namespace kiln::launcher::detail
