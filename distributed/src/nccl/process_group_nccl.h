// The NCCL process group (private to kiln_distributed): CUDA tensors, through
// libnccl.so.2 on a GPU or the emulated NCCL on the emulated device
// (distributed/nccl/).
//
// Streams. One communication stream per group (high priority). A collective
// records an event on the calling thread's current stream of the group's
// device, the communication stream waits for it, NCCL runs there, and an
// event recorded after it marks completion. The tensors are marked used on the
// communication stream (record_stream), so the caching allocator reuses their
// memory only after the collective. Work::wait() (no timeout) makes the
// caller's current stream wait for the completion event and returns at once,
// as PyTorch's; wait(timeout) also blocks the host until the collective
// completed or failed.
//
// Watchdog. A thread polls every pending collective's completion event and
// ncclCommGetAsyncError. An asynchronous error, or a collective pending longer
// than the group's timeout, aborts the communicator (ncclCommAbort) and fails
// every pending Work with a kiln::Error naming the collective and why; the
// group is then unusable (later collectives fail at once, naming the first
// error). A failed peer fails its collective on every rank: the emulated NCCL
// notices a peer that exited or left, real NCCL reports ncclRemoteError or
// hangs until the watchdog's timeout.
//
// CUDA graphs. A collective issued while this thread captures a compiled step
// into a CUDA graph (kernels/cuda/cuda_graphs.h) follows the same protocol,
// captured: the communication stream forks from the capturing stream at the
// ready event and joins it at Work::wait(), the NCCL call becomes graph nodes,
// and nothing host-side waits for it (no watchdog entry, no record_stream: the
// graph keeps its tensors and events). Its Work completes at once: what runs
// later are the graph's replays, and those the group watches (ReplayWatch):
// before a replay a failed group raises its error instead; after one, the
// watchdog polls an event recorded behind it like any collective, so a peer
// that fails during a replay times the replay out, aborts the communicator
// and fails the next replay (or collective) with a kiln::Error. NCCL's
// ncclCommDestroy and ncclCommAbort wait until every graph holding the
// communicator's work is destroyed, so the group releases those graphs first
// (ReplayWatch::release: their plans run without a graph from then on).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/cuda_graphs.h"
#include "kiln/cuda.h"
#include "kiln/distributed/process_group.h"
#include "nccl_lib.h"
#include "process_group_impl.h"

namespace kiln::dist::nccl_backend {

using detail::CollectiveInfo;
using detail::WorkImpl;

/// A collective in flight: completed by the watchdog.
struct Pending {
  std::shared_ptr<WorkImpl> work;
  cuda::Event done;
  std::vector<Tensor> keep;  // the tensors it reads and writes (and temporaries)
  Clock::time_point issued;
};

class NcclGroup final : public ProcessGroup {
 public:
  /// Joins the group on CUDA device `device`: rank 0's unique id travels
  /// through `store` (keys under `prefix`). kiln::Error when NCCL or the
  /// device is unusable, or a rank does not join within options.timeout.
  NcclGroup(std::shared_ptr<Store> store, int rank, int size, int device, ProcessGroupOptions opts,
            std::string prefix);
  ~NcclGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  const ProcessGroupOptions& options() const override { return opts_; }
  int device() const { return device_; }

  WorkPtr all_reduce(Tensor t, ReduceOp op) override;
  WorkPtr all_reduce_coalesced(std::vector<Tensor> ts, ReduceOp op) override;
  WorkPtr broadcast(Tensor t, int root) override;
  WorkPtr reduce(Tensor t, int root, ReduceOp op) override;
  WorkPtr all_gather(std::vector<Tensor> outs, Tensor in) override;
  WorkPtr reduce_scatter(Tensor out, Tensor in, ReduceOp op) override;
  WorkPtr barrier() override;
  WorkPtr send(Tensor t, int dst, int tag) override;
  WorkPtr recv(Tensor t, int src, int tag) override;
  /// Zeros on the group's device (NCCL reads device memory in place).
  Tensor make_comm_buffer(int64_t numel, DType dtype) override;
  /// CUDA tensors: NCCL calls can be captured into a CUDA graph.
  bool capturable(const Tensor& t) const override { return t.defined() && t.device().is_cuda(); }

  /// Watches a replay of a graph holding this group's collectives (`what`),
  /// just launched on CUstream `stream`: the watchdog completes or times it out.
  void watch_replay(void* stream, const std::string& what);
  /// "" or why the group is unusable (its first failure).
  std::string broken() const;

  /// What a replay watch of a destroyed group finds: the group while it lives.
  struct Link {
    std::mutex mu;
    NcclGroup* group = nullptr;
  };

 private:
  // Launches one NCCL call on the communication stream (after the caller's
  // current stream's work so far); `launch` gets the stream handle and may add
  // temporaries to `keep`, which stays alive, and marked used on the
  // communication stream, until done.
  using Launch = std::function<ncclResult_t(cudaStream_t, std::vector<Tensor>& keep)>;
  WorkPtr enqueue(CollectiveInfo info, std::vector<Tensor> results, std::vector<Tensor> keep,
                  const Launch& launch, bool ordered = true);
  void check_tensor(const char* op, const Tensor& t, const char* name = "tensor") const;
  void check_root(const char* op, int root) const;
  // Destroys the CUDA graphs that hold this group's collectives (before the
  // communicator goes: NCCL waits for them), `why` their plans' reason.
  void release_graphs(const std::string& why);
  // enqueue() while this thread captures a CUDA graph.
  WorkPtr enqueue_captured(std::shared_ptr<WorkImpl> work, std::vector<Tensor> keep,
                           const Launch& launch);
  // Fails every pending collective with `why`, aborts the communicator.
  void break_group(const std::string& why, const std::shared_ptr<WorkImpl>& first);
  void watchdog();
  std::string nccl_error(ncclResult_t r) const;

  std::shared_ptr<Store> store_;
  int rank_, size_, device_;
  ProcessGroupOptions opts_;
  std::string prefix_, where_;
  bool debug_ = false;
  const nccl::Nccl* lib_ = nullptr;
  ncclComm_t comm_ = nullptr;
  std::unique_ptr<cuda::Stream> stream_;
  std::shared_ptr<detail::CollectiveLog> log_ = std::make_shared<detail::CollectiveLog>(32);

  std::mutex issue_mu_;  // collectives are launched in sequence-number order
  uint64_t next_seq_ = 0, next_p2p_ = 0;

  mutable std::mutex mu_;  // the state below
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  std::string broken_;
  bool aborted_ = false, stop_ = false;
  std::thread watchdog_;
  std::shared_ptr<Link> link_ = std::make_shared<Link>();
  std::vector<std::weak_ptr<cuda::ReplayWatch>> watches_;  // (mu_) of the graphs holding our work
};

}  // namespace kiln::dist::nccl_backend
