// DistributedDataParallel: construction (rank agreement, broadcast, bucket
// assignment) and the Reducer that the gradient hooks drive.
//
// Iteration protocol: the first gradient hook of a synchronized backward
// starts an iteration and, inside an eager backward, queues the finalizer on
// the autograd engine. Each hook copies its gradient into the bucket (unless
// .grad already is the bucket view) and launches every bucket whose gradients
// are all ready, in bucket order (after zero_grad(set_to_none=true) the
// gradient already is in its bucket: autograd computed or copied it into the
// parameter's gradient destination). The finalizer (end of
// backward; or, in a compiled step, which has no engine, the hook that launched the last bucket)
// handles parameters without a gradient, waits for the buckets and resets.
#include "kiln/distributed/ddp.h"

#include <algorithm>
#include <array>
#include <mutex>

#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/distributed/collectives.h"
#include "kiln/functional.h"
#include "kiln/grad_destination.h"
#include "kiln/profiler.h"

namespace kiln::dist {
namespace {

constexpr const char* kTag = "[DistributedDataParallel] ";

bool is_view_of(const Tensor& g, const Tensor& view) {
  return g.defined() && g.impl()->storage && g.impl()->storage == view.impl()->storage &&
         g.offset() == view.offset() && g.shape() == view.shape() && g.strides() == view.strides();
}

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// FNV-1a over the parameters' shapes and dtypes, folded to 32 bits so that it
// travels exactly in an f64.
double signature_hash(const std::vector<Tensor>& ps) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) {
    h ^= v;
    h *= 1099511628211ull;
  };
  for (const Tensor& p : ps) {
    mix(static_cast<uint64_t>(p.dtype()));
    mix(static_cast<uint64_t>(p.dim()));
    for (int64_t d : p.shape()) mix(static_cast<uint64_t>(d));
  }
  return static_cast<double>(static_cast<uint32_t>(h ^ (h >> 32)));
}

// Raises on every rank if the ranks' parameters differ (count, size, shapes).
// The exchange runs on the parameters' device (an NCCL group takes only CUDA
// tensors; an "auto" group sends CUDA tensors to its NCCL part).
void check_same_parameters(ProcessGroup& pg, const std::vector<Tensor>& ps) {
  int64_t numel = 0;
  for (const Tensor& p : ps) numel += p.numel();
  const Device dev = ps[0].device();
  Tensor mine = zeros({3}, DType::f64);
  double* m = mine.data<double>();
  m[0] = static_cast<double>(ps.size());
  m[1] = static_cast<double>(numel);
  m[2] = signature_hash(ps);
  std::vector<Tensor> all;
  for (int r = 0; r < pg.size(); ++r) all.push_back(zeros({3}, DType::f64, dev));
  pg.all_gather(all, mine.to(dev))->wait();
  for (Tensor& t : all) t = t.to(Device::cpu());  // after the gather (stream order)
  const double* r0 = all[0].data<double>();
  for (int r = 1; r < pg.size(); ++r) {
    const double* x = all[static_cast<size_t>(r)].data<double>();
    if (x[0] == r0[0] && x[1] == r0[1] && x[2] == r0[2]) continue;
    throw Error(str(kTag, "ranks disagree on the parameters: rank 0 has ",
                    static_cast<int64_t>(r0[0]), " parameters (", static_cast<int64_t>(r0[1]),
                    " elements), rank ", r, " has ", static_cast<int64_t>(x[0]), " (",
                    static_cast<int64_t>(x[1]), " elements)",
                    x[0] == r0[0] && x[1] == r0[1] ? " with different shapes or dtypes" : "",
                    "; every rank must build the same model"));
  }
}

// Copies rank 0's values into `ts` on every rank: one flat broadcast per dtype.
void broadcast_from_rank0(ProcessGroup& pg, const std::vector<Tensor>& ts) {
  NoGradGuard ng;
  std::array<std::vector<Tensor>, kNumDTypes> by_dtype;
  for (const Tensor& t : ts)
    if (t.defined() && t.numel() > 0) by_dtype[static_cast<size_t>(t.dtype())].push_back(t);
  std::vector<std::pair<Tensor, WorkPtr>> flats;
  for (const auto& group : by_dtype) {
    if (group.empty()) continue;
    std::vector<Tensor> parts;
    for (const Tensor& t : group) parts.push_back(t.detach().reshape({t.numel()}));
    Tensor flat = parts.size() == 1 ? parts[0].clone() : cat(parts);
    flats.emplace_back(flat, pg.broadcast(flat, 0));
  }
  size_t k = 0;
  for (const auto& group : by_dtype) {
    if (group.empty()) continue;
    auto& [flat, work] = flats[k++];
    work->wait();
    int64_t off = 0;
    for (const Tensor& t : group) {
      Tensor dst = t.detach();
      dst.copy_(flat.narrow(0, off, t.numel()).view(t.shape()));
      off += t.numel();
    }
  }
}

}  // namespace

