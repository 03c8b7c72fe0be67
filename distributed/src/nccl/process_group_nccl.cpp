// The NCCL process group (process_group_nccl.h has the design): set-up, the
// launch protocol on the communication stream, and the watchdog.
#include "process_group_nccl.h"

#include <cstring>
#include <utility>

#include "kernels/cuda/driver.h"
#include "kiln/autograd.h"
#include "kiln/env.h"
#include "kiln/error.h"
#include "kiln/functional.h"
#include "nccl_emulated.h"

namespace kiln::dist::nccl_backend {
namespace {

// The Work of an NCCL collective: a WorkImpl that the watchdog completes, and
// the completion event that wait() orders the caller's stream after. A
// captured one's wait joins the communication stream back into the capture
// while it runs; after, the graph's replays order its work themselves.
class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<WorkImpl> impl, cuda::Event done, int device, bool captured = false)
      : impl_(std::move(impl)), done_(std::move(done)), device_(device), captured_(captured) {}
  void wait(detail::Millis timeout) override {
    if (captured_) {
      if (cuda::capturing_graph()) cuda::current_stream(device_).wait(done_);
      return;
    }
    if (timeout.count() >= 0 || impl_->is_completed()) {
      impl_->wait(timeout);  // blocks the host; throws if it failed
      if (timeout.count() < 0) return;
    }
    cuda::current_stream(device_).wait(done_);
  }
  bool is_completed() const override { return impl_->is_completed(); }
  std::vector<Tensor> result() const override { return impl_->result(); }
  Clock::time_point start_time() const override { return impl_->start_time(); }
  Clock::time_point end_time() const override { return impl_->end_time(); }
  std::string describe() const override { return impl_->describe(); }

 private:
  std::shared_ptr<WorkImpl> impl_;
  cuda::Event done_;
  int device_;
  bool captured_;
};

// A group's watch on the replays of a graph that holds its collectives.
class NcclReplayWatch final : public cuda::ReplayWatch {
 public:
  explicit NcclReplayWatch(std::shared_ptr<NcclGroup::Link> link) : link_(std::move(link)) {}
  void add(const std::string& collective) {
    what_ += what_.empty() ? "a replayed CUDA graph's collectives: " : ", ";
    what_ += collective;
  }
  void before_launch() override {
    std::lock_guard lock(link_->mu);
    KILN_CHECK(link_->group, "[nccl] ", what_, ": their process group was destroyed");
    if (std::string b = link_->group->broken(); !b.empty())
      throw Error(
          kiln::str("[nccl] ", what_, ": the group is unusable after an earlier failure: ", b));
  }
  void after_launch(void* stream) override {
    std::lock_guard lock(link_->mu);
    if (link_->group) link_->group->watch_replay(stream, what_);
  }

 private:
  std::shared_ptr<NcclGroup::Link> link_;
  std::string what_;
};

using detail::tensor_op;

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i64:
      return ncclInt64;
    case DType::i32:
      return ncclInt32;
    case DType::u8:
    case DType::b8:  // moved, never reduced (check_reducible)
      return ncclUint8;
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kProduct:
      return ncclProd;
  }
  return ncclSum;
}

void* ptr(const Tensor& t) {
  return t.data_ptr();
}

// The NCCL of the device: the emulated one on the emulated device.
const nccl::Nccl& library() {
  KILN_CHECK(cuda::is_available(), "[nccl] CUDA is unavailable: ", cuda::unavailable_reason());
  return cuda::driver().emulated ? nccl::emulated_lib() : nccl::lib();
}

}  // namespace

std::string NcclGroup::nccl_error(ncclResult_t r) const {
  std::string s = kiln::str(lib_->ncclGetErrorString(r), " (", int(r), ")");
  const char* last = lib_->ncclGetLastError(comm_);
  if (last && *last) s += kiln::str(": ", last);
  return s;
}

