// kilnrun: its library parts (command line, environment, line splitting) and
// the launcher binary itself on loopback: environment, prefixed output, logs,
// exit codes, teardown of workers and grandchildren, restarts, SIGTERM, and
// two launchers forming one job. Every wait is bounded.
#include <gtest/gtest.h>
#include <signal.h>

#include <set>
#include <string>
#include <vector>

#include "distributed/kilnrun_test_util.h"

namespace {

using namespace kiln::testing::kilnrun;
using kiln::launcher::Options;

// ---- library parts ---------------------------------------------------------

TEST(Launcher, ParseStopsAtTheProgram) {
  Options o;
  auto rc = parse(
      {"--nproc-per-node", "2", "--max-restarts", "1", "sh", "-c", "echo $RANK", "--nnodes", "3"},
      o);
  EXPECT_FALSE(rc.has_value());
  EXPECT_EQ(o.nproc_per_node, 2);
  EXPECT_EQ(o.max_restarts, 1);
  EXPECT_EQ(o.nnodes, 1);  // --nnodes after the program belongs to the program
  std::vector<std::string> want = {"sh", "-c", "echo $RANK", "--nnodes", "3"};
  EXPECT_EQ(o.program, want);

  Options o2;
  EXPECT_FALSE(parse({"--", "prog", "--help"}, o2).has_value());
  EXPECT_EQ(o2.program, (std::vector<std::string>{"prog", "--help"}));
}

TEST(Launcher, ParseRejectsBadCommandLines) {
  std::string err;
  Options a;
  EXPECT_NE(parse({"--nproc-per-node", "2"}, a, &err).value_or(0), 0);
  EXPECT_NE(err.find("no program"), std::string::npos) << err;
  Options b;
  EXPECT_NE(parse({"--bogus", "prog"}, b, &err).value_or(0), 0);
  Options c;
  EXPECT_NE(parse({"--nnodes", "2", "--node-rank", "2", "prog"}, c, &err).value_or(0), 0);
  Options d;
  EXPECT_NE(parse({"--nproc-per-node", "0", "prog"}, d, &err).value_or(0), 0);
  Options e;
  EXPECT_NE(parse({"--nnodes", "2", "--master-port", "0", "prog"}, e, &err).value_or(0), 0);
}

TEST(Launcher, WorkerEnvironment) {
  Options o;
  o.nproc_per_node = 2;
  o.nnodes = 2;
  o.node_rank = 1;
  o.master_addr = "10.0.0.1";
  o.master_port = 1234;
  o.token = "secret";
  auto env = kiln::launcher::worker_env({"PATH=/bin", "RANK=99", "OMP_NUM_THREADS=4"}, o, 1, 2);
  std::set<std::string> got(env.begin(), env.end());
  for (const char* want :
       {"PATH=/bin", "RANK=3", "LOCAL_RANK=1", "WORLD_SIZE=4", "LOCAL_WORLD_SIZE=2", "GROUP_RANK=1",
        "GROUP_WORLD_SIZE=2", "MASTER_ADDR=10.0.0.1", "MASTER_PORT=1234", "KILN_STORE_TOKEN=secret",
        "KILN_RESTART_COUNT=2", "KILN_USE_AGENT_STORE=1", "OMP_NUM_THREADS=4",
        "KILN_NUM_THREADS=1"})
    EXPECT_TRUE(got.count(want)) << want;
  EXPECT_FALSE(got.count("RANK=99"));
  EXPECT_EQ(env.size(), got.size());  // nothing duplicated

  o.nproc_per_node = 1;
  o.token.clear();
  env = kiln::launcher::worker_env({"KILN_STORE_TOKEN=stale"}, o, 0, 0);
  for (const auto& e : env) {
    EXPECT_EQ(e.rfind("KILN_STORE_TOKEN", 0), std::string::npos) << e;
    EXPECT_EQ(e.rfind("OMP_NUM_THREADS", 0), std::string::npos) << e;
  }
}

TEST(Launcher, LineBufferSplitsAndBounds) {
  std::vector<std::string> got;
  auto emit = [&](std::string_view l) { got.emplace_back(l); };
  kiln::launcher::LineBuffer b(8);
  b.feed("ab", emit);
  b.feed("c\nde\n\nf", emit);
  EXPECT_EQ(got, (std::vector<std::string>{"abc", "de", ""}));
  b.feed("0123456789\n", emit);  // "f0123456" is cut at 8 bytes
  EXPECT_EQ(got.back(), "789");
  EXPECT_EQ(got[got.size() - 2], "f0123456");
  b.feed("tail", emit);
  b.flush(emit);
  EXPECT_EQ(got.back(), "tail");
  EXPECT_EQ(kiln::launcher::prefixed_line(3, "hi"), "[rank 3] hi\n");
}

TEST(Launcher, ExitCodesOfStatuses) {
  EXPECT_EQ(kiln::launcher::exit_code_of_status(3 << 8), 3);
  EXPECT_EQ(kiln::launcher::exit_code_of_status(SIGKILL), 128 + SIGKILL);
  EXPECT_EQ(kiln::launcher::describe_status(SIGKILL), "was killed by signal 9 (SIGKILL)");
  EXPECT_EQ(kiln::launcher::describe_status(3 << 8), "exited with code 3");
}

// Two workers that each start a sleeping grandchild and record both pids.
Launch start_sleepers(const std::string& dir) {
  std::string script =
      kiln::str("sleep 100 & echo $! > ", dir, "/gc_$RANK; echo $$ > ", dir, "/pid_$RANK; wait");
  return start({"--nproc-per-node", "2", "--master-port", "0", "sh", "-c", script}, dir);
}

bool sleepers_started(const std::string& dir) {
  return wait_for_files({dir + "/pid_0", dir + "/pid_1", dir + "/gc_0", dir + "/gc_1"}, 5s);
}

// Every worker and grandchild pid recorded by start_sleepers is gone.
void expect_sleepers_dead(const std::string& dir) {
  auto pids = read_pids(dir, "pid_");
  auto gc = read_pids(dir, "gc_");
  pids.insert(pids.end(), gc.begin(), gc.end());
  EXPECT_EQ(pids.size(), 4u);
  expect_all_dead(pids);
  fs::remove_all(dir);
}

// ---- the binary --------------------------------------------------------------

TEST(Kilnrun, HelpListsEveryFlag) {
  std::string dir = make_temp_dir();
  Result r = run_kilnrun({"--help"}, dir);
  EXPECT_EQ(r.code, 0) << r.err;
  for (const char* flag : {"--nproc-per-node", "--nnodes", "--node-rank", "--master-addr",
                           "--master-port", "--max-restarts", "--log-dir", "--grace-period",
                           "--rdzv-timeout", "--token", "RANK", "KILN_STORE_TOKEN"})
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag << "\n" << r.out;
  fs::remove_all(dir);
}

TEST(Kilnrun, SetsTheEnvironmentOfTwoWorkers) {
  std::string dir = make_temp_dir();
  ::unsetenv("OMP_NUM_THREADS");
  ::unsetenv("KILN_NUM_THREADS");
  Result r = run_kilnrun(
      {"--nproc-per-node", "2", "--master-port", "0", "sh", "-c",
       "echo ENV $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR "
       "$OMP_NUM_THREADS $KILN_NUM_THREADS $KILN_RESTART_COUNT ${KILN_STORE_TOKEN:+token} "
       "$MASTER_PORT"},
      dir);
  ASSERT_EQ(r.code, 0) << r.err;
  std::set<std::string> got;
  std::string port;
  for (const auto& l : lines_of(r.out)) {
    size_t p = l.rfind(' ');
    got.insert(l.substr(0, p));
    port = l.substr(p + 1);
  }
  EXPECT_EQ(got, (std::set<std::string>{"[rank 0] ENV 0 0 2 2 0 127.0.0.1 1 1 0 token",
                                        "[rank 1] ENV 1 1 2 2 0 127.0.0.1 1 1 0 token"}))
      << r.out;
  EXPECT_GT(std::atoi(port.c_str()), 0) << r.out;
  EXPECT_EQ(r.err.find("token="), std::string::npos);  // nothing secret printed
  fs::remove_all(dir);
}

TEST(Kilnrun, PrefixesEveryLineAndWritesLogs) {
  std::string dir = make_temp_dir();
  std::string logs = dir + "/logs";
  Result r = run_kilnrun({"--nproc-per-node", "2", "--master-port", "0", "--log-dir", logs, "sh",
                          "-c", "echo one $RANK; echo two $RANK; echo err $RANK >&2; printf tail"},
                         dir);
  ASSERT_EQ(r.code, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    std::string p = kiln::str("[rank ", rank, "] ");
    EXPECT_NE(r.out.find(kiln::str(p, "one ", rank, "\n")), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(kiln::str(p, "two ", rank, "\n")), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(kiln::str(p, "tail\n")), std::string::npos) << r.out;
    EXPECT_NE(r.err.find(kiln::str(p, "err ", rank, "\n")), std::string::npos) << r.err;
    std::string log = slurp(kiln::str(logs, "/rank_", rank, ".log"));
    EXPECT_NE(log.find(kiln::str("one ", rank, "\ntwo ", rank, "\n")), std::string::npos) << log;
    EXPECT_NE(log.find(kiln::str("err ", rank, "\n")), std::string::npos) << log;
  }
  for (const auto& l : lines_of(r.out)) EXPECT_EQ(l.rfind("[rank ", 0), 0u) << l;
  fs::remove_all(dir);
}

TEST(Kilnrun, FailingWorkerSetsTheExitCodeAndStopsTheOthers) {
  std::string dir = make_temp_dir();
  Result r = run_kilnrun({"--nproc-per-node", "3", "--master-port", "0", "sh", "-c",
                          "if [ $RANK = 1 ]; then sleep 0.2; exit 3; fi; sleep 30"},
                         dir);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_LT(r.seconds, 10);
  EXPECT_NE(r.err.find("rank 1 (local rank 1, node 0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exited with code 3"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

TEST(Kilnrun, KilledWorkerTearsDownTheJob) {
  std::string dir = make_temp_dir();
  std::string script = kiln::str("sleep 100 & echo $! > ", dir, "/gc_$RANK; echo $$ > ", dir,
                                 "/pid_$RANK; ", "if [ $RANK = 1 ]; then ",
                                 sh_wait_for(dir, {"pid_0", "pid_2", "gc_0", "gc_1", "gc_2"}),
                                 "kill -9 $$; fi; wait");
  Result r = run_kilnrun(
      {"--nproc-per-node", "3", "--master-port", "0", "--grace-period", "2", "sh", "-c", script},
      dir);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.code, 128 + SIGKILL) << r.err;
  EXPECT_LT(r.seconds, 10);
  EXPECT_NE(r.err.find("rank 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("killed by signal 9"), std::string::npos) << r.err;
  auto pids = read_pids(dir, "pid_");
  auto grandchildren = read_pids(dir, "gc_");
  EXPECT_EQ(pids.size(), 3u);
  EXPECT_EQ(grandchildren.size(), 3u);  // rank 1's sleep was orphaned by kill -9
  pids.insert(pids.end(), grandchildren.begin(), grandchildren.end());
  expect_all_dead(pids);
  fs::remove_all(dir);
}

TEST(Kilnrun, GrandchildrenOfAFailedWorkerDie) {
  std::string dir = make_temp_dir();
  // Rank 0 exits 1 but leaves a background sleep behind; rank 1's sleep ignores SIGTERM.
  std::string script = kiln::str("if [ $RANK = 1 ]; then trap '' TERM; fi; sleep 100 & echo $! > ",
                                 dir, "/gc_$RANK; ", "if [ $RANK = 0 ]; then ",
                                 sh_wait_for(dir, {"gc_0", "gc_1"}), "exit 1; fi; wait");
  Result r = run_kilnrun(
      {"--nproc-per-node", "2", "--master-port", "0", "--grace-period", "0.5", "sh", "-c", script},
      dir);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_LT(r.seconds, 10);
  EXPECT_NE(r.err.find("SIGKILL"), std::string::npos) << r.err;  // rank 1 needed it
  auto gc = read_pids(dir, "gc_");
  EXPECT_EQ(gc.size(), 2u);
  expect_all_dead(gc);
  fs::remove_all(dir);
}

TEST(Kilnrun, MaxRestartsRestartsTheGroup) {
  std::string dir = make_temp_dir();
  std::string script =
      kiln::str("echo $KILN_RESTART_COUNT >> ", dir, "/count_$RANK; ",
                "if [ $KILN_RESTART_COUNT = 0 ] && [ $RANK = 0 ]; then exit 5; fi");
  Result r = run_kilnrun(
      {"--nproc-per-node", "2", "--master-port", "0", "--max-restarts", "1", "sh", "-c", script},
      dir);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(slurp(dir + "/count_0"), "0\n1\n");
  auto rank1 = lines_of(slurp(dir + "/count_1"));
  ASSERT_FALSE(rank1.empty());
  EXPECT_EQ(rank1.back(), "1");
  EXPECT_NE(r.err.find("restarting"), std::string::npos) << r.err;

  // Restarts exhausted: the last failure's code.
  r = run_kilnrun({"--master-port", "0", "--max-restarts", "1", "sh", "-c",
                   kiln::str("echo x >> ", dir, "/always; exit 4")},
                  dir);
  EXPECT_EQ(r.code, 4) << r.err;
  EXPECT_EQ(slurp(dir + "/always"), "x\nx\n");
  fs::remove_all(dir);
}

TEST(Kilnrun, SigtermToTheLauncherStopsTheJob) {
  std::string dir = make_temp_dir();
  Launch l = start_sleepers(dir);
  ASSERT_TRUE(sleepers_started(dir));
  auto t0 = Clock::now();
  ::kill(l.pid, SIGTERM);
  Result r = finish(l, 10, t0);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.code, 128 + SIGTERM) << r.err;
  EXPECT_NE(r.err.find("SIGTERM"), std::string::npos) << r.err;
  expect_sleepers_dead(dir);
}

// Even a SIGKILLed launcher leaves nothing behind: PR_SET_PDEATHSIG stops the
// workers and the launcher's watchdog process their children.
TEST(Kilnrun, SigkillToTheLauncherLeavesNoProcess) {
  std::string dir = make_temp_dir();
  Launch l = start_sleepers(dir);
  ASSERT_TRUE(sleepers_started(dir));
  ::kill(l.pid, SIGKILL);
  Result r = finish(l, 10);
  EXPECT_EQ(r.code, 128 + SIGKILL);
  expect_sleepers_dead(dir);
}

TEST(Kilnrun, MissingProgramExits127) {
  std::string dir = make_temp_dir();
  Result r = run_kilnrun({"--master-port", "0", "/nonexistent/kiln-program"}, dir);
  EXPECT_EQ(r.code, 127) << r.err;
  fs::remove_all(dir);
}

// Two launchers on loopback as two nodes: one job with ranks 0..3.
TEST(Kilnrun, TwoLaunchersFormOneJob) {
  std::string dir = make_temp_dir();
  std::string port = std::to_string(kiln::dist::free_loopback_port());
  auto node = [&](int rank, const std::string& script) {
    return start(
        {"--nnodes", "2", "--node-rank", std::to_string(rank), "--nproc-per-node", "2",
         "--master-port", port, "--rdzv-timeout", "10", "--grace-period", "2", "sh", "-c", script},
        dir, kiln::str("node", rank));
  };
  std::string script = "echo R $RANK $LOCAL_RANK $WORLD_SIZE $GROUP_RANK $MASTER_PORT";
  auto t0 = Clock::now();
  Launch n1 = node(1, script);  // the second node may start first: it waits for the store
  Launch n0 = node(0, script);
  Result r0 = finish(n0, 10, t0), r1 = finish(n1, 10, t0);
  ASSERT_EQ(r0.code, 0) << r0.err;
  ASSERT_EQ(r1.code, 0) << r1.err;
  std::set<std::string> got;
  for (const auto& l : lines_of(r0.out + r1.out)) got.insert(l);
  EXPECT_EQ(got,
            (std::set<std::string>{
                kiln::str("[rank 0] R 0 0 4 0 ", port), kiln::str("[rank 1] R 1 1 4 0 ", port),
                kiln::str("[rank 2] R 2 0 4 1 ", port), kiln::str("[rank 3] R 3 1 4 1 ", port)}))
      << r0.out << r1.out;
  fs::remove_all(dir);
}

// A failure on one node stops the other node, which exits with the same code.
TEST(Kilnrun, FailureOnOneNodeStopsTheOther) {
  std::string dir = make_temp_dir();
  std::string port = std::to_string(kiln::dist::free_loopback_port());
  std::string script =
      kiln::str("echo $$ > ", dir, "/pid_$RANK; if [ $RANK = 3 ]; then ",
                sh_wait_for(dir, {"pid_0", "pid_1", "pid_2"}), "exit 7; fi; sleep 100");
  auto node = [&](int rank) {
    return start(
        {"--nnodes", "2", "--node-rank", std::to_string(rank), "--nproc-per-node", "2",
         "--master-port", port, "--rdzv-timeout", "10", "--grace-period", "2", "sh", "-c", script},
        dir, kiln::str("node", rank));
  };
  auto t0 = Clock::now();
  Launch n0 = node(0), n1 = node(1);
  Result r0 = finish(n0, 10, t0), r1 = finish(n1, 10, t0);
  EXPECT_FALSE(r0.timed_out || r1.timed_out);
  EXPECT_EQ(r1.code, 7) << r1.err;
  EXPECT_EQ(r0.code, 7) << r0.err;
  EXPECT_NE(r0.err.find("rank 3"), std::string::npos) << r0.err;
  auto pids = read_pids(dir, "pid_");
  EXPECT_EQ(pids.size(), 4u);
  expect_all_dead(pids);
  fs::remove_all(dir);
}

}  // namespace
