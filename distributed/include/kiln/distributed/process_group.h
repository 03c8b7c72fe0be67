// Process groups: a set of ranks that run collectives together (like c10d's
// ProcessGroup). Every collective is asynchronous and returns a Work handle;
// errors and timeouts surface as kiln::Error from Work::wait on every rank,
// never as a silent hang. Backends: Gloo (CPU tensors over TCP), NCCL (CUDA
// tensors; make_nccl_group) and "auto" (both). A Gloo group whose
// ranks all run on one host moves the collectives' bytes through shared
// memory instead of TCP (KILN_SHM=0 turns that off).
//
// Ordering contract (as in PyTorch): every rank of a group issues the same
// collectives in the same order. Several may be in flight at once. Send/recv
// are outside that order (they pair up by peer and tag).
//
// Failures: argument errors (bad dtype, shape, root) and KILN_DIST_DEBUG
// mismatches (on every rank) throw kiln::Error from the call itself; the group
// stays usable. Ranks that issue different collectives (op, dtype, element
// count, reduce op or root; compared before any data moves, always), a
// transport failure or a timeout fail that Work on every rank and leave the
// group unusable: every later collective fails at once, naming the first error.
// When a collective fails or a wait times out, the group prints its log of the
// last 32 collectives to stderr.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/distributed/store.h"
#include "kiln/tensor.h"

namespace kiln::dist {

/// Reduction applied by all_reduce, reduce and reduce_scatter.
enum class ReduceOp : uint8_t { kSum, kAvg, kMax, kMin, kProduct };
/// "sum", "avg", ...
const char* to_string(ReduceOp op);

using Clock = std::chrono::steady_clock;

/// A pending collective. Thread-safe.
class Work {
 public:
  virtual ~Work() = default;
  /// Blocks until the collective finished. kiln::Error if it failed, or if it did
  /// not finish within `timeout` (default: the group's timeout), naming the op.
  virtual void wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(-1)) = 0;
  /// True once finished (successfully or not); never blocks.
  virtual bool is_completed() const = 0;
  /// The tensors the collective produced (all_reduce: the input, reduced in place).
  virtual std::vector<Tensor> result() const = 0;
  /// When the backend began and finished the transfer (for overlap analysis);
  /// `end` is unset (epoch) until completed.
  virtual Clock::time_point start_time() const = 0;
  virtual Clock::time_point end_time() const = 0;
  /// The op name ("all_reduce") and a sequence number within the group.
  virtual std::string describe() const = 0;
};
using WorkPtr = std::shared_ptr<Work>;

/// Options shared by every backend.
struct ProcessGroupOptions {
  std::chrono::milliseconds timeout{300000};  ///< every collective and the rendezvous
  int threads = 2;                            ///< worker threads running collectives
  /// Address other ranks reach this rank at (Gloo's sockets bind to it); empty:
  /// the interface in GLOO_SOCKET_IFNAME if set, else this machine's hostname.
  std::string host;
  /// 1: check before each collective that every rank issues the same op, dtype
  /// and size (slow: a store round trip each); 0: off; -1: KILN_DIST_DEBUG.
  int debug = -1;
  /// 1: when every rank runs on this host, collectives go through shared memory
  /// (send/recv stay on TCP); 0: TCP only; -1: KILN_SHM (default 1). Ranks
  /// that disagree all use TCP.
  int shm = -1;
};

/// A group of ranks. Tensors must be contiguous, on the backend's device, with the
/// same dtype and element count on every rank (checked: the error names every
/// rank and what it issued). In-place ops write into the given tensors, which must not
/// be touched until the Work completes. Destroying a group fails its queued ops,
/// aborts pending send/recv and waits for running collectives (bounded by timeout).
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "gloo", "nccl".
  virtual std::string backend() const = 0;
  /// How the collectives move bytes: "shm" (Gloo group whose ranks share this
  /// host), "tcp" (other Gloo groups); backends without a choice: backend().
  virtual std::string transport() const { return backend(); }

  /// Reduces `t` across ranks, in place on every rank.
  virtual WorkPtr all_reduce(Tensor t, ReduceOp op = ReduceOp::kSum) = 0;
  /// Reduces several tensors as one flat buffer (DDP's coalesced buckets).
  virtual WorkPtr all_reduce_coalesced(std::vector<Tensor> ts, ReduceOp op = ReduceOp::kSum) = 0;
  /// Reduces the concatenation of `srcs` (contiguous, dst's dtype; only read,
  /// and not to be written until the Work completes) into the 1-D `dst` on
  /// every rank: all_reduce(dst) after copying srcs into it, with the copy on
  /// the group's worker. A src that is the matching range of dst is not copied
  /// (any other overlap with dst is an error). Into a comm buffer over shared
  /// memory the copy is fused with the reduction (each rank copies only the
  /// shares the others reduce).
  virtual WorkPtr all_reduce_into(std::vector<Tensor> srcs, Tensor dst,
                                  ReduceOp op = ReduceOp::kSum);
  /// Copies root's `t` into `t` on every rank.
  virtual WorkPtr broadcast(Tensor t, int root) = 0;
  /// Reduces into root's `t` (other ranks' `t` are unchanged).
  virtual WorkPtr reduce(Tensor t, int root, ReduceOp op = ReduceOp::kSum) = 0;
  /// outs[r] receives rank r's `in` (outs.size() == size()).
  virtual WorkPtr all_gather(std::vector<Tensor> outs, Tensor in) = 0;
  /// `out` receives the reduction of chunk rank() of every rank's `in`
  /// (in.numel() == size() * out.numel()).
  virtual WorkPtr reduce_scatter(Tensor out, Tensor in, ReduceOp op = ReduceOp::kSum) = 0;
  /// Returns when every rank has entered the barrier.
  virtual WorkPtr barrier() = 0;
  /// Point-to-point; `tag` matches a send with its recv.
  virtual WorkPtr send(Tensor t, int dst, int tag = 0) = 0;
  virtual WorkPtr recv(Tensor t, int src, int tag = 0) = 0;

  /// A zeroed 1-D tensor that all_reduce of this group reduces without staging
  /// copies: shared memory every rank maps when the group runs over shm (plain
  /// memory otherwise). Every rank must call it in the same order with the same
  /// numel and dtype (store round trips; not ordered with collectives), and
  /// all_reduce a given range of it on every rank alike. DDP's buckets use it.
  virtual Tensor make_comm_buffer(int64_t numel, DType dtype);

  /// Whether this group's collectives on `t` may be issued while this thread
  /// captures a CUDA graph (a compiled step replayed from a graph): they then
  /// become part of the graph and run with each replay. True for NCCL on CUDA
  /// tensors; other groups refuse (the compiled step runs without a graph).
  virtual bool capturable(const Tensor& t) const {
    (void)t;
    return false;
  }

  virtual const ProcessGroupOptions& options() const = 0;
};