NcclGroup::NcclGroup(std::shared_ptr<Store> store, int rank, int size, int device,
                     ProcessGroupOptions opts, std::string prefix)
    : store_(std::move(store)),
      rank_(rank),
      size_(size),
      device_(device),
      opts_(std::move(opts)),
      prefix_(std::move(prefix)) {
  constexpr const char* kOp = "[nccl] ";
  KILN_CHECK(rank >= 0 && rank < size, kOp, "rank ", rank, " is out of range for size ", size);
  debug_ = opts_.debug < 0 ? env::get_flag("KILN_DIST_DEBUG", false) : opts_.debug != 0;
  lib_ = &library();
  // The emulated device is one device that every rank of the host shares.
  if (cuda::driver().emulated) device_ = device = 0;
  where_ = kiln::str("rank ", rank_, "/", size_, ", group '", prefix_, "', nccl on cuda:", device);
  const int count = cuda::device_count();
  KILN_CHECK(device >= 0 && device < count, kOp, "device cuda:", device, " does not exist (", count,
             " CUDA device(s)); LOCAL_RANK picks the device");
  cuda::set_device(device);  // NCCL binds the communicator to the current device
  ncclUniqueId id{};
  const std::string key = prefix_ + "/nccl/unique_id";
  if (rank_ == 0) {
    ncclResult_t r = lib_->ncclGetUniqueId(&id);
    KILN_CHECK(r == ncclSuccess, kOp, "ncclGetUniqueId failed: ", nccl_error(r));
    const auto* from = reinterpret_cast<const uint8_t*>(id.internal);
    store_->set(key, Bytes(from, from + sizeof id.internal));
  } else {
    try {
      store_->wait({key}, opts_.timeout);
    } catch (const StoreTimeout&) {
      throw Error(kiln::str(kOp, "rank ", rank_, " got no unique id from rank 0 within ",
                            opts_.timeout.count(), " ms (group '", prefix_, "')"));
    }
    Bytes b = store_->get(key);
    KILN_CHECK(b.size() == sizeof id.internal, kOp, "the unique id has ", b.size(), " bytes");
    std::memcpy(id.internal, b.data(), b.size());
  }
  if (lib_ == &nccl::emulated_lib()) nccl::set_emulated_bootstrap(store_, opts_.timeout);
  ncclResult_t r = lib_->ncclCommInitRank(&comm_, size_, id, rank_);
  if (lib_ == &nccl::emulated_lib()) nccl::set_emulated_bootstrap(nullptr, opts_.timeout);
  if (r != ncclSuccess) {
    const char* last = lib_->ncclGetLastError(nullptr);
    throw Error(kiln::str(kOp, "ncclCommInitRank failed on ", where_, ": ",
                          lib_->ncclGetErrorString(r), last && *last ? ": " : "",
                          last ? last : ""));
  }
  stream_ = std::make_unique<cuda::Stream>(device, -1);  // high priority
  link_->group = this;
  watchdog_ = std::thread([this] { watchdog(); });
}

NcclGroup::~NcclGroup() {
  {
    std::lock_guard lock(link_->mu);
    link_->group = nullptr;
  }
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  watchdog_.join();
  bool aborted = false;
  {
    std::lock_guard lock(mu_);
    aborted = aborted_;
  }
  if (!aborted) {
    release_graphs("the NCCL process group of the graph's collectives was destroyed");
    lib_->ncclCommDestroy(comm_);  // runs the queued collectives first
  }
  std::deque<Pending> left;
  {
    std::lock_guard lock(mu_);
    left.swap(pending_);
  }
  for (Pending& p : left) {
    if (p.done.query())
      p.work->mark_done();
    else
      p.work->mark_failed(p.work->failure("the group was destroyed before it completed"));
  }
}

std::string NcclGroup::broken() const {
  std::lock_guard lock(mu_);
  return broken_;
}

