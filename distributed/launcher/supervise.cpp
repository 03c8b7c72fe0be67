// kilnrun's process supervision: spawning workers in their own process groups,
// forwarding their output line by line, tearing the group down on a failure,
// and the run loop (restarts; the store talk is in coordinator.cpp).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "coordinator.h"
#include "kiln/distributed/shm_segments.h"
#include "kiln/distributed/store.h"
#include "kiln/env.h"
#include "kiln/error.h"
#include "launcher.h"

extern char** environ;

namespace kiln::launcher {
namespace detail {

std::string g_tag = "[kilnrun] ";  // "[kilnrun node 1] " in multi-node jobs

void write_all(int fd, std::string_view s) {
  while (!s.empty()) {
    ssize_t n = ::write(fd, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    if (n <= 0) return;  // a closed stdout loses output but not the job
    s.remove_prefix(static_cast<size_t>(n));
  }
}

void say(const std::string& msg) {
  write_all(2, g_tag + msg + "\n");
}

// ---- signals: a self-pipe the loops read between poll() calls -------------
// (SIGCHLD too, so a worker's exit wakes the loop at once.)

int g_sig_pipe[2] = {-1, -1};
int g_stop_signal = 0;  // the first SIGINT/SIGTERM/SIGHUP/SIGQUIT received
int g_stop_count = 0;

constexpr int kHandled[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD};

void on_signal(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = ::write(g_sig_pipe[1], &b, 1);
  errno = saved;
}

void install_signals() {
  if (::pipe2(g_sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
    throw kiln::Error(kiln::str("pipe2: ", std::strerror(errno)));
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int s : kHandled) sigaction(s, &sa, nullptr);
  // A closed stdout must not kill the launcher (workers get SIGPIPE back to default).
  ::signal(SIGPIPE, SIG_IGN);
}

// Reads pending signal bytes and records stop signals.
void drain_signals() {
  unsigned char buf[64];
  ssize_t n;
  while ((n = ::read(g_sig_pipe[0], buf, sizeof buf)) > 0) {
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] == SIGCHLD) continue;
      if (!g_stop_signal) g_stop_signal = buf[i];
      ++g_stop_count;
    }
  }
}

void wait_signal_pipe(Clock::duration d) {
  pollfd p = {g_sig_pipe[0], POLLIN, 0};
  ::poll(&p, 1, static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(d).count()));
  drain_signals();
}

}  // namespace detail

namespace {

using namespace detail;
using namespace std::chrono_literals;

constexpr auto kPump = 50ms;        // poll() timeout of the supervision loop
constexpr auto kKillWait = 2s;      // bound on the wait after SIGKILL
constexpr auto kDrainWait = 500ms;  // bound on reading what is left in the pipes

// ---- watchdog: stops the job if the launcher itself is SIGKILLed ------------

// PR_SET_PDEATHSIG reaches the workers but not their children. This helper
// process outlives a killed launcher: it sees EOF on its pipe and SIGKILLs
// every worker process group still registered.
class Watchdog {
 public:
  Watchdog() {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) throw kiln::Error(kiln::str("pipe2: ", std::strerror(errno)));
    pid_ = ::fork();
    if (pid_ == 0) serve(p[0]);  // async-signal-safe calls only from here on
    ::close(p[0]);
    if (pid_ < 0) {
      ::close(p[1]);
      throw kiln::Error(kiln::str("fork: ", std::strerror(errno)));
    }
    fd_ = p[1];
  }
  ~Watchdog() {
    ::close(fd_);  // EOF: it kills what is still registered and exits
    auto deadline = Clock::now() + 1s;
    while (::waitpid(pid_, nullptr, WNOHANG) == 0 && Clock::now() < deadline)
      std::this_thread::sleep_for(5ms);
  }
  void add(pid_t group) { send(group); }
  void remove(pid_t group) { send(-group); }
  pid_t pid() const { return pid_; }

 private:
  void send(int32_t v) { write_all(fd_, std::string_view(reinterpret_cast<char*>(&v), sizeof v)); }

