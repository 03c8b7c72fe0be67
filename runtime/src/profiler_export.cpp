// The profiler's outputs: Chrome trace-event JSON, the per-name table, merged
// per-rank traces, and the memory snapshot's report.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kiln/error.h"
#include "kiln/profiler.h"

namespace kiln::profiler {

namespace detail {
int process_rank();
}  // namespace detail

namespace {

// Microseconds with nanosecond digits, as Chrome's "ts"/"dur" expect.
std::string micros(int64_t ns) {
  char b[40];
  const int64_t a = ns < 0 ? -ns : ns;
  std::snprintf(b, sizeof b, "%s%lld.%03lld", ns < 0 ? "-" : "", static_cast<long long>(a / 1000),
                static_cast<long long>(a % 1000));
  return b;
}

// Writes `text` to `path` through a temporary name, so no partial file remains.
void write_file(const std::string& path, const std::string& text, const char* op) {
  const std::string tmp = str(path, ".tmp.", ::getpid());
  {
    std::ofstream f(tmp, std::ios::binary);
    KILN_CHECK(f.good(), "[", op, "] cannot open '", tmp, "' for writing");
    f << text;
    f.flush();
    KILN_CHECK(f.good(), "[", op, "] writing '", tmp, "' failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp);
  KILN_CHECK(!ec, "[", op, "] cannot rename '", tmp, "' to '", path, "': ", ec.message());
}

struct Row {
  std::string name, cat;
  int64_t count = 0, total = 0, self = 0;
};

std::string ms(int64_t ns) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", static_cast<double>(ns) / 1e6);
  return b;
}

std::string pct(int64_t part, int64_t whole) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f%%",
                whole ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0);
  return b;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char s[32];
  std::snprintf(s, sizeof s, u ? "%.2f %s" : "%.0f %s", b, units[u]);
  return s;
}

}  // namespace

void Profile::export_chrome_trace(const std::string& path) {
  stop();
  const int rank = detail::process_rank();
  const int64_t offset = clock_offset_ns();
  const std::string pid = std::to_string(rank >= 0 ? rank : static_cast<int>(::getpid()));
  std::string o = "{\"traceEvents\":[\n";
  o +=
      str("{\"ph\":\"M\",\"pid\":", pid, ",\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":",
          json_quote(rank >= 0 ? str("rank ", rank) : std::string("kiln")), "}}");
  if (rank >= 0)
    o += str(",\n{\"ph\":\"M\",\"pid\":", pid,
             ",\"tid\":0,\"name\":\"process_sort_index\",\"args\":{\"sort_index\":", rank, "}}");
  for (const auto& [tid, name] : threads_)
    o += str(",\n{\"ph\":\"M\",\"pid\":", pid, ",\"tid\":", tid,
             ",\"name\":\"thread_name\",\"args\":{\"name\":", json_quote(name), "}}");
  for (const Event& e : events_) {
    o += str(",\n{\"ph\":\"", e.ph, "\",\"pid\":", pid, ",\"tid\":", e.tid,
             ",\"ts\":", micros(e.ts_ns + offset));
    if (e.ph == 'X') o += str(",\"dur\":", micros(e.dur_ns));
    o += str(",\"name\":", json_quote(e.name), ",\"cat\":", json_quote(e.cat), ",\"args\":{",
             e.args, "}}");
  }
  o += str("\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"rank\":", rank,
           ",\"clock_offset_ns\":", offset, ",\"clock\":\"steady_clock, aligned to rank 0\"}}\n");
  write_file(path, o, "export_chrome_trace");
}

std::string Profile::table(SortBy by, size_t limit) {
  stop();
  std::map<std::pair<std::string, std::string>, Row> rows;
  int64_t wall = 0;
  // Self time: per thread, a span's length minus its direct children's.
  struct Open {
    int64_t end;
    Row* row;
  };
  std::vector<Open> stack;
  int64_t tid = -1;
  for (const Event& e : events_) {
    if (e.ph != 'X') continue;
    if (e.tid != tid) {
      stack.clear();
      tid = e.tid;
    }
    while (!stack.empty() && stack.back().end <= e.ts_ns) stack.pop_back();
    Row& r = rows[{e.name, e.cat}];
    r.name = e.name;
    r.cat = e.cat;
    ++r.count;
    r.total += e.dur_ns;
    r.self += e.dur_ns;
    if (!stack.empty())
      stack.back().row->self -= e.dur_ns;
    else
      wall += e.dur_ns;
    stack.push_back({e.ts_ns + e.dur_ns, &r});
  }
  std::vector<Row> sorted;
  for (auto& [k, r] : rows) sorted.push_back(r);
  std::stable_sort(sorted.begin(), sorted.end(), [by](const Row& a, const Row& b) {
    switch (by) {
      case SortBy::kSelf:
        return a.self > b.self;
      case SortBy::kCount:
        return a.count > b.count;
      case SortBy::kName:
        return a.name < b.name;
      case SortBy::kTotal:
        break;
    }
    return a.total > b.total;
  });
  if (limit && sorted.size() > limit) sorted.resize(limit);
  size_t w = 4;
  for (const Row& r : sorted) w = std::max(w, std::min<size_t>(r.name.size(), 60));
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line, "%-*s  %-10s %8s %12s %8s %12s %8s %12s\n", static_cast<int>(w),
                "Name", "Category", "Calls", "Total ms", "Total %", "Self ms", "Self %", "Avg us");
  os << line << std::string(w + 80, '-') << "\n";
  for (const Row& r : sorted) {
    std::snprintf(line, sizeof line, "%-*s  %-10s %8lld %12s %8s %12s %8s %12.2f\n",
                  static_cast<int>(w), r.name.substr(0, 60).c_str(), r.cat.c_str(),
                  static_cast<long long>(r.count), ms(r.total).c_str(), pct(r.total, wall).c_str(),
                  ms(r.self).c_str(), pct(r.self, wall).c_str(),
                  static_cast<double>(r.total) / 1e3 / static_cast<double>(r.count));
    os << line;
  }
  os << "Spans at the top of their thread: " << ms(wall) << " ms\n";
  return os.str();
}

