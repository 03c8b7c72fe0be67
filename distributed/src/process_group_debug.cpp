// KILN_DIST_DEBUG: before a collective runs, every rank publishes its
// signature (op, dtype, element count, root / reduce op) in the store and
// compares it with every other rank's. A mismatch is reported naming both
// ranks instead of hanging (or silently mixing buffers); a rank that never
// issues the collective is named after the timeout (if the store itself went
// away, which without kilnrun means rank 0 exited, that is said instead of
// naming every rank). The last rank to read a collective's keys deletes them,
// so the store does not grow with training.
#include <algorithm>
#include <string>
#include <vector>

#include "kiln/env.h"
#include "kiln/error.h"
#include "process_group_impl.h"

namespace kiln::dist::detail {

std::vector<int> missing_ranks(Store& store, const std::string& prefix, int size) {
  std::vector<int> missing;
  for (int r = 0; r < size; ++r) {
    try {
      store.wait({prefix + std::to_string(r)}, Millis(1));
    } catch (const StoreTimeout&) {
      missing.push_back(r);
    }  // any other failure propagates: the store is gone, no rank can be named
  }
  return missing;
}

std::string store_lost(const Error& e) {
  const bool agent = env::get_flag("KILN_USE_AGENT_STORE", false);
  return kiln::str("lost the store (", e.what(), "); ",
                   agent ? "kilnrun serves it, so the launcher has stopped"
                         : "without kilnrun, rank 0 of the job serves it, so rank 0 has exited or "
                           "destroyed its process group");
}

void debug_check(Store& store, const std::string& prefix, int rank, int size,
                 const CollectiveInfo& info, Millis timeout,
                 const std::function<void()>& on_timeout) {
  const std::string base = kiln::str(prefix, "/debug/", info.seq, "/");
  const std::string mine = info.signature();
  const char* op = info.op.c_str();
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(base + std::to_string(r));
  try {
    store.set(base + std::to_string(rank), to_bytes(mine));
    store.wait(keys, timeout);
  } catch (const StoreTimeout&) {
    std::vector<int> missing;
    try {
      missing = missing_ranks(store, base, size);
    } catch (const Error& e) {
      kiln::throw_error(kiln::str("[", op, "] KILN_DIST_DEBUG: rank ", rank, " issued collective #",
                                  info.seq, " ", mine, " but ", store_lost(e)));
    }
    if (on_timeout) on_timeout();
    kiln::throw_error(kiln::str("[", op, "] KILN_DIST_DEBUG: rank(s) ", missing,
                                " did not issue collective #", info.seq, " within ",
                                timeout.count(), " ms, while rank ", rank, " issued ", mine,
                                " (a rank skipped it, or ran a different number of collectives)"));
  } catch (const Error& e) {
    // Not a timeout: probing the ranks' keys would only name every rank.
    kiln::throw_error(kiln::str("[", op, "] KILN_DIST_DEBUG: rank ", rank,
                                " could not check collective #", info.seq, " ", mine,
                                " with the other ranks: ", store_lost(e)));
  }
  std::vector<std::string> sigs(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r)
    sigs[size_t(r)] = r == rank ? mine : from_bytes(store.get(keys[size_t(r)]));
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

void debug_check_logged(Store& store, const std::string& prefix, int rank, int size,
                        const CollectiveInfo& info, Millis timeout,
                        const std::shared_ptr<CollectiveLog>& log, const std::string& where) {
  auto print = [&] {
    print_log(*log, where, kiln::str("KILN_DIST_DEBUG: waiting for ", info.str()));
  };
  try {
    debug_check(store, prefix, rank, size, info, timeout, print);
  } catch (const Error& e) {
    failed_work(info, where, log, e.what());  // into the log
    throw;
  }
}

}  // namespace kiln::dist::detail
