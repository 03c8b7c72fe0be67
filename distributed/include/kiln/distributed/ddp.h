// DistributedDataParallel: data-parallel training over a ProcessGroup (like
// torch.nn.parallel.DistributedDataParallel).
//
// At construction it checks that every rank holds the same parameter shapes,
// broadcasts rank 0's parameters and buffers, and assigns the gradients to
// buckets in reverse registration order (about the order backward produces
// them): bucket 0 is capped at first_bucket_mb so communication starts early,
// the others at bucket_cap_mb; one flat buffer per bucket and dtype (from
// ProcessGroup::make_comm_buffer: on one host, shared memory the all-reduce
// reduces in place across the ranks, with the average fused in). Each
// parameter's .grad becomes a view into its bucket (gradient_as_bucket_view),
// so accumulation writes straight into the buffer that is all-reduced; after
// zero_grad(set_to_none=true) the bucket slice is the parameter's gradient
// destination, so a Linear's weight gradient (the GEMM) is computed in the
// bucket and other gradients are copied there once (by autograd), on the CPU
// and on CUDA (where each slice starts at a multiple of 256 bytes of its
// bucket, as a fresh allocation, so the GEMM is the one it would be anyway).
//
// During backward a post-accumulate-grad hook marks each parameter ready;
// when a bucket's last gradient is ready its all-reduce (mean over ranks)
// starts on the group's worker threads while backward continues. Buckets are
// launched strictly in bucket order, so every rank issues the same sequence of
// collectives. The end of backward waits for every bucket.
//
// CUDA parameters (one device; an "nccl" or "auto" group): the buckets live
// on the device and a bucket's all-reduce is enqueued when its last gradient's
// kernels have been enqueued (the NCCL group orders it after them with an
// event), so it overlaps the rest of backward; the end of backward makes the
// current stream wait for the buckets without blocking the host; the
// compression hooks' casts are device kernels.
//
// Compiled steps (kiln::compile), with no graph break: by default
// (trace_collectives) the same hooks run while tracing and record each
// bucket's all-reduce as collective_start / collective_wait IR nodes, and the
// reduced gradients become the .grad the rest of the trace reads — so forward,
// backward and the optimizer update can be one graph; the schedule_collectives
// pass starts each bucket as soon as its gradients exist and makes each update
// wait only for its own bucket. With gradient_as_bucket_view and
// compute_grads_in_buckets (CPU or CUDA) a bucket's collective reduces in the
// bucket itself and its results are the bucket views (collective_group_id_in):
// the weight gradients are computed there, the others copied in once, none
// copied out. With trace_collectives=false,
// compile forward and backward only: the plan fires the gradient-ready hooks
// as it produces each gradient, computes each weight gradient straight into
// its bucket (its gradient destination) and the eager buckets reduce. (A plan does not re-run
// forward's host code: buffers are not re-broadcast per call, and every
// parameter must get a gradient, since unused ones are only detected at the
// end of an eager backward; comm hooks need trace_collectives=false.) On CUDA
// the collective nodes follow the NCCL group's stream protocol above.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/distributed/process_group.h"
#include "kiln/nn/module.h"

