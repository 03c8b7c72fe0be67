#include "profiler_clock.h"

#include <limits>

#include "kiln/env.h"
#include "kiln/error.h"
#include "kiln/profiler.h"

namespace kiln::dist::detail {

namespace {

constexpr int kRounds = 5;

Bytes to_bytes(int64_t v) {
  const std::string s = std::to_string(v);
  return Bytes(s.begin(), s.end());
}

int64_t from_bytes(const Bytes& b, const std::string& key) {
  const std::string s(b.begin(), b.end());
  try {
    return std::stoll(s);
  } catch (const std::exception&) {
    throw Error(
        kiln::str("[init_process_group] profiler clock key ", key, " holds '", s, "', not a time"));
  }
}

}  // namespace

void align_profiler_clock(Store& store, const std::string& prefix, int rank, int world_size) {
  if (env::get("KILN_PROFILE").empty() || world_size < 2) {
    profiler::set_process(rank, 0);
    return;
  }
  const std::string base = prefix + "/profiler_clock/";
  if (rank == 0) {
    for (int r = 1; r < world_size; ++r)
      for (int k = 0; k < kRounds; ++k) {
        store.get(kiln::str(base, "ping/", r, "/", k));  // waits for the ping
        store.set(kiln::str(base, "pong/", r, "/", k), to_bytes(profiler::now_ns()));
      }
    profiler::set_process(0, 0);
    return;
  }
  int64_t best_rtt = std::numeric_limits<int64_t>::max(), offset = 0;
  for (int k = 0; k < kRounds; ++k) {
    const int64_t t0 = profiler::now_ns();
    store.set(kiln::str(base, "ping/", rank, "/", k), to_bytes(t0));
    const std::string key = kiln::str(base, "pong/", rank, "/", k);
    const int64_t remote = from_bytes(store.get(key), key);
    const int64_t t1 = profiler::now_ns();
    if (t1 - t0 < best_rtt) {
      best_rtt = t1 - t0;
      offset = remote - (t0 + t1) / 2;
    }
  }
  profiler::set_process(rank, offset);
}

}  // namespace kiln::dist::detail
