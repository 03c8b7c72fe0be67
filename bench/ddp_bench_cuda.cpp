// ddp_bench --device cuda: the 2-rank DDP step with CUDA parameters over an
// NCCL group, and its overlap schedule; with --ranks 1, the one-rank DDP step
// against the plain single-GPU step and a one-rank all-reduce's bandwidth. On the emulated device
// (PoCL, no GPU) this shows the schedule only, not speed: kernels run on the host's cores and the
// emulated NCCL moves bytes through shared memory.
//
// The schedule comes from the device streams, not the host's enqueue times
// (the host runs ahead of the device): DDP's group is wrapped so that every
// bucket all-reduce records an event on the compute stream when it is issued
// ("ready": the stream reached the bucket's last gradient kernel), and a poller
// thread notes when each ready event and each collective completes. The
// comm stream runs the collectives in order, each after its ready event, so a
// bucket's all-reduce starts at max(ready, previous bucket's end). Times are
// relative to backward's end on the compute stream (the last bucket's ready:
// its gradient is the last one backward computes).
//
// With --ranks 1 the same wrapper, over the group of one, also gives eager
// backward's timeline on the device: each bucket's ready event against one
// recorded as backward starts, in device time (elapsed_time), and the line
// ddp_overlap_model takes ("model input: --ready ... --end ...") to model
// the overlap on 8 GPUs.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "ddp_timeline.h"
#include "kiln/compile.h"
#include "kiln/cuda.h"
#include "kiln/distributed/collectives.h"
#include "kiln/distributed/ddp.h"
#include "kiln/grad_destination.h"
#include "kiln/thread_pool.h"
#include "mlp_step.h"

namespace kiln::bench {
namespace {

using Clock = std::chrono::steady_clock;

double ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// One bucket all-reduce as the device ran it.
struct Issued {
  Clock::time_point enqueued;  // host: when DDP (or the compiled plan) issued it
  int64_t numel = 0;
  double bytes = 0;
  cuda::Event ready{/*enable_timing=*/true};  // recorded on the compute stream at issue
  dist::WorkPtr work;
  Clock::time_point ready_at{}, done_at{};  // set by the poller
};

// Forwards to the NCCL group; records each all_reduce as an Issued entry.
class ScheduleGroup final : public dist::ProcessGroup {
 public:
  explicit ScheduleGroup(std::shared_ptr<dist::ProcessGroup> inner) : in_(std::move(inner)) {
    poller_ = std::thread([this] { poll(); });
  }
  ~ScheduleGroup() override {
    stop_ = true;
    poller_.join();
  }
  int rank() const override { return in_->rank(); }
  int size() const override { return in_->size(); }
  std::string backend() const override { return in_->backend(); }
  dist::WorkPtr all_reduce(Tensor t, dist::ReduceOp op) override {
    auto e = std::make_shared<Issued>();
    e->enqueued = Clock::now();
    e->numel = t.numel();
    e->bytes = static_cast<double>(t.numel()) * static_cast<double>(t.element_size());
    e->ready.record(cuda::current_stream(0));
    e->work = in_->all_reduce(t, op);
    std::lock_guard<std::mutex> lock(mu_);
    issued_.push_back(e);
    return e->work;
  }
  dist::WorkPtr all_reduce_coalesced(std::vector<Tensor> ts, dist::ReduceOp op) override {
    return in_->all_reduce_coalesced(std::move(ts), op);
  }
  dist::WorkPtr broadcast(Tensor t, int root) override { return in_->broadcast(t, root); }
  dist::WorkPtr reduce(Tensor t, int root, dist::ReduceOp op) override {
    return in_->reduce(t, root, op);
  }
  dist::WorkPtr all_gather(std::vector<Tensor> outs, Tensor in) override {
    return in_->all_gather(std::move(outs), in);
  }
  dist::WorkPtr reduce_scatter(Tensor out, Tensor in, dist::ReduceOp op) override {
    return in_->reduce_scatter(out, in, op);
  }
  dist::WorkPtr barrier() override { return in_->barrier(); }
  dist::WorkPtr send(Tensor t, int dst, int tag) override { return in_->send(t, dst, tag); }
  dist::WorkPtr recv(Tensor t, int src, int tag) override { return in_->recv(t, src, tag); }
  Tensor make_comm_buffer(int64_t numel, DType dtype) override {
    return in_->make_comm_buffer(numel, dtype);
  }
  const dist::ProcessGroupOptions& options() const override { return in_->options(); }

