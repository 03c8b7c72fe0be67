// Internal: the second implementation of the NCCL function table (nccl_lib.h),
// for the emulated CUDA device (codegen/kernels/cuda/pocl_driver.h). NCCL
// refuses two ranks on one GPU and CI has none, so multi-rank runs of the NCCL
// process group execute here: the collectives of kilnrun processes (or forked
// ones) on one host, through kiln's shared-memory transport (src/shm/).
//
// Stream order, as NCCL's kernels have it: a call records an event on the
// given stream, closes a gate on it (emulated_close_gate: the stream's later
// work waits), and queues the op for the communicator's thread, which waits
// for the event, runs the collective on the device memory (the emulated
// device's memory is host-addressable), and opens the gate. Calls return at
// once, as NCCL's do.
// On a stream capturing a CUDA graph, a call is recorded as a node of the
// graph instead (emulated_record_launch): each launch of the graph does the
// above at that point of its work, as a captured NCCL kernel runs with each
// launch of real NCCL's graphs. Every rank must launch the graph alike. As
// real NCCL's, ncclCommDestroy and ncclCommAbort wait until the graphs
// holding such calls are destroyed (real NCCL forever; here 5 s, then an
// error on stderr and from the call).
//
// Bootstrap: real NCCL connects its ranks over its own sockets from the unique
// id; the emulated one connects them over a kiln store the caller lends it
// (set_emulated_bootstrap) under keys named after the unique id. Failures (a
// peer that exited or left, ranks issuing different collectives, a wait past
// the bootstrap's timeout) make ncclCommGetAsyncError report an error and
// ncclGetLastError say what happened; the communicator then skips its queued
// ops (their gates open, so the streams never hang) until it is aborted.
#pragma once

#include <chrono>
#include <memory>

#include "kiln/distributed/store.h"
#include "nccl_lib.h"

namespace kiln::dist::nccl {

/// The emulated library's table (every entry set).
const Nccl& emulated_lib();

/// The store and the wait limit that the emulated ncclCommInitRank calls of
/// this thread connect over (nullptr store: none; ncclCommInitRank then fails
/// with ncclInvalidUsage).
void set_emulated_bootstrap(std::shared_ptr<Store> store, std::chrono::milliseconds timeout);

}  // namespace kiln::dist::nccl
