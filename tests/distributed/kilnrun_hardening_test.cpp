// kilnrun against what a job can leave or a caller can pass: a worker's
// grandchild that left its process group with setsid, shared-memory segments
// of torn-down workers, durations that are not finite numbers, and symbolic
// links in the log directory. Loopback only; every wait is bounded.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "distributed/kilnrun_test_util.h"
#include "kiln/distributed/shm_segments.h"

namespace {

using namespace kiln::testing::kilnrun;

// ---- processes that escaped the worker's process group -------------------

// A grandchild in a session of its own (setsid) is not reached by killing the
// worker's process group; the launcher adopts it as a subreaper and kills it
// at teardown: after a failure, and after a success that left it running.
TEST(KilnrunHardening, SetsidGrandchildrenDoNotOutliveTheJob) {
  for (bool fail : {true, false}) {
    std::string dir = make_temp_dir();
    std::string start = kiln::str("setsid sleep 100 & echo $! > ", dir, "/gc_$RANK; ");
    std::string script = fail ? kiln::str(start, sh_wait_for(dir, {"gc_0", "gc_1"}),
                                          "if [ $RANK = 0 ]; then exit 1; fi; sleep 100")
                              : start + "exit 0";
    Result r = run_kilnrun(
        {"--nproc-per-node", "2", "--master-port", "0", "--grace-period", "1", "sh", "-c", script},
        dir);
    EXPECT_FALSE(r.timed_out) << fail;
    EXPECT_EQ(r.code, fail ? 1 : 0) << r.err;
    auto gc = read_pids(dir, "gc_");
    EXPECT_EQ(gc.size(), 2u) << fail;
    expect_all_dead(gc);
    fs::remove_all(dir);
  }
}

// ---- shared-memory segments ---------------------------------------------------

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// Segments named with the job's token prefix whose creators are gone are
// removed once the workers are; another job's, and one whose creator is
// alive, stay.
TEST(KilnrunHardening, RemovesTheSegmentsTheWorkersLeft) {
  std::string dir = make_temp_dir();
  const std::string token = kiln::str("kilnrun-shm-test-", ::getpid());
  const std::string mine = "/dev/shm/" + kiln::dist::job_segment_prefix(token);
  const std::string other =
      kiln::str("/dev/shm/", kiln::dist::job_segment_prefix(token + "-other"), "x.1");
  const std::string live = kiln::str(mine, "live.", ::getpid());  // this process is alive
  for (const auto& p : {other, live}) std::ofstream(p) << "x";
  // Each worker leaves a segment (as if killed while setting one up); rank 1 fails.
  std::string script = kiln::str(": > ", mine, "rank$RANK.$$; echo $$ > ", dir, "/pid_$RANK; ",
                                 sh_wait_for(dir, {"pid_0", "pid_1"}),
                                 "if [ $RANK = 1 ]; then exit 3; fi; sleep 100");
  Result r = run_kilnrun({"--nproc-per-node", "2", "--master-port", "0", "--grace-period", "1",
                          "--token", token, "sh", "-c", script},
                         dir);
  EXPECT_EQ(r.code, 3) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    std::string left = kiln::str(mine, "rank", rank, ".", slurp(kiln::str(dir, "/pid_", rank)));
    left.pop_back();  // the pid file's newline
    EXPECT_FALSE(exists(left)) << left << " was left in /dev/shm\n" << r.err;
  }
  EXPECT_NE(r.err.find("removed 2 shared-memory segment(s)"), std::string::npos) << r.err;
  EXPECT_TRUE(exists(other));
  EXPECT_TRUE(exists(live));
  for (const auto& p : {other, live}) ::unlink(p.c_str());
  fs::remove_all(dir);
}

// ---- the command line -----------------------------------------------------------

// Durations must be finite numbers in range; the message is one short line.
TEST(KilnrunHardening, DurationsMustBeFiniteAndInRange) {
  for (std::vector<std::string> bad : {std::vector<std::string>{"--grace-period", "nan"},
                                       {"--grace-period", "inf"},
                                       {"--grace-period", "1e300"},
                                       {"--grace-period", "-1"},
                                       {"--grace-period", "-nan"},
                                       {"--rdzv-timeout", "nan"},
                                       {"--rdzv-timeout", "inf"},
                                       {"--rdzv-timeout", "0"},
                                       {"--rdzv-timeout", "1e300"}}) {
    Options o;
    std::string err;
    bad.push_back("prog");
    EXPECT_EQ(parse(bad, o, &err).value_or(0) != 0, true) << bad[0] << " " << bad[1];
    EXPECT_NE(err.find(bad[0]), std::string::npos) << err;
    EXPECT_NE(err.find("must be a number of seconds in"), std::string::npos) << err;
    EXPECT_LT(err.size(), 200u) << err;
  }
  Options o;
  EXPECT_FALSE(parse({"--grace-period", "0.5", "--rdzv-timeout", "30", "prog"}, o).has_value());
  EXPECT_EQ(o.grace_seconds, 0.5);
  EXPECT_EQ(o.rdzv_timeout_seconds, 30);
}

// A log file planted as a symbolic link is not followed (its target keeps its
// contents), nor is a log directory that is a link.
TEST(KilnrunHardening, LogDirDoesNotFollowSymlinks) {
  std::string dir = make_temp_dir();
  const std::string victim = dir + "/victim";
  std::ofstream(victim) << "precious";
  fs::create_directory(dir + "/logs");
  fs::create_symlink(victim, dir + "/logs/rank_0.log");
  Result r =
      run_kilnrun({"--master-port", "0", "--log-dir", dir + "/logs", "sh", "-c", "echo hi"}, dir);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("rank_0.log is a symbolic link"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(victim), "precious");

  fs::create_directory(dir + "/elsewhere");
  fs::create_directory_symlink(dir + "/elsewhere", dir + "/linked");
  r = run_kilnrun({"--master-port", "0", "--log-dir", dir + "/linked", "sh", "-c", "echo hi"}, dir);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("is a symbolic link"), std::string::npos) << r.err;
  EXPECT_FALSE(exists(dir + "/elsewhere/rank_0.log"));

  // A plain directory (created if missing) still works.
  r = run_kilnrun({"--master-port", "0", "--log-dir", dir + "/fresh", "sh", "-c", "echo hi"}, dir);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(slurp(dir + "/fresh/rank_0.log"), "hi\n");
  fs::remove_all(dir);
}

}  // namespace
