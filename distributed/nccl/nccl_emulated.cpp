// The emulated NCCL (nccl_emulated.h): communicators whose collectives run on
// a thread of their own through the shared-memory transport, in the order of
// the streams they were issued on, over the host addresses where the emulated
// device keeps its buffers (cuda::emulated_host_address).
#include "nccl_emulated.h"

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/cuda/driver.h"
#include "kernels/cuda/pocl_driver.h"
#include "kiln/error.h"
#include "shm/shm_world.h"

namespace kiln::dist::nccl {
namespace {

using detail::CollectiveKind;
using detail::Span;
using Millis = std::chrono::milliseconds;

constexpr char kMagic[8] = {'k', 'i', 'l', 'n', 'e', 'm', 'u', '1'};
constexpr size_t kIdBytes = 16;  // random bytes after the magic

std::mutex g_mu;  // guards the last error without a communicator
std::string g_last;
// The bootstrap of this thread's next ncclCommInitRank (per thread: ranks may
// be threads of one process, each creating its group).
thread_local std::shared_ptr<Store> t_store;
thread_local Millis t_timeout{300000};

ncclResult_t global_error(ncclResult_t r, const std::string& why) {
  std::lock_guard lock(g_mu);
  g_last = why;
  return r;
}

// What a queued op does on the communicator's thread, before `deadline`.
struct Comm;
using RunFn = std::function<void(Comm&, Clock::time_point deadline)>;

struct Op {
  CUevent ready = nullptr;  // recorded on the stream: the op's inputs are written
  void* gate = nullptr;     // the stream's later work waits for it
  RunFn run;
};

struct Comm {
  int rank = 0, size = 1;
  std::string prefix;  // the store keys of this communicator
  std::shared_ptr<Store> store;
  Millis timeout{300000};
  std::unique_ptr<shm::World> world;  // size >= 2

  std::mutex mu;
  std::condition_variable cv;
  std::deque<Op> queue;
  bool stop = false, abort = false, exited = false;
  ncclResult_t error = ncclSuccess;
  std::string message;

  // Captured calls of this communicator that live CUDA graphs hold: real
  // NCCL's ncclCommDestroy and ncclCommAbort wait until those are destroyed.
  std::atomic<int> graphs{0};

  // The thread's own state.
  uint64_t seq = 0;
  std::map<int, uint64_t> sent, received;

