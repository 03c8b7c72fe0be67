// init_process_group in forked processes (the default group is per process):
// env:// with rank 0 hosting the store, env:// with a launcher-hosted store and
// token, tcp://, new_group, destroy and re-init, and a rank that exits while
// its peer runs collectives. In this process: malformed URLs and missing
// environment variables. Loopback only; every child is killed after a deadline.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/scoped_env.h"
#include "distributed/forked_ranks.h"
#include "kiln/distributed/process_group.h"
#include "kiln/functional.h"
#include "runtime/test_util.h"

namespace kiln::dist {
namespace {

using kiln::testing::expect_error;
using kiln::testing::ScopedEnv;
using namespace std::chrono_literals;

// A port that was free a moment ago (rank 0 binds it again).
// A failed check inside a child: print it and exit with code 1.
#define CHILD_CHECK(cond)                                                          \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::fprintf(stderr, "child check failed: %s (line %d)\n", #cond, __LINE__); \
      std::fflush(stderr);                                                         \
      ::_exit(1);                                                                  \
    }                                                                              \
  } while (0)

// Forks `n` rank processes running body(rank, value); each must exit 0 within
// `limit`. `after_fork` (e.g. starting a store server) runs in the parent once
// every rank is forked, and its result is each rank's `value` (see
// forked_ranks.h for why nothing may start a thread before the forks).
// Children leave with _exit (no destructors or gtest teardown of the parent's
// state) and keep tensors small: the parent's intra-op pool threads do not
// exist after fork, so a child must never reach parallel_for.
void run_processes(int n, const std::function<void(int, uint64_t)>& body,
                   const std::function<uint64_t()>& after_fork, std::chrono::seconds limit = 10s) {
  kiln::testing::ForkedRanks ranks(n, [&](int rank, uint64_t value) {
    body(rank, value);
    return 0;
  });
  ASSERT_EQ(int(ranks.pids().size()), n) << "fork failed";
  ranks.start(after_fork ? after_fork() : 0);
  const auto statuses = ranks.wait(Clock::now() + limit);
  for (size_t r = 0; r < statuses.size(); ++r) {
    if (statuses[r] == -1) {
      ADD_FAILURE() << "rank " << r << " did not finish in time";
      continue;
    }
    EXPECT_TRUE(WIFEXITED(statuses[r]) && WEXITSTATUS(statuses[r]) == 0)
        << "rank " << r << " exit status " << statuses[r];
  }
}

void run_processes(int n, const std::function<void(int)>& body, std::chrono::seconds limit = 10s) {
  run_processes(
      n, [&](int rank, uint64_t) { body(rank); }, {}, limit);
}

void set_env(const char* name, const std::string& value) {
  ::setenv(name, value.c_str(), 1);
}

// all_reduce(sum) of ones on the default group equals the world size.
bool sum_of_ones_ok(int world) {
  Tensor t = ones({5});
  default_group()->all_reduce(t)->wait();
  for (int64_t i = 0; i < 5; ++i)
    if (element_as_double(t, i) != world) return false;
  return true;
}

// env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK; rank 0 serves
// the store; destroy then init again works; new_group({0, 2}) leaves rank 1 out.
TEST(InitProcessGroup, EnvRankZeroHostsTheStore) {
  uint16_t port = kiln::dist::free_loopback_port(), port2 = kiln::dist::free_loopback_port();
  run_processes(3, [&](int rank) {
    set_env("RANK", std::to_string(rank));
    set_env("WORLD_SIZE", "3");
    set_env("MASTER_ADDR", "127.0.0.1");
    set_env("MASTER_PORT", std::to_string(port));
    set_env("LOCAL_RANK", std::to_string(rank));
    ::unsetenv("KILN_USE_AGENT_STORE");
    InitOptions o;
    o.timeout = 5000ms;
    init_process_group(o);
    CHILD_CHECK(is_initialized());
    CHILD_CHECK(get_rank() == rank && get_world_size() == 3 && get_local_rank() == rank);
    CHILD_CHECK(sum_of_ones_ok(3));
    auto sub = new_group({2, 0});
    CHILD_CHECK((sub == nullptr) == (rank == 1));
    if (sub) {
      CHILD_CHECK(sub->size() == 2 && sub->rank() == (rank == 0 ? 0 : 1));
      Tensor t = full({3}, double(rank));
      sub->all_reduce(t)->wait();
      CHILD_CHECK(element_as_double(t, 2) == 2.0);
    }
    auto second = new_group({0, 1, 2});  // a second group coexists with the first
    CHILD_CHECK(second && second->size() == 3);
    second->barrier()->wait();
    default_group()->barrier()->wait();  // nobody still needs rank 0's store
    sub.reset();
    second.reset();
    destroy_process_group();
    destroy_process_group();  // idempotent
    CHILD_CHECK(!is_initialized());

    // Again, on a new port: the old server may still be closing in rank 0.
    set_env("MASTER_PORT", std::to_string(port2));
    init_process_group(o);
    CHILD_CHECK(sum_of_ones_ok(3));
    default_group()->barrier()->wait();
    destroy_process_group();
  });
}