  /// The entries issued since the last take (all complete once the device is synchronized;
  /// kiln::Error if one is still not complete after 60 s).
  std::vector<std::shared_ptr<Issued>> take() {
    const auto give_up = Clock::now() + std::chrono::seconds(60);
    for (;;) {  // the poller notes completions within ~50 us
      KILN_CHECK(Clock::now() < give_up,
                 "[ddp_bench] an all-reduce not complete 60 s after the device synchronized");
      {
        std::lock_guard<std::mutex> lock(mu_);
        bool all = true;
        for (auto& e : issued_) all = all && e->done_at != Clock::time_point{};
        if (all) return std::exchange(issued_, {});
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  void poll() {
    // Makes device 0's context current on this thread (event queries need it).
    const Tensor touch = zeros({1}, DType::f32, Device::cuda(0));
    while (!stop_) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        const auto now = Clock::now();
        for (auto& e : issued_) {
          if (e->ready_at == Clock::time_point{} && e->ready.query()) e->ready_at = now;
          if (e->done_at == Clock::time_point{} && e->work->is_completed()) e->done_at = now;
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  std::shared_ptr<dist::ProcessGroup> in_;
  std::mutex mu_;
  std::vector<std::shared_ptr<Issued>> issued_;
  std::atomic<bool> stop_{false};
  std::thread poller_;
};

// Eager DDP's backward on the device in a one-rank group (wrapped as the
// 2-rank schedule is): each bucket's ready time from backward's start, in
// device time, medians of `iters` synchronized steps. The compiled step is
// left out: one plan runs forward and backward (no place for the start
// event) and replays one CUDA graph, in which DDP's group is not called per
// bucket, so no ready event is recorded (and capturing one would change the
// graph).
void one_rank_timeline(int iters, int warmup, double bucket_cap_mb, double first_bucket_mb) {
  auto pg = std::make_shared<ScheduleGroup>(dist::default_group());
  MlpStep step(/*fused=*/false);
  const Device dev = Device::cuda(0);
  step.model->to(dev);
  step.opt = std::make_unique<optim::SGD>(step.model->parameters(),
                                          optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
  const Tensor x = step.x.to(dev), y = step.y.to(dev);
  dist::DistributedDataParallel ddp(
      step.model,
      {.bucket_cap_mb = bucket_cap_mb, .first_bucket_mb = first_bucket_mb, .process_group = pg});
  const size_t nb = ddp.num_buckets();
  std::vector<std::vector<double>> ready(nb);
  std::vector<double> bytes(nb), end;
  for (int i = 0; i < warmup + iters; ++i) {
    step.opt->zero_grad();
    Tensor loss = cross_entropy(ddp(x), y);
    cuda::Event start(/*enable_timing=*/true);
    start.record(cuda::current_stream(0));
    loss.backward();
    step.opt->step();
    cuda::synchronize(0);
    auto issued = pg->take();
    KILN_CHECK(issued.size() == nb, "[ddp_bench] ", issued.size(),
               " all-reduces in a one-rank step, DDP has ", nb, " buckets");
    if (i < warmup) continue;
    for (size_t b = 0; b < nb; ++b) {
      ready[b].push_back(start.elapsed_time(issued[b]->ready));
      bytes[b] = issued[b]->bytes;
    }
    end.push_back(ready[nb - 1].back());
  }
  std::vector<bench::ReadyBucket> timeline;
  const double end_ms = median(end);
  std::printf(
      "  eager backward's timeline on the device (DDP's group wrapped; device time from an event "
      "recorded as backward starts; medians of %d steps): compute ends (the last bucket ready) "
      "%.4f ms after backward's start\n",
      iters, end_ms);
  for (size_t b = 0; b < nb; ++b) {
    timeline.push_back({median(ready[b]), bytes[b]});
    std::printf("    bucket %zu (%.0f bytes): ready %+.4f ms relative to backward's end\n", b,
                bytes[b], timeline[b].ready_ms - end_ms);
  }
  std::printf("  model input: %s\n", bench::format_model_input(timeline, end_ms).c_str());
}

// --device cuda --ranks 1: the one-rank DDP step (an NCCL group of one)
// against the plain single-GPU step, alternating which runs first, and a
// one-rank all-reduce's time at the gradients' size and at 256 MB.
int ddp_cuda_one_rank(int iters, int warmup, double bucket_cap_mb, double first_bucket_mb,
                      bool compiled) {
  const bool emulated = std::getenv("KILN_CUDA_EMULATE") != nullptr;
  auto pg = dist::default_group();
  const Device dev = Device::cuda(0);
  auto on_device = [&](MlpStep& s) {
    s.model->to(dev);
    s.opt = std::make_unique<optim::SGD>(s.model->parameters(),
                                         optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
    s.x = s.x.to(dev);
    s.y = s.y.to(dev);
  };
  MlpStep plain(/*fused=*/false), wrapped(/*fused=*/false);
  on_device(plain);
  on_device(wrapped);
  dist::DistributedDataParallel ddp(
      wrapped.model, {.bucket_cap_mb = bucket_cap_mb, .first_bucket_mb = first_bucket_mb});
  auto fwd_bwd = [&](std::function<Tensor(const Tensor&)> model, const char* name) {
    return compile(
        [model](const Tensor& xb, const Tensor& yb) {
          Tensor loss = cross_entropy(model(xb), yb);
          loss.backward();
          return loss;
        },
        {.enabled = compiled, .name = name});
  };
  auto plain_step = fwd_bwd([&](const Tensor& xb) { return plain.model->forward(xb); }, "plain");
  auto ddp_step = fwd_bwd([&](const Tensor& xb) { return ddp(xb); }, "ddp1");
  auto timed = [&](MlpStep& s, auto& f) {
    cuda::synchronize(0);
    const auto t0 = Clock::now();
    s.opt->zero_grad();
    f(s.x, s.y);
    s.opt->step();
    cuda::synchronize(0);
    return ms(Clock::now() - t0);
  };
  std::vector<double> p_ms, d_ms, ratio;
  autograd::GradDestinationStats dest0{};
  dist::BoundCollectiveStats bound0{};
  const cuda::GraphStats graphs0 = cuda::graph_stats();
  for (int i = 0; i < warmup + iters; ++i) {
    if (i == warmup) {
      dest0 = autograd::grad_destination_stats();
      bound0 = dist::bound_collective_stats();
    }
    double p = 0, d = 0;
    if (i % 2 == 0) {
      p = timed(plain, plain_step);
      d = timed(wrapped, ddp_step);
    } else {
      d = timed(wrapped, ddp_step);
      p = timed(plain, plain_step);
    }
    if (i < warmup) continue;
    p_ms.push_back(p);
    d_ms.push_back(d);
    ratio.push_back(d / p);
  }
  std::printf(
      "one rank on %s, %s forward+backward, MLP 784-1024-1024-10 batch 128, SGD momentum, %zu "
      "buckets; medians of %d paired steps (synchronized): plain %.3f ms, DDP %.3f ms, DDP / "
      "plain %.3fx (median of the pairs' ratios; target <= 1.05x)\n",
      emulated ? "the emulated CUDA device (PoCL: not speed)" : "the GPU",
      compiled ? "compiled" : "eager", ddp.num_buckets(), iters, median(p_ms), median(d_ms),
      median(ratio));
  // How the DDP step's gradients reached the buckets (the plain step sets no
  // destinations): a plan's outputs written into them are not counted, and a
  // traced all-reduce is counted where the plan runs on the host (plainly, or
  // capturing a CUDA graph), not in the graph's replays.
  const auto dest1 = autograd::grad_destination_stats();
  const auto bound1 = dist::bound_collective_stats();
  const double n = iters;
  std::printf(
      "  per DDP step: %.1f gradients computed in their buckets and %.1f copied there by "
      "backward; traced all-reduces found %.1f in their buckets and copied %.1f in\n",
      static_cast<double>(dest1.computed_in_place - dest0.computed_in_place) / n,
      static_cast<double>(dest1.copied - dest0.copied) / n,
      static_cast<double>(bound1.in_place - bound0.in_place) / n,
      static_cast<double>(bound1.copied - bound0.copied) / n);
  // Both plans replay CUDA graphs once captured (the DDP one with its
  // all-reduces captured), or say why one runs plainly.
  const cuda::GraphStats graphs1 = cuda::graph_stats();
  if (compiled)
    std::printf(
        "  CUDA graphs (both steps, warm-up included): %lld captured, %lld replays, %lld "
        "plans plain%s%s\n",
        static_cast<long long>(graphs1.captures - graphs0.captures),
        static_cast<long long>(graphs1.replays - graphs0.replays),
        static_cast<long long>(graphs1.fallbacks - graphs0.fallbacks),
        graphs1.fallbacks > graphs0.fallbacks ? ": " : "",
        graphs1.fallbacks > graphs0.fallbacks ? graphs1.last_fallback.c_str() : "");
  int64_t grads = 0;
  for (auto& p : plain.model->parameters()) grads += p.numel();
  for (int64_t n : {grads, emulated ? int64_t{0} : int64_t{64} << 20}) {
    if (n == 0) continue;
    Tensor t = zeros({n}, DType::f32, dev);
    for (int i = 0; i < 2; ++i) pg->all_reduce(t, dist::ReduceOp::kSum)->wait();
    cuda::synchronize(0);
    std::vector<double> each;
    for (int i = 0; i < std::max(iters, 5); ++i) {
      const auto t0 = Clock::now();
      pg->all_reduce(t, dist::ReduceOp::kSum)->wait();
      cuda::synchronize(0);
      each.push_back(ms(Clock::now() - t0));
    }
    const double bytes = 4.0 * static_cast<double>(n), m = median(each);
    std::printf(
        "  one-rank all-reduce of %.1f MB: %.3f ms, algbw %.1f GB/s (busbw = algbw * 2(n-1)/n "
        "= 0 for n = 1: nothing crosses a link)\n",
        bytes / 1e6, m, bytes / (m * 1e6));
  }
  std::fflush(stdout);  // the figures above stand whatever the timeline does
  if (compiled) {
    std::printf(
        "  backward timeline: not measured for the compiled step (one plan runs forward and "
        "backward, no event between them, and replays one CUDA graph: DDP's group is not called "
        "per bucket, no ready events); run without --compile\n");
  } else {
    try {
      one_rank_timeline(iters, warmup, bucket_cap_mb, first_bucket_mb);
    } catch (const std::exception& e) {
      std::printf("  backward timeline failed: %s\n", e.what());
    }
  }
  std::fflush(stdout);
  dist::destroy_process_group();
  return 0;
}

}  // namespace

// The --device cuda mode (called on each rank by ddp_bench's worker).
int ddp_cuda_schedule(int iters, int warmup, double bucket_cap_mb, double first_bucket_mb,
                      bool compiled) {
  if (!cuda::is_available()) {
    std::fprintf(stderr, "ddp_bench --device cuda: %s\n", cuda::unavailable_reason().c_str());
    return 1;
  }
  set_num_threads(1);
  dist::init_process_group({.backend = "nccl"});
  if (dist::default_group()->size() == 1)
    return ddp_cuda_one_rank(iters, warmup, bucket_cap_mb, first_bucket_mb, compiled);
  auto pg = std::make_shared<ScheduleGroup>(dist::default_group());
  MlpStep step(/*fused=*/false);
  step.model->to(Device::cuda(0));
  step.opt = std::make_unique<optim::SGD>(step.model->parameters(),
                                          optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
  const Tensor x = step.x.to(Device::cuda(0)), y = step.y.to(Device::cuda(0));
  dist::DistributedDataParallel ddp(
      step.model,
      {.bucket_cap_mb = bucket_cap_mb, .first_bucket_mb = first_bucket_mb, .process_group = pg});
  auto fwd_bwd = compile(
      [&](const Tensor& xb, const Tensor& yb) {
        Tensor loss = cross_entropy(ddp(xb), yb);
        loss.backward();
        return loss;
      },
      {.enabled = compiled, .name = "ddp_bench_cuda"});
  const size_t nb = ddp.num_buckets();
  std::vector<std::vector<double>> ready(nb), start(nb), end(nb), host(nb);
  std::vector<int64_t> numel(nb);
  std::vector<double> step_ms, exposed;
  for (int i = 0; i < warmup + iters; ++i) {
    pg->barrier()->wait(std::chrono::minutes(5));
    const auto t0 = Clock::now();
    step.opt->zero_grad();
    fwd_bwd(x, y);
    step.opt->step();
    cuda::synchronize(0);
    const auto t1 = Clock::now();
    auto issued = pg->take();
    if (i < warmup) continue;
    if (issued.size() != nb) {
      std::fprintf(stderr, "rank %d: %zu all-reduces in a step, DDP has %zu buckets\n", pg->rank(),
                   issued.size(), nb);
      return 1;
    }
    const auto bwd_end = issued.back()->ready_at;
    Clock::time_point prev_end{};
    for (size_t b = 0; b < nb; ++b) {
      const Issued& e = *issued[b];
      const auto s = std::max(e.ready_at, prev_end);
      prev_end = e.done_at;
      ready[b].push_back(ms(e.ready_at - bwd_end));
      start[b].push_back(ms(s - bwd_end));
      end[b].push_back(ms(e.done_at - bwd_end));
      host[b].push_back(ms(e.enqueued - t0));
      numel[b] = e.numel;
    }
    step_ms.push_back(ms(t1 - t0));
    exposed.push_back(ms(issued.back()->done_at - bwd_end));
  }
  for (int r = 0; r < pg->size(); ++r) {
    pg->barrier()->wait(std::chrono::minutes(1));
    if (r != pg->rank()) continue;
    std::printf(
        "rank %d: DDP on %s, %s forward+backward, MLP 784-1024-1024-10 batch 128, %zu buckets; "
        "medians of %d steps, ms relative to backward's end on the compute stream (the last "
        "bucket's ready); %s\n",
        r, "CUDA (on the emulated device, PoCL: schedule only, not speed)",
        compiled ? "compiled" : "eager", nb, iters,
        "start = max(ready, previous end): the comm stream's order");
    for (size_t b = 0; b < nb; ++b)
      std::printf(
          "  all-reduce %zu (%lld elements): issued by the host at %.1f after the step began; "
          "ready %+.1f  all-reduce %+.1f .. %+.1f\n",
          b, static_cast<long long>(numel[b]), median(host[b]), median(ready[b]), median(start[b]),
          median(end[b]));
    std::printf("  step (synchronized) %.1f; communication after backward's end %.1f\n",
                median(step_ms), median(exposed));
    std::fflush(stdout);
  }
  pg->barrier()->wait(std::chrono::minutes(1));
  dist::destroy_process_group();
  return 0;
}

}  // namespace kiln::bench