struct DistributedDataParallel::Reducer : std::enable_shared_from_this<Reducer> {
  struct Param {
    std::string name;
    Tensor tensor;
    size_t bucket = 0;
    Tensor view;  // its slice of the bucket buffer, shaped like the parameter
  };
  struct Bucket {
    DType dtype = DType::f32;
    Tensor buffer;
    std::vector<size_t> params;
    std::vector<int64_t> offsets;
    int64_t numel = 0;
    size_t pending = 0;
    WorkPtr work;
    Clock::time_point launched{};  // when its last gradient was ready (hook called)
    int64_t traced_group = 0;      // the group id its traced all-reduce carries
  };

  std::shared_ptr<ProcessGroup> pg;
  DDPOptions opts;
  std::vector<Param> params;
  std::vector<Tensor> buffers;
  std::vector<Bucket> buckets;
  CommHook hook;

  std::mutex mu;
  bool sync = true;
  bool active = false;           // a synchronized backward's reduction has begun
  bool callback_queued = false;  // the engine runs finalize() at the end of backward
  size_t next_bucket = 0;        // buckets are launched strictly in order
  std::vector<char> ready;       // got its gradient in this iteration
  std::vector<char> used;        // got a gradient since the last reduction (no_sync too)
  std::vector<WorkPtr> last_works;
  std::vector<Clock::time_point> last_launches;
  Clock::time_point backward_end{};

  // Where p's slice of a bucket holding `used` elements starts. On a device
  // every slice starts at a multiple of 256 bytes, as a fresh allocation does:
  // cuBLASLt picks a GEMM by its operands' alignment (up to 256 bytes), so a
  // weight gradient computed in its slice gets the algorithm, speed and bits
  // it would get in its own tensor (W2 of a 784-1024-1024-10 MLP would start 8
  // bytes into a granule). The gaps stay zero: they are reduced as zeros.
  static int64_t slice_start(int64_t used, const Tensor& p) {
    if (p.device().is_cpu()) return used;
    const int64_t align = std::max<int64_t>(1, 256 / static_cast<int64_t>(dtype_size(p.dtype())));
    return (used + align - 1) / align * align;
  }

  void assign_buckets() {
    const auto limit_of = [](double mb) { return static_cast<int64_t>(mb * 1024.0 * 1024.0); };
    std::array<int64_t, kNumDTypes> open;
    open.fill(-1);
    std::array<bool, kNumDTypes> first_done{};
    std::vector<int64_t> limits;
    // Reverse registration order: the last layers' gradients come first.
    for (size_t k = params.size(); k-- > 0;) {
      const Tensor& p = params[k].tensor;
      const auto d = static_cast<size_t>(p.dtype());
      if (open[d] < 0) {
        open[d] = static_cast<int64_t>(buckets.size());
        buckets.push_back({});
        buckets.back().dtype = p.dtype();
        limits.push_back(limit_of(first_done[d] ? opts.bucket_cap_mb : opts.first_bucket_mb));
        first_done[d] = true;
      }
      const auto bi = static_cast<size_t>(open[d]);
      Bucket& b = buckets[bi];
      params[k].bucket = bi;
      b.params.push_back(k);
      b.offsets.push_back(slice_start(b.numel, p));
      b.numel = b.offsets.back() + p.numel();
      if (b.numel * static_cast<int64_t>(dtype_size(b.dtype)) >= limits[bi]) open[d] = -1;
    }
    NoGradGuard ng;
    const Device dev = params[0].tensor.device();
    for (Bucket& b : buckets) {
      // Shared with the peers when they run on this host: reduced without copies.
      // On the parameters' device (an "auto" group's buffers are the CPU's).
      b.buffer = pg->make_comm_buffer(b.numel, b.dtype);
      if (b.buffer.device() != dev) b.buffer = zeros({b.numel}, b.dtype, dev);
      b.pending = b.params.size();
      // Gradients computed in the bucket (any device: a CUDA bucket's all-reduce
      // is ordered after the kernels writing it by the NCCL group's event on the
      // compute stream); a traced all-reduce reduces in the bucket and its
      // results are the bucket views (no copies in or out), as in eager.
      const bool in_bucket = opts.gradient_as_bucket_view && opts.compute_grads_in_buckets;
      b.traced_group =
          in_bucket ? collective_group_id_in(pg, b.buffer, b.offsets) : collective_group_id(pg);
      for (size_t j = 0; j < b.params.size(); ++j) {
        Param& p = params[b.params[j]];
        p.view = b.buffer.narrow(0, b.offsets[j], p.tensor.numel()).view(p.tensor.shape());
        Tensor g = p.tensor.grad();
        if (opts.gradient_as_bucket_view && g.defined()) {
          p.view.copy_(g);
          p.tensor.set_grad(p.view);
        }
        if (in_bucket) autograd::set_grad_destination(p.tensor, p.view);
      }
    }
    ready.assign(params.size(), 0);
    used.assign(params.size(), 0);
  }

