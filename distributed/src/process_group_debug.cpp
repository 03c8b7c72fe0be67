// KILN_DIST_DEBUG: before a collective runs, every rank publishes its
// signature (op, dtype, element count, root / reduce op) in the store and
// compares it with every other rank's. A mismatch is reported naming both
// ranks instead of hanging (or silently mixing buffers); a rank that never
// issues the collective is named after the timeout. The last rank to read a
// collective's keys deletes them, so the store does not grow with training.
#include <algorithm>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "process_group_impl.h"

namespace kiln::dist::detail {

namespace {

Bytes to_bytes(const std::string& s) {
  return Bytes(s.begin(), s.end());
}
std::string to_string(const Bytes& b) {
  return std::string(b.begin(), b.end());
}

}  // namespace

std::vector<int> missing_ranks(Store& store, const std::string& prefix, int size) {
  std::vector<int> missing;
  for (int r = 0; r < size; ++r) {
    try {
      store.wait({prefix + std::to_string(r)}, Millis(1));
    } catch (const Error&) {
      missing.push_back(r);
    }
  }
  return missing;
}

void debug_check(Store& store, const std::string& prefix, int rank, int size, const OpInfo& info,
                 Millis timeout, const std::function<void()>& on_timeout) {
  const std::string base = kiln::str(prefix, "/debug/", info.seq, "/");
  const std::string mine = info.signature();
  const char* op = info.op.c_str();
  store.set(base + std::to_string(rank), to_bytes(mine));
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(base + std::to_string(r));
  try {
    store.wait(keys, timeout);
  } catch (const Error&) {
    auto missing = missing_ranks(store, base, size);
    if (on_timeout) on_timeout();
    kiln::throw_error(kiln::str("[", op, "] KILN_DIST_DEBUG: rank(s) ", missing,
                                " did not issue collective #", info.seq, " within ",
                                timeout.count(), " ms, while rank ", rank, " issued ", mine,
                                " (a rank skipped it, or ran a different number of collectives)"));
  }
  std::vector<std::string> sigs(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r)
    sigs[size_t(r)] = r == rank ? mine : to_string(store.get(keys[size_t(r)]));
  // Every rank holds the same list, so every rank reports the same pair.
  if (store.add(base + "read", 1) == size) {
    for (const auto& k : keys) store.delete_key(k);
    store.delete_key(base + "read");
  }
  for (int r = 1; r < size; ++r) {
    if (sigs[size_t(r)] == sigs[0]) continue;
    kiln::throw_error(kiln::str("[", op, "] KILN_DIST_DEBUG: collective #", info.seq,
                                " differs across ranks: rank 0 issued ", sigs[0], " but rank ", r,
                                " issued ", sigs[size_t(r)]));
  }
}

}  // namespace kiln::dist::detail
