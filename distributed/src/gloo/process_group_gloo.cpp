// The Gloo backend: CPU tensors over TCP.
//
// Threads and contexts. Collective n runs on worker lane n % threads, and each
// lane owns its own Gloo context (its own TCP connections), so two collectives
// in flight never share a socket and one lane's FIFO order is the same on
// every rank (the ordering contract makes it so). The tag is the collective's
// sequence number, which keeps Gloo's slots apart even within one lane.
// Send/recv are posted on the caller's thread on a separate context (they are
// outside the collective order) and completed by one more lane that waits for
// them in posting order; every transfer is already posted, so waiting in order
// cannot deadlock.
//
// Failures. Any exception from Gloo (a peer closed its sockets, a timeout) is
// turned into a kiln::Error naming the op, the rank and the group, and marks
// the group unusable: Gloo closes a context's connections after a timeout, so
// later ops could not succeed anyway; they now fail at once with the first
// error. The group's log of recent collectives is printed once at that point.
//
// Signatures. Before a collective moves its payload, the ranks compare what
// each issued (op, dtype, element count, reduce op, root, sequence number):
// over TCP each rank first sends its fixed-size signature to every other rank
// (signature_check.h), over shared memory each step's descriptor holds it.
// Ranks that disagree all fail that collective with the same message naming
// them, instead of Gloo aborting the process on mismatched sizes or
// reducing garbage for same-size mismatches; the group becomes unusable.
//
// Placement. When the group's ranks are at least as many as this host's cores
// (so each rank's compute thread has a core of its own), a lane runs on the
// core of the thread that issues its collective (re-pinned when that thread
// moves): the reduction then takes its CPU time from its own rank, not from a
// peer's compute thread. Unpinned, lanes of both ranks often landed on one
// core, that rank fell behind, and the other waited for it at the end of
// DDP's backward (bench/RESULTS.md, "CPU DDP overlap").
//
// Shared memory. When every rank runs on this host (and KILN_SHM is not 0),
// the collectives move their bytes through a shared-memory segment instead
// (src/shm/): each lane then also owns a shm::Channel, used in the same lane
// order. The Gloo contexts stay for send/recv. A shm failure (a peer left,
// exited or timed out) breaks the group as a Gloo failure does.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <pthread.h>
#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gloo_store.h"
#include "kiln/env.h"
#include "kiln/error.h"
#include "kiln/functional.h"
#include "process_group_impl.h"
#include "reduce_kernels.h"
#include "shm/shm_world.h"
#include "signature_check.h"

namespace kiln::dist {

namespace gloo_backend {

namespace {

using detail::CollectiveKind;
using detail::OpInfo;
using detail::Signature;
using detail::WorkImpl;
using CtxPtr = std::shared_ptr<::gloo::Context>;
using BufPtr = std::shared_ptr<::gloo::transport::UnboundBuffer>;

// What a collective runs with on its lane: the lane's Gloo context, the op's
// tag (its sequence number), the lane's shm channel (null: TCP), the deadline
// of the op (it started at most timeout ago) and its signature.
struct LaneRun {
  const CtxPtr& ctx;
  uint32_t tag;
  shm::Channel* shm;
  Clock::time_point deadline;
  const Signature& sig;
};
using RunFn = std::function<void(const LaneRun&)>;

// Gloo's option setters are templated on the element type only for its size.
template <typename F>
void with_element(size_t bytes, F&& f) {
  switch (bytes) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    case 8:
      return f(uint64_t{});
  }
  KILN_ASSERT(false, "element size ", bytes);
}

void allreduce_raw(const CtxPtr& ctx, uint32_t tag, Millis timeout, void* p, size_t n, DType dt,
                   ReduceOp op) {
  if (n == 0) return;
  ::gloo::AllreduceOptions o(ctx);
  with_element(dtype_size(dt), [&](auto e) {
    using T = decltype(e);
    o.setOutput(static_cast<T*>(p), n);
  });
  o.setReduceFunction(reduce_fn(dt, op));
  o.setTag(tag);
  o.setTimeout(timeout);
  ::gloo::allreduce(o);
  if (op == ReduceOp::kAvg) divide_in_place(p, dt, n, ctx->size);
}

std::byte* bytes_of(const Tensor& t) {
  return static_cast<std::byte*>(t.data_ptr());
}
size_t nbytes(const Tensor& t) {
  return size_t(t.numel()) * t.element_size();
}
shm::Span span_of(const Tensor& t) {
  return {bytes_of(t), nbytes(t)};
}

OpInfo tensor_op(const char* op, const Tensor& t, std::string detail = {}) {
  OpInfo i;
  i.op = op;
  i.dtype = dtype_name(t.dtype());
  i.shape = detail::shape_str(t);
  i.numel = t.numel();
  i.detail = std::move(detail);
  return i;
}

struct Task {
  std::shared_ptr<WorkImpl> work;
  RunFn run;
  uint32_t tag = 0;
  BufPtr p2p;  // send/recv: the posted buffer (aborted when the group is destroyed)
  bool is_send = false;
  Signature sig;  // collectives: compared across ranks before the payload moves
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
  WorkPtr collective(OpInfo info, Signature sig, std::vector<Tensor> results, RunFn run);
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
  std::unique_ptr<shm::World> shm_;           // when every rank is on this host
  bool pin_lanes_ = false;  // the ranks saturate this host's cores: see collective()
  std::vector<std::unique_ptr<Lane>> lanes_;  // collectives
  std::unique_ptr<Lane> p2p_;                 // waits for send/recv

