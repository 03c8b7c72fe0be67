// The DDP example (examples/ddp) as a real job: kilnrun starts 2 processes
// that train over Gloo and finish with a test accuracy; and when one rank is
// killed mid-training, kilnrun exits non-zero within 10 s and no process of
// the job remains. Every wait is bounded.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kiln/data/fashion_mnist.h"
#include "kiln/error.h"

#if defined(KILNRUN_PATH) && defined(KILN_DDP_EXAMPLE_PATH)

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// kilnrun --nproc-per-node 2 <the DDP example> args..., output in dir/out and dir/err.
struct Job {
  std::string dir;
  pid_t launcher = -1;

  explicit Job(const std::vector<std::string>& example_args) {
    char tmpl[] = "/tmp/ddp_job_XXXXXX";
    dir = ::mkdtemp(tmpl) ? tmpl : "/tmp";
    std::vector<std::string> args = {KILNRUN_PATH, "--nproc-per-node", "2", "--master-port",
                                     "0",          "--grace-period",   "2", KILN_DDP_EXAMPLE_PATH};
    args.insert(args.end(), example_args.begin(), example_args.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string out = dir + "/out", err = dir + "/err";
    const pid_t parent = ::getpid();
    launcher = ::fork();
    if (launcher == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a crashed test leaves no launcher behind
      if (::getppid() != parent) ::_exit(126);
      ::dup2(::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), 1);
      ::dup2(::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), 2);
      ::execv(argv[0], argv.data());
      ::_exit(126);
    }
  }
  ~Job() {
    if (launcher > 0) {
      ::kill(launcher, SIGKILL);
      ::waitpid(launcher, nullptr, 0);
    }
    fs::remove_all(dir);
  }
  std::string out() const { return slurp(dir + "/out"); }
  std::string err() const { return slurp(dir + "/err"); }

  // The launcher's exit status, or nullopt if it is still running after `timeout`.
  std::optional<int> wait(std::chrono::milliseconds timeout) {
    if (launcher <= 0) return std::nullopt;
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      int status = 0;
      if (::waitpid(launcher, &status, WNOHANG) == launcher) {
        launcher = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(10ms);
    }
    return std::nullopt;
  }
};

// Live (not zombie) children of `parent`, keyed by their RANK variable.
std::map<int, pid_t> workers_of(pid_t parent) {
  std::map<int, pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = slurp(e.path().string() + "/stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != parent || state == 'Z') continue;
    std::stringstream env(slurp(e.path().string() + "/environ"));
    for (std::string var; std::getline(env, var, '\0');)
      if (var.rfind("RANK=", 0) == 0) out[std::stoi(var.substr(5))] = std::stoi(name);
  }
  return out;
}

bool alive(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  const std::string stat = slurp(kiln::str("/proc/", pid, "/stat"));
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

bool have_data() {
  return fs::exists(kiln::data::FashionMNIST::kDefaultRoot);
}

// Two ranks train one epoch on 2048 images; rank 0 reports progress and a
// final accuracy well above chance (10%).
TEST(DDPExample, TrainsUnderKilnrun) {
  if (!have_data()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  Job job({"--limit", "2048", "--epochs", "1", "--log-every", "8", "--test-limit", "500"});
  ASSERT_GT(job.launcher, 0);
  auto code = job.wait(120s);
  ASSERT_TRUE(code.has_value()) << "the job did not finish: " << job.out() << job.err();
  EXPECT_EQ(*code, 0) << job.err();
  const std::string out = job.out();
  EXPECT_NE(out.find("[rank 0] ddp: 2 ranks, mlp (eager), 2048 training images (1024 per rank)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("[rank 0] epoch 1 step 8/16"), std::string::npos) << out;
  EXPECT_EQ(out.find("[rank 1]"), std::string::npos) << "only rank 0 prints: " << out;
  const size_t at = out.find("final test accuracy ");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_GT(std::stod(out.substr(at + 20)), 50.0) << out;
}

// Rank 1 is killed (SIGKILL) while training; rank 0 is then blocked in an
// all-reduce with it. kilnrun must exit with the killed rank's status within
// 10 s and leave no worker behind.
TEST(DDPFaults, KilledRankStopsTheWholeJob) {
  if (!have_data()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  Job job({"--limit", "1024", "--epochs", "1000", "--log-every", "1", "--test-limit", "100"});
  ASSERT_GT(job.launcher, 0);
  const auto deadline = Clock::now() + 60s;
  while (job.out().find("step 3/") == std::string::npos && Clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  ASSERT_NE(job.out().find("step 3/"), std::string::npos)
      << "training did not start: " << job.out() << job.err();
  const auto workers = workers_of(job.launcher);
  ASSERT_EQ(workers.size(), 2u);
  ASSERT_EQ(::kill(workers.at(1), SIGKILL), 0);
  const auto t0 = Clock::now();
  auto code = job.wait(10s);
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_TRUE(code.has_value()) << "kilnrun still runs 10 s after a rank was killed";
  EXPECT_LT(secs, 10);
  EXPECT_EQ(*code, 128 + SIGKILL) << job.err();
  EXPECT_NE(job.err().find("rank 1"), std::string::npos) << job.err();
  for (auto [rank, pid] : workers) {
    const auto until = Clock::now() + 2s;
    while (alive(pid) && Clock::now() < until) std::this_thread::sleep_for(10ms);
    EXPECT_FALSE(alive(pid)) << "rank " << rank << " (pid " << pid << ") outlived the job";
    if (alive(pid)) ::kill(pid, SIGKILL);
  }
}

}  // namespace

#endif
