// Compiled graphs on CUDA replayed from CUDA graphs (executor/device_graph.h).
//
// A plan's first run is plain. Its second captures the executor's launches
// and copies into a CUDA graph on a stream of its own, every allocation in a
// private pool the plan keeps (so the graph's buffers stay at fixed
// addresses), and from then on each call replays that graph:
// - inputs whose storage was the same in the previous call (parameters,
//   optimizer state) or that the graph writes (destinations) are read where
//   they are: a replay checks they are still the same tensors;
// - other device inputs (a batch) are copied into buffers of the pool before
//   each replay, CPU scalar inputs (a learning rate) uploaded into them;
// - outputs in the pool are returned where the graph wrote them, no copy; a
//   later replay writes there again, so one the caller still holds then is
//   moved out first (its storage gets a copy in memory of its own: every view
//   of it sees the same values, and a result that was dropped costs nothing);
//   outputs in the caller's memory (a parameter updated in place, a .grad)
//   are returned as views of it.
// Inputs or destinations that moved capture again (three times at most). What
// cannot be captured runs plainly for good: graphs with random draws, dynamic
// shapes, and anything that fails during the capture (a host read of a device
// value, a synchronization, a collective of a group that cannot be captured)
// — the failure's message is graph_stats().last_fallback. KILN_CUDA_GRAPHS=0
// turns graphs off.
// Collectives (a compiled DDP step's collective_start/collective_wait) are
// captured when their group's stream work can be (NCCL: the communication
// stream forks from the capturing stream and joins it again, and the NCCL
// kernels become graph nodes). A replay then runs those collectives: every
// rank replays its graph of the same step, so they run in the same order on
// every rank, as NCCL requires of captured collectives. The group watches each
// replay (ReplayWatch: a failed group stops the next replay with its error).
#include <algorithm>
#include <atomic>
#include <mutex>

#include "executor/device_graph.h"
#include "executor/executor.h"
#include "kernels/cuda/cuda_allocator.h"
#include "kernels/cuda/cuda_graphs.h"
#include "kernels/cuda/driver.h"
#include "kernels/cuda/module.h"
#include "kernels/cuda/stream.h"
#include "kiln/autograd.h"
#include "kiln/env.h"
#include "kiln/functional.h"
#include "kiln/tensor.h"

namespace kiln::cuda {
namespace {

constexpr int kMaxCaptures = 3;  // per plan: inputs that keep moving stay plain

std::mutex g_stats_mu;
GraphStats g_stats;

// This thread's open capture: what the graph must keep alive.
struct CaptureScope {
  std::vector<std::shared_ptr<void>> keep;
  std::vector<std::pair<const void*, std::shared_ptr<ReplayWatch>>> watches;  // by owner
};
thread_local CaptureScope* t_scope = nullptr;

const StorageImpl* storage_of(const Tensor& t) {
  return t.defined() && t.impl()->storage ? t.impl()->storage.get() : nullptr;
}

// The same memory seen the same way (storage, offset, shape, strides, dtype).
bool same_view(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  return storage_of(a) == storage_of(b) && a.offset() == b.offset() && a.shape() == b.shape() &&
         a.strides() == b.strides() && a.dtype() == b.dtype();
}

enum class InputKind { kStatic, kCopied, kHostScalar };
enum class OutputKind { kAsIs, kCallerView, kInPool };

// The instantiated graph, shared with the release functions its replay
// watches hold (ReplayWatch::release may destroy it from another thread).
struct ExecBox {
  std::mutex mu;
  CUgraphExec exec = nullptr;  // null once released
  int device = 0;
  std::string released;  // why a library released it ("": it did not)
};

struct CudaGraphState final : detail::DeviceGraphState {
  bool disabled = false;
  bool checked = false;  // the graph's nodes were checked for capture
  int runs = 0, captures = 0;
  // The last call's inputs, held so that a new storage cannot reuse the
  // address of one of them (and pass for it).
  std::vector<Tensor> previous;
  // The captured graph and what it reads and writes.
  int device = 0;
  std::shared_ptr<Allocator> pool;
  std::unique_ptr<Stream> stream;
  std::shared_ptr<ExecBox> box;  // the captured graph (null: none)
  std::vector<InputKind> input_kind;
  std::vector<Tensor> inputs;  // static: the caller's tensor; else the pool's buffer
  std::vector<Tensor> dests;
  // Where the graph reads static inputs and writes destinations: a storage
  // can move (another plan's output the caller held, move_held_outputs).
  std::vector<const void*> input_at, dest_at;
  std::vector<Tensor> outs;
  std::vector<OutputKind> out_kind;
  RunStats stats;
  std::vector<std::shared_ptr<void>> keep;
  std::vector<std::shared_ptr<ReplayWatch>> watches;
  StreamPtr last_stream;  // where the last replay ran (held: it may be a user's stream)

