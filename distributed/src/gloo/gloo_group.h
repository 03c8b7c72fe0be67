// Internal to the Gloo backend: the group, its lanes and tasks, shared by
// process_group_gloo.cpp (set-up, lanes, send/recv) and
// process_group_gloo_collectives.cpp (the collectives).
#pragma once

#include <gloo/allreduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gloo_transport.h"
#include "kiln/error.h"
#include "process_group_impl.h"
#include "shm/shm_world.h"
#include "signature_check.h"

namespace kiln::dist::gloo_backend {

using detail::CollectiveInfo;
using detail::CollectiveKind;
using detail::Signature;
using detail::WorkImpl;
using BufPtr = std::shared_ptr<::gloo::transport::UnboundBuffer>;

// What a collective runs with on its lane: the transport (the lane's shared-
// memory channel, or its Gloo context over TCP for this op's tag), the
// deadline of the op (it started at most timeout ago) and its signature.
struct LaneRun {
  detail::Transport& transport;
  Clock::time_point deadline;
  const Signature& sig;
};
using RunFn = std::function<void(const LaneRun&)>;

inline std::byte* bytes_of(const Tensor& t) {
  return static_cast<std::byte*>(t.data_ptr());
}
inline size_t nbytes(const Tensor& t) {
  return size_t(t.numel()) * t.element_size();
}
inline detail::Span span_of(const Tensor& t) {
  return {bytes_of(t), nbytes(t)};
}

using detail::tensor_op;

// A send's or recv's Gloo buffers, each kept alive (also after a failure,
// until the contexts close) and aborted when the group is destroyed.
struct PointToPoint {
  /// Keeps `b`; false (and `b` aborted) once abort() ran.
  bool add(BufPtr b);
  /// Ends every wait on the buffers now and later.
  void abort();

  std::mutex mu;
  std::vector<BufPtr> bufs;  // guarded by mu
  bool aborted = false;      // guarded by mu
};

struct Task {
  std::shared_ptr<WorkImpl> work;
  RunFn run;
  uint32_t tag = 0;
  std::shared_ptr<PointToPoint> p2p;  // send/recv only
  Signature sig;                      // collectives: compared across ranks before the payload moves
};

// A worker thread with its own context and FIFO queue.
struct Lane {
  CtxPtr ctx;
  shm::Channel* shm = nullptr;  // owned by the group's shm::World
  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Task> queue;
  bool stop = false;
  Task* current = nullptr;  // guarded by mu; the task being run
  int cpu = -1;             // the core it is pinned to (pin_lanes_), guarded by mu
};

class GlooGroup final : public ProcessGroup {
 public:
  GlooGroup(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions opts,
            std::string prefix);
  ~GlooGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "gloo"; }
  std::string transport() const override { return shm_ ? "shm" : "tcp"; }
  const ProcessGroupOptions& options() const override { return opts_; }

  WorkPtr all_reduce(Tensor t, ReduceOp op) override;
  WorkPtr all_reduce_coalesced(std::vector<Tensor> ts, ReduceOp op) override;
  WorkPtr all_reduce_into(std::vector<Tensor> srcs, Tensor dst, ReduceOp op) override;
  WorkPtr broadcast(Tensor t, int root) override;
  WorkPtr reduce(Tensor t, int root, ReduceOp op) override;
  WorkPtr all_gather(std::vector<Tensor> outs, Tensor in) override;
  WorkPtr reduce_scatter(Tensor out, Tensor in, ReduceOp op) override;
  WorkPtr barrier() override;
  WorkPtr send(Tensor t, int dst, int tag) override;
  WorkPtr recv(Tensor t, int src, int tag) override;
  Tensor make_comm_buffer(int64_t numel, DType dtype) override;

 private:
  void rendezvous();
  CtxPtr connect(const std::string& name);
  WorkPtr collective(CollectiveInfo info, Signature sig, std::vector<Tensor> results, RunFn run);
  WorkPtr point_to_point(const char* op, Tensor t, int peer, int tag, bool is_send);
  void run_lane(Lane& lane);
  bool execute(Lane& lane, Task& t);  // true on success
  std::string broken() const;
  void check_root(const char* op, int root) const;

  std::shared_ptr<Store> store_;
  int rank_, size_;
  ProcessGroupOptions opts_;
  std::string prefix_;
  std::string where_;
  bool debug_ = false;
  std::shared_ptr<detail::CollectiveLog> log_ = std::make_shared<detail::CollectiveLog>(32);

  std::shared_ptr<::gloo::transport::Device> device_;
  std::unique_ptr<shm::World> shm_;  // when every rank is on this host
  bool pin_lanes_ = false;           // the ranks saturate this host's cores: see collective()
  std::vector<std::unique_ptr<Lane>> lanes_;  // collectives
  std::unique_ptr<Lane> p2p_;                 // waits for send/recv

  std::mutex issue_mu_;  // sequence numbers follow queue order
  uint64_t next_seq_ = 0, next_p2p_ = 0, next_buffer_ = 0;

  mutable std::mutex broken_mu_;
  std::string broken_;           // the first transport failure
  std::vector<Task> graveyard_;  // aborted send/recv: kept until the contexts close

  // Each recv waits on a thread of its own: it posts its payload only once
  // the sender's header arrived, and one recv must not hold up another.
  void run_recv(Task t);
  std::mutex recvs_mu_;
  std::condition_variable recvs_cv_;
  std::vector<std::shared_ptr<PointToPoint>> recvs_;  // running; aborted by the destructor
};

}  // namespace kiln::dist::gloo_backend