// env:// under kilnrun: the launcher's store (here the parent's, with a token)
// and KILN_USE_AGENT_STORE=1, so rank 0 does not serve.
TEST(InitProcessGroup, EnvWithAgentStoreAndToken) {
  std::unique_ptr<TCPStoreServer> agent;
  auto start_agent = [&]() -> uint64_t {
    TCPStoreServerOptions so;
    so.host = "127.0.0.1";
    so.token = "secret-token";
    agent = std::make_unique<TCPStoreServer>(so);
    return agent->port();
  };
  run_processes(
      2,
      [&](int rank, uint64_t port) {
        set_env("RANK", std::to_string(rank));
        set_env("WORLD_SIZE", "2");
        set_env("MASTER_ADDR", "127.0.0.1");
        set_env("MASTER_PORT", std::to_string(port));
        set_env("KILN_USE_AGENT_STORE", "1");
        set_env("KILN_STORE_TOKEN", "secret-token");
        ::unsetenv("LOCAL_RANK");
        InitOptions o;
        o.timeout = 5000ms;
        init_process_group(o);
        CHILD_CHECK(get_local_rank() == 0);
        CHILD_CHECK(sum_of_ones_ok(2));
        default_group()->barrier()->wait();
        destroy_process_group();
      },
      start_agent);
}

// tcp://host:port with the rank and world size given in InitOptions.
TEST(InitProcessGroup, TcpUrl) {
  uint16_t port = kiln::dist::free_loopback_port();
  run_processes(2, [&](int rank) {
    ::unsetenv("RANK");
    ::unsetenv("WORLD_SIZE");
    ::unsetenv("KILN_USE_AGENT_STORE");
    ::unsetenv("KILN_STORE_TOKEN");
    InitOptions o;
    o.init_method = kiln::str("tcp://127.0.0.1:", port);
    o.rank = rank;
    o.world_size = 2;
    o.timeout = 5000ms;
    init_process_group(o);
    CHILD_CHECK(get_rank() == rank && get_world_size() == 2);
    CHILD_CHECK(sum_of_ones_ok(2));
    default_group()->barrier()->wait();
    destroy_process_group();
  });
}

// A rank whose process exits mid-job: its peer's next collective fails with a
// kiln::Error (connection closed), not a hang; later ones fail at once.
TEST(InitProcessGroup, PeerProcessExits) {
  uint16_t port = kiln::dist::free_loopback_port();
  run_processes(2, [&](int rank) {
    InitOptions o;
    o.init_method = kiln::str("tcp://127.0.0.1:", port);
    o.rank = rank;
    o.world_size = 2;
    o.timeout = 4000ms;
    init_process_group(o);
    CHILD_CHECK(sum_of_ones_ok(2));
    if (rank == 1) ::_exit(0);  // gone, sockets closed by the kernel
    auto t0 = Clock::now();
    std::string msg;
    try {
      default_group()->all_reduce(ones({1 << 14}))->wait();
    } catch (const Error& e) {
      msg = e.what();
    }
    CHILD_CHECK(msg.find("[all_reduce] all_reduce #1") != std::string::npos);
    CHILD_CHECK(msg.find("failed on rank 0/2") != std::string::npos);
    CHILD_CHECK(msg.find("(peer: rank 1)") != std::string::npos);
    CHILD_CHECK(Clock::now() - t0 < 3s);
    bool failed = false;
    try {
      default_group()->barrier()->wait();
    } catch (const Error& e) {
      failed = std::string(e.what()).find("unusable") != std::string::npos;
    }
    CHILD_CHECK(failed);
    // The store server lives in this process (rank 0): destroy must not hang.
    destroy_process_group();
  });
}

// KILN_DIST_DEBUG without kilnrun, where rank 0 serves the store: rank 0
// exits without issuing the collective rank 1 waits in. Rank 1's error says
// the store went away with rank 0; it used to list every rank (itself too)
// as not having issued it, after a store timeout per rank.
TEST(InitProcessGroup, DebugCheckWhenTheStoreHostExitsFirst) {
  uint16_t port = kiln::dist::free_loopback_port();
  run_processes(2, [&](int rank) {
    set_env("KILN_DIST_DEBUG", "1");
    ::unsetenv("KILN_USE_AGENT_STORE");
    ::unsetenv("KILN_STORE_TOKEN");
    ::unsetenv("KILN_RESTART_COUNT");
    InitOptions o;
    o.init_method = kiln::str("tcp://127.0.0.1:", port);
    o.rank = rank;
    o.world_size = 2;
    o.timeout = 3000ms;
    init_process_group(o);
    CHILD_CHECK(sum_of_ones_ok(2));
    if (rank == 0) {
      // Once rank 1 has published collective #1 for the check, leave without it.
      TCPStoreOptions co;
      co.port = port;
      co.timeout = 3000ms;
      TCPStore peek(co);
      peek.wait({"pg/r0/i0/default/debug/1/1"}, 3000ms);
      ::_exit(0);
    }
    std::string msg;
    try {
      default_group()->all_reduce(ones({4}));
    } catch (const Error& e) {
      msg = e.what();
    }
    if (msg.find("lost the store") == std::string::npos ||
        msg.find("rank 0 of the job serves it") == std::string::npos ||
        msg.find("rank(s) [") != std::string::npos)
      std::fprintf(stderr, "unexpected: '%s'\n", msg.c_str());
    CHILD_CHECK(msg.find("[all_reduce] KILN_DIST_DEBUG: rank 1") != std::string::npos);
    CHILD_CHECK(msg.find("lost the store") != std::string::npos);
    CHILD_CHECK(msg.find("rank 0 of the job serves it") != std::string::npos);
    CHILD_CHECK(msg.find("rank(s) [") == std::string::npos);
  });
}