  ~CudaGraphState() override { drop(); }
  // Forgets the graph (the pool stays for the next capture).
  void drop() {
    if (box) {
      CUgraphExec exec = nullptr;
      {  // not held while synchronizing: a release may be what lets a replay end
        std::lock_guard<std::mutex> lock(box->mu);
        std::swap(exec, box->exec);
      }
      try {
        use_device(device);
        // A replay (of a released graph too) may still run: it reads the
        // staged host data and host functions' payloads freed below.
        driver().cuCtxSynchronize();
        if (exec) driver().cuGraphExecDestroy(exec);
      } catch (const Error&) {  // the driver is gone (exit): nothing to free
      }
      box.reset();
    }
    last_stream.reset();
    inputs.clear();
    dests.clear();
    input_at.clear();
    dest_at.clear();
    outs.clear();
    keep.clear();
    watches.clear();
  }
};

void disable(CudaGraphState& st, const std::string& why) {
  st.drop();
  st.disabled = true;
  std::lock_guard<std::mutex> lock(g_stats_mu);
  ++g_stats.fallbacks;
  g_stats.last_fallback = why;
}

// Why graphs of `ex` cannot be captured, or "".
std::string uncapturable(const Executor& ex, const RunArgs& args) {
  if (!args.syms.empty() || !ex.bind_symbols(args.inputs).empty())
    return "the plan has dynamic shapes";
  for (const ir::Node* n : ex.graph().nodes()) {
    if (n->info().has(kRandom))
      return str("the plan draws random numbers (", n->info().name,
                 "): a graph would replay the same draw");
  }
  return "";
}

// Whether input i shares memory with another input or a destination.
bool shares_memory(const RunArgs& args, size_t i) {
  const StorageImpl* s = storage_of(args.inputs[i]);
  for (size_t j = 0; j < args.inputs.size(); ++j)
    if (j != i && storage_of(args.inputs[j]) == s) return true;
  for (const Tensor& d : args.dests)
    if (storage_of(d) == s) return true;
  return false;
}

// Input i is read where it is (not copied into the pool) when it was there
// in the previous call too, or shares memory with another input or a
// destination (the graph may write it; copies would lose the sharing).
bool keep_in_place(const CudaGraphState& st, const RunArgs& args, size_t i) {
  const StorageImpl* s = storage_of(args.inputs[i]);
  for (const Tensor& p : st.previous)
    if (storage_of(p) == s) return true;
  return shares_memory(args, i);
}

void remember(CudaGraphState& st, const RunArgs& args) {
  st.previous.assign(args.inputs.begin(), args.inputs.end());
}

// Whether the call can replay the captured graph.
bool matches(const CudaGraphState& st, const RunArgs& args) {
  if (args.inputs.size() != st.inputs.size() || args.dests.size() != st.dests.size()) return false;
  for (size_t i = 0; i < args.inputs.size(); ++i) {
    const Tensor& t = args.inputs[i];
    const Tensor& c = st.inputs[i];
    switch (st.input_kind[i]) {
      case InputKind::kStatic:
        if (!same_view(t, c) || t.data_ptr() != st.input_at[i]) return false;
        break;
      case InputKind::kCopied:
        if (!t.device().is_cuda() || t.shape() != c.shape() || t.dtype() != c.dtype() ||
            shares_memory(args, i))
          return false;
        break;
      case InputKind::kHostScalar:
        if (!t.device().is_cpu() || t.dim() != 0 || t.dtype() != c.dtype() ||
            t.impl()->wrapped_number != c.impl()->wrapped_number)
          return false;
        break;
    }
  }
  for (size_t i = 0; i < args.dests.size(); ++i)
    if (!same_view(args.dests[i], st.dests[i]) ||
        (args.dests[i].defined() && args.dests[i].data_ptr() != st.dest_at[i]))
      return false;
  return true;
}

// What ReplayWatch::release does to the graph in `b`.
std::function<void(const std::string&)> releaser(const std::shared_ptr<ExecBox>& b) {
  return [weak = std::weak_ptr<ExecBox>(b)](const std::string& why) {
    const std::shared_ptr<ExecBox> box = weak.lock();
    if (!box) return;
    std::lock_guard<std::mutex> lock(box->mu);
    if (!box->exec) return;
    try {
      use_device(box->device);
      driver().cuGraphExecDestroy(box->exec);  // freed once a replay in flight ends
    } catch (const Error&) {
    }
    box->exec = nullptr;
    box->released = why;
  };
}

// Runs `plain` into a new graph (st.box) with the pool's buffers for the
// inputs that are copied. Throws kiln::Error when the capture failed.
void capture(CudaGraphState& st, Device device, const RunArgs& args,
             const detail::PlainRun& plain) {
  st.device = device.index;
  use_device(device.index);
  if (!st.pool) st.pool = make_graph_pool(device.index);
  if (!st.stream) st.stream = std::make_unique<Stream>(device.index);
  PoolGuard pool(st.pool.get(), device.index);
  StreamGuard on_stream(*st.stream);
  st.input_kind.clear();
  st.inputs.clear();
  for (size_t i = 0; i < args.inputs.size(); ++i) {
    const Tensor& t = args.inputs[i];
    if (t.device().is_cpu()) {
      st.input_kind.push_back(InputKind::kHostScalar);
      Tensor b = make_tensor({}, t.dtype(), device);
      b.impl()->wrapped_number = t.impl()->wrapped_number;
      st.inputs.push_back(b);
    } else if (keep_in_place(st, args, i)) {
      st.input_kind.push_back(InputKind::kStatic);
      st.inputs.push_back(t);
    } else {
      st.input_kind.push_back(InputKind::kCopied);
      st.inputs.push_back(make_tensor(t.shape(), t.dtype(), device));
    }
  }
  st.dests.assign(args.dests.begin(), args.dests.end());
  st.input_at.clear();
  st.dest_at.clear();
  for (const Tensor& t : st.inputs) st.input_at.push_back(t.defined() ? t.data_ptr() : nullptr);
  for (const Tensor& t : st.dests) st.dest_at.push_back(t.defined() ? t.data_ptr() : nullptr);
  RunArgs a = args;
  a.inputs = st.inputs;
  a.on_ready = nullptr;  // called after each replay instead
  a.stats = &st.stats;
  const auto s = static_cast<CUstream>(st.stream->handle());
  CaptureScope scope;
  t_scope = &scope;
  check(driver().cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
        "cuStreamBeginCapture");
  std::vector<Tensor> outs;
  CUgraph graph = nullptr;
  try {
    outs = plain(a);
  } catch (...) {
    t_scope = nullptr;
    driver().cuStreamEndCapture(s, &graph);
    if (graph) driver().cuGraphDestroy(graph);
    throw;
  }
  t_scope = nullptr;
  check(driver().cuStreamEndCapture(s, &graph), "cuStreamEndCapture");
  CUgraphExec exec = nullptr;
  const CUresult r = driver().cuGraphInstantiateWithFlags(&exec, graph, 0);
  driver().cuGraphDestroy(graph);
  check(r, "cuGraphInstantiate");
  st.box = std::make_shared<ExecBox>();
  st.box->exec = exec;
  st.box->device = st.device;
  st.keep = std::move(scope.keep);
  for (auto& [owner, w] : scope.watches) {
    w->set_release(releaser(st.box));
    st.watches.push_back(std::move(w));
  }
  // Where each output lives decides what a replay returns.
  st.out_kind.clear();
  for (const Tensor& o : outs) {
    const StorageImpl* so = storage_of(o);
    OutputKind k = OutputKind::kInPool;
    if (!o.defined() || o.device().is_cpu()) k = OutputKind::kAsIs;
    for (size_t i = 0; i < st.inputs.size(); ++i)
      if (storage_of(st.inputs[i]) == so) {
        KILN_CHECK(st.input_kind[i] == InputKind::kStatic, "an output is a view of input ", i,
                   ", which the graph reads from a copy");
        k = OutputKind::kCallerView;
      }
    for (const Tensor& d : st.dests)
      if (storage_of(d) == so) k = OutputKind::kCallerView;
    st.out_kind.push_back(k);
  }
  st.outs = std::move(outs);
  ++st.captures;
  std::lock_guard<std::mutex> lock(g_stats_mu);
  ++g_stats.captures;
}

// Gives the caller's hold on each in-pool output its own memory before a
// replay writes the pool again: a held storage swaps its pool block for a
// copy in a new block, and the graph's outputs move to a storage object of
// their own at the pool's (fixed) address. Returns how many moved.
int64_t move_held_outputs(CudaGraphState& st, CUstream s) {
  int64_t moved = 0;
  for (size_t o = 0; o < st.outs.size(); ++o) {
    if (st.out_kind[o] != OutputKind::kInPool) continue;
    const std::shared_ptr<StorageImpl> held = st.outs[o].impl()->storage;
    long own = 1;  // `held` itself
    for (const Tensor& t : st.outs)
      if (t.defined() && t.impl()->storage == held) ++own;
    if (held.use_count() <= own) continue;  // nobody else holds it
    Tensor fresh = make_tensor({static_cast<int64_t>(held->nbytes)}, DType::u8, held->device);
    StorageImpl& f = *fresh.impl()->storage;
    if (held->nbytes > 0)
      check(driver().cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(f.data),
                                       reinterpret_cast<CUdeviceptr>(held->data), held->nbytes, s),
            "cuMemcpyDtoDAsync");
    std::swap(held->data, f.data);
    std::swap(held->allocator, f.allocator);
    std::swap(held->deleter, f.deleter);
    for (Tensor& t : st.outs)
      if (t.defined() && t.impl()->storage == held) t.impl()->storage = fresh.impl()->storage;
    ++moved;
  }
  return moved;
}

std::vector<Tensor> replay(CudaGraphState& st, const RunArgs& args) {
  NoGradGuard no_grad;
  use_device(st.device);
  // Replays share the pool's buffers: one on another stream than the last
  // waits for the last.
  StreamPtr stream = current_stream_impl(st.device);
  if (st.last_stream && st.last_stream->handle != stream->handle)
    check(driver().cuStreamSynchronize(st.last_stream->handle), "cuStreamSynchronize");
  const CUstream s = stream->handle;
  st.last_stream = std::move(stream);
  for (const auto& w : st.watches) w->before_launch();
  const int64_t moved = move_held_outputs(st, s);
  for (size_t i = 0; i < st.inputs.size(); ++i)
    if (st.input_kind[i] != InputKind::kStatic) {
      Tensor b = st.inputs[i];
      b.copy_(args.inputs[i]);
    }
  {
    std::lock_guard<std::mutex> lock(st.box->mu);
    KILN_CHECK(st.box->exec,
               "[cuda] a compiled plan's CUDA graph was released: ", st.box->released);
    check(driver().cuGraphLaunch(st.box->exec, s), "cuGraphLaunch");
  }
  for (const auto& w : st.watches) w->after_launch(s);
  std::vector<Tensor> result;
  result.reserve(st.outs.size());
  for (size_t o = 0; o < st.outs.size(); ++o) {
    const Tensor& t = st.outs[o];
    switch (st.out_kind[o]) {
      case OutputKind::kAsIs:
        result.push_back(t);
        break;
      case OutputKind::kCallerView:  // a new handle on the caller's memory
      case OutputKind::kInPool:      // or on the graph's, until the next replay moves it
        result.push_back(as_strided(t, t.shape(), t.strides(), t.offset()));
        break;
    }
  }
  if (args.on_ready)
    for (size_t o = 0; o < result.size(); ++o) (*args.on_ready)(o, result[o]);
  if (args.stats) *args.stats = st.stats;
  std::lock_guard<std::mutex> lock(g_stats_mu);
  ++g_stats.replays;
  g_stats.outputs_moved += moved;
  return result;
}

class CudaGraphRunner final : public detail::DeviceGraphRunner {
 public:
  std::optional<std::vector<Tensor>> run(detail::DeviceGraphSlot& slot, Device device,
                                         const Executor& ex, const RunArgs& args,
                                         const detail::PlainRun& plain) override {
    // KILN_CUDA_SYNC is read once, as the launches read it (module.cpp);
    // KILN_CUDA_GRAPHS at every call (tests turn graphs off for a while).
    if (sync_launches() || !env::get_flag("KILN_CUDA_GRAPHS", true)) return std::nullopt;
    std::unique_lock<std::mutex> lock(slot.mu, std::try_to_lock);
    if (!lock.owns_lock()) return std::nullopt;  // another thread replays it: run plainly
    if (!slot.state) slot.state = std::make_unique<CudaGraphState>();
    auto& st = static_cast<CudaGraphState&>(*slot.state);
    if (st.disabled) return std::nullopt;
    if (!st.checked) {
      st.checked = true;
      if (std::string why = uncapturable(ex, args); !why.empty()) {
        disable(st, why);
        return std::nullopt;
      }
    }
    if (st.box) {
      std::string released;
      {
        std::lock_guard<std::mutex> box_lock(st.box->mu);
        released = st.box->released;
      }
      if (!released.empty()) {
        disable(st, released);
        return std::nullopt;
      }
      if (matches(st, args)) return replay(st, args);
      st.drop();  // inputs or destinations moved: capture again
      if (st.captures >= kMaxCaptures) {
        disable(st,
                str("the plan's inputs or destinations moved after ", kMaxCaptures, " captures"));
        return std::nullopt;
      }
    } else if (st.runs++ == 0) {
      remember(st, args);  // the first run is plain (it compiles and loads kernels)
      return std::nullopt;
    }
    try {
      capture(st, device, args, plain);
    } catch (const Error& e) {
      disable(st, str("capture failed: ", e.what()));
      return std::nullopt;
    }
    remember(st, args);
    return replay(st, args);
  }
};

CudaGraphRunner g_runner;
const bool g_registered = [] {
  detail::register_device_graph_runner(DeviceType::kCUDA, &g_runner);
  return true;
}();

}  // namespace

