// Recording: per-thread event buffers, overlapping sessions, KILN_PROFILE and
// the allocator's live-block table. Export and the table are in
// profiler_export.cpp.
#include "kiln/profiler.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "kiln/env.h"
#include "kiln/error.h"

namespace kiln::profiler {

namespace detail {
std::atomic<int> g_state{0};
}  // namespace detail

namespace {

constexpr int kUnread = 0, kOff = 1, kOn = 2;

// One thread's events. The registry keeps it after the thread exits, so a
// pool worker's or loader's events outlive it until the session gathers them.
struct ThreadBuffer {
  std::mutex mu;
  std::vector<Event> events;
  int64_t tid = 0;
  std::string name;
  bool track = false;  // a named track (record_track_span), not an OS thread
};

struct Registry {
  std::mutex mu;
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  int sessions = 0;
  std::atomic<int> shapes{0}, memory{0};  // sessions that asked for them
  int rank = -1;
  int64_t clock_offset = 0;
  std::mutex live_mu;
  std::unordered_map<const void*, MemoryBlock> live;
  std::vector<PeakReport> peaks;  // the latest per plan, while memory is recorded
  Profile* env_profile = nullptr;
  std::string env_path;
  pid_t env_pid = 0;  // the process that started it (a forked child does not write)
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: threads may record at exit
  return *r;
}

thread_local std::shared_ptr<ThreadBuffer> t_buffer;
thread_local const std::string* t_scope = nullptr;  // innermost span's name

int64_t os_tid() {
  return static_cast<int64_t>(::gettid());
}

ThreadBuffer& buffer() {
  if (!t_buffer) {
    auto b = std::make_shared<ThreadBuffer>();
    b->tid = os_tid();
    b->name = b->tid == static_cast<int64_t>(::getpid()) ? "main" : str("thread ", b->tid);
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    r.buffers.push_back(b);
    t_buffer = std::move(b);
  }
  return *t_buffer;
}

void push(Event e) {
  ThreadBuffer& b = buffer();
  e.tid = b.tid;
  std::lock_guard lock(b.mu);
  b.events.push_back(std::move(e));
}

// The path KILN_PROFILE names for this process: %r becomes the rank; a
// directory (existing, or ending in '/') gets rank<N>.json or trace.json.
std::string resolve_path(std::string path, int rank) {
  if (rank < 0)
    if (const char* r = std::getenv("RANK")) rank = std::atoi(r);
  const std::string rs = rank < 0 ? std::string("0") : std::to_string(rank);
  for (size_t at; (at = path.find("%r")) != std::string::npos;) path.replace(at, 2, rs);
  struct stat st {};
  const bool is_dir = (!path.empty() && path.back() == '/') ||
                      (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode));
  if (!is_dir) return path;
  ::mkdir(path.c_str(), 0755);
  if (path.back() != '/') path += '/';
  return path + (rank < 0 ? std::string("trace.json") : "rank" + rs + ".json");
}

// At exit: the whole-run profile writes its file. Errors are printed, not
// thrown (there is no caller left to catch them).
void write_env_profile() {
  Registry& r = registry();
  if (!r.env_profile || ::getpid() != r.env_pid) return;
  // Freed once written (LeakSanitizer counts an unreachable profile as a leak).
  std::unique_ptr<Profile> p(std::exchange(r.env_profile, nullptr));
  const std::string path = resolve_path(r.env_path, r.rank);
  try {
    p->export_chrome_trace(path);
    std::fprintf(stderr, "[kiln.profiler] wrote %s\n", path.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[kiln.profiler] could not write %s: %s\n", path.c_str(), e.what());
  }
}

// Reads KILN_PROFILE once. Re-entrant (the env profile's constructor calls it
// again and returns at once).
void read_env_once() {
  static std::atomic<bool> done{false};
  if (done.exchange(true)) return;
  const std::string path = env::get("KILN_PROFILE");
  if (!path.empty()) {
    Registry& r = registry();
    r.env_path = path;
    r.env_pid = ::getpid();
    r.env_profile = new Profile({.record_shapes = true, .profile_memory = true});
    std::atexit(write_env_profile);
  }
  int expected = kUnread;
  detail::g_state.compare_exchange_strong(expected, kOff);
}

std::string fmt_double(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

}  // namespace

namespace detail {
bool init_from_env() {
  read_env_once();
  return g_state.load(std::memory_order_relaxed) == kOn;
}
}  // namespace detail

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool record_shapes() {
  return registry().shapes.load(std::memory_order_relaxed) > 0;
}

bool profile_memory() {
  return registry().memory.load(std::memory_order_relaxed) > 0;
}

std::string json_quote(std::string_view s) {
  std::string o = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (u < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", u);
      o += b;
    } else {
      o += c;
    }
  }
  return o + "\"";
}

// ---- Profile ----

Profile::Profile(Options opts) : opts_(opts) {
  read_env_once();
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  if (r.sessions++ == 0) {
    // A fresh start: drop what spans ending after the last session left, and
    // the buffers of threads that have exited since.
    std::erase_if(r.buffers, [](const auto& b) { return b.use_count() == 1; });
    for (auto& b : r.buffers) {
      std::lock_guard bl(b->mu);
      b->events.clear();
    }
  }
  r.shapes += opts_.record_shapes;
  r.memory += opts_.profile_memory;
  start_ns_ = now_ns();
  detail::g_state.store(kOn, std::memory_order_relaxed);
}

Profile::~Profile() {
  stop();
}

void Profile::stop() {
  if (stop_ns_ >= 0) return;
  stop_ns_ = now_ns();
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  for (auto& b : r.buffers) {
    std::lock_guard bl(b->mu);
    bool any = false;
    for (const Event& e : b->events) {
      // Only spans wholly inside the window, so nesting stays intact.
      if (e.ts_ns < start_ns_ || e.ts_ns + e.dur_ns > stop_ns_) continue;
      if (e.ph == 'C' && !opts_.profile_memory) continue;
      events_.push_back(e);
      any = true;
    }
    if (any) threads_.emplace_back(b->tid, b->name);
  }
  r.shapes -= opts_.record_shapes;
  r.memory -= opts_.profile_memory;
  if (--r.sessions == 0) {
    detail::g_state.store(kOff, std::memory_order_relaxed);
    for (auto& b : r.buffers) {
      std::lock_guard bl(b->mu);
      b->events.clear();
    }
    std::lock_guard ll(r.live_mu);
    r.live.clear();
    r.peaks.clear();
  }
  std::stable_sort(events_.begin(), events_.end(), [](const Event& a, const Event& b) {
    if (a.tid != b.tid) return a.tid < b.tid;
    if (a.ts_ns != b.ts_ns) return a.ts_ns < b.ts_ns;
    return a.dur_ns > b.dur_ns;  // a parent before the child that starts with it
  });
}

const std::vector<Event>& Profile::events() {
  stop();
  return events_;
}

// ---- spans ----

Span::Span(const char* cat, std::string_view name) {
  if (!enabled()) return;
  on_ = true;
  cat_ = cat;
  name_ = name;
  prev_scope_ = t_scope;
  t_scope = &name_;
  start_ = now_ns();
}

Span::~Span() {
  if (!on_) return;
  const int64_t end = now_ns();
  t_scope = prev_scope_;
  if (bytes_ > 0) {
    arg("bytes", bytes_);
    arg("GB/s",
        static_cast<double>(bytes_) / static_cast<double>(std::max<int64_t>(1, end - start_)));
  }
  push({std::move(name_), cat_, 'X', start_, end - start_, 0, std::move(args_)});
}

void Span::arg(std::string_view key, int64_t value) {
  if (!on_) return;
  if (!args_.empty()) args_ += ',';
  args_ += json_quote(key) + ":" + std::to_string(value);
}

void Span::arg(std::string_view key, double value) {
  if (!on_) return;
  if (!args_.empty()) args_ += ',';
  args_ += json_quote(key) + ":" + fmt_double(value);
}

void Span::arg(std::string_view key, std::string_view value) {
  if (!on_) return;
  if (!args_.empty()) args_ += ',';
  args_ += json_quote(key) + ":" + json_quote(value);
}

void record_span(const char* cat, std::string_view name, int64_t start_ns, int64_t end_ns,
                 std::string args) {
  if (!enabled()) return;
  push({std::string(name), cat, 'X', start_ns, std::max<int64_t>(0, end_ns - start_ns), 0,
        std::move(args)});
}

void record_track_span(std::string_view track, const char* cat, std::string_view name,
                       int64_t start_ns, int64_t end_ns, std::string args) {
  if (!enabled()) return;
  // Track ids start far above any OS thread id (Linux's pid_max is at most 2^22).
  constexpr int64_t kFirstTrackId = int64_t{1} << 40;
  Registry& r = registry();
  std::shared_ptr<ThreadBuffer> b;
  {
    std::lock_guard lock(r.mu);
    int64_t tracks = 0;
    for (const auto& x : r.buffers) {
      if (!x->track) continue;
      ++tracks;
      if (x->name == track) b = x;
    }
    if (!b) {
      b = std::make_shared<ThreadBuffer>();
      b->tid = kFirstTrackId + tracks;
      b->name = std::string(track);
      b->track = true;
      r.buffers.push_back(b);
    }
  }
  std::lock_guard lock(b->mu);
  b->events.push_back({std::string(name), cat, 'X', start_ns,
                       std::max<int64_t>(0, end_ns - start_ns), b->tid, std::move(args)});
}

void set_thread_name(std::string name) {
  ThreadBuffer& b = buffer();
  std::lock_guard lock(b.mu);
  b.name = std::move(name);
}

void set_process(int rank, int64_t clock_offset_ns) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.rank = rank;
  r.clock_offset = clock_offset_ns;
}

