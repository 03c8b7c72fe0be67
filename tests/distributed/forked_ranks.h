// Test helper: rank processes forked before the test starts any thread.
//
// fork() copies only the calling thread: a lock another thread holds at that
// moment stays held forever in the child. glibc's malloc has fork handlers,
// but the sanitizer runtime of GCC 12 does not (its allocator and thread
// registry), so a child forked while the parent's store server thread was
// starting or allocating could hang in its first allocation or thread start
// (seen in CI as "rank 0 did not finish in time" under ASan). Tests therefore
// fork their ranks first, then start the server, then release the ranks with
// the server's port through a pipe.
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <utility>
#include <vector>

#include "distributed/wait_child.h"

namespace kiln::testing {

/// `n` forked children; child r waits until start(value) and then exits with
/// body(r, value) (2 if it threw, 3 if the parent never started it).
class ForkedRanks {
 public:
  ForkedRanks(int n, const std::function<int(int rank, uint64_t value)>& body) {
    if (::pipe(gate_) != 0) {
      std::perror("pipe");
      return;
    }
    for (int r = 0; r < n; ++r) {
      const pid_t pid = ::fork();
      if (pid < 0) {
        std::perror("fork");
        return;
      }
      if (pid == 0) ::_exit(run_child(r, body));
      pids_.push_back(pid);
    }
  }

  /// Releases every child with `value` (a port, say). Call once.
  void start(uint64_t value) {
    for (size_t i = 0; i < pids_.size(); ++i)
      if (::write(gate_[1], &value, sizeof value) != sizeof value) break;
    close_gate();
  }

  /// The children's pids, in rank order (0 once waited for).
  const std::vector<pid_t>& pids() const { return pids_; }

  /// Rank r's wait status, or -1 if it had not exited by `deadline` (it is
  /// then killed); 0 for a rank already waited for.
  int wait_rank(size_t r, std::chrono::steady_clock::time_point deadline) {
    close_gate();
    const pid_t pid = std::exchange(pids_.at(r), 0);
    return pid > 0 ? wait_child(pid, deadline) : 0;
  }

  /// Each child's wait status, as wait_rank.
  std::vector<int> wait(std::chrono::steady_clock::time_point deadline) {
    std::vector<int> out;
    for (size_t r = 0; r < pids_.size(); ++r) out.push_back(wait_rank(r, deadline));
    return out;
  }

  /// Children still running are killed and reaped: none outlives the test.
  ~ForkedRanks() {
    close_gate();
    if (gate_[0] >= 0) ::close(gate_[0]);
    for (pid_t pid : pids_)
      if (pid > 0) wait_child(pid, std::chrono::steady_clock::now());
  }

  ForkedRanks(const ForkedRanks&) = delete;
  ForkedRanks& operator=(const ForkedRanks&) = delete;

 private:
  int run_child(int rank, const std::function<int(int, uint64_t)>& body) {
    ::close(gate_[1]);
    uint64_t value = 0;
    ssize_t got;
    while ((got = ::read(gate_[0], &value, sizeof value)) < 0 && errno == EINTR) {
    }
    ::close(gate_[0]);
    if (got != sizeof value) return 3;  // the parent failed before start()
    int rc = 2;
    try {
      rc = body(rank, value);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d threw: %s\n", rank, e.what());
    }
    std::fflush(stderr);
    return rc;
  }

  void close_gate() {
    if (gate_[1] >= 0) ::close(gate_[1]);
    gate_[1] = -1;
  }

  int gate_[2] = {-1, -1};
  std::vector<pid_t> pids_;
};

}  // namespace kiln::testing