void NcclGroup::check_tensor(const char* op, const Tensor& t, const char* name) const {
  KILN_CHECK(t.defined(), "[", op, "] ", name, " is undefined");
  KILN_CHECK(!t.is_symbolic(), "[", op, "] ", name,
             " is symbolic (collectives cannot run while tracing)");
  KILN_CHECK(t.device() == Device::cuda(device_), "[", op, "] ", name, " is on ", t.device(),
             "; this nccl group takes tensors on cuda:", device_);
  KILN_CHECK(t.is_contiguous(), "[", op, "] ", name, " must be contiguous; got shape ", t.shape(),
             " strides ", t.strides());
}

void NcclGroup::check_root(const char* op, int root) const {
  KILN_CHECK(root >= 0 && root < size_, "[", op, "] root ", root, " is out of range for a ",
             "group of size ", size_);
}

WorkPtr NcclGroup::enqueue(CollectiveInfo info, std::vector<Tensor> results,
                           std::vector<Tensor> keep, const Launch& launch, bool ordered) {
  std::lock_guard issue(issue_mu_);
  info.seq = ordered ? next_seq_++ : next_p2p_++;
  if (debug_ && ordered) {
    detail::debug_check_logged(*store_, prefix_, rank_, size_, info, opts_.timeout, log_, where_);
  }
  const uint64_t id = log_->add(info.str());
  auto work = std::make_shared<WorkImpl>(std::move(info), where_, std::move(results), opts_.timeout,
                                         log_, id);
  cuda::Event done;
  if (std::string b = broken(); !b.empty()) {
    work->mark_failed(work->failure("the group is unusable after an earlier failure: " + b));
    return std::make_shared<NcclWork>(work, done, device_);
  }
  if (cuda::capturing_graph()) return enqueue_captured(std::move(work), std::move(keep), launch);
  // After the work queued on the caller's stream so far (the inputs' kernels).
  cuda::Event ready;
  ready.record(cuda::current_stream(device_));
  stream_->wait(ready);
  ncclResult_t r = ncclSuccess;
  {
    cuda::StreamGuard on_comm(*stream_);  // staging copies run on the communication stream
    r = launch(static_cast<cudaStream_t>(stream_->handle()), keep);
  }
  if (r != ncclSuccess) {
    break_group(work->failure(kiln::str("NCCL refused it: ", nccl_error(r))), work);
    return std::make_shared<NcclWork>(work, done, device_);
  }
  done.record(*stream_);
  for (const Tensor& t : keep)
    if (t.defined() && t.numel() > 0) cuda::record_stream(t, *stream_);
  {
    std::lock_guard lock(mu_);
    pending_.push_back(Pending{work, done, std::move(keep), Clock::now()});
  }
  cv_.notify_all();
  return std::make_shared<NcclWork>(work, done, device_);
}

WorkPtr NcclGroup::enqueue_captured(std::shared_ptr<WorkImpl> work, std::vector<Tensor> keep,
                                    const Launch& launch) {
  // The events and tensors live as long as the graph (the emulated device
  // replays its event records; real CUDA turns them into edges).
  struct Held {
    cuda::Event ready, done;
    std::vector<Tensor> keep;
  };
  auto held = std::make_shared<Held>();
  held->ready.record(cuda::current_stream(device_));
  stream_->wait(held->ready);  // forks the communication stream into the capture
  ncclResult_t r = ncclSuccess;
  {
    cuda::StreamGuard on_comm(*stream_);
    r = launch(static_cast<cudaStream_t>(stream_->handle()), keep);
  }
  // The capture fails (the step runs plainly); the group stays usable.
  if (r != ncclSuccess)
    throw Error(work->failure(
        kiln::str("NCCL refused it while a CUDA graph was captured: ", nccl_error(r))));
  held->done.record(*stream_);
  held->keep = std::move(keep);
  cuda::Event done = held->done;
  cuda::keep_for_graph(held);
  std::shared_ptr<NcclReplayWatch> made;  // this capture's first collective of the group
  auto& watch = static_cast<NcclReplayWatch&>(cuda::replay_watch(this, [&] {
    made = std::make_shared<NcclReplayWatch>(link_);
    return made;
  }));
  watch.add(work->info().str());
  if (made) {
    std::lock_guard lock(mu_);
    std::erase_if(watches_, [](const auto& w) { return w.expired(); });
    watches_.push_back(made);
  }
  work->mark_started();
  work->mark_done();  // recorded; its runs are the replays, watched as a whole
  return std::make_shared<NcclWork>(work, done, device_, true);
}

