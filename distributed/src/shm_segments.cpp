// Segment names and their cleanup: the job prefix kilnrun removes after a
// teardown, and the table of names a signal handler unlinks when this process
// is stopped between creating a segment and unlinking it (the window in which
// a name would otherwise be left in /dev/shm).
#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "kiln/distributed/shm_segments.h"
#include "kiln/env.h"
#include "kiln/error.h"
#include "shm_registry.h"

namespace kiln::dist {

namespace {

constexpr const char* kShmDir = "/dev/shm/";

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// ---- the table the signal handler reads -------------------------------------

// A slot is free (0), being written (1) or holds a live name (2). The handler
// only reads slots in state 2, owned by this process (not a forked child's
// copy of its parent's table).
struct Slot {
  std::atomic<int> state{0};
  pid_t pid = 0;
  char path[256] = {};  // "/dev/shm/kiln...."
};
constexpr int kSlots = 64;  // segments being set up at once (two per group at most)
Slot g_slots[kSlots];

constexpr int kSignals[] = {SIGTERM, SIGINT, SIGHUP};
struct sigaction g_previous[3];
volatile sig_atomic_t g_depth = 0;  // a previous handler that chains back to this one

void on_signal(int sig, siginfo_t* info, void* uctx) {
  const int saved = errno;
  const pid_t me = ::getpid();
  for (Slot& s : g_slots)
    if (s.state.load(std::memory_order_acquire) == 2 && s.pid == me) ::unlink(s.path);
  if (g_depth > 0) return;  // called again by the handler it chained to
  int i = 0;
  while (kSignals[i] != sig) ++i;
  const struct sigaction& prev = g_previous[i];
  g_depth = g_depth + 1;
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction) prev.sa_sigaction(sig, info, uctx);
  } else if (prev.sa_handler == SIG_DFL) {
    // The default action (terminate), as if this handler had never been there:
    // the signal is blocked while it runs, and kills the process on return.
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(sig, &dfl, nullptr);
    ::raise(sig);
  } else if (prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
  }
  g_depth = g_depth - 1;
  errno = saved;
}

// Puts on_signal in front of whatever handles each signal now (the program may
// have installed its own since the last segment), unless the signal is ignored.
void install_handlers() {
  static std::mutex mu;
  std::lock_guard lock(mu);
  for (int i = 0; i < 3; ++i) {
    struct sigaction cur = {};
    ::sigaction(kSignals[i], nullptr, &cur);
    if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_signal) continue;  // in place
    if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_IGN) continue;     // stays ignored
    g_previous[i] = cur;
    struct sigaction sa = {};
    sa.sa_sigaction = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    ::sigaction(kSignals[i], &sa, nullptr);
  }
}

}  // namespace

std::string job_segment_prefix(const std::string& token) {
  return "kiln." + hex16(fnv1a(token)) + ".";
}

int remove_job_segments(const std::string& token) {
  if (token.empty()) return 0;
  const std::string prefix = job_segment_prefix(token);
  int removed = 0;
  DIR* d = ::opendir(kShmDir);
  if (!d) return 0;
  while (dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) != 0) continue;
    // Names end in their creator's pid: a live creator (a process of the same
    // job on this host that is not ours to stop) keeps its segment.
    const char* dot = std::strrchr(e->d_name, '.');
    const long pid = dot ? std::strtol(dot + 1, nullptr, 10) : 0;
    if (pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno == EPERM)) continue;
    if (::unlinkat(::dirfd(d), e->d_name, 0) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

namespace detail {

std::string new_segment_name(const std::string& what) {
  std::string readable;
  for (char c : what.substr(0, 80))
    readable += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? c : '_';
  return kiln::str("/", job_segment_prefix(env::get("KILN_STORE_TOKEN")), readable, ".",
                   hex16(fnv1a(what)), ".", ::getpid());
}

void track_segment(const std::string& name) {
  install_handlers();
  const std::string path = kShmDir + name.substr(name[0] == '/' ? 1 : 0);
  if (path.size() >= sizeof(Slot::path)) return;  // not tracked: kilnrun still removes it
  for (Slot& s : g_slots) {
    int free = 0;
    if (!s.state.compare_exchange_strong(free, 1)) continue;
    s.pid = ::getpid();
    std::memcpy(s.path, path.c_str(), path.size() + 1);
    s.state.store(2, std::memory_order_release);
    return;
  }
}

void unlink_segment(const std::string& name) {
  ::shm_unlink(name.c_str());
  untrack_segment(name);
}

void untrack_segment(const std::string& name) {
  const std::string path = kShmDir + name.substr(name[0] == '/' ? 1 : 0);
  const pid_t me = ::getpid();
  for (Slot& s : g_slots) {
    if (s.state.load(std::memory_order_acquire) != 2 || s.pid != me || path != s.path) continue;
    int live = 2;
    if (s.state.compare_exchange_strong(live, 1)) {
      s.path[0] = '\0';
      s.state.store(0, std::memory_order_release);
    }
    return;
  }
}

}  // namespace detail

}  // namespace kiln::dist
