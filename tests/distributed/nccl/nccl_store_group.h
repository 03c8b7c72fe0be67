// The NCCL group of a forked test rank (testing::run_store_ranks): its store
// client on the test's loopback store, 30 s timeouts, the rank's device index
// its rank (on the emulated device every index is cuda:0's memory).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "kiln/distributed/process_group.h"
#include "kiln/distributed/store.h"

namespace kiln::testing {

/// Rank `rank` of `size`'s NCCL group through the store on `port`, its keys
/// under `prefix`.
inline std::shared_ptr<dist::ProcessGroup> nccl_store_group(int rank, int size, uint64_t port,
                                                            const std::string& prefix) {
  using namespace std::chrono_literals;
  dist::TCPStoreOptions co;
  co.host = "127.0.0.1";
  co.port = uint16_t(port);
  co.timeout = 30s;
  auto store = std::make_shared<dist::TCPStore>(co);
  dist::ProcessGroupOptions po;
  po.timeout = 30s;
  po.host = "127.0.0.1";
  return dist::make_nccl_group(store, rank, size, rank, po, prefix);
}

}  // namespace kiln::testing