namespace kiln::dist {

/// DistributedDataParallel's options (PyTorch's names and defaults).
struct DDPOptions {
  double bucket_cap_mb = 25;   ///< size cap of every bucket but bucket 0
  double first_bucket_mb = 1;  ///< size cap of bucket 0 (the last layers, reduced first)
  /// Parameters that got no gradient in a backward are reduced as zeros (and
  /// left without .grad when no rank used them) instead of raising an error.
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;        ///< copy rank 0's buffers before every forward
  bool gradient_as_bucket_view = true;  ///< .grad is a view into its bucket (no copy back)
  /// With gradient_as_bucket_view (CPU or CUDA): a gradient with no .grad to
  /// accumulate into (after zero_grad()) is computed straight into its bucket
  /// (kiln/grad_destination.h); false copies it there (for comparisons).
  bool compute_grads_in_buckets = true;
  /// A traced step (kiln::compile) holds each bucket's all-reduce as IR nodes
  /// (collective_start as soon as its gradients exist, collective_wait before
  /// their first use), so the whole step — optimizer update included — can be
  /// one graph. false: compiled plans fire the gradient-ready hooks and the
  /// eager buckets reduce (forward+backward only; comm hooks apply).
  bool trace_collectives = true;
  std::shared_ptr<ProcessGroup> process_group = nullptr;  ///< null: the default group
};

/// One bucket, as a comm hook sees it.
struct GradBucket {
  size_t index = 0;
  Tensor buffer;                   ///< flat, contiguous: this rank's (sum of) gradients
  std::vector<Tensor> parameters;  ///< the bucket's parameters, in bucket order
  std::vector<int64_t> offsets;    ///< element offset of each parameter's gradient in buffer
};

/// Replaces a bucket's all-reduce: starts the communication and returns a Work;
/// once that Work's wait() returned, bucket.buffer must hold the mean over ranks.
using CommHook = std::function<WorkPtr(ProcessGroup&, const GradBucket&)>;

/// The default reduction: all_reduce of the buffer, averaged over the ranks.
WorkPtr allreduce_hook(ProcessGroup& pg, const GradBucket& bucket);
/// Casts the bucket to f16 (pre-divided by the world size) in a comm buffer kept
/// per bucket, all-reduces half the bytes, and casts the mean back into the
/// buffer on wait().
WorkPtr fp16_compress_hook(ProcessGroup& pg, const GradBucket& bucket);
/// As fp16_compress_hook with bfloat16 (f32's range, fewer mantissa bits; the
/// all-reduce averages, with no pre-division).
WorkPtr bf16_compress_hook(ProcessGroup& pg, const GradBucket& bucket);

/// A Work that waits for `inner` and then runs `then` once, on the thread that
/// first calls wait() (comm hooks use it to post-process a result).
WorkPtr then_work(WorkPtr inner, std::function<void()> then);

/// Wraps a module for data-parallel training; see the top of this header.
class DistributedDataParallel {
 public:
  /// Raises kiln::Error if the module has no parameter that requires grad, if
  /// the options are invalid, or if ranks disagree on the parameters (naming
  /// the ranks and counts).
  explicit DistributedDataParallel(std::shared_ptr<nn::Module> module, DDPOptions opts = {});
  /// Collectives still in flight (after an error) finish in the background.
  ~DistributedDataParallel();
  DistributedDataParallel(DistributedDataParallel&&) noexcept;
  DistributedDataParallel& operator=(DistributedDataParallel&&) noexcept;
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  /// Broadcasts buffers (if enabled), then runs the module's forward.
  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }
  /// For models with another forward signature: prepares the step as forward()
  /// does, then returns fn(module()).
  template <typename F>
  decltype(auto) call(F&& fn) {
    prepare_forward();
    return fn(module());
  }

  /// The wrapped module.
  nn::Module& module() const { return *module_; }
  const std::shared_ptr<nn::Module>& module_ptr() const { return module_; }
  ProcessGroup& process_group() const;

  /// Disables gradient synchronization while alive: backward passes accumulate
  /// into .grad locally; the first synchronized backward after it reduces the sum.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool prev_;
  };
  /// `auto guard = ddp.no_sync();` (like PyTorch's `with ddp.no_sync():`).
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }
  /// False inside no_sync().
  bool sync_enabled() const;

  /// Replaces the all-reduce of every bucket (once, before the first backward).
  void register_comm_hook(CommHook hook);

  // ---- introspection (tests, benchmarks) ----
  size_t num_buckets() const;
  /// Dotted names of bucket b's parameters, in bucket order.
  std::vector<std::string> bucket_parameter_names(size_t b) const;
  /// Bucket b's flat gradient buffer.
  Tensor bucket_buffer(size_t b) const;
  /// The Work of each bucket in the last synchronized backward (bucket order).
  std::vector<WorkPtr> last_bucket_works() const;
  /// When each bucket's collective was launched (its comm hook called) in the
  /// last synchronized backward (bucket order).
  std::vector<Clock::time_point> last_bucket_launch_times() const;
  /// When the last synchronized backward had produced every local gradient
  /// (the reduction's final wait began then).
  Clock::time_point last_backward_end() const;

 private:
  void prepare_forward();

  struct Reducer;
  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<Reducer> reducer_;
};

}  // namespace kiln::dist