bool capturing_graph() {
  return t_scope != nullptr;
}

bool capturing_on(CUstream s) {
  if (t_scope) return true;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  check(driver().cuStreamIsCapturing(s, &status), "cuStreamIsCapturing");
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

void keep_for_graph(std::shared_ptr<void> p) {
  KILN_CHECK(t_scope, "[cuda] keep_for_graph outside a graph capture");
  t_scope->keep.push_back(std::move(p));
}

ReplayWatch& replay_watch(const void* owner,
                          const std::function<std::shared_ptr<ReplayWatch>()>& make) {
  KILN_CHECK(t_scope, "[cuda] replay_watch outside a graph capture");
  for (auto& [o, w] : t_scope->watches)
    if (o == owner) return *w;
  t_scope->watches.emplace_back(owner, make());
  return *t_scope->watches.back().second;
}

void ReplayWatch::release(const std::string& why) {
  std::function<void(const std::string&)> f;
  {
    std::lock_guard<std::mutex> lock(mu_);
    f = release_;
  }
  if (f) f(why);
}

void ReplayWatch::set_release(std::function<void(const std::string&)> f) {
  std::lock_guard<std::mutex> lock(mu_);
  release_ = std::move(f);
}

RelaxedCapture::RelaxedCapture(bool any_capture) {
  if (!t_scope && !any_capture) return;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  on_ = driver().cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS;
  previous_ = static_cast<int>(mode);
}
RelaxedCapture::~RelaxedCapture() {
  if (!on_) return;
  auto mode = static_cast<CUstreamCaptureMode>(previous_);
  driver().cuThreadExchangeStreamCaptureMode(&mode);
}

GraphStats graph_stats() {
  std::lock_guard<std::mutex> lock(g_stats_mu);
  return g_stats;
}

}  // namespace kiln::cuda