  [[noreturn]] static void serve(int fd) {
    ::prctl(PR_SET_NAME, "kilnrun-watch");  // told apart from the launcher in ps
    ::setpgid(0, 0);  // not in the launcher's group: a Ctrl-C there must not stop it
    struct sigaction ign = {};
    ign.sa_handler = SIG_IGN;
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) ::sigaction(s, &ign, nullptr);
    int null = ::open("/dev/null", O_RDWR);
    for (int i = 0; i < 3; ++i) ::dup2(null, i);  // hold no caller pipe open
    ::dup2(fd, 3);
    ::close_range(4, ~0U, 0);
    static pid_t groups[16384];
    size_t n = 0;
    int32_t v;
    while (true) {
      ssize_t r = ::read(3, &v, sizeof v);
      if (r < 0 && errno == EINTR) continue;
      if (r != sizeof v) break;  // EOF: the launcher is gone
      if (v > 0 && n < sizeof groups / sizeof groups[0]) groups[n++] = v;
      for (size_t i = 0; v < 0 && i < n; ++i)
        if (groups[i] == -v) groups[i] = groups[--n];
    }
    for (size_t i = 0; i < n; ++i) ::kill(-groups[i], SIGKILL);
    ::_exit(0);
  }

  pid_t pid_ = -1;
  int fd_ = -1;
};

// ---- the workers of one round ---------------------------------------------

struct Worker {
  int rank = 0, local_rank = 0;
  pid_t pid = -1;  // also its process group id
  bool exited = false;
  int status = 0;
  int fd[2] = {-1, -1};  // read ends of its stdout and stderr pipes
  LineBuffer buf[2];
  int log_fd = -1;
};

std::string resolve_program(const std::string& name) {
  auto runnable = [](const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) return runnable(name) ? name : "";
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    std::string p = kiln::str(dir.empty() ? "." : dir, "/", name);
    if (runnable(p)) return p;
    start = end + 1;
  }
  return "";
}

