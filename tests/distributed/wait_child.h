// Test helper: wait for a forked child with a deadline, never hanging.
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <chrono>
#include <thread>

namespace kiln::testing {

/// The wait status of child `pid`, or -1 if it had not exited by `deadline`
/// (it is then killed and reaped, so no process outlives the test).
inline int wait_child(pid_t pid, std::chrono::steady_clock::time_point deadline) {
  int status = 0;
  pid_t got = 0;
  while ((got = ::waitpid(pid, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (got != 0) return status;
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -1;
}

}  // namespace kiln::testing