  void fail(ncclResult_t r, const std::string& why) {
    {
      std::lock_guard lock(mu);
      if (error == ncclSuccess) {
        error = r;
        message = why;
      }
    }
    // Peers waiting for this rank fail now rather than at their deadline.
    if (world) world->mark_left();
  }
  shm::Channel& channel() { return world->channel(0); }
};

// The ncclComm_t handed out: the thread holds the Comm too.
struct Handle {
  std::shared_ptr<Comm> comm;
  std::thread thread;
};

Comm* comm_of(ncclComm_t h) {
  auto* handle = reinterpret_cast<Handle*>(h);
  return handle ? handle->comm.get() : nullptr;
}

// Polls the op's ready event (the stream's earlier work); false if aborted first.
bool wait_ready(Comm& c, CUevent ev) {
  const auto& d = cuda::driver();
  auto pause = std::chrono::microseconds(10);
  for (;;) {
    const CUresult r = d.cuEventQuery(ev);
    if (r != CUDA_ERROR_NOT_READY) return true;  // an error shows in the op's own results
    {
      std::lock_guard lock(c.mu);
      if (c.abort) return false;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(500));
  }
}

void run_comm(std::shared_ptr<Comm> c) {
  for (;;) {
    Op op;
    {
      std::unique_lock lock(c->mu);
      c->cv.wait(lock, [&] { return c->stop || c->abort || !c->queue.empty(); });
      if (c->queue.empty()) break;
      op = std::move(c->queue.front());
      c->queue.pop_front();
    }
    const bool ready = wait_ready(*c, op.ready);
    bool skip = !ready;
    {
      std::lock_guard lock(c->mu);
      skip = skip || c->abort || c->error != ncclSuccess;
    }
    if (!skip) {
      try {
        op.run(*c, Clock::now() + c->timeout);
      } catch (const detail::MismatchError& e) {
        c->fail(ncclInvalidUsage, e.what());
      } catch (const detail::TransportError& e) {
        c->fail(ncclRemoteError, e.what());
      } catch (const std::exception& e) {
        c->fail(ncclSystemError, e.what());
      }
    }
    cuda::emulated_open_gate(op.gate);
    cuda::driver().cuEventDestroy(op.ready);
  }
  std::lock_guard lock(c->mu);
  c->exited = true;
  c->cv.notify_all();
}

ncclResult_t enqueue_now(Comm* c, CUstream s, RunFn run);

// Queues `run` after the work on `stream` so far. On a stream that captures a
// CUDA graph the call becomes a node of the graph instead: each launch of the
// graph queues it then, in order with the graph's other work (as real NCCL's
// captured kernels run with each launch); the graph holds the communicator.
ncclResult_t enqueue(ncclComm_t h, cudaStream_t stream, RunFn run) {
  Comm* c = comm_of(h);
  if (!c) return global_error(ncclInvalidArgument, "the communicator is null");
  const auto s = reinterpret_cast<CUstream>(stream);
  // Counts the graph as holding the communicator while it lives.
  struct GraphRef {
    std::shared_ptr<Comm> comm;
    explicit GraphRef(std::shared_ptr<Comm> c) : comm(std::move(c)) { ++comm->graphs; }
    ~GraphRef() { --comm->graphs; }
  };
  auto held = std::make_shared<GraphRef>(reinterpret_cast<Handle*>(h)->comm);
  const bool captured = cuda::emulated_record_launch(s, [held, run](CUstream at) {
    // An aborted or destroyed communicator fails the launch (the graph
    // runner raises it); real NCCL's behaviour is undefined there.
    if (ncclResult_t r = enqueue_now(held->comm.get(), at, run))
      return r == ncclInvalidUsage ? CUDA_ERROR_ILLEGAL_STATE : CUDA_ERROR_LAUNCH_FAILED;
    return CUDA_SUCCESS;
  });
  return captured ? ncclSuccess : enqueue_now(c, s, std::move(run));
}

ncclResult_t enqueue_now(Comm* c, CUstream s, RunFn run) {
  {
    std::lock_guard lock(c->mu);
    if (c->abort || c->stop) return ncclInvalidUsage;
  }
  const auto& d = cuda::driver();
  Op op;
  op.run = std::move(run);
  if (d.cuEventCreate(&op.ready, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
    return global_error(ncclUnhandledCudaError, "cuEventCreate failed");
  if (d.cuEventRecord(op.ready, s) != CUDA_SUCCESS) {
    d.cuEventDestroy(op.ready);
    return global_error(ncclUnhandledCudaError,
                        "cuEventRecord failed: " + cuda::take_emulated_detail());
  }
  op.gate = cuda::emulated_close_gate(s);
  if (!op.gate) {
    d.cuEventDestroy(op.ready);
    return global_error(ncclUnhandledCudaError,
                        "the stream's gate failed: " + cuda::take_emulated_detail());
  }
  {
    std::lock_guard lock(c->mu);
    c->queue.push_back(std::move(op));
  }
  c->cv.notify_all();
  return ncclSuccess;
}

// The kiln dtype of an NCCL datatype; false for those kiln has no reduction for.
bool dtype_of(ncclDataType_t t, DType& out) {
  switch (t) {
    case ncclFloat32:
      out = DType::f32;
      return true;
    case ncclFloat64:
      out = DType::f64;
      return true;
    case ncclFloat16:
      out = DType::f16;
      return true;
    case ncclBfloat16:
      out = DType::bf16;
      return true;
    case ncclInt64:
      out = DType::i64;
      return true;
    case ncclInt32:
      out = DType::i32;
      return true;
    case ncclUint8:
      out = DType::u8;
      return true;
    default:
      return false;
  }
}

bool op_of(ncclRedOp_t o, ReduceOp& out) {
  switch (o) {
    case ncclSum:
      out = ReduceOp::kSum;
      return true;
    case ncclProd:
      out = ReduceOp::kProduct;
      return true;
    case ncclMax:
      out = ReduceOp::kMax;
      return true;
    case ncclMin:
      out = ReduceOp::kMin;
      return true;
    case ncclAvg:
      out = ReduceOp::kAvg;
      return true;
    default:
      return false;
  }
}

std::byte* bytes(const void* p) {
  return static_cast<std::byte*>(const_cast<void*>(p));
}

void copy_if_apart(void* dst, const void* src, size_t n) {
  if (dst != src && n) std::memcpy(dst, src, n);
}

// The host address where the emulated device keeps the device bytes
// [p, p + n), which the collectives read and write (device addresses are not
// host-addressable, as on a GPU).
ncclResult_t host_span(const void* p, size_t n, std::byte*& out) {
  if (n == 0) {
    out = bytes(p);
    return ncclSuccess;
  }
  void* h = cuda::emulated_host_address(reinterpret_cast<CUdeviceptr>(p), n);
  if (!h)
    return global_error(ncclInvalidArgument,
                        "a buffer is not device memory: " + cuda::take_emulated_detail());
  out = static_cast<std::byte*>(h);
  return ncclSuccess;
}

// The communicator's rank and size (0 and 1 for a null one: enqueue refuses it).
std::pair<int, int> rank_size(ncclComm_t h) {
  const Comm* c = comm_of(h);
  return c ? std::pair{c->rank, c->size} : std::pair{0, 1};
}

// ---------------- the entry points ----------------

ncclResult_t GetVersion(int* v) {
  *v = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t GetUniqueId(ncclUniqueId* id) {
  std::memset(id, 0, sizeof *id);
  std::memcpy(id->internal, kMagic, sizeof kMagic);
  std::random_device rd;
  for (size_t i = 0; i < kIdBytes; ++i)
    id->internal[sizeof kMagic + i] = static_cast<char>(rd() & 0xff);
  return ncclSuccess;
}

ncclResult_t CommInitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
  if (std::memcmp(id.internal, kMagic, sizeof kMagic) != 0)
    return global_error(ncclInvalidArgument, "the unique id is not one of the emulated NCCL");
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return global_error(ncclInvalidArgument,
                        str("rank ", rank, " is out of range for ", nranks, " ranks"));
  auto c = std::make_shared<Comm>();
  c->store = t_store;
  c->timeout = t_timeout;
  if (!c->store)
    return global_error(ncclInvalidUsage,
                        "the emulated NCCL connects its ranks over a kiln store: call "
                        "set_emulated_bootstrap first");
  c->rank = rank;
  c->size = nranks;
  std::string hex;
  for (size_t i = 0; i < kIdBytes; ++i) {
    const auto b =
        static_cast<unsigned>(static_cast<unsigned char>(id.internal[sizeof kMagic + i]));
    hex += "0123456789abcdef"[b >> 4];
    hex += "0123456789abcdef"[b & 15];
  }
  c->prefix = "nccl-emu/" + hex;
  if (nranks > 1) {
    try {
      c->world = shm::World::connect(*c->store, c->prefix, rank, nranks, 1, true, c->timeout);
    } catch (const std::exception& e) {
      return global_error(ncclSystemError, str("rank ", rank, " of ", nranks,
                                               " could not connect to its peers: ", e.what()));
    }
    if (!c->world)
      return global_error(ncclSystemError,
                          "the emulated NCCL needs every rank on this host with shared memory");
  }
  auto* h = new Handle{c, std::thread(run_comm, c)};
  *out = reinterpret_cast<ncclComm_t>(h);
  return ncclSuccess;
}

// Stops the thread once it ran (`abort`: skipped) the queued ops; waits for it
// up to the op timeout, then leaves it to finish on its own.
ncclResult_t finish(ncclComm_t h, bool abort) {
  auto* handle = reinterpret_cast<Handle*>(h);
  if (!handle) return ncclInvalidArgument;
  Comm& c = *handle->comm;
  // Real NCCL waits, without bound, until every CUDA graph holding the
  // communicator's work is destroyed; here 5 s, then an error.
  ncclResult_t result = ncclSuccess;
  for (auto until = Clock::now() + Millis(5000); c.graphs.load() > 0;) {
    if (Clock::now() > until) {
      std::lock_guard lock(c.mu);
      c.message = str(abort ? "ncclCommAbort" : "ncclCommDestroy", ": ", c.graphs.load(),
                      " captured call(s) of this communicator are held by live CUDA graphs "
                      "(real NCCL waits until those are destroyed: a hang)");
      std::fprintf(stderr, "[emulated nccl] %s\n", c.message.c_str());
      result = ncclInvalidUsage;
      break;
    }
    std::this_thread::sleep_for(Millis(10));
  }
  {
    std::unique_lock lock(c.mu);
    c.stop = true;
    c.abort = c.abort || abort;
    c.cv.notify_all();
    if (abort && c.world) c.world->mark_left();
    const auto limit = abort ? Millis(2000) : c.timeout + Millis(2000);
    c.cv.wait_for(lock, limit, [&] { return c.exited; });
    if (!c.exited) {
      handle->thread.detach();  // holds its Comm; ends at its op's deadline
      delete handle;
      return result;
    }
  }
  handle->thread.join();
  delete handle;
  return result;
}

ncclResult_t CommDestroy(ncclComm_t h) {
  return finish(h, false);
}
ncclResult_t CommAbort(ncclComm_t h) {
  return finish(h, true);
}

ncclResult_t CommGetAsyncError(ncclComm_t h, ncclResult_t* r) {
  Comm* c = comm_of(h);
  if (!c) return ncclInvalidArgument;
  std::lock_guard lock(c->mu);
  *r = c->error;
  return ncclSuccess;
}

const char* GetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

const char* GetLastError(ncclComm_t h) {
  thread_local std::string text;
  if (Comm* c = comm_of(h)) {
    std::lock_guard lock(c->mu);
    text = c->message;
  } else {
    std::lock_guard lock(g_mu);
    text = g_last;
  }
  return text.c_str();
}

// Validates dtype (and op) on the caller's thread, as NCCL does at the call.
ncclResult_t check_args(ncclDataType_t t, DType& dt, const ncclRedOp_t* o = nullptr,
                        ReduceOp* rop = nullptr) {
  if (!dtype_of(t, dt))
    return global_error(ncclInvalidArgument, str("datatype ", int(t), " is not emulated"));
  if (o && !op_of(*o, *rop))
    return global_error(ncclInvalidArgument, str("reduction ", int(*o), " is not emulated"));
  return ncclSuccess;
}

ncclResult_t AllReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t o,
                       ncclComm_t h, cudaStream_t s) {
  DType dt;
  ReduceOp rop;
  if (auto r = check_args(t, dt, &o, &rop)) return r;
  const size_t n = count * dtype_size(dt);
  std::byte *in = nullptr, *out = nullptr;
  if (auto r = host_span(send, n, in)) return r;
  if (auto r = host_span(recv, n, out)) return r;
  return enqueue(h, s, [=](Comm& c, Clock::time_point deadline) {
    copy_if_apart(out, in, n);
    if (c.size == 1) return;
    auto sig = detail::make_signature(CollectiveKind::kAllReduce, c.seq++, dt, count, int(rop));
    c.channel().all_reduce({Span{out, n}}, dt, rop, sig, deadline);
  });
}

ncclResult_t Broadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root,
                       ncclComm_t h, cudaStream_t s) {
  DType dt;
  if (auto r = check_args(t, dt)) return r;
  const size_t n = count * dtype_size(dt);
  std::byte *in = nullptr, *out = nullptr;
  if (auto r = host_span(recv, n, out)) return r;
  if (rank_size(h).first == root)  // only root's sendbuff is read
    if (auto r = host_span(send, n, in)) return r;
  return enqueue(h, s, [=](Comm& c, Clock::time_point deadline) {
    if (c.rank == root) copy_if_apart(out, in, n);
    if (c.size == 1) return;
    auto sig = detail::make_signature(CollectiveKind::kBroadcast, c.seq++, dt, count, -1, root);
    c.channel().broadcast(Span{out, n}, root, sig, deadline);
  });
}

ncclResult_t Reduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t o,
                    int root, ncclComm_t h, cudaStream_t s) {
  DType dt;
  ReduceOp rop;
  if (auto r = check_args(t, dt, &o, &rop)) return r;
  const size_t n = count * dtype_size(dt);
  std::byte *in = nullptr, *out = nullptr;
  if (auto r = host_span(send, n, in)) return r;
  if (rank_size(h).first == root)  // only root's recvbuff is written (NCCL ignores the others')
    if (auto r = host_span(recv, n, out)) return r;
  return enqueue(h, s, [=](Comm& c, Clock::time_point deadline) {
    std::vector<std::byte> scratch;
    std::byte* data = out;
    if (c.rank == root) {
      copy_if_apart(out, in, n);
    } else {
      scratch.assign(in, in + n);
      data = scratch.data();
    }
    if (c.size == 1) return;
    auto sig = detail::make_signature(CollectiveKind::kReduce, c.seq++, dt, count, int(rop), root);
    c.channel().reduce(Span{data, n}, dt, rop, root, sig, deadline);
  });
}

ncclResult_t AllGather(const void* send, void* recv, size_t count, ncclDataType_t t, ncclComm_t h,
                       cudaStream_t s) {
  DType dt;
  if (auto r = check_args(t, dt)) return r;
  const size_t n = count * dtype_size(dt);
  std::byte *in = nullptr, *out = nullptr;
  if (auto r = host_span(send, n, in)) return r;
  if (auto r = host_span(recv, n * size_t(rank_size(h).second), out)) return r;
  return enqueue(h, s, [=](Comm& c, Clock::time_point deadline) {
    if (c.size == 1) return copy_if_apart(out, in, n);
    std::vector<Span> outs;
    for (int r = 0; r < c.size; ++r) outs.push_back({out + size_t(r) * n, n});
    auto sig = detail::make_signature(CollectiveKind::kAllGather, c.seq++, dt, count);
    c.channel().all_gather(outs, Span{in, n}, sig, deadline);
  });
}

ncclResult_t ReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t t,
                           ncclRedOp_t o, ncclComm_t h, cudaStream_t s) {
  DType dt;
  ReduceOp rop;
  if (auto r = check_args(t, dt, &o, &rop)) return r;
  const size_t n = count * dtype_size(dt);
  std::byte *in = nullptr, *out = nullptr;
  if (auto r = host_span(send, n * size_t(rank_size(h).second), in)) return r;
  if (auto r = host_span(recv, n, out)) return r;
  return enqueue(h, s, [=](Comm& c, Clock::time_point deadline) {
    if (c.size == 1) return copy_if_apart(out, in, n);
    auto sig = detail::make_signature(CollectiveKind::kReduceScatter, c.seq++, dt,
                                      count * size_t(c.size), int(rop));
    c.channel().reduce_scatter(Span{out, n}, Span{in, n * size_t(c.size)}, dt, rop, sig, deadline);
  });
}