// The pids of this process's children (any thread's). /proc/<pid>/task/*/children
// needs CONFIG_PROC_CHILDREN; without it every /proc/<pid>/stat is read.
std::vector<pid_t> children_of_self() {
  std::vector<pid_t> out;
  const pid_t self = ::getpid();
  bool have_children_files = false;
  if (DIR* tasks = ::opendir("/proc/self/task")) {
    while (dirent* t = ::readdir(tasks)) {
      if (t->d_name[0] == '.') continue;
      std::ifstream f(kiln::str("/proc/self/task/", t->d_name, "/children"));
      if (!f) continue;
      have_children_files = true;
      for (pid_t p; f >> p;) out.push_back(p);
    }
    ::closedir(tasks);
  }
  if (have_children_files) return out;
  if (DIR* proc = ::opendir("/proc")) {
    while (dirent* e = ::readdir(proc)) {
      if (!std::isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
      std::ifstream f(kiln::str("/proc/", e->d_name, "/stat"));
      std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      size_t close = stat.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream rest(stat.substr(close + 1));
      std::string state;
      pid_t ppid = 0;
      if (rest >> state >> ppid && ppid == self) out.push_back(pid_t(std::atol(e->d_name)));
    }
    ::closedir(proc);
  }
  return out;
}

class Group {
 public:
  Group(const Options& o, const std::string& path, const std::vector<std::string>& base_env,
        const std::vector<int>& log_fds, int restart, Watchdog& watchdog)
      : workers_(static_cast<size_t>(o.nproc_per_node)),
        node_rank_(o.node_rank),
        watchdog_(watchdog) {
    devnull_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    for (int l = 0; l < o.nproc_per_node; ++l) {
      Worker& w = workers_[static_cast<size_t>(l)];
      w.local_rank = l;
      w.rank = o.node_rank * o.nproc_per_node + l;
      w.log_fd = log_fds.empty() ? -1 : log_fds[static_cast<size_t>(l)];
      spawn(w, path, o.program, worker_env(base_env, o, l, restart));
    }
  }
  ~Group() {
    // Safety net (exceptions): nothing of the job may outlive the launcher.
    for (auto& w : workers_) {
      if (w.pid > 0 && !gone(w)) ::kill(-w.pid, SIGKILL);
      if (w.pid > 0 && gone(w)) watchdog_.remove(w.pid);
      for (int& fd : w.fd)
        if (fd >= 0) ::close(fd);
    }
    for (pid_t p : adopted()) ::kill(p, SIGKILL);
    if (devnull_ >= 0) ::close(devnull_);
  }

  // Waits up to `timeout` for output or signals, forwards output, reaps children.
  void pump(Clock::duration timeout) {
    std::vector<pollfd> fds = {{g_sig_pipe[0], POLLIN, 0}};
    std::vector<std::pair<Worker*, int>> who = {{nullptr, 0}};
    for (auto& w : workers_)
      for (int s = 0; s < 2; ++s)
        if (w.fd[s] >= 0) {
          fds.push_back({w.fd[s], POLLIN, 0});
          who.emplace_back(&w, s);
        }
    int ms = static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(timeout).count());
    int n = ::poll(fds.data(), fds.size(), ms);
    if (n > 0) {
      for (size_t i = 1; i < fds.size(); ++i)
        if (fds[i].revents) read_output(*who[i].first, who[i].second);
    }
    drain_signals();
    reap();
  }

  // The first worker that failed, in the order the launcher saw them.
  const Worker* first_failure() const { return first_failed_; }
  bool all_exited() const {
    for (const auto& w : workers_)
      if (!w.exited) return false;
    return true;
  }
  // A worker's process group, or a process of the job that left it (setsid)
  // and was re-parented here when its parent died, is still running.
  bool any_left() const {
    for (const auto& w : workers_)
      if (!gone(w)) return true;
    return !adopted().empty();
  }

  // Stops every worker and what it started: SIGTERM to each process group and
  // to each adopted process, SIGKILL after the grace period (or a second stop
  // signal), every wait bounded.
  void terminate(double grace_seconds) {
    std::set<pid_t> termed;  // adopted processes already sent SIGTERM
    auto term_adopted = [&] {
      for (pid_t p : adopted())
        if (termed.insert(p).second) ::kill(p, SIGTERM);
    };
    signal_all(SIGTERM);
    term_adopted();
    int stops = g_stop_count;
    auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(grace_seconds));
    while (any_left() && Clock::now() < deadline && g_stop_count == stops) {
      pump(20ms);
      term_adopted();  // orphans appear as their parents exit
    }
    if (any_left()) {
      say("sending SIGKILL to the workers still running");
      auto kill_deadline = Clock::now() + kKillWait;
      do {
        // Killing an adopted process re-parents its own children here: repeat.
        signal_all(SIGKILL);
        for (pid_t p : adopted()) ::kill(p, SIGKILL);
        pump(20ms);
      } while (any_left() && Clock::now() < kill_deadline);
      if (any_left()) say("some worker processes did not die after SIGKILL");
    }
    drain();
  }

  // Reads what is left in the pipes (bounded: a process outside the groups
  // may hold a pipe open) and closes them.
  void drain() {
    auto deadline = Clock::now() + kDrainWait;
    while (open_fds() && Clock::now() < deadline) pump(20ms);
    for (auto& w : workers_)
      for (int s = 0; s < 2; ++s) close_stream(w, s);
  }

  std::string describe(const Worker& w) const {
    return kiln::str("rank ", w.rank, " (local rank ", w.local_rank, ", node ", node_rank_,
                     ", pid ", w.pid, ") ", describe_status(w.status));
  }

 private:
  void spawn(Worker& w, const std::string& path, const std::vector<std::string>& args,
             const std::vector<std::string>& env) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
      throw kiln::Error(kiln::str("pipe2: ", std::strerror(errno)));
    // Everything the child touches is prepared before fork(): the store server
    // runs a thread, so the child may only make async-signal-safe calls.
    std::vector<char*> argv, envp;
    argv.push_back(const_cast<char*>(path.c_str()));
    for (size_t i = 1; i < args.size(); ++i) argv.push_back(const_cast<char*>(args[i].c_str()));
    argv.push_back(nullptr);
    for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    std::string fail_msg = kiln::str("kilnrun: cannot execute ", path, "\n");
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);  // no handler runs in the child
    pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);                     // its own group: teardown reaches grandchildren too
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // dies with a SIGKILLed launcher
      if (::getppid() != parent) ::_exit(127);
      struct sigaction dfl = {};
      dfl.sa_handler = SIG_DFL;
      for (int s : kHandled) ::sigaction(s, &dfl, nullptr);
      ::sigaction(SIGPIPE, &dfl, nullptr);
      ::dup2(devnull_, 0);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      ::close_range(3, ~0U, 0);  // no launcher socket or pipe leaks into the job
      ::sigprocmask(SIG_SETMASK, &old, nullptr);
      ::execve(argv[0], argv.data(), envp.data());
      [[maybe_unused]] ssize_t n = ::write(2, fail_msg.data(), fail_msg.size());
      ::_exit(127);
    }
    int fork_errno = errno;
    if (pid > 0) ::setpgid(pid, pid);  // also here: no window where kill(-pid) misses
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    ::close(out[1]);
    ::close(err[1]);
    if (pid < 0) {
      ::close(out[0]);
      ::close(err[0]);
      throw kiln::Error(kiln::str("fork: ", std::strerror(fork_errno)));
    }
    w.pid = pid;
    watchdog_.add(pid);
    w.fd[0] = out[0];
    w.fd[1] = err[0];
    for (int fd : w.fd) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }

  void emit(Worker& w, int s, std::string_view line) {
    write_all(s == 0 ? 1 : 2, prefixed_line(w.rank, line));
    if (w.log_fd >= 0) write_all(w.log_fd, std::string(line) + "\n");
  }

  void read_output(Worker& w, int s) {
    char buf[65536];
    ssize_t n = ::read(w.fd[s], buf, sizeof buf);
    if (n > 0) {
      w.buf[s].feed(std::string_view(buf, static_cast<size_t>(n)),
                    [&](std::string_view line) { emit(w, s, line); });
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      close_stream(w, s);
    }
  }

  void close_stream(Worker& w, int s) {
    if (w.fd[s] < 0) return;
    w.buf[s].flush([&](std::string_view line) { emit(w, s, line); });
    ::close(w.fd[s]);
    w.fd[s] = -1;
  }

  bool open_fds() const {
    for (const auto& w : workers_)
      if (w.fd[0] >= 0 || w.fd[1] >= 0) return true;
    return false;
  }

  // The launcher is a child subreaper, so orphaned grandchildren are reaped
  // here too (pids that are no worker are just collected).
  void reap() {
    int status;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      for (auto& w : workers_) {
        if (w.pid != pid) continue;
        w.exited = true;
        w.status = status;
        if (!first_failed_ && status != 0) first_failed_ = &w;
      }
    }
  }

  // A worker is gone once it was reaped and its process group is empty.
  static bool gone(const Worker& w) {
    return w.pid <= 0 || (w.exited && ::kill(-w.pid, 0) != 0 && errno == ESRCH);
  }

  // Children of the launcher that are neither a worker nor the watchdog:
  // descendants of the job re-parented here (the launcher is a subreaper).
  // Zombies among them are reaped by the next reap().
  std::vector<pid_t> adopted() const {
    std::vector<pid_t> out;
    for (pid_t p : children_of_self()) {
      bool worker = p == watchdog_.pid();
      for (const auto& w : workers_) worker = worker || w.pid == p;
      if (!worker && !is_zombie(p)) out.push_back(p);
    }
    return out;
  }

  static bool is_zombie(pid_t p) {
    std::ifstream f(kiln::str("/proc/", p, "/stat"));
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    size_t close = stat.rfind(')');
    return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
  }

  void signal_all(int sig) {
    for (auto& w : workers_)
      if (!gone(w)) ::kill(-w.pid, sig);
  }

  std::vector<Worker> workers_;
  int node_rank_;
  Watchdog& watchdog_;
  int devnull_ = -1;
  const Worker* first_failed_ = nullptr;
};