  std::mutex issue_mu_;  // sequence numbers follow queue order
  uint64_t next_seq_ = 0, next_p2p_ = 0, next_buffer_ = 0;

  mutable std::mutex broken_mu_;
  std::string broken_;           // the first transport failure
  std::vector<Task> graveyard_;  // aborted send/recv: kept until the contexts close
};

// Gloo writes to its sockets without MSG_NOSIGNAL: a write to a peer that has
// exited raises SIGPIPE, whose default action kills the process. Gloo's device
// thread and the lane threads inherit the mask of the thread that creates them,
// so SIGPIPE is blocked while the group is built (their writes then fail with
// EPIPE, which Gloo reports). The caller's mask is restored afterwards, after
// discarding a SIGPIPE this thread may have raised meanwhile.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeBlocked() {
    sigset_t pending;
    if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE)) {
      timespec zero{0, 0};
      sigtimedwait(&pipe_, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t pipe_, old_;
};

GlooGroup::GlooGroup(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions opts,
                     std::string prefix)
    : store_(std::move(store)),
      rank_(rank),
      size_(size),
      opts_(std::move(opts)),
      prefix_(std::move(prefix)) {
  KILN_CHECK(store_ != nullptr, "[process_group] the store is null");
  KILN_CHECK(size_ >= 1 && rank_ >= 0 && rank_ < size_, "[process_group] rank ", rank_,
             " is out of range for a group of size ", size_);
  KILN_CHECK(opts_.threads >= 1 && opts_.threads <= 64, "[process_group] threads must be in ",
             "[1, 64]; got ", opts_.threads);
  KILN_CHECK(opts_.timeout.count() > 0, "[process_group] timeout must be positive; got ",
             opts_.timeout.count(), " ms");
  KILN_CHECK(!prefix_.empty(), "[process_group] the store prefix is empty");
  where_ = kiln::str("rank ", rank_, "/", size_, ", group '", prefix_, "'");
  debug_ = opts_.debug < 0 ? env::get_int("KILN_DIST_DEBUG", 0) != 0 : opts_.debug != 0;
  SigpipeBlocked no_sigpipe;
  rendezvous();
  for (auto& lane : lanes_) lane->thread = std::thread([this, l = lane.get()] { run_lane(*l); });
  p2p_->thread = std::thread([this] { run_lane(*p2p_); });
}

// Every rank announces itself, with the world size it was given, first: a
// rank that never comes is named, and ranks given different sizes are told
// each rank's size (connectFullMesh itself would only report a store key).
void GlooGroup::rendezvous() {
  const std::string join = prefix_ + "/join/";
  store_->set(join + std::to_string(rank_), detail::to_bytes(std::to_string(size_)));
  auto announced = [&](int r) {
    std::string v = detail::from_bytes(store_->get(join + std::to_string(r)));
    return v.empty() ? std::string("?") : v;
  };
  auto disagree = [&](const std::string& who_said_what) {
    kiln::throw_error(kiln::str("[process_group] ", where_,
                                ": the ranks were given different world sizes: ", who_said_what,
                                " (check WORLD_SIZE or InitOptions::world_size on every rank)"));
  };
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back(join + std::to_string(r));
  try {
    // Rank 0 exists in every world: a rank given a larger size than rank 0
    // learns it now instead of waiting for ranks that never come.
    if (rank_ != 0) {
      store_->wait({keys[0]}, opts_.timeout);
      if (std::string s0 = announced(0); s0 != std::to_string(size_))
        disagree(kiln::str("rank 0 announced ", s0, ", rank ", rank_, " announced ", size_));
    }
    store_->wait(keys, opts_.timeout);
  } catch (const StoreTimeout&) {
    auto missing = detail::missing_ranks(*store_, join, size_);
    std::string sizes;
    for (int r = 0; r < size_; ++r)
      if (std::find(missing.begin(), missing.end(), r) == missing.end())
        sizes += kiln::str(sizes.empty() ? "" : ", ", "rank ", r, ": ", announced(r));
    kiln::throw_error(kiln::str("[process_group] ", where_, ": rank(s) ", missing,
                                " did not join within ", opts_.timeout.count(),
                                " ms (world sizes announced by the ranks that joined: ", sizes,
                                ")"));
  }
  std::string list;
  bool agree = true;
  for (int r = 0; r < size_; ++r) {
    std::string s = r == rank_ ? std::to_string(size_) : announced(r);
    agree = agree && s == std::to_string(size_);
    list += kiln::str(r ? ", " : "", "rank ", r, " announced ", s);
  }
  if (!agree) disagree(list);
  ::gloo::transport::tcp::attr attr;
  if (!opts_.host.empty()) {
    attr.hostname = opts_.host;
  } else if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
    attr.iface = ifname;
  }  // else Gloo uses this machine's hostname
  try {
    device_ = ::gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    kiln::throw_error(kiln::str("[process_group] ", where_, ": cannot open a Gloo TCP device on ",
                                opts_.host.empty() ? "this host's name" : opts_.host, ": ",
                                e.what()));
  }
  for (int i = 0; i < opts_.threads; ++i) {
    lanes_.push_back(std::make_unique<Lane>());
    lanes_.back()->ctx = connect(kiln::str("lane", i));
  }
  p2p_ = std::make_unique<Lane>();
  p2p_->ctx = connect("p2p");
  const bool want_shm = opts_.shm < 0 ? env::get_int("KILN_SHM", 1) != 0 : opts_.shm != 0;
  shm_ =
      shm::World::connect(*store_, prefix_, rank_, size_, opts_.threads, want_shm, opts_.timeout);
  if (shm_)
    for (size_t i = 0; i < lanes_.size(); ++i) lanes_[i]->shm = &shm_->channel(int(i));
  pin_lanes_ = shm_ && unsigned(size_) >= std::thread::hardware_concurrency();
}