  ~Reducer() {
    for (Param& p : params) {
      Tensor dst = p.view.defined() ? autograd::grad_destination(p.tensor) : Tensor();
      if (dst.defined() && dst.impl() == p.view.impl()) autograd::clear_grad_destination(p.tensor);
    }
  }

  std::vector<std::string> unready_names() const {
    std::vector<std::string> names;
    for (size_t i = 0; i < params.size(); ++i)
      if (!ready[i]) names.push_back(params[i].name);
    return names;
  }

  void reset_iteration() {
    active = false;
    callback_queued = false;
    next_bucket = 0;
    ready.assign(params.size(), 0);
    used.assign(params.size(), 0);
    for (Bucket& b : buckets) {
      b.pending = b.params.size();
      b.work.reset();
    }
  }

  // Gives up on the current iteration after an error. Collectives already
  // launched finish in the background (their Work holds the buffers).
  void abandon() { reset_iteration(); }

  // While tracing (trace_collectives): the reduction as IR nodes.
  struct Traced {
    bool active = false;
    size_t next_bucket = 0;
    std::vector<size_t> pending;  // per bucket
    std::vector<char> ready;      // per parameter
    std::vector<Tensor> handles;  // per bucket: collective_start's result
  } traced;

  // The traceable hook of parameter i: runs only while tracing.
  void on_grad_traced(size_t i) {
    if (!current_recorder() || !opts.trace_collectives) return;
    std::lock_guard<std::mutex> lock(mu);
    // The graph depends on no_sync(): a compiled step re-traces when it changes.
    trace_guard(
        [w = weak_from_this(), s = sync] {
          auto r = w.lock();
          if (!r) return false;
          std::lock_guard<std::mutex> l(r->mu);
          return r->sync == s;
        },
        "DistributedDataParallel no_sync() state");
    if (!sync) return;
    KILN_CHECK(!hook, kTag,
               "a comm hook cannot run inside a traced step; construct DDP with "
               "trace_collectives=false and compile forward+backward only");
    if (!traced.active) {
      KILN_CHECK(autograd::in_backward(), kTag, "gradient hook outside backward while tracing");
      traced.active = true;
      traced.next_bucket = 0;
      traced.ready.assign(params.size(), 0);
      traced.handles.assign(buckets.size(), Tensor());
      traced.pending.clear();
      for (const Bucket& b : buckets) traced.pending.push_back(b.params.size());
      autograd::queue_callback([w = weak_from_this()] {
        if (auto r = w.lock()) r->finalize_traced();
      });
    }
    KILN_CHECK(!traced.ready[i], kTag, "parameter '", params[i].name,
               "' received a second gradient in one traced backward");
    traced.ready[i] = 1;
    if (--traced.pending[params[i].bucket] > 0) return;
    while (traced.next_bucket < buckets.size() && traced.pending[traced.next_bucket] == 0) {
      const size_t b = traced.next_bucket++;
      traced.handles[b] =
          all_reduce_start(buckets[b].traced_group, bucket_grads(b), ReduceOp::kAvg);
    }
  }

  std::vector<Tensor> bucket_grads(size_t b) const {
    std::vector<Tensor> gs;
    for (size_t k : buckets[b].params) gs.push_back(params[k].tensor.grad());
    return gs;
  }

