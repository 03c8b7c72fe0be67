// Checks a Chrome trace-event file the way a viewer reads it: well-formed
// JSON, every span with a start and a length, spans properly nested per thread.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace kiln::testing {

/// Parses `path`; a parse failure fails the test (returns null).
inline nlohmann::json read_trace(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << path << " is not valid JSON";
  if (j.is_discarded()) return nullptr;
  EXPECT_TRUE(j.is_object() && j.contains("traceEvents") && j["traceEvents"].is_array());
  return j;
}

/// Every "X" event has numeric ts/dur >= 0 and a name; per (pid, tid) the
/// spans nest (each one ends before the span it starts inside ends).
inline void expect_spans_nested(const nlohmann::json& trace) {
  std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<int64_t, int64_t>>> by_thread;
  for (const auto& e : trace["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("tid")) << e.dump();
    if (e["ph"] != "X") continue;
    ASSERT_TRUE(e.contains("ts") && e["ts"].is_number() && e.contains("dur") &&
                e["dur"].is_number() && e.contains("name"))
        << e.dump();
    const auto ts = static_cast<int64_t>(std::llround(e["ts"].get<double>() * 1000));
    const auto dur = static_cast<int64_t>(std::llround(e["dur"].get<double>() * 1000));
    ASSERT_GE(dur, 0) << e.dump();
    by_thread[{e["pid"].get<int64_t>(), e["tid"].get<int64_t>()}].push_back({ts, ts + dur});
  }
  for (auto& [thread, spans] : by_thread) {
    std::sort(spans.begin(), spans.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : a.second > b.second;
    });
    std::vector<int64_t> open;  // end times of the enclosing spans
    for (const auto& [b, e] : spans) {
      while (!open.empty() && open.back() <= b) open.pop_back();
      if (!open.empty()) {
        ASSERT_LE(e, open.back()) << "span [" << b << ", " << e << "] ns on thread "
                                  << thread.second << " overlaps its parent's end";
      }
      open.push_back(e);
    }
  }
}

/// Events whose name and ph match.
inline std::vector<nlohmann::json> trace_events(const nlohmann::json& trace,
                                                const std::string& name, const char* ph = "X") {
  std::vector<nlohmann::json> r;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == ph && e.value("name", "") == name) r.push_back(e);
  return r;
}

}  // namespace kiln::testing