/// Creates a Gloo process group over `store` (TCP transport on options.host).
/// Blocks until all ranks join; kiln::Error naming the missing ranks after
/// options.timeout. `prefix` namespaces the group's keys: it must be new on the
/// store each time a group is created. kiln::Error if built without Gloo.
std::shared_ptr<ProcessGroup> make_gloo_group(std::shared_ptr<Store> store, int rank, int size,
                                              ProcessGroupOptions options = {},
                                              const std::string& prefix = "default_pg");

/// Creates an NCCL process group (CUDA tensors on device cuda:`device`) over
/// `store`: rank 0's unique id travels through the store, NCCL connects the
/// ranks. On the emulated CUDA device (KILN_CUDA_EMULATE) the emulated NCCL
/// runs the collectives through shared memory between the ranks of one host.
/// Collectives are ordered on the group's communication stream after the
/// caller's current stream; Work::wait() without a timeout makes the caller's
/// current stream wait for the collective and returns at once (with a timeout
/// it also blocks the host until done); a watchdog fails every pending Work
/// and aborts the communicator on an NCCL error or after options.timeout.
/// kiln::Error when NCCL, CUDA or the device is unavailable.
std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<Store> store, int rank, int size,
                                              int device, ProcessGroupOptions options = {},
                                              const std::string& prefix = "default_pg");
/// The "auto" backend (PyTorch's "cpu:gloo,cuda:nccl"): one group whose
/// collectives on CUDA tensors run on an NCCL part (device cuda:`device`) and
/// the others, barrier and make_comm_buffer on a Gloo part. Without a usable
/// CUDA device the NCCL part is absent and CUDA tensors raise kiln::Error.
std::shared_ptr<ProcessGroup> make_auto_group(std::shared_ptr<Store> store, int rank, int size,
                                              int device, ProcessGroupOptions options = {},
                                              const std::string& prefix = "default_pg");

/// Arguments of init_process_group (like torch.distributed.init_process_group).
struct InitOptions {
  /// "gloo" (CPU tensors), "nccl" (CUDA tensors on device LOCAL_RANK) or
  /// "auto" (both: each collective by its tensors' device).
  std::string backend = "gloo";
  /// "env://" (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or "tcp://host:port".
  std::string init_method = "env://";
  int rank = -1;        ///< -1: from the environment
  int world_size = -1;  ///< -1: from the environment
  std::chrono::milliseconds timeout{300000};
  int threads = 2;  ///< ProcessGroupOptions::threads of the default group
};

/// Creates the default group. Rank 0 hosts the store unless the launcher does
/// (KILN_USE_AGENT_STORE=1); clients present KILN_STORE_TOKEN. tcp:// takes the
/// rank and world size from `opts` or else RANK/WORLD_SIZE. kiln::Error if
/// already initialized, or naming the malformed URL or missing variable.
void init_process_group(const InitOptions& opts = {});
/// True between init_process_group and destroy_process_group.
bool is_initialized();
/// The default group (kiln::Error if not initialized).
std::shared_ptr<ProcessGroup> default_group();
int get_rank();
int get_world_size();
/// LOCAL_RANK from the environment at init (0 if it was unset).
int get_local_rank();
/// A subgroup of the default group; every rank of the default group must call it
/// with the same ranks. Ranks outside `ranks` get nullptr.
std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks);
/// Tears down the default group and its store (idempotent).
void destroy_process_group();

}  // namespace kiln::dist
