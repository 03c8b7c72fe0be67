// Verifies the intra-op thread pool: coverage, exceptions, nesting, resizing.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "kiln/kiln.h"

using namespace kiln;

// parallel_for covers every index exactly once, for many range sizes.
TEST(ThreadPool, CoversRangeExactlyOnce) {
  for (int64_t n : {0, 1, 7, 1000, 100003}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    parallel_for(0, n, 16, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  }
}

// An exception thrown in a chunk reaches the caller, and the pool still works after.
TEST(ThreadPool, PropagatesExceptions) {
  EXPECT_THROW(parallel_for(0, 1000, 1,
                            [](int64_t, int64_t e) {
                              if (e == 1000) throw Error("chunk failed");
                            }),
               Error);
  std::atomic<int64_t> sum{0};
  parallel_for(0, 100, 1, [&](int64_t b, int64_t e) { sum += e - b; });
  EXPECT_EQ(sum.load(), 100);
}

// Nested parallel_for runs inline instead of deadlocking.
TEST(ThreadPool, NestedCallsRunInline) {
  std::atomic<int64_t> sum{0};
  parallel_for(0, 8, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      parallel_for(0, 100, 1, [&](int64_t bb, int64_t ee) { sum += ee - bb; });
  });
  EXPECT_EQ(sum.load(), 800);
}

// Idle workers poll for the next job (KILN_POOL_SPIN_US) before sleeping:
// jobs posted while they poll complete exactly; resizing ends the polling at
// once instead of waiting it out; a negative value is an error that leaves
// the pool working.
TEST(ThreadPool, PollingWorkersFinishJobsAndStopPromptly) {
  const int prev = num_threads();
  ::setenv("KILN_POOL_SPIN_US", "-5", 1);
  EXPECT_THROW(set_num_threads(2), Error);
  ::setenv("KILN_POOL_SPIN_US", "1000000", 1);  // 1 s, the cap
  set_num_threads(2);
  for (int it = 0; it < 2000; ++it) {
    std::vector<int> hits(64, 0);
    parallel_for(0, 64, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i)];
    });
    for (int h : hits) ASSERT_EQ(h, 1) << "job " << it;
  }
  const auto t0 = std::chrono::steady_clock::now();
  set_num_threads(1);  // the worker is polling: stop() must not wait the second out
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500));
  ::unsetenv("KILN_POOL_SPIN_US");
  set_num_threads(prev);
}

// The caller polls for the workers still running a chunk, then sleeps: a chunk
// that outlasts the poll (50 us here) is still waited for, and its writes are
// visible when parallel_for returns.
TEST(ThreadPool, CallerWaitsForAWorkerPastItsPoll) {
  const int prev = num_threads();
  ::setenv("KILN_POOL_SPIN_US", "50", 1);
  set_num_threads(2);
  for (int it = 0; it < 20; ++it) {
    std::vector<int> done(4, 0);
    parallel_for(0, 4, 1, [&](int64_t b, int64_t e) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      for (int64_t i = b; i < e; ++i) done[static_cast<size_t>(i)] = 1;
    });
    for (int d : done) ASSERT_EQ(d, 1) << "job " << it;
  }
  ::unsetenv("KILN_POOL_SPIN_US");
  set_num_threads(prev);
}

// Many tiny jobs back to back on an oversubscribed pool: workers that wake up
// after the caller has claimed every chunk stay out of that job, and never
// run a finished job (its counts would be off, or ASan would see its frame).
TEST(ThreadPool, LateWorkersNeverRunAFinishedJob) {
  const int prev = num_threads();
  set_num_threads(6);
  for (int it = 0; it < 3000; ++it) {
    std::vector<int> hits(16, 0);  // plain ints: each index belongs to one chunk
    parallel_for(0, 16, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i)];
    });
    for (int h : hits) ASSERT_EQ(h, 1) << "job " << it;
  }
  set_num_threads(prev);
}

// Results of a large elementwise op do not depend on the thread count.
TEST(ThreadPool, ResultsIndependentOfThreadCount) {
  int prev = num_threads();
  manual_seed(3);
  Tensor x = rand({300000});
  set_num_threads(1);
  auto one = (exp(x) * 2.0).sum().item<float>();
  set_num_threads(2);
  auto two = (exp(x) * 2.0).sum().item<float>();
  set_num_threads(prev);
  EXPECT_FLOAT_EQ(one, two);
  EXPECT_THROW(set_num_threads(0), Error);
}

// A forked child (multi-process tests, launchers) gets a working pool: the
// parent's workers do not exist there, and using them would hang.
TEST(ThreadPool, WorksInAForkedChild) {
  set_num_threads(2);
  std::atomic<int64_t> warm{0};
  parallel_for(0, 1 << 16, 1, [&](int64_t b, int64_t e) { warm += e - b; });  // pool started
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(20);  // a hang kills the child instead of the test
    std::atomic<int64_t> sum{0};
    parallel_for(0, 1 << 20, 1, [&](int64_t b, int64_t e) { sum += e - b; });
    Tensor t = ones({1 << 20});
    const bool ok =
        sum.load() == (1 << 20) && kiln::sum(t).item<double>() == (1 << 20) && num_threads() == 2;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child was killed (signal " << WTERMSIG(status) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}