void NcclGroup::watch_replay(void* stream, const std::string& what) {
  CollectiveInfo info;
  info.op = "graph replay";
  info.detail = what;
  auto work = std::make_shared<WorkImpl>(std::move(info), where_, std::vector<Tensor>{},
                                         opts_.timeout, log_, log_->add(what));
  // The graph runner launches on the current stream.
  const cuda::Stream current = cuda::current_stream(device_);
  KILN_CHECK(current.handle() == stream, "[nccl] a graph was replayed on another stream than ",
             "the current one");
  cuda::Event done;
  done.record(current);
  {
    std::lock_guard lock(mu_);
    pending_.push_back(Pending{work, done, {}, Clock::now()});
  }
  cv_.notify_all();
}

void NcclGroup::release_graphs(const std::string& why) {
  std::vector<std::shared_ptr<cuda::ReplayWatch>> live;
  {
    std::lock_guard lock(mu_);
    for (const auto& w : watches_)
      if (auto l = w.lock()) live.push_back(std::move(l));
    watches_.clear();
  }
  for (const auto& w : live) w->release(why);
}

void NcclGroup::break_group(const std::string& why, const std::shared_ptr<WorkImpl>& first) {
  std::deque<Pending> failed;
  bool abort = false;
  {
    std::lock_guard lock(mu_);
    if (broken_.empty()) broken_ = why;
    failed.swap(pending_);
    abort = !aborted_;
    aborted_ = true;
  }
  detail::print_log(*log_, where_, "a collective failed: " + why);
  // Before the Works fail: the emulated abort lets the streams behind them run.
  if (abort) {
    release_graphs("the NCCL group of the graph's collectives failed: " + why);
    lib_->ncclCommAbort(comm_);
  }
  if (first) first->mark_failed(why);
  for (Pending& p : failed)
    if (p.work != first)
      p.work->mark_failed(p.work->failure("an earlier collective failed: " + why));
}

void NcclGroup::watchdog() {
  cuda::set_device(device_);  // event queries need the device's context on this thread
  std::unique_lock lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(1));
    if (pending_.empty() || aborted_) continue;
    // The asynchronous error first: a failed collective's event completes too
    // (the emulated NCCL lets the stream go on), so it must not count as done.
    ncclResult_t async = ncclSuccess;
    lib_->ncclCommGetAsyncError(comm_, &async);
    // Completed collectives leave in issue order (one stream runs them in order).
    while (async == ncclSuccess && !pending_.empty()) {
      Pending& p = pending_.front();
      if (p.work->start_time() == Clock::time_point{}) p.work->mark_started();
      if (!p.done.query()) break;
      // An error set before the event completed belongs to this collective.
      lib_->ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess) break;
      {
        Pending done = std::move(p);
        pending_.pop_front();
        lock.unlock();
        done.work->mark_done();
      }  // the tensors are released off the lock
      lock.lock();
    }
    if (pending_.empty()) continue;
    std::string why;
    std::shared_ptr<WorkImpl> first = pending_.front().work;
    const auto waited = Clock::now() - pending_.front().issued;
    if (async != ncclSuccess && async != ncclInProgress) {
      why = first->failure(kiln::str("NCCL reported an asynchronous error: ", nccl_error(async)));
    } else if (waited > opts_.timeout) {
      why = first->failure(kiln::str("did not complete within the group's timeout (",
                                     opts_.timeout.count(),
                                     " ms); a peer may have failed or "
                                     "issued different collectives; the communicator is aborted"));
    }
    if (why.empty()) continue;
    lock.unlock();
    break_group(why, first);
    lock.lock();
  }
}