// ---- one round: spawn, supervise, and decide ------------------------------

struct Outcome {
  std::optional<Failure> failure;  // nullopt: every worker of every node succeeded
};

Outcome supervise(const Options& o, const std::string& path, const std::vector<std::string>& env,
                  const std::vector<int>& log_fds, int restart, Coordinator* coord,
                  Watchdog& watchdog) {
  Group g(o, path, env, log_fds, restart, watchdog);
  std::optional<Failure> root;
  bool local_done = false;
  auto next_poll = Clock::now();
  // Publishes a failure of this node; the store decides which one was first.
  auto publish = [&](const Failure& f) {
    say(f.what);
    if (!coord) return f;
    try {
      return coord->publish_failure(restart, f);
    } catch (const std::exception& e) {
      say(kiln::str("cannot report the failure through the store: ", e.what()));
      coord->mark_lost();
      return f;
    }
  };
  while (true) {
    g.pump(kPump);
    if (g_stop_signal) {
      root = publish({128 + g_stop_signal, false,
                      kiln::str("launcher on node ", o.node_rank, " received SIG",
                                sigabbrev_np(g_stop_signal))});
      break;
    }
    if (const Worker* w = g.first_failure()) {
      root = publish({exit_code_of_status(w->status), true, g.describe(*w)});
      break;
    }
    if (!local_done && g.all_exited()) {
      local_done = true;
      if (!coord) break;
      try {
        coord->publish_done(restart);
      } catch (const std::exception& e) {
        coord->mark_lost();
        root = Failure{1, false, kiln::str("lost the store: ", e.what())};
        say(root->what);
        break;
      }
    }
    if (coord && Clock::now() >= next_poll) {
      next_poll = Clock::now() + kStorePoll;
      try {
        coord->beat(restart);
        if ((root = coord->poll_failure(restart))) {
          say(kiln::str("another node failed: ", root->what));
          break;
        }
        if (o.node_rank == 0) {
          if (auto lost = coord->check_beats(restart)) {
            root = publish(*lost);
            break;
          }
        }
        if (local_done && coord->all_done(restart)) break;
      } catch (const std::exception& e) {
        coord->mark_lost();
        root = Failure{1, false,
                       kiln::str("lost the store at ", o.master_addr, ":", o.master_port,
                                 " (node 0's launcher gone?): ", e.what())};
        say(root->what);
        break;
      }
    }
  }
  if (root) {
    if (g.any_left()) say("stopping the workers");
    g.terminate(o.grace_seconds);
  } else if (g.any_left()) {
    say("the workers exited but left processes behind; stopping them");
    g.terminate(o.grace_seconds);
  } else {
    g.drain();
  }
  return {root};
}

