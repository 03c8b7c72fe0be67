// The profiler: spans of eager ops, autograd nodes, compiled kernels, pool
// chunks, data-loader waits and collectives, plus an allocator counter track,
// written as Chrome trace-event JSON (Perfetto, chrome://tracing) or summed
// into a table like PyTorch's `key_averages().table()`.
//
//   kiln::profiler::Profile p({.record_shapes = true, .profile_memory = true});
//   step(x, y);
//   p.stop();
//   p.export_chrome_trace("step.json");
//   std::cout << p.table();
//
// `KILN_PROFILE=path` profiles a whole run and writes the trace at exit. When
// no profile is active every hook costs one relaxed atomic load and a branch.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/allocator.h"

namespace kiln {
struct PeakReport;
}  // namespace kiln

namespace kiln::profiler {

namespace detail {
/// 0: KILN_PROFILE not read yet, 1: off, 2: a profile is recording.
extern std::atomic<int> g_state;
/// Reads KILN_PROFILE once (starting the whole-run profile it asks for);
/// returns whether a profile records.
bool init_from_env();
}  // namespace detail

/// Whether a profile is recording (reads KILN_PROFILE on the first call).
inline bool enabled() {
  const int s = detail::g_state.load(std::memory_order_relaxed);
  if (s == 1) [[likely]]
    return false;
  return s == 2 || detail::init_from_env();
}
/// Whether a recording profile asked for op input shapes and dtypes.
bool record_shapes();
/// Whether a recording profile asked for the allocator's events.
bool profile_memory();

/// What a Profile records.
struct Options {
  bool record_shapes = false;   ///< op spans carry their inputs' shapes and dtypes
  bool profile_memory = false;  ///< allocator counter track and live blocks by op
};

/// One recorded event. `ph` is Chrome's phase: 'X' a complete span, 'C' a counter.
struct Event {
  std::string name;
  std::string cat;  ///< "op", "autograd", "kernel", "compile", "pool", "data", "collective", ...
  char ph = 'X';
  int64_t ts_ns = 0;   ///< start, steady clock
  int64_t dur_ns = 0;  ///< span length (0 for counters)
  int64_t tid = 0;     ///< OS thread id
  std::string args;    ///< a JSON object's members without braces ("bytes":64,...)
};

/// Column a table is sorted by (descending).
enum class SortBy { kTotal, kSelf, kCount, kName };

/// A profiling session: records from construction to stop() (or destruction).
/// Profiles may overlap (KILN_PROFILE's and a user's); each keeps the events
/// inside its own window.
class Profile {
 public:
  explicit Profile(Options opts = {});
  ~Profile();
  Profile(const Profile&) = delete;
  Profile& operator=(const Profile&) = delete;

  /// Stops recording and gathers the events (later calls do nothing).
  void stop();
  /// The events of the window, by thread then start time (stops first).
  const std::vector<Event>& events();
  /// Writes a Chrome trace-event JSON file (temporary name, then rename).
  void export_chrome_trace(const std::string& path);
  /// Per-name totals: count, total and self time (self = minus nested spans
  /// of the same thread), sorted by `by`; `limit` rows (0: all).
  std::string table(SortBy by = SortBy::kTotal, size_t limit = 0);

 private:
  Options opts_;
  int64_t start_ns_ = 0;
  int64_t stop_ns_ = -1;
  std::vector<Event> events_;
  std::vector<std::pair<int64_t, std::string>> threads_;  // tid, name
};

/// Steady-clock nanoseconds, the profiler's time base.
int64_t now_ns();

/// A span on the calling thread while a profile records; nothing otherwise.
/// Allocations made inside it are attributed to its name.
class Span {
 public:
  Span(const char* cat, std::string_view name);
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  /// Adds an argument shown with the span (no-op when not recording).
  void arg(std::string_view key, int64_t value);
  void arg(std::string_view key, double value);
  void arg(std::string_view key, std::string_view value);
  /// Bytes the span moves: at its end it also gets "GB/s".
  void set_bytes(int64_t bytes) { bytes_ = bytes; }
  /// Whether this span records.
  bool active() const { return on_; }

 private:
  bool on_ = false;
  const char* cat_ = nullptr;
  const std::string* prev_scope_ = nullptr;
  int64_t start_ = 0;
  int64_t bytes_ = 0;
  std::string name_;
  std::string args_;
};

/// Records a finished span measured by the caller (e.g. a collective's
/// start and end on its communication thread), on the calling thread.
void record_span(const char* cat, std::string_view name, int64_t start_ns, int64_t end_ns,
                 std::string args = {});
/// Records a finished span on the named track `track` (its own row in a
/// trace, made on first use): e.g. a device's kernels timed by its events.
void record_track_span(std::string_view track, const char* cat, std::string_view name,
                       int64_t start_ns, int64_t end_ns, std::string args = {});
/// Names the calling thread in traces ("pool worker 1", "gloo lane 0").
void set_thread_name(std::string name);
/// The process's label and clock offset in traces: under a process group,
/// "rank N" and the nanoseconds to add to this process's clock to read rank
/// 0's (measured through the store at init).
void set_process(int rank, int64_t clock_offset_ns);
/// The clock offset set_process recorded (0 if none).
int64_t clock_offset_ns();

/// Allocator hooks (called by the allocators when profile_memory()).
void on_alloc(const void* ptr, size_t bytes, int64_t current_bytes);
void on_free(const void* ptr, size_t bytes, int64_t current_bytes);

/// Keeps `r` as its graph's latest peak report (the executor calls this when
/// profile_memory()) and adds it to the trace as a zero-length "peak" span.
void record_peak_report(PeakReport r);

/// Merges Chrome trace files (each already on rank 0's clock) into one.
void merge_chrome_traces(const std::vector<std::string>& inputs, const std::string& output);

/// JSON string literal of `s` (quotes included, escapes applied).
std::string json_quote(std::string_view s);

}  // namespace kiln::profiler

namespace kiln {

/// One live allocator block: where it is, its size and the innermost profiler
/// span (op, kernel) that allocated it.
struct MemoryBlock {
  const void* ptr = nullptr;
  size_t bytes = 0;
  std::string op;  ///< "" when allocated outside any span
  int64_t tid = 0;
};

/// One value held at a compiled run's peak.
struct PeakValue {
  std::string value;  ///< the IR value ("%12", or its name)
  std::string op;     ///< its producer ("conv2d", "fused kernel <name>")
  std::string type;   ///< "f32[64, 32, 14, 14]"
  int64_t bytes = 0;  ///< its buffer (shared buffers are listed once)
};

/// Where a compiled run's intermediate buffers peaked and what was alive then
/// (measured by the executor, graph inputs excluded).
struct PeakReport {
  std::string plan;  ///< which graph ("forward of <name>", "backward ...")
  int64_t peak_bytes = 0;
  std::string step;               ///< the step that reached the peak
  std::vector<PeakValue> values;  ///< largest first
};

/// The CPU allocator's counters and, while a profile with profile_memory
/// records, the blocks allocated since it started that are still live.
struct MemorySnapshot {
  AllocatorStats stats;
  std::vector<MemoryBlock> blocks;  ///< largest first
  /// While recording memory: the last peak report of each compiled graph run.
  std::vector<PeakReport> compiled_peaks;
  /// A text report: counters, then bytes by op, then the largest blocks.
  std::string str(size_t max_blocks = 20) const;
};

/// The CPU allocator's state now (see MemorySnapshot).
MemorySnapshot memory_snapshot();

}  // namespace kiln