CtxPtr GlooGroup::connect(const std::string& name) {
  auto ctx = std::make_shared<::gloo::rendezvous::Context>(rank_, size_);
  ctx->setTimeout(opts_.timeout);
  GlooStore adapter(store_, kiln::str(prefix_, "/", name, "/"));
  try {
    ctx->connectFullMesh(adapter, device_);
  } catch (const std::exception& e) {  // kiln::Error from the store, or Gloo's own
    kiln::throw_error(
        kiln::str("[process_group] ", where_, ": Gloo rendezvous (", name, ") failed: ", e.what()));
  }
  return ctx;
}

GlooGroup::~GlooGroup() {
  // Queued ops fail; a running collective ends within its timeout; a waiting
  // send/recv is aborted.
  auto stop = [](Lane& lane) {
    std::lock_guard lock(lane.mu);
    lane.stop = true;
    if (lane.current && lane.current->p2p) {
      if (lane.current->is_send) {
        lane.current->p2p->abortWaitSend();
      } else {
        lane.current->p2p->abortWaitRecv();
      }
    }
    lane.cv.notify_all();
  };
  for (auto& lane : lanes_) stop(*lane);
  if (p2p_) stop(*p2p_);
  for (auto& lane : lanes_)
    if (lane->thread.joinable()) lane->thread.join();
  if (p2p_ && p2p_->thread.joinable()) p2p_->thread.join();
  // Close every connection before freeing the buffers of aborted transfers.
  lanes_.clear();
  p2p_.reset();
  device_.reset();
  graveyard_.clear();
  shm_.reset();  // peers still waiting for this rank fail at once
}