// ---------------- the collectives ----------------

WorkPtr NcclGroup::all_reduce(Tensor t, ReduceOp op) {
  check_tensor("all_reduce", t);
  detail::check_reducible("all_reduce", t.dtype(), op);
  return enqueue(tensor_op("all_reduce", t, to_string(op)), {t}, {t},
                 [&](cudaStream_t s, std::vector<Tensor>&) {
                   return lib_->ncclAllReduce(ptr(t), ptr(t), size_t(t.numel()),
                                              nccl_type(t.dtype()), nccl_op(op), comm_, s);
                 });
}

// One flat buffer on the communication stream: copied in, reduced, copied out.
WorkPtr NcclGroup::all_reduce_coalesced(std::vector<Tensor> ts, ReduceOp op) {
  CollectiveInfo info = detail::coalesced_info(
      ts, op, [this](const char* name, const Tensor& t) { check_tensor(name, t); });
  const int64_t total = info.numel;
  return enqueue(std::move(info), ts, ts, [&](cudaStream_t s, std::vector<Tensor>& keep) {
    NoGradGuard ng;
    Tensor flat = zeros({total}, ts[0].dtype(), Device::cuda(device_));
    int64_t off = 0;
    for (const Tensor& t : ts) {
      flat.narrow(0, off, t.numel()).copy_(t.reshape({t.numel()}));
      off += t.numel();
    }
    ncclResult_t r = lib_->ncclAllReduce(ptr(flat), ptr(flat), size_t(total),
                                         nccl_type(flat.dtype()), nccl_op(op), comm_, s);
    off = 0;
    for (const Tensor& t : ts) {
      t.reshape({t.numel()}).copy_(flat.narrow(0, off, t.numel()));
      off += t.numel();
    }
    keep.push_back(flat);
    return r;
  });
}

WorkPtr NcclGroup::broadcast(Tensor t, int root) {
  check_tensor("broadcast", t);
  check_root("broadcast", root);
  return enqueue(tensor_op("broadcast", t, kiln::str("root=", root)), {t}, {t},
                 [&](cudaStream_t s, std::vector<Tensor>&) {
                   return lib_->ncclBroadcast(ptr(t), ptr(t), size_t(t.numel()),
                                              nccl_type(t.dtype()), root, comm_, s);
                 });
}

WorkPtr NcclGroup::reduce(Tensor t, int root, ReduceOp op) {
  check_tensor("reduce", t);
  check_root("reduce", root);
  detail::check_reducible("reduce", t.dtype(), op);
  return enqueue(tensor_op("reduce", t, kiln::str(to_string(op), " root=", root)), {t}, {t},
                 [&](cudaStream_t s, std::vector<Tensor>&) {
                   return lib_->ncclReduce(ptr(t), ptr(t), size_t(t.numel()), nccl_type(t.dtype()),
                                           nccl_op(op), root, comm_, s);
                 });
}

// NCCL gathers into one buffer: a flat one, then copied into the outputs.
WorkPtr NcclGroup::all_gather(std::vector<Tensor> outs, Tensor in) {
  check_tensor("all_gather", in, "input");
  KILN_CHECK(int(outs.size()) == size_, "[all_gather] needs ", size_, " output tensors (one per ",
             "rank); got ", outs.size());
  for (const Tensor& o : outs) {
    check_tensor("all_gather", o, "output");
    KILN_CHECK(o.dtype() == in.dtype() && o.numel() == in.numel(), "[all_gather] every output ",
               "must match the input (", in.dtype(), ", ", in.numel(), " elements); got ",
               o.dtype(), ", ", o.numel());
  }
  std::vector<Tensor> used = outs;
  used.push_back(in);
  return enqueue(
      tensor_op("all_gather", in), outs, used, [&](cudaStream_t s, std::vector<Tensor>& keep) {
        NoGradGuard ng;
        const int64_t n = in.numel();
        Tensor flat = zeros({n * size_}, in.dtype(), Device::cuda(device_));
        ncclResult_t r =
            lib_->ncclAllGather(ptr(in), ptr(flat), size_t(n), nccl_type(in.dtype()), comm_, s);
        for (int i = 0; i < size_; ++i)
          outs[size_t(i)].reshape({n}).copy_(flat.narrow(0, i * n, n));
        keep.push_back(flat);
        return r;
      });
}