int64_t clock_offset_ns() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  return r.clock_offset;
}

namespace detail {
int process_rank() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  return r.rank;
}
}  // namespace detail

// ---- memory ----

void on_alloc(const void* ptr, size_t bytes, int64_t current_bytes) {
  const int64_t t = now_ns();
  push({"memory", "memory", 'C', t, 0, 0, "\"allocated_bytes\":" + std::to_string(current_bytes)});
  Registry& r = registry();
  std::lock_guard lock(r.live_mu);
  r.live[ptr] = {ptr, bytes, t_scope ? *t_scope : std::string(), os_tid()};
}

void on_free(const void* ptr, size_t, int64_t current_bytes) {
  push({"memory", "memory", 'C', now_ns(), 0, 0,
        "\"allocated_bytes\":" + std::to_string(current_bytes)});
  Registry& r = registry();
  std::lock_guard lock(r.live_mu);
  r.live.erase(ptr);
}

void record_peak_report(PeakReport rep) {
  const int64_t t = now_ns();
  std::string args = "\"peak_bytes\":" + std::to_string(rep.peak_bytes) +
                     ",\"step\":" + json_quote(rep.step) + ",\"values\":[";
  for (size_t i = 0; i < rep.values.size() && i < 20; ++i) {
    const PeakValue& v = rep.values[i];
    if (i) args += ',';
    args += json_quote(str(v.value, " ", v.type, " ", v.bytes, " B from ", v.op));
  }
  args += "]";
  push({"peak of " + rep.plan, "memory", 'X', t, 0, 0, std::move(args)});
  Registry& r = registry();
  std::lock_guard lock(r.live_mu);
  for (PeakReport& p : r.peaks)
    if (p.plan == rep.plan) {
      p = std::move(rep);
      return;
    }
  r.peaks.push_back(std::move(rep));
}

}  // namespace kiln::profiler

namespace kiln {

MemorySnapshot memory_snapshot() {
  MemorySnapshot s;
  s.stats = cpu_allocator().stats();
  profiler::Registry& r = profiler::registry();
  {
    std::lock_guard lock(r.live_mu);
    for (const auto& [p, b] : r.live) s.blocks.push_back(b);
    s.compiled_peaks = r.peaks;
  }
  std::sort(s.blocks.begin(), s.blocks.end(), [](const MemoryBlock& a, const MemoryBlock& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.ptr < b.ptr;
  });
  return s;
}

}  // namespace kiln