std::string GlooGroup::broken() const {
  std::lock_guard lock(broken_mu_);
  return broken_;
}

void GlooGroup::run_lane(Lane& lane) {
  for (;;) {
    Task t;
    bool stopping = false;
    {
      std::unique_lock lock(lane.mu);
      lane.cv.wait(lock, [&] { return lane.stop || !lane.queue.empty(); });
      if (lane.queue.empty()) return;
      t = std::move(lane.queue.front());
      lane.queue.pop_front();
      stopping = lane.stop;
      if (!stopping) lane.current = &t;
    }
    bool ok = false;
    if (stopping) {
      t.work->mark_failed(t.work->failure("the process group was destroyed before it ran"));
    } else {
      ok = execute(lane, t);
      std::lock_guard lock(lane.mu);
      lane.current = nullptr;
    }
    // A send/recv that did not complete may still be known to Gloo: keep its
    // buffer and tensor alive until the contexts are closed.
    if (t.p2p && !ok) {
      std::lock_guard lock(broken_mu_);
      graveyard_.push_back(std::move(t));
    }
  }
}

bool GlooGroup::execute(Lane& lane, Task& t) {
  if (std::string b = broken(); !b.empty()) {
    t.work->mark_failed(t.work->failure("the group is unusable after an earlier failure: " + b));
    return false;
  }
  t.work->mark_started();
  std::string why;
  try {
    const auto deadline = Clock::now() + opts_.timeout;
    if (!t.p2p && !lane.shm && size_ > 1) check_signatures(lane.ctx, t.tag, t.sig, deadline);
    t.run(LaneRun{lane.ctx, t.tag, lane.shm, deadline, t.sig});
    t.work->mark_done();
    return true;
  } catch (const detail::MismatchError& e) {
    why = e.what();
  } catch (const Error& e) {
    // Kiln's own (e.g. an aborted wait): the group stays usable, unless the
    // error left a shared-memory channel mid-collective.
    if (!lane.shm) {
      t.work->mark_failed(t.work->failure(e.what()));
      return false;
    }
    why = kiln::str("shared memory: ", e.what());
  } catch (const shm::TransportError& e) {
    why = kiln::str("shared memory: ", e.what());
  } catch (const std::exception& e) {
    why = kiln::str("Gloo: ", e.what());
    if (size_ == 2 && !t.p2p) why += kiln::str(" (peer: rank ", 1 - rank_, ")");
  }
  {
    std::string msg = t.work->failure(why);
    bool first = false;
    {
      std::lock_guard lock(broken_mu_);
      first = broken_.empty();
      if (first) broken_ = msg;
    }
    // Peers waiting for this rank in shared memory fail now, not at their timeout.
    if (shm_) shm_->mark_left();
    // Printed before waiters wake, so the log precedes their error.
    t.work->mark_failed(msg, [&] {
      if (first) detail::print_log(*log_, where_, "a collective failed: " + msg);
    });
  }
  return false;
}

void GlooGroup::check_root(const char* op, int root) const {
  KILN_CHECK(root >= 0 && root < size_, "[", op, "] root ", root, " is out of range for a ",
             "group of size ", size_);
}