// The per-rank logs. Neither the directory nor a log file may be a symbolic
// link: in a shared directory (/tmp) someone else could plant one and have
// the launcher truncate and write a file of theirs choosing.
std::vector<int> open_logs(const Options& o) {
  const std::string& dir = o.log_dir;
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    kiln::throw_error(kiln::str("cannot create --log-dir ", dir, ": ", std::strerror(errno)));
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) {
    struct stat st;
    bool link = ::lstat(dir.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
    kiln::throw_error(link ? kiln::str("--log-dir ", dir,
                                       " is a symbolic link; give the directory "
                                       "it points to (kilnrun does not follow links it did not "
                                       "create)")
                           : kiln::str("cannot open --log-dir ", dir, ": ", std::strerror(errno)));
  }
  std::vector<int> fds;
  for (int l = 0; l < o.nproc_per_node; ++l) {
    std::string name = kiln::str("rank_", o.node_rank * o.nproc_per_node + l, ".log");
    int fd =
        ::openat(dfd, name.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
      int err = errno;
      ::close(dfd);
      for (int f : fds) ::close(f);
      kiln::throw_error(err == ELOOP
                            ? kiln::str(dir, "/", name,
                                        " is a symbolic link; kilnrun does "
                                        "not follow links it did not create")
                            : kiln::str("cannot open ", dir, "/", name, ": ", std::strerror(err)));
    }
    fds.push_back(fd);
  }
  ::close(dfd);
  return fds;
}

std::string random_token() {
  unsigned char raw[16];
  size_t got = 0;
  while (got < sizeof raw) {
    ssize_t n = ::getrandom(raw + got, sizeof raw - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw kiln::Error(kiln::str("getrandom: ", std::strerror(errno)));
    got += static_cast<size_t>(n);
  }
  std::string hex;
  for (unsigned char c : raw) {
    const char* digits = "0123456789abcdef";
    hex += digits[c >> 4];
    hex += digits[c & 15];
  }
  return hex;
}

std::string store_token_from_env() {
  return env::get("KILN_STORE_TOKEN");
}

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr == "::1" || addr.rfind("127.", 0) == 0;
}

