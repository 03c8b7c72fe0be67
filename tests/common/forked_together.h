// Test helper: N forked processes that start at the same moment (two ranks
// writing one cache directory, say), each running body(i) and exiting with its
// result (1 on an exception); the parent waits for all within `limit`, kills
// them all past it, and reports a crash, a non-zero exit or the timeout as a
// test failure. Fork before the test starts threads of its own.
#pragma once
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <thread>
#include <vector>

namespace kiln::testing {

inline void run_forked_together(int n, const std::function<int(int)>& body,
                                std::chrono::seconds limit) {
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  std::vector<pid_t> kids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      char c;
      if (::read(go[0], &c, 1) != 1) ::_exit(3);  // start together
      int code = 0;
      try {
        code = body(r);
      } catch (...) {
        code = 1;
      }
      ::_exit(code);
    }
    kids.push_back(pid);
  }
  const std::vector<char> start(static_cast<size_t>(n), 'g');
  ASSERT_EQ(::write(go[1], start.data(), start.size()), static_cast<ssize_t>(start.size()));
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (pid_t pid : kids) {
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        for (pid_t k : kids) ::kill(k, SIGKILL);
        ::waitpid(pid, &status, 0);
        FAIL() << "a forked process did not finish within " << limit.count() << " s";
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(WIFEXITED(status)) << "a forked process crashed";
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
  ::close(go[0]);
  ::close(go[1]);
}

}  // namespace kiln::testing