WorkPtr GlooGroup::collective(OpInfo info, Signature sig, std::vector<Tensor> results, RunFn run) {
  std::lock_guard lock(issue_mu_);
  info.seq = next_seq_++;
  sig.seq = info.seq;
  if (debug_) {
    auto print = [&] {
      detail::print_log(*log_, where_, kiln::str("KILN_DIST_DEBUG: waiting for ", info.str()));
    };
    try {
      detail::debug_check(*store_, prefix_, rank_, size_, info, opts_.timeout, print);
    } catch (const Error& e) {
      detail::failed_work(info, where_, log_, e.what());  // into the log
      throw;
    }
  }
  uint64_t id = log_->add(info.str());
  auto work = std::make_shared<WorkImpl>(std::move(info), where_, std::move(results), opts_.timeout,
                                         log_, id);
  Lane& lane = *lanes_[work->info().seq % lanes_.size()];
  {
    std::lock_guard l(lane.mu);
    // When the ranks saturate the cores, a lane runs on the core of the thread
    // that issued its collective: its reduction then takes time from this rank
    // only, not from a peer's compute thread (which would make the ranks drift
    // apart and the peer's wait at the end of backward longer).
    if (pin_lanes_) {
      const int cpu = ::sched_getcpu();
      if (cpu >= 0 && cpu != lane.cpu) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (::pthread_setaffinity_np(lane.thread.native_handle(), sizeof set, &set) == 0)
          lane.cpu = cpu;
      }
    }
    lane.queue.push_back(
        Task{work, std::move(run), uint32_t(work->info().seq), nullptr, false, sig});
  }
  lane.cv.notify_one();
  return work;
}

WorkPtr GlooGroup::all_reduce(Tensor t, ReduceOp op) {
  detail::check_cpu_tensor("all_reduce", t);
  detail::check_reducible("all_reduce", t.dtype(), op);
  Millis timeout = opts_.timeout;
  Signature sig = detail::make_signature(CollectiveKind::kAllReduce, 0, t.dtype(),
                                         uint64_t(t.numel()), int(op));
  return collective(
      tensor_op("all_reduce", t, to_string(op)), sig, {t}, [t, op, timeout](const LaneRun& run) {
        if (run.shm) return run.shm->all_reduce({span_of(t)}, t.dtype(), op, run.sig, run.deadline);
        allreduce_raw(run.ctx, run.tag, timeout, t.data_ptr(), size_t(t.numel()), t.dtype(), op);
      });
}

WorkPtr GlooGroup::all_reduce_coalesced(std::vector<Tensor> ts, ReduceOp op) {
  KILN_CHECK(!ts.empty(), "[all_reduce_coalesced] no tensors given");
  int64_t total = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    detail::check_cpu_tensor("all_reduce_coalesced", ts[i]);
    KILN_CHECK(ts[i].dtype() == ts[0].dtype(), "[all_reduce_coalesced] tensor ", i, " is ",
               ts[i].dtype(), " but tensor 0 is ", ts[0].dtype(), "; all must share a dtype");
    total += ts[i].numel();
  }
  detail::check_reducible("all_reduce_coalesced", ts[0].dtype(), op);
  OpInfo info = tensor_op("all_reduce_coalesced", ts[0], to_string(op));
  info.numel = total;
  info.shape = kiln::str("[", total, " in ", ts.size(), " tensors]");
  Millis timeout = opts_.timeout;
  // The same signature as all_reduce of the flat buffer: that is what moves.
  Signature sig = detail::make_signature(CollectiveKind::kAllReduce, 0, ts[0].dtype(),
                                         uint64_t(total), int(op));
  return collective(std::move(info), sig, ts, [ts, op, total, timeout](const LaneRun& run) {
    DType dt = ts[0].dtype();
    if (run.shm) {  // straight from and into the tensors: no flat copy
      std::vector<shm::Span> spans;
      for (const auto& t : ts) spans.push_back(span_of(t));
      return run.shm->all_reduce(spans, dt, op, run.sig, run.deadline);
    }
    Tensor flat = empty({total}, dt);
    std::byte* p = bytes_of(flat);
    for (const auto& t : ts)
      p = static_cast<std::byte*>(std::memcpy(p, bytes_of(t), nbytes(t))) + nbytes(t);
    allreduce_raw(run.ctx, run.tag, timeout, flat.data_ptr(), size_t(total), dt, op);
    p = bytes_of(flat);
    for (const auto& t : ts) {
      std::memcpy(bytes_of(t), p, nbytes(t));
      p += nbytes(t);
    }
  });
}