  // End of a traced backward: wait for every bucket (the pass moves each wait
  // to just before its first use) and make the reduced values the .grads.
  void finalize_traced() {
    std::lock_guard<std::mutex> lock(mu);
    if (!traced.active) return;
    traced.active = false;
    std::vector<std::string> missing;
    for (size_t i = 0; i < params.size(); ++i)
      if (!traced.ready[i]) missing.push_back(params[i].name);
    KILN_CHECK(missing.empty(), kTag, missing.size(),
               " parameter(s) received no gradient in the traced backward: ", join(missing),
               ". A compiled step must give every parameter a gradient (find_unused_parameters "
               "needs an eager backward)");
    for (size_t b = 0; b < buckets.size(); ++b) {
      std::vector<Tensor> gs = bucket_grads(b);
      std::vector<Tensor> reduced = all_reduce_wait(pg, traced.handles[b], gs);
      for (size_t j = 0; j < buckets[b].params.size(); ++j)
        params[buckets[b].params[j]].tensor.set_grad(reduced[j]);
    }
    traced.handles.clear();
  }

  // The post-accumulate-grad hook of parameter i.
  void on_grad_ready(size_t i) {
    // Called by a compiled plan writing back a gradient (not inside an autograd
    // backward) whose graph already holds the collectives: nothing to do.
    if (opts.trace_collectives && !autograd::in_backward()) return;
    std::lock_guard<std::mutex> lock(mu);
    used[i] = 1;
    if (!sync) return;  // no_sync(): accumulate locally
    if (!active) {
      active = true;
      if (autograd::in_backward()) {
        callback_queued = true;
        autograd::queue_callback([w = weak_from_this()] {
          if (auto r = w.lock()) r->finalize();
        });
      }
    }
    if (ready[i]) {
      auto missing = unready_names();
      abandon();
      std::string why = " (backward ran twice in one iteration?)";
      if (!missing.empty())
        why = str("; parameters that got no gradient in that iteration: ", join(missing),
                  opts.find_unused_parameters
                      ? " (find_unused_parameters needs an eager backward: a compiled step "
                        "must give every parameter a gradient)"
                      : " (pass find_unused_parameters=true, or set requires_grad=false on them)");
      throw Error(str(kTag, "parameter '", params[i].name,
                      "' received a second gradient before the reduction of its iteration "
                      "finished",
                      why));
    }
    try {
      mark_ready(i);
      if (!callback_queued && next_bucket == buckets.size()) finalize_locked();
    } catch (...) {
      if (active) abandon();
      throw;
    }
  }

  // Copies parameter i's gradient (or zeros) into its bucket and launches
  // every bucket that became complete. (Copying here, while the gradient is
  // hot in this core's cache, measured faster on 2 cores than letting the
  // all-reduce read it later: ProcessGroup::all_reduce_into.)
  void mark_ready(size_t i) {
    Param& p = params[i];
    {
      NoGradGuard ng;
      Tensor g = p.tensor.grad();
      if (!g.defined()) {
        p.view.zero_();
      } else if (!is_view_of(g, p.view)) {
        p.view.copy_(g);
        if (opts.gradient_as_bucket_view) p.tensor.set_grad(p.view);
      }
    }
    ready[i] = 1;
    if (--buckets[p.bucket].pending > 0) return;
    while (next_bucket < buckets.size() && buckets[next_bucket].pending == 0) {
      Bucket& b = buckets[next_bucket];
      GradBucket gb{next_bucket, b.buffer, {}, b.offsets};
      for (size_t k : b.params) gb.parameters.push_back(params[k].tensor);
      b.launched = Clock::now();
      profiler::Span span("ddp", "launch bucket");
      span.arg("bucket", static_cast<int64_t>(next_bucket));
      span.arg("bytes", b.buffer.numel() * static_cast<int64_t>(dtype_size(b.buffer.dtype())));
      b.work = hook ? hook(*pg, gb) : allreduce_hook(*pg, gb);
      KILN_CHECK(b.work != nullptr, kTag, "the comm hook returned no Work for bucket ",
                 next_bucket);
      ++next_bucket;
    }
  }

  void finalize() {
    std::lock_guard<std::mutex> lock(mu);
    try {
      finalize_locked();
    } catch (...) {
      if (active) abandon();
      throw;
    }
  }