std::string p2p_key(const Comm& c, int from, int to, uint64_t n) {
  return str(c.prefix, "/p2p/", from, "-", to, "/", n);
}

// Send/recv move their bytes through the store (the shared-memory transport
// has no point-to-point path): a send never waits, a recv waits for its key.
ncclResult_t Send(const void* send, size_t count, ncclDataType_t t, int peer, ncclComm_t h,
                  cudaStream_t s) {
  DType dt;
  if (auto r = check_args(t, dt)) return r;
  const size_t n = count * dtype_size(dt);
  std::byte* in = nullptr;
  if (auto r = host_span(send, n, in)) return r;
  return enqueue(h, s, [=](Comm& c, Clock::time_point) {
    KILN_CHECK(peer >= 0 && peer < c.size && peer != c.rank, "ncclSend to rank ", peer,
               " of a communicator of ", c.size);
    const auto* from = reinterpret_cast<const uint8_t*>(in);
    c.store->set(p2p_key(c, c.rank, peer, c.sent[peer]++), Bytes(from, from + n));
  });
}

ncclResult_t Recv(void* recv, size_t count, ncclDataType_t t, int peer, ncclComm_t h,
                  cudaStream_t s) {
  DType dt;
  if (auto r = check_args(t, dt)) return r;
  const size_t n = count * dtype_size(dt);
  std::byte* out = nullptr;
  if (auto r = host_span(recv, n, out)) return r;
  return enqueue(h, s, [=](Comm& c, Clock::time_point deadline) {
    KILN_CHECK(peer >= 0 && peer < c.size && peer != c.rank, "ncclRecv from rank ", peer,
               " of a communicator of ", c.size);
    const std::string key = p2p_key(c, peer, c.rank, c.received[peer]++);
    const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
    try {
      c.store->wait({key}, std::max(left, Millis(1)));
    } catch (const StoreTimeout&) {
      throw detail::TransportError(str("timed out waiting for rank ", peer, "'s send"));
    }
    Bytes b = c.store->get(key);
    c.store->delete_key(key);
    if (b.size() != n)
      throw detail::MismatchError(
          str("rank ", peer, " sent ", b.size(), " bytes but rank ", c.rank, " receives ", n));
    if (n) std::memcpy(out, b.data(), n);
  });
}