void merge_chrome_traces(const std::vector<std::string>& inputs, const std::string& output) {
  using nlohmann::json;
  json all = json::array();
  json ranks = json::array();
  for (const std::string& in : inputs) {
    std::ifstream f(in);
    KILN_CHECK(f.good(), "[merge_chrome_traces] cannot read '", in, "'");
    json t = json::parse(f, nullptr, false);
    KILN_CHECK(!t.is_discarded() && t.is_object() && t.contains("traceEvents") &&
                   t["traceEvents"].is_array(),
               "[merge_chrome_traces] '", in,
               "' is not a Chrome trace (JSON object with "
               "traceEvents)");
    for (auto& e : t["traceEvents"]) all.push_back(std::move(e));
    if (t.contains("otherData")) ranks.push_back(t["otherData"]);
  }
  json out = {{"traceEvents", std::move(all)},
              {"displayTimeUnit", "ms"},
              {"otherData", {{"merged", std::move(ranks)}}}};
  write_file(output, out.dump() + "\n", "merge_chrome_traces");
}

}  // namespace kiln::profiler

namespace kiln {

std::string MemorySnapshot::str(size_t max_blocks) const {
  std::ostringstream os;
  os << "allocator: current " << profiler::human_bytes(static_cast<double>(stats.current_bytes))
     << ", peak " << profiler::human_bytes(static_cast<double>(stats.peak_bytes)) << ", cached "
     << profiler::human_bytes(static_cast<double>(stats.cached_bytes)) << ", " << stats.num_allocs
     << " allocations (" << stats.num_cache_hits << " from the cache)\n";
  for (const PeakReport& p : compiled_peaks) {
    os << "peak of " << p.plan << ": " << profiler::human_bytes(static_cast<double>(p.peak_bytes))
       << " at " << p.step << "; alive then:\n";
    for (size_t i = 0; i < p.values.size() && i < max_blocks; ++i)
      os << "  " << p.values[i].value << " " << p.values[i].type << " "
         << profiler::human_bytes(static_cast<double>(p.values[i].bytes)) << " from "
         << p.values[i].op << "\n";
  }
  if (blocks.empty()) {
    os << "no live blocks recorded (blocks are tracked while a profile with profile_memory "
          "records)\n";
    return os.str();
  }
  std::map<std::string, std::pair<size_t, size_t>> by_op;  // bytes, blocks
  size_t total = 0;
  for (const MemoryBlock& b : blocks) {
    auto& [bytes, n] = by_op[b.op.empty() ? "(no span)" : b.op];
    bytes += b.bytes;
    ++n;
    total += b.bytes;
  }
  std::vector<std::pair<std::string, std::pair<size_t, size_t>>> ops(by_op.begin(), by_op.end());
  std::stable_sort(ops.begin(), ops.end(),
                   [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  os << "live blocks recorded: " << blocks.size() << ", "
     << profiler::human_bytes(static_cast<double>(total)) << "; by op:\n";
  for (const auto& [op, v] : ops)
    os << "  " << op << ": " << profiler::human_bytes(static_cast<double>(v.first)) << " in "
       << v.second << " block" << (v.second == 1 ? "" : "s") << "\n";
  os << "largest blocks:\n";
  for (size_t i = 0; i < blocks.size() && i < max_blocks; ++i)
    os << "  " << blocks[i].ptr << " "
       << profiler::human_bytes(static_cast<double>(blocks[i].bytes)) << " by "
       << (blocks[i].op.empty() ? "(no span)" : blocks[i].op) << "\n";
  return os.str();
}

}  // namespace kiln