  void finalize_locked() {
    if (!active) return;
    backward_end = Clock::now();
    std::vector<size_t> unready;
    for (size_t i = 0; i < params.size(); ++i)
      if (!ready[i]) unready.push_back(i);
    std::vector<char> had_grad(params.size(), 1);
    if (!unready.empty()) {
      if (!opts.find_unused_parameters) {
        auto names = unready_names();
        abandon();
        throw Error(str(kTag, names.size(),
                        " parameter(s) received no gradient in this backward: ", join(names),
                        ". Every parameter must contribute to the loss on every "
                        "rank; pass find_unused_parameters=true if some are unused on purpose, "
                        "or set requires_grad=false on them"));
      }
      for (size_t i : unready) {
        had_grad[i] = params[i].tensor.grad().defined();
        mark_ready(i);  // its current .grad (accumulated under no_sync) or zeros
      }
    }
    // With find_unused_parameters, which parameters did any rank use?
    Tensor used_any;
    WorkPtr used_work;
    if (opts.find_unused_parameters) {
      used_any = zeros({static_cast<int64_t>(params.size())});
      float* u = used_any.data<float>();
      for (size_t i = 0; i < params.size(); ++i) u[i] = used[i] ? 1.0f : 0.0f;
      // On the buckets' device (an NCCL group reduces CUDA tensors only).
      used_any = used_any.to(params[0].tensor.device());
      used_work = pg->all_reduce(used_any, ReduceOp::kSum);
    }
    std::vector<WorkPtr> works;
    std::vector<Clock::time_point> launches;
    for (size_t b = 0; b < buckets.size(); ++b) {
      try {
        profiler::Span span("ddp", "wait bucket");
        span.arg("bucket", static_cast<int64_t>(b));
        buckets[b].work->wait();
      } catch (const Error& e) {
        throw Error(str(kTag, "the all-reduce of bucket ", b, " (", buckets[b].params.size(),
                        " parameters) failed: ", e.what()));
      }
      works.push_back(buckets[b].work);
      launches.push_back(buckets[b].launched);
    }
    if (used_work) {
      used_work->wait();
      used_any = used_any.to(Device::cpu());  // ordered after the all-reduce
    }
    NoGradGuard ng;
    for (size_t i = 0; i < params.size(); ++i) {
      Param& p = params[i];
      // A parameter no rank used keeps its missing .grad, as in PyTorch.
      if (used_any.defined() && used_any.data<float>()[i] == 0.0f && !had_grad[i]) continue;
      Tensor g = p.tensor.grad();
      if (opts.gradient_as_bucket_view) {
        if (!is_view_of(g, p.view)) p.tensor.set_grad(p.view);
      } else if (g.defined() && !is_view_of(g, p.view)) {
        g.copy_(p.view);
      } else {
        p.tensor.set_grad(p.view.clone());
      }
    }
    last_works = std::move(works);
    last_launches = std::move(launches);
    reset_iteration();
  }
};

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 DDPOptions opts)
    : module_(std::move(module)) {
  KILN_CHECK(module_ != nullptr, kTag, "the module is null");
  KILN_CHECK(opts.bucket_cap_mb > 0 && opts.first_bucket_mb > 0, kTag,
             "bucket_cap_mb and first_bucket_mb must be > 0, got ", opts.bucket_cap_mb, " and ",
             opts.first_bucket_mb);
  auto r = std::make_shared<Reducer>();
  r->pg = opts.process_group ? opts.process_group : default_group();
  r->opts = opts;
  r->opts.process_group = nullptr;  // held once, in r->pg
  std::vector<Tensor> ps;
  for (auto& [name, t] : module_->named_parameters()) {
    if (!t.requires_grad()) continue;
    r->params.push_back({name, t, 0, Tensor()});
    ps.push_back(t);
  }
  KILN_CHECK(!ps.empty(), kTag,
             "the module has no parameter that requires grad, so there is "
             "nothing to synchronize");
  for (const auto& p : r->params)
    KILN_CHECK(p.tensor.device() == ps[0].device(), kTag, "parameter '", p.name, "' is on ",
               p.tensor.device(), " but '", r->params[0].name, "' on ", ps[0].device(),
               "; DDP takes a module on one device");
  r->buffers = module_->buffers();
  check_same_parameters(*r->pg, ps);
  if (r->pg->size() > 1) {
    std::vector<Tensor> state = ps;
    state.insert(state.end(), r->buffers.begin(), r->buffers.end());
    broadcast_from_rank0(*r->pg, state);
  }
  r->assign_buckets();
  for (size_t i = 0; i < r->params.size(); ++i) {
    r->params[i].tensor.register_post_accumulate_grad_hook(
        [w = std::weak_ptr<Reducer>(r), i](const Tensor&) {
          if (auto rr = w.lock()) rr->on_grad_ready(i);
        });
    r->params[i].tensor.register_post_accumulate_grad_hook(
        [w = std::weak_ptr<Reducer>(r), i](const Tensor&) {
          if (auto rr = w.lock()) rr->on_grad_traced(i);
        },
        /*traceable=*/true);
  }
  reducer_ = std::move(r);
}

