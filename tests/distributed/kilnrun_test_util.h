// Test helpers for kilnrun (launcher_test.cpp, kilnrun_hardening_test.cpp):
// starting the binary with its output in files, bounded waits for it, and
// checks that recorded pids are gone. Every wait is bounded.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kiln/distributed/store.h"
#include "kiln/error.h"
#include "launcher.h"

#ifndef KILNRUN_PATH
#error "KILNRUN_PATH must name the kilnrun binary (tests/distributed/CMakeLists.txt)"
#endif

namespace kiln::testing::kilnrun {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using kiln::launcher::Options;

// Shell code that waits until every file exists and is non-empty, so a worker
// fails only after the others have written their pids.
inline std::string sh_wait_for(const std::string& dir, const std::vector<std::string>& names) {
  std::string s = "for f in";
  for (const auto& n : names) s += " " + dir + "/" + n;
  return s + "; do while [ ! -s $f ]; do sleep 0.02; done; done; ";
}

inline std::string make_temp_dir() {
  char tmpl[] = "/tmp/kilnrun_test_XXXXXX";
  const char* d = ::mkdtemp(tmpl);
  EXPECT_NE(d, nullptr);
  return d ? d : "/tmp";
}

inline std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string l; std::getline(ss, l);) out.push_back(l);
  return out;
}

// A kilnrun process started by the test, output going to files in `dir`.
struct Launch {
  pid_t pid = -1;
  std::string out_path, err_path;
};

struct Result {
  int code = -1;
  bool timed_out = false;
  double seconds = 0;
  std::string out, err;
};

inline Launch start(const std::vector<std::string>& args, const std::string& dir,
                    const std::string& name = "kilnrun") {
  Launch l{-1, dir + "/" + name + ".out", dir + "/" + name + ".err"};
  std::vector<std::string> all = {KILNRUN_PATH};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t parent = ::getpid();
  l.pid = ::fork();
  if (l.pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a crashed test leaves no launcher behind
    if (::getppid() != parent) ::_exit(126);
    int out = ::open(l.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = ::open(l.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::execv(argv[0], argv.data());
    ::_exit(126);
  }
  EXPECT_GT(l.pid, 0);
  return l;
}

// Waits (bounded) for the launcher; kills it on timeout.
inline Result finish(const Launch& l, double timeout_s = 10, Clock::time_point t0 = Clock::now()) {
  Result r;
  int status = 0;
  while (true) {
    pid_t p = ::waitpid(l.pid, &status, WNOHANG);
    if (p == l.pid) break;
    if (Clock::now() - t0 > std::chrono::duration<double>(timeout_s)) {
      r.timed_out = true;
      ::kill(l.pid, SIGKILL);
      ::waitpid(l.pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(l.out_path);
  r.err = slurp(l.err_path);
  return r;
}

inline Result run_kilnrun(const std::vector<std::string>& args, const std::string& dir,
                          double timeout_s = 10) {
  auto t0 = Clock::now();
  return finish(start(args, dir), timeout_s, t0);
}

// A process that exists and is not a zombie.
inline bool alive(pid_t pid) {
  if (pid <= 0 || ::kill(pid, 0) != 0) return false;
  std::string stat = slurp(kiln::str("/proc/", pid, "/stat"));
  size_t close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() || stat[close + 2] != 'Z';
}

inline std::vector<pid_t> read_pids(const std::string& dir, const std::string& prefix) {
  std::vector<pid_t> pids;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().rfind(prefix, 0) != 0) continue;
    std::string s = slurp(e.path());
    if (!s.empty()) pids.push_back(static_cast<pid_t>(std::stol(s)));
  }
  return pids;
}

// Bounded: every pid is gone within 2 s (the launcher has already exited).
inline void expect_all_dead(const std::vector<pid_t>& pids) {
  auto deadline = Clock::now() + 2s;
  for (pid_t p : pids) {
    while (alive(p) && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
    EXPECT_FALSE(alive(p)) << "pid " << p << " outlived the launcher";
    if (alive(p)) ::kill(p, SIGKILL);  // do not leak it into other tests
  }
}

inline bool wait_for_files(const std::vector<std::string>& paths,
                           std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    bool all = true;
    for (const auto& p : paths) all = all && !slurp(p).empty();
    if (all) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

inline std::optional<int> parse(std::vector<std::string> args, Options& o,
                                std::string* err = nullptr) {
  args.insert(args.begin(), "kilnrun");
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, errs;
  auto rc = kiln::launcher::parse_args(static_cast<int>(argv.size()), argv.data(), o, out, errs);
  if (err) *err = errs.str();
  return rc;
}

}  // namespace kiln::testing::kilnrun
