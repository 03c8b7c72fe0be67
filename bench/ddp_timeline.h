// The backward timeline that ddp_bench --device cuda --ranks 1 measures and
// ddp_overlap_model takes: one text form, printed by one and parsed by the
// other (tests/distributed/ddp_timeline_test.cpp checks the round trip).
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kiln/error.h"

namespace kiln::bench {

/// One DDP bucket in a measured backward: when it became ready (its last
/// gradient), in ms from backward's start, and its size.
struct ReadyBucket {
  double ready_ms = 0;
  double bytes = 0;
};

/// `--ready MS:BYTES,... --end MS` (ms with 4 decimals: 0.1 us), the
/// arguments ddp_overlap_model takes for a timeline measured elsewhere.
inline std::string format_model_input(const std::vector<ReadyBucket>& buckets, double end_ms) {
  std::string out = "--ready ";
  char item[64];
  for (size_t b = 0; b < buckets.size(); ++b) {
    std::snprintf(item, sizeof item, "%s%.4f:%.0f", b ? "," : "", buckets[b].ready_ms,
                  buckets[b].bytes);
    out += item;
  }
  std::snprintf(item, sizeof item, " --end %.4f", end_ms);
  return out + item;
}

/// A number that fills `text` (and is finite, >= 0), else kiln::Error naming `what`.
inline double parse_timeline_number(const std::string& text, const char* what) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  KILN_CHECK(!text.empty() && end == text.c_str() + text.size() && errno == 0 && v >= 0,
             "[ddp timeline] ", what, " '", text, "' is not a number >= 0");
  return v;
}

/// "MS:BYTES,MS:BYTES,..." (format_model_input's --ready value) in order;
/// kiln::Error naming the item for anything else.
inline std::vector<ReadyBucket> parse_ready(const std::string& s) {
  std::vector<ReadyBucket> out;
  size_t at = 0;
  while (!s.empty()) {  // every item between commas, an empty last one included
    const size_t comma = std::min(s.find(',', at), s.size());
    const std::string item = s.substr(at, comma - at);
    const size_t colon = item.find(':');
    KILN_CHECK(colon != std::string::npos, "[ddp timeline] --ready item '", item,
               "' is not MS:BYTES (in '", s, "')");
    out.push_back({parse_timeline_number(item.substr(0, colon), "ready time"),
                   parse_timeline_number(item.substr(colon + 1), "bucket bytes")});
    if (comma == s.size()) break;
    at = comma + 1;
  }
  KILN_CHECK(!out.empty(), "[ddp timeline] --ready '", s, "' names no bucket");
  return out;
}

}  // namespace kiln::bench
