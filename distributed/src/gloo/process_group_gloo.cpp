// The Gloo backend: CPU tensors over TCP.
//
// Threads and contexts. Collective n runs on worker lane n % threads, and each
// lane owns its own Gloo context (its own TCP connections), so two collectives
// in flight never share a socket and one lane's FIFO order is the same on
// every rank (the ordering contract makes it so). The tag is the collective's
// sequence number, which keeps Gloo's slots apart even within one lane.
// Send/recv are posted on the caller's thread on a separate context (they are
// outside the collective order), after a header exchange that makes a send
// and recv that disagree fail instead of aborting in Gloo; sends are waited
// for by one more lane in posting order, each recv on a thread of its own
// (process_group_gloo_p2p.cpp).
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

#include "gloo_group.h"
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
  debug_ = opts_.debug < 0 ? env::get_flag("KILN_DIST_DEBUG", false) : opts_.debug != 0;
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
  const bool want_shm = opts_.shm < 0 ? env::get_flag("KILN_SHM", true) : opts_.shm != 0;
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
  {
    std::unique_lock lock(recvs_mu_);
    for (auto& r : recvs_) r->abort();
    recvs_cv_.wait(lock, [&] { return recvs_.empty(); });
  }
  auto stop = [](Lane& lane) {
    std::lock_guard lock(lane.mu);
    lane.stop = true;
    if (lane.current && lane.current->p2p) lane.current->p2p->abort();
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
    GlooTransport tcp(lane.ctx, t.tag, opts_.timeout);
    detail::Transport& transport = lane.shm ? static_cast<detail::Transport&>(*lane.shm) : tcp;
    t.run(LaneRun{transport, deadline, t.sig});
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
  } catch (const detail::TransportError& e) {
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

WorkPtr GlooGroup::collective(CollectiveInfo info, Signature sig, std::vector<Tensor> results,
                              RunFn run) {
  std::lock_guard lock(issue_mu_);
  info.seq = next_seq_++;
  sig.seq = info.seq;
  if (debug_) {
    detail::debug_check_logged(*store_, prefix_, rank_, size_, info, opts_.timeout, log_, where_);
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
    lane.queue.push_back(Task{work, std::move(run), uint32_t(work->info().seq), nullptr, sig});
  }
  lane.cv.notify_one();
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

}  // namespace gloo_backend

std::shared_ptr<ProcessGroup> make_gloo_group(std::shared_ptr<Store> store, int rank, int size,
                                              ProcessGroupOptions options,
                                              const std::string& prefix) {
  return std::make_shared<gloo_backend::GlooGroup>(std::move(store), rank, size, std::move(options),
                                                   prefix);
}

}  // namespace kiln::dist