// The copy into dst runs on the lane; over shared memory it is fused with the
// reduction (shm::Channel::all_reduce_into).
WorkPtr GlooGroup::all_reduce_into(std::vector<Tensor> srcs, Tensor dst, ReduceOp op) {
  detail::check_all_reduce_into(srcs, dst);
  detail::check_cpu_tensor("all_reduce_into", dst, "dst");
  detail::check_reducible("all_reduce_into", dst.dtype(), op);
  Millis timeout = opts_.timeout;
  Signature sig = detail::make_signature(CollectiveKind::kAllReduce, 0, dst.dtype(),
                                         uint64_t(dst.numel()), int(op));
  return collective(tensor_op("all_reduce_into", dst, to_string(op)), sig, {dst},
                    [srcs, dst, op, timeout](const LaneRun& run) {
                      std::vector<shm::Span> spans;
                      for (const auto& s : srcs) spans.push_back(span_of(s));
                      if (run.shm)
                        return run.shm->all_reduce_into(spans, span_of(dst), dst.dtype(), op,
                                                        run.sig, run.deadline);
                      std::byte* p = bytes_of(dst);
                      for (const auto& s : spans) {
                        if (s.data != p) std::memcpy(p, s.data, s.bytes);
                        p += s.bytes;
                      }
                      allreduce_raw(run.ctx, run.tag, timeout, dst.data_ptr(), size_t(dst.numel()),
                                    dst.dtype(), op);
                    });
}

WorkPtr GlooGroup::broadcast(Tensor t, int root) {
  detail::check_cpu_tensor("broadcast", t);
  check_root("broadcast", root);
  Millis timeout = opts_.timeout;
  Signature sig = detail::make_signature(CollectiveKind::kBroadcast, 0, t.dtype(),
                                         uint64_t(t.numel()), -1, root);
  return collective(tensor_op("broadcast", t, kiln::str("root=", root)), sig, {t},
                    [t, root, timeout](const LaneRun& run) {
                      if (run.shm)
                        return run.shm->broadcast(span_of(t), root, run.sig, run.deadline);
                      if (t.numel() == 0) return;
                      ::gloo::BroadcastOptions o(run.ctx);
                      with_element(t.element_size(), [&](auto e) {
                        using T = decltype(e);
                        o.setOutput(static_cast<T*>(t.data_ptr()), size_t(t.numel()));
                      });
                      o.setRoot(root);
                      o.setTag(run.tag);
                      o.setTimeout(timeout);
                      ::gloo::broadcast(o);
                    });
}

WorkPtr GlooGroup::reduce(Tensor t, int root, ReduceOp op) {
  detail::check_cpu_tensor("reduce", t);
  detail::check_reducible("reduce", t.dtype(), op);
  check_root("reduce", root);
  Millis timeout = opts_.timeout;
  Signature sig = detail::make_signature(CollectiveKind::kReduce, 0, t.dtype(), uint64_t(t.numel()),
                                         int(op), root);
  return collective(tensor_op("reduce", t, kiln::str(to_string(op), " root=", root)), sig, {t},
                    [t, root, op, timeout](const LaneRun& run) {
                      if (run.shm)
                        return run.shm->reduce(span_of(t), t.dtype(), op, root, run.sig,
                                               run.deadline);
                      if (t.numel() == 0) return;
                      size_t n = size_t(t.numel());
                      bool is_root = run.ctx->rank == root;
                      // Gloo uses the output as scratch on every rank: non-roots keep `t` intact.
                      Tensor out = is_root ? t : empty(t.shape(), t.dtype());
                      ::gloo::ReduceOptions o(run.ctx);
                      with_element(t.element_size(), [&](auto e) {
                        using T = decltype(e);
                        if (!is_root) o.setInput(static_cast<T*>(t.data_ptr()), n);
                        o.setOutput(static_cast<T*>(out.data_ptr()), n);
                      });
                      o.setRoot(root);
                      o.setReduceFunction(reduce_fn(t.dtype(), op));
                      o.setTag(run.tag);
                      o.setTimeout(timeout);
                      ::gloo::reduce(o);
                      if (is_root && op == ReduceOp::kAvg)
                        divide_in_place(t.data_ptr(), t.dtype(), n, run.ctx->size);
                    });
}