int run_job(const Options& opts) {
  Options o = opts;
  if (o.nnodes > 1) g_tag = kiln::str("[kilnrun node ", o.node_rank, "] ");
  std::string path = resolve_program(o.program.front());
  if (path.empty()) {
    say(kiln::str("cannot find an executable ", o.program.front()));
    return 127;
  }
  // Forked first, before the store's threads and the signal handlers exist.
  auto watchdog = std::make_unique<Watchdog>();
  install_signals();
  // Orphaned grandchildren are re-parented to the launcher, which reaps them.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);

  if (o.token.empty()) o.token = store_token_from_env();
  if (o.token.empty()) {
    if (o.nnodes == 1) {
      o.token = random_token();
    } else if (!is_loopback(o.master_addr)) {
      say("a multi-node job needs the same --token (or KILN_STORE_TOKEN) on every node");
      return 2;
    }
    // Multi-node on loopback without a token: the store accepts loopback clients only.
  }

  std::unique_ptr<dist::TCPStoreServer> server;
  if (o.node_rank == 0) {
    dist::TCPStoreServerOptions so;
    so.host = o.nnodes == 1 && is_loopback(o.master_addr) ? "127.0.0.1" : "0.0.0.0";
    so.port = static_cast<uint16_t>(o.master_port);
    so.token = o.token;
    server = std::make_unique<dist::TCPStoreServer>(so);
    o.master_port = server->port();
  }
  std::unique_ptr<Coordinator> coord;
  if (o.nnodes > 1) {
    coord = std::make_unique<Coordinator>(o);
    if (!coord->connected()) return 128 + g_stop_signal;
  }

  std::vector<std::string> base;
  for (char** e = environ; *e; ++e) base.emplace_back(*e);
  std::vector<int> log_fds;
  struct CloseLogs {
    std::vector<int>& fds;
    ~CloseLogs() {
      for (int fd : fds) ::close(fd);
    }
  } close_logs{log_fds};
  if (!o.log_dir.empty()) log_fds = open_logs(o);

  for (int restart = 0;; ++restart) {
    if (coord) {
      coord->reset_beats();
      std::optional<Failure> f;
      try {
        f = coord->rendezvous(restart);
      } catch (const std::exception& e) {
        // Tell the other nodes (a wrong configuration, a node that never came),
        // so they stop now instead of at their own timeouts.
        say(kiln::str("error: ", e.what()));
        try {
          coord->publish_failure(restart,
                                 {1, false, kiln::str("node ", o.node_rank, ": ", e.what())});
          coord->finish(restart);
        } catch (const std::exception&) {
        }
        return 1;
      }
      if (!f && g_stop_signal) {
        f = coord->publish_failure(restart,
                                   {128 + g_stop_signal, false,
                                    kiln::str("launcher on node ", o.node_rank, " received SIG",
                                              sigabbrev_np(g_stop_signal), " before starting")});
      }
      if (f) {
        say(kiln::str("root cause: ", f->what));
        coord->finish(restart);
        return f->code;
      }
    }
    Outcome out = supervise(o, path, base, log_fds, restart, coord.get(), *watchdog);
    // A worker stopped between creating a shared-memory segment and unlinking
    // it (once its peers mapped it) leaves the name behind; the names carry
    // the job's token, and the workers are gone now.
    if (int n = dist::remove_job_segments(o.token); n > 0)
      say(kiln::str("removed ", n, " shared-memory segment(s) the workers left in /dev/shm"));
    bool again = out.failure && out.failure->restartable && restart < o.max_restarts;
    if (coord && !again) coord->finish(restart);
    if (!out.failure) return 0;
    if (!again) {
      say(kiln::str("root cause (first failure): ", out.failure->what, "; exiting with ",
                    out.failure->code));
      return out.failure->code;
    }
    say(kiln::str("restarting the workers (restart ", restart + 1, " of ", o.max_restarts,
                  ") after: ", out.failure->what));
    for (int fd : log_fds) write_all(fd, kiln::str("[kilnrun] restart ", restart + 1, "\n"));
  }
}

}  // namespace

int run(const Options& opts) {
  try {
    Options o = opts;
    if (!o.profile_dir.empty()) {
      // Absolute, so workers that change directory still write there.
      o.profile_dir = std::filesystem::absolute(o.profile_dir).string();
      std::filesystem::create_directories(o.profile_dir);
    }
    const int code = run_job(o);
    if (!o.profile_dir.empty()) {
      const std::string merged = merge_profile_dir(o.profile_dir);
      say(merged.empty() ? kiln::str("--profile: no rank wrote a trace in ", o.profile_dir)
                         : kiln::str("profile of every rank: ", merged));
    }
    return code;
  } catch (const std::exception& e) {
    say(kiln::str("error: ", e.what()));
    return 1;
  }
}

}  // namespace kiln::launcher
