// Forked ranks around a loopback TCP store: the harness the multi-rank tests
// of a process group share.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "distributed/forked_ranks.h"
#include "kiln/distributed/store.h"

namespace kiln::testing {

/// Forks `size` ranks, each running body(rank, port of a TCPStoreServer on
/// 127.0.0.1); a rank succeeds when body returns "" and prints its failure text
/// otherwise. Returns the ranks' exit statuses (0 passed, -1 not done within `limit`).
inline std::vector<int> run_store_ranks(int size,
                                        const std::function<std::string(int, uint64_t)>& body,
                                        std::chrono::seconds limit) {
  ForkedRanks ranks(size, [&](int rank, uint64_t port) {
    const std::string why = body(rank, port);
    if (why.empty()) return 0;
    std::fprintf(stderr, "rank %d: %s\n", rank, why.c_str());
    return 1;
  });
  dist::TCPStoreServerOptions so;
  so.host = "127.0.0.1";
  dist::TCPStoreServer server(so);
  ranks.start(server.port());
  return ranks.wait(std::chrono::steady_clock::now() + limit);
}

}  // namespace kiln::testing