WorkPtr GlooGroup::all_gather(std::vector<Tensor> outs, Tensor in) {
  detail::check_cpu_tensor("all_gather", in, "input");
  KILN_CHECK(outs.size() == size_t(size_), "[all_gather] needs one output per rank (", size_,
             "); got ", outs.size());
  for (size_t r = 0; r < outs.size(); ++r) {
    detail::check_cpu_tensor("all_gather", outs[r], "output");
    KILN_CHECK(outs[r].dtype() == in.dtype() && outs[r].numel() == in.numel(),
               "[all_gather] output ", r, " is ", outs[r].dtype(), outs[r].shape(),
               " but the input is ", in.dtype(), in.shape());
  }
  Millis timeout = opts_.timeout;
  Signature sig =
      detail::make_signature(CollectiveKind::kAllGather, 0, in.dtype(), uint64_t(in.numel()));
  OpInfo info = tensor_op("all_gather", in);
  return collective(std::move(info), sig, outs, [outs, in, timeout](const LaneRun& run) {
    size_t n = size_t(in.numel()), b = nbytes(in);
    if (run.shm) {
      std::vector<shm::Span> spans;
      for (const auto& o : outs) spans.push_back(span_of(o));
      return run.shm->all_gather(spans, span_of(in), run.sig, run.deadline);
    }
    if (n == 0) return;
    Tensor flat = empty({int64_t(n) * run.ctx->size}, in.dtype());
    ::gloo::AllgatherOptions o(run.ctx);
    with_element(in.element_size(), [&](auto e) {
      using T = decltype(e);
      o.setInput(static_cast<T*>(in.data_ptr()), n);
      o.setOutput(static_cast<T*>(flat.data_ptr()), n * size_t(run.ctx->size));
    });
    o.setTag(run.tag);
    o.setTimeout(timeout);
    ::gloo::allgather(o);
    for (size_t r = 0; r < outs.size(); ++r)
      std::memcpy(bytes_of(outs[r]), bytes_of(flat) + r * b, b);
  });
}

// Over TCP, built on all_reduce of a copy (Gloo has no options-API
// reduce-scatter): twice the traffic of a ring reduce-scatter, but simple and
// exact. Over shared memory each rank reduces only its own block.
WorkPtr GlooGroup::reduce_scatter(Tensor out, Tensor in, ReduceOp op) {
  detail::check_cpu_tensor("reduce_scatter", out, "output");
  detail::check_cpu_tensor("reduce_scatter", in, "input");
  detail::check_reducible("reduce_scatter", in.dtype(), op);
  KILN_CHECK(out.dtype() == in.dtype() && in.numel() == out.numel() * size_,
             "[reduce_scatter] the input must hold size() = ", size_, " outputs: got input ",
             in.dtype(), in.shape(), " and output ", out.dtype(), out.shape());
  OpInfo info = tensor_op("reduce_scatter", in, to_string(op));
  Millis timeout = opts_.timeout;
  Signature sig = detail::make_signature(CollectiveKind::kReduceScatter, 0, in.dtype(),
                                         uint64_t(in.numel()), int(op));
  return collective(std::move(info), sig, {out}, [out, in, op, timeout](const LaneRun& run) {
    if (run.shm)
      return run.shm->reduce_scatter(span_of(out), span_of(in), in.dtype(), op, run.sig,
                                     run.deadline);
    if (in.numel() == 0) return;
    Tensor tmp = in.clone();
    allreduce_raw(run.ctx, run.tag, timeout, tmp.data_ptr(), size_t(tmp.numel()), tmp.dtype(), op);
    std::memcpy(bytes_of(out), bytes_of(tmp) + size_t(run.ctx->rank) * nbytes(out), nbytes(out));
  });
}

WorkPtr GlooGroup::barrier() {
  OpInfo info;
  info.op = "barrier";
  Millis timeout = opts_.timeout;
  Signature sig = detail::barrier_signature(0);
  return collective(std::move(info), sig, {}, [timeout](const LaneRun& run) {
    if (run.shm) return run.shm->barrier(run.sig, run.deadline);
    ::gloo::BarrierOptions o(run.ctx);
    o.setTag(run.tag);
    o.setTimeout(timeout);
    ::gloo::barrier(o);
  });
}

