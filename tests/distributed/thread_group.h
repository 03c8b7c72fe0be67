// An in-process ProcessGroup for tests: N ranks are N threads of one process
// sharing memory. Collectives are matched across ranks by their issue order
// (as Gloo matches tags), run asynchronously on each rank's worker threads and
// return real Work handles with start/end timestamps, so DDP's overlap and
// ordering are exercised without sockets. Send/recv are not implemented.
// run_gloo_ranks runs the same per-rank code over the Gloo backend.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "kiln/distributed/process_group.h"
#include "kiln/distributed/store.h"

namespace kiln::testing {

/// Creates the `size` groups of one in-process world (element r is rank r).
/// A collective that some rank does not join within `opts.timeout` fails with
/// kiln::Error naming the missing ranks.
std::vector<std::shared_ptr<dist::ProcessGroup>> make_thread_groups(
    int size, dist::ProcessGroupOptions opts = {});

/// Group options for tests: a 30 s timeout, so a stuck test fails instead of hanging.
dist::ProcessGroupOptions test_group_options();

/// Options of a Gloo group on loopback: `timeout`, host 127.0.0.1, no debug
/// checks, `shm` as ProcessGroupOptions::shm (-1 = automatic).
dist::ProcessGroupOptions loopback_options(std::chrono::milliseconds timeout, int shm = -1);

/// A client of the TCP store listening on 127.0.0.1:`port`.
std::shared_ptr<dist::Store> store_client(uint16_t port, std::chrono::milliseconds timeout);

/// Runs fn(rank, group) on `size` threads, one per rank, and joins them; the
/// first exception thrown by any rank is rethrown here. A rank that stops early
/// makes the others' collectives fail after opts.timeout.
void run_ranks(int size, const std::function<void(int, dist::ProcessGroup&)>& fn,
               dist::ProcessGroupOptions opts = test_group_options());

/// As run_ranks, over real Gloo groups (make_gloo_group on a loopback TCP
/// store): the same DDP code on the production backend. `shm` is
/// ProcessGroupOptions::shm (0: loopback TCP only, 1: shared memory, -1: automatic).
void run_gloo_ranks(int size, const std::function<void(int, dist::ProcessGroup&)>& fn,
                    std::chrono::milliseconds timeout = std::chrono::milliseconds(30000),
                    int shm = -1);

}  // namespace kiln::testing