DistributedDataParallel::~DistributedDataParallel() = default;
DistributedDataParallel::DistributedDataParallel(DistributedDataParallel&&) noexcept = default;
DistributedDataParallel& DistributedDataParallel::operator=(DistributedDataParallel&&) noexcept =
    default;

void DistributedDataParallel::prepare_forward() {
  if (current_recorder()) return;  // tracing: the compiled plan does not re-run this
  Reducer& r = *reducer_;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (r.active) {
      auto missing = r.unready_names();
      r.abandon();
      throw Error(str(kTag,
                      "the previous iteration did not finish its gradient reduction; "
                      "parameters that got no gradient: ",
                      join(missing),
                      " (pass find_unused_parameters=true, or set requires_grad=false on them)"));
    }
  }
  if (r.opts.broadcast_buffers && r.pg->size() > 1 && !r.buffers.empty())
    broadcast_from_rank0(*r.pg, r.buffers);
}

Tensor DistributedDataParallel::forward(const Tensor& x) {
  prepare_forward();
  return module_->forward(x);
}

ProcessGroup& DistributedDataParallel::process_group() const {
  return *reducer_->pg;
}

DistributedDataParallel::NoSyncGuard::NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp) {
  std::lock_guard<std::mutex> lock(ddp_.reducer_->mu);
  prev_ = ddp_.reducer_->sync;
  ddp_.reducer_->sync = false;
}

DistributedDataParallel::NoSyncGuard::~NoSyncGuard() {
  std::lock_guard<std::mutex> lock(ddp_.reducer_->mu);
  ddp_.reducer_->sync = prev_;
}

bool DistributedDataParallel::sync_enabled() const {
  std::lock_guard<std::mutex> lock(reducer_->mu);
  return reducer_->sync;
}

void DistributedDataParallel::register_comm_hook(CommHook hook) {
  std::lock_guard<std::mutex> lock(reducer_->mu);
  KILN_CHECK(hook != nullptr, kTag, "register_comm_hook: the hook is empty");
  KILN_CHECK(!reducer_->hook, kTag, "register_comm_hook: a comm hook is already registered");
  KILN_CHECK(!reducer_->active, kTag, "register_comm_hook: called during a backward pass");
  reducer_->hook = std::move(hook);
}

size_t DistributedDataParallel::num_buckets() const {
  return reducer_->buckets.size();
}

std::vector<std::string> DistributedDataParallel::bucket_parameter_names(size_t b) const {
  KILN_CHECK(b < reducer_->buckets.size(), kTag, "bucket ", b, " does not exist (there are ",
             reducer_->buckets.size(), ")");
  std::vector<std::string> names;
  for (size_t k : reducer_->buckets[b].params) names.push_back(reducer_->params[k].name);
  return names;
}

Tensor DistributedDataParallel::bucket_buffer(size_t b) const {
  KILN_CHECK(b < reducer_->buckets.size(), kTag, "bucket ", b, " does not exist (there are ",
             reducer_->buckets.size(), ")");
  return reducer_->buckets[b].buffer;
}

std::vector<WorkPtr> DistributedDataParallel::last_bucket_works() const {
  std::lock_guard<std::mutex> lock(reducer_->mu);
  return reducer_->last_works;
}

std::vector<Clock::time_point> DistributedDataParallel::last_bucket_launch_times() const {
  std::lock_guard<std::mutex> lock(reducer_->mu);
  return reducer_->last_launches;
}

Clock::time_point DistributedDataParallel::last_backward_end() const {
  std::lock_guard<std::mutex> lock(reducer_->mu);
  return reducer_->backward_end;
}

}  // namespace kiln::dist
