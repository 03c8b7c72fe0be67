// A rank stopped by SIGTERM while it holds a shared-memory segment that its
// peers have not mapped yet (here: make_comm_buffer while the peer never
// calls it, as after a peer died) unlinks the segment before the signal's
// previous action runs: the default (the process dies by SIGTERM) or the
// program's own handler. Ranks are forked processes; every wait is bounded.
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "distributed/forked_ranks.h"
#include "distributed/thread_group.h"
#include "kiln/distributed/process_group.h"
#include "kiln/distributed/shm_segments.h"

namespace kiln::dist {
namespace {

using namespace std::chrono_literals;

std::vector<std::string> shm_names_starting(const std::string& prefix) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d))
      if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) out.push_back(e->d_name);
    ::closedir(d);
  }
  return out;
}

bool any_contains(const std::vector<std::string>& names, const char* part) {
  for (const auto& n : names)
    if (n.find(part) != std::string::npos) return true;
  return false;
}

extern "C" void exit_42(int) {
  ::_exit(42);
}

// Rank 0 and 1 of a shm group in two processes; rank 0 (with its own SIGTERM
// handler if `own_handler`) blocks in make_comm_buffer, rank 1 never joins
// it. Returns rank 0's wait status after SIGTERM; no segment of the job may
// be left.
int sigterm_during_comm_buffer(bool own_handler) {
  const std::string token = kiln::str("shm-signal-test-", ::getpid(), own_handler ? "-h" : "");
  const std::string prefix = job_segment_prefix(token);
  // Forked before the server thread starts (see forked_ranks.h).
  testing::ForkedRanks ranks(2, [&](int r, uint64_t port) {
    ::setenv("KILN_STORE_TOKEN", token.c_str(), 1);
    if (own_handler) ::signal(SIGTERM, exit_42);
    auto pg = make_gloo_group(testing::store_client(uint16_t(port), 10000ms), r, 2,
                              testing::loopback_options(10000ms, 1), "signal");
    if (pg->transport() != "shm") return 3;
    if (r == 0) pg->make_comm_buffer(1000, DType::f32);  // waits for rank 1's buffer
    std::this_thread::sleep_for(20s);                    // until killed
    return 2;
  });
  TCPStoreServerOptions so;
  so.host = "127.0.0.1";
  TCPStoreServer server(so);
  ranks.start(server.port());
  // Rank 0's comm buffer exists under the job's prefix: it waits for rank 1.
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!any_contains(shm_names_starting(prefix), "buffer") &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(any_contains(shm_names_starting(prefix), "buffer")) << "no comm buffer appeared";
  ::kill(ranks.pids().at(0), SIGTERM);
  const int status = ranks.wait_rank(0, std::chrono::steady_clock::now() + 5s);
  ::kill(ranks.pids().at(1), SIGKILL);
  ranks.wait_rank(1, std::chrono::steady_clock::now() + 5s);
  auto left = shm_names_starting(prefix);
  EXPECT_EQ(left, std::vector<std::string>{}) << "left in /dev/shm";
  for (const auto& n : left) ::unlink(("/dev/shm/" + n).c_str());
  return status;
}

TEST(ShmSignals, SigtermUnlinksThenDiesBySigterm) {
  const int status = sigterm_during_comm_buffer(false);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "status " << status;
}

TEST(ShmSignals, SigtermUnlinksThenRunsTheProgramsHandler) {
  const int status = sigterm_during_comm_buffer(true);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 42) << "status " << status;
}

}  // namespace
}  // namespace kiln::dist