ncclResult_t GroupStart() {
  return ncclSuccess;  // sends never wait, so grouped calls need no fusing
}
ncclResult_t GroupEnd() {
  return ncclSuccess;
}

}  // namespace

const Nccl& emulated_lib() {
  static const Nccl n = [] {
    Nccl t;
    t.ncclGetVersion = &GetVersion;
    t.ncclGetUniqueId = &GetUniqueId;
    t.ncclCommInitRank = &CommInitRank;
    t.ncclCommDestroy = &CommDestroy;
    t.ncclCommAbort = &CommAbort;
    t.ncclCommGetAsyncError = &CommGetAsyncError;
    t.ncclGetErrorString = &GetErrorString;
    t.ncclGetLastError = &GetLastError;
    t.ncclAllReduce = &AllReduce;
    t.ncclBroadcast = &Broadcast;
    t.ncclReduce = &Reduce;
    t.ncclReduceScatter = &ReduceScatter;
    t.ncclAllGather = &AllGather;
    t.ncclSend = &Send;
    t.ncclRecv = &Recv;
    t.ncclGroupStart = &GroupStart;
    t.ncclGroupEnd = &GroupEnd;
    return t;
  }();
  return n;
}

void set_emulated_bootstrap(std::shared_ptr<Store> store, std::chrono::milliseconds timeout) {
  t_store = std::move(store);
  t_timeout = timeout;
}

}  // namespace kiln::dist::nccl
