// Test helper: ranks of a Gloo group as threads of a forked child process, so
// a test that makes the process abort (as Gloo did on mismatched collectives)
// fails instead of killing the test binary. The child hosts its own store;
// each rank's outcome (a string) comes back to the parent through a pipe.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "distributed/thread_group.h"
#include "distributed/wait_child.h"
#include "kiln/distributed/process_group.h"

namespace kiln::testing {

/// Runs fn(rank, group) on `size` threads of a forked child, over Gloo groups
/// on loopback (`shm` as ProcessGroupOptions::shm, group timeout `timeout`),
/// and returns what each rank's fn returned (element r is rank r's). If the
/// child dies, hangs past `limit` or a rank throws, the one element says so.
inline std::vector<std::string> ranks_in_child(
    int size, int shm, const std::function<std::string(int, dist::ProcessGroup&)>& fn,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(3000),
    std::chrono::seconds limit = std::chrono::seconds(20)) {
  int p[2];
  if (::pipe(p) != 0) return {"pipe failed"};
  const pid_t pid = ::fork();
  if (pid < 0) return {"fork failed"};
  if (pid == 0) {
    ::close(p[0]);
    std::vector<std::string> out(static_cast<size_t>(size));
    try {
      dist::TCPStoreServerOptions so;
      so.host = "127.0.0.1";
      dist::TCPStoreServer server(so);
      std::vector<std::thread> ts;
      for (int r = 0; r < size; ++r) {
        ts.emplace_back([&, r] {
          try {
            auto pg = dist::make_gloo_group(store_client(server.port(), timeout), r, size,
                                            loopback_options(timeout, shm), "child");
            out[size_t(r)] = fn(r, *pg);
          } catch (const std::exception& e) {
            out[size_t(r)] = std::string("rank threw: ") + e.what();
          }
        });
      }
      for (auto& t : ts) t.join();
    } catch (const std::exception& e) {
      out.assign(1, std::string("child threw: ") + e.what());
    }
    std::string msg;
    for (const auto& s : out) msg += s + '\x1e';
    size_t off = 0;
    while (off < msg.size()) {
      ssize_t n = ::write(p[1], msg.data() + off, msg.size() - off);
      if (n <= 0) break;
      off += size_t(n);
    }
    ::_exit(0);
  }
  ::close(p[1]);
  std::string got;
  std::thread reader([&] {
    char buf[4096];
    for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;) got.append(buf, size_t(n));
  });
  const int status = wait_child(pid, std::chrono::steady_clock::now() + limit);
  reader.join();
  ::close(p[0]);
  if (status == -1) return {"the child did not finish in time"};
  if (WIFSIGNALED(status)) {
    const char* name = sigabbrev_np(WTERMSIG(status));
    return {std::string("the child was killed by signal ") + std::to_string(WTERMSIG(status)) +
            " (SIG" + (name ? name : "?") + ")"};
  }
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != '\x1e') continue;
    out.push_back(got.substr(start, i - start));
    start = i + 1;
  }
  return out;
}

}  // namespace kiln::testing