WorkPtr NcclGroup::reduce_scatter(Tensor out, Tensor in, ReduceOp op) {
  check_tensor("reduce_scatter", out, "output");
  check_tensor("reduce_scatter", in, "input");
  detail::check_reducible("reduce_scatter", in.dtype(), op);
  KILN_CHECK(out.dtype() == in.dtype() && in.numel() == out.numel() * size_,
             "[reduce_scatter] the input must hold size() * output.numel() = ", size_, " * ",
             out.numel(), " elements of the output's dtype ", out.dtype(), "; got ", in.numel(),
             " of ", in.dtype());
  CollectiveInfo info = tensor_op("reduce_scatter", in, to_string(op));
  return enqueue(std::move(info), {out}, {out, in}, [&](cudaStream_t s, std::vector<Tensor>&) {
    return lib_->ncclReduceScatter(ptr(in), ptr(out), size_t(out.numel()), nccl_type(in.dtype()),
                                   nccl_op(op), comm_, s);
  });
}

// An all-reduce of one element, as PyTorch's NCCL barrier.
WorkPtr NcclGroup::barrier() {
  CollectiveInfo info;
  info.op = "barrier";
  Tensor one = zeros({1}, DType::f32, Device::cuda(device_));
  return enqueue(std::move(info), {}, {one}, [&](cudaStream_t s, std::vector<Tensor>&) {
    return lib_->ncclAllReduce(ptr(one), ptr(one), 1, ncclFloat32, ncclSum, comm_, s);
  });
}

WorkPtr NcclGroup::send(Tensor t, int dst, int tag) {
  check_tensor("send", t);
  KILN_CHECK(dst >= 0 && dst < size_ && dst != rank_, "[send] dst ", dst, " is out of range ",
             "or this rank (", rank_, ") in a group of size ", size_);
  CollectiveInfo info = tensor_op("send", t, kiln::str("dst=", dst, " tag=", tag));
  return enqueue(
      std::move(info), {t}, {t},
      [&](cudaStream_t s, std::vector<Tensor>&) {
        return lib_->ncclSend(ptr(t), size_t(t.numel()) * t.element_size(), ncclUint8, dst, comm_,
                              s);
      },
      false);
}

WorkPtr NcclGroup::recv(Tensor t, int src, int tag) {
  check_tensor("recv", t);
  KILN_CHECK(src >= 0 && src < size_ && src != rank_, "[recv] src ", src, " is out of range ",
             "or this rank (", rank_, ") in a group of size ", size_);
  CollectiveInfo info = tensor_op("recv", t, kiln::str("src=", src, " tag=", tag));
  return enqueue(
      std::move(info), {t}, {t},
      [&](cudaStream_t s, std::vector<Tensor>&) {
        return lib_->ncclRecv(ptr(t), size_t(t.numel()) * t.element_size(), ncclUint8, src, comm_,
                              s);
      },
      false);
}

Tensor NcclGroup::make_comm_buffer(int64_t numel, DType dtype) {
  KILN_CHECK(numel >= 0, "[make_comm_buffer] numel must be >= 0; got ", numel);
  return zeros({numel}, dtype, Device::cuda(device_));
}

}  // namespace kiln::dist::nccl_backend

namespace kiln::dist {

std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<Store> store, int rank, int size,
                                              int device, ProcessGroupOptions options,
                                              const std::string& prefix) {
  return std::make_shared<nccl_backend::NcclGroup>(std::move(store), rank, size, device,
                                                   std::move(options), prefix);
}

}  // namespace kiln::dist