// Malformed URLs, missing or bad variables and an unknown backend are clear
// errors raised before any network traffic; the group API needs init first.
TEST(InitProcessGroup, ErrorsBeforeAnyNetwork) {
  ScopedEnv g1("RANK", {}), g2("WORLD_SIZE", {}), g3("MASTER_ADDR", {}), g4("MASTER_PORT", {}),
      g5("LOCAL_RANK", {});
  auto init = [](const std::string& url, int rank = 0, int world = 1) {
    InitOptions o;
    o.init_method = url;
    o.rank = rank;
    o.world_size = world;
    o.timeout = 1000ms;
    init_process_group(o);
  };
  expect_error([&] { init("env://", -1, -1); },
               {"[init_process_group] env:// needs the environment variable(s)",
                "[RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT]"});
  set_env("MASTER_ADDR", "127.0.0.1");
  set_env("MASTER_PORT", "http");
  expect_error([&] { init("env://"); }, {"MASTER_PORT='http' is not an integer"});
  set_env("MASTER_PORT", "70000");
  expect_error([&] { init("env://"); }, {"MASTER_PORT=70000 is out of range [1, 65535]"});
  set_env("MASTER_PORT", "29500");
  set_env("LOCAL_RANK", "x");
  expect_error([&] { init("env://"); }, {"LOCAL_RANK='x' is not an integer"});
  ::unsetenv("LOCAL_RANK");
  expect_error([&] { init("env://", 2, 2); }, {"RANK=2 is out of range [0, 1]"});
  expect_error([&] { init("env://", 0, 0); }, {"WORLD_SIZE=0 is out of range"});
  expect_error([&] { init("tcp://127.0.0.1"); },
               {"malformed init_method 'tcp://127.0.0.1'", "no port given"});
  expect_error([&] { init("tcp://:29500"); }, {"malformed init_method", "host is empty"});
  expect_error(
      [&] { init("tcp://host:12ab"); },
      {"malformed init_method 'tcp://host:12ab': port '12ab' is not an integer in [1, 65535]"});
  expect_error([&] { init("tcp://[::1]29500"); }, {"expected tcp://[ipv6]:port"});
  expect_error([&] { init("tcp://127.0.0.1:29500", -1, -1); },
               {"tcp://127.0.0.1:29500 needs the environment variable(s) [RANK, WORLD_SIZE]"});
  expect_error([&] { init("file:///tmp/x"); }, {"unsupported init_method 'file:///tmp/x'"});
  InitOptions mpi;
  mpi.backend = "mpi";
  expect_error([&] { init_process_group(mpi); }, {"backend 'mpi'", "use gloo, nccl or auto"});
  EXPECT_FALSE(is_initialized());
  expect_error([] { default_group(); }, {"[default_group]", "not initialized"});
  expect_error([] { get_rank(); }, {"[get_rank]", "init_process_group"});
  expect_error([] { new_group({0}); }, {"[new_group]", "not initialized"});
  destroy_process_group();  // harmless when not initialized
}

// new_group validates its ranks (a one-rank world in this process).
TEST(InitProcessGroup, NewGroupRanksAreChecked) {
  InitOptions o;
  o.init_method = kiln::str("tcp://127.0.0.1:", kiln::dist::free_loopback_port());
  o.rank = 0;
  o.world_size = 1;
  o.timeout = 3000ms;
  init_process_group(o);
  expect_error([] { init_process_group(); }, {"already initialized"});
  expect_error([] { new_group({}); }, {"[new_group]", "empty"});
  expect_error([] { new_group({0, 1}); }, {"rank 1 is out of range for world size 1"});
  expect_error([] { new_group({0, 0}); }, {"rank 0 is listed twice"});
  auto g = new_group({0});
  ASSERT_TRUE(g);
  Tensor t = full({2}, 3.0);
  g->all_reduce(t, ReduceOp::kAvg)->wait();
  EXPECT_EQ(element_as_double(t, 1), 3.0);
  g.reset();
  destroy_process_group();
}

}  // namespace
}  // namespace kiln::dist