WorkPtr GlooGroup::point_to_point(const char* op, Tensor t, int peer, int tag, bool is_send) {
  detail::check_cpu_tensor(op, t);
  const char* role = is_send ? "dst" : "src";
  KILN_CHECK(peer >= 0 && peer < size_ && peer != rank_, "[", op, "] ", role, " ", peer,
             " must be another rank of the group (size ", size_, ", this rank ", rank_, ")");
  KILN_CHECK(tag >= 0, "[", op, "] tag must be >= 0; got ", tag);
  OpInfo info = tensor_op(op, t, kiln::str(role, "=", peer, " tag=", tag));
  std::lock_guard lock(issue_mu_);
  info.seq = next_p2p_++;
  if (std::string b = broken(); !b.empty())
    return detail::failed_work(info, where_, log_,
                               kiln::str("[", op, "] ", info.str(), " failed on ", where_,
                                         ": the group is unusable after an earlier failure: ", b));
  uint64_t id = log_->add(info.str());
  auto work =
      std::make_shared<WorkImpl>(info, where_, std::vector<Tensor>{t}, opts_.timeout, log_, id);
  if (t.numel() == 0) {
    work->mark_done();
    return work;
  }
  BufPtr buf;
  try {
    buf = p2p_->ctx->createUnboundBuffer(t.data_ptr(), nbytes(t));
    if (is_send) {
      buf->send(peer, uint64_t(tag));
    } else {
      buf->recv(peer, uint64_t(tag));
    }
  } catch (const std::exception& e) {
    std::string msg = work->failure(kiln::str("Gloo: ", e.what(), " (peer: rank ", peer, ")"));
    {
      std::lock_guard g(broken_mu_);
      if (broken_.empty()) broken_ = msg;
    }
    work->mark_failed(msg);
    return work;
  }
  Millis timeout = opts_.timeout;
  RunFn wait = [buf, is_send, timeout, peer](const LaneRun&) {
    bool ok = false;
    try {
      ok = is_send ? buf->waitSend(nullptr, timeout) : buf->waitRecv(nullptr, timeout);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw std::runtime_error(kiln::str(e.what(), " (peer: rank ", peer, ")"));
    }
    if (!ok) kiln::throw_error("aborted: the process group was destroyed");
  };
  {
    std::lock_guard l(p2p_->mu);
    p2p_->queue.push_back(Task{work, std::move(wait), 0, buf, is_send, {}});
  }
  p2p_->cv.notify_one();
  return work;
}

Tensor GlooGroup::make_comm_buffer(int64_t numel, DType dtype) {
  KILN_CHECK(numel >= 0, "[make_comm_buffer] numel must be >= 0; got ", numel);
  uint64_t id = 0;
  {
    std::lock_guard lock(issue_mu_);
    id = next_buffer_++;
  }
  if (!shm_ || numel == 0) return zeros({numel}, dtype);
  const size_t bytes = size_t(numel) * dtype_size(dtype);
  auto buf =
      shm_->make_symmetric(*store_, kiln::str(prefix_, "/buffer/", id), bytes, opts_.timeout);
  if (!buf) return zeros({numel}, dtype);
  std::byte* own = buf->bases[size_t(rank_)];              // zeroed by ftruncate
  return from_blob(own, {numel}, dtype, [buf](void*) {});  // unmapped with the last view
}

WorkPtr GlooGroup::send(Tensor t, int dst, int tag) {
  return point_to_point("send", std::move(t), dst, tag, true);
}

WorkPtr GlooGroup::recv(Tensor t, int src, int tag) {
  return point_to_point("recv", std::move(t), src, tag, false);
}

}  // namespace

}  // namespace gloo_backend

std::shared_ptr<ProcessGroup> make_gloo_group(std::shared_ptr<Store> store, int rank, int size,
                                              ProcessGroupOptions options,
                                              const std::string& prefix) {
  return std::make_shared<gloo_backend::GlooGroup>(std::move(store), rank, size, std::move(options),
                                                   prefix);
}

}  // namespace kiln::dist
