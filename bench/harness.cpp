// The eager-vs-compiled harness: one command runs a fixed set of workloads
// eagerly and through kiln::compile, measures the machine's own limits in the
// same run (STREAM copy/triad, sgemm, a hand-written fused GELU loop), and
// prints a table (and JSON with --json FILE). Figures are ratios within one run.
//   harness [--quick] [--json FILE] [--only NAME,NAME...]
//   harness --paired-resnet ROUNDS STEPS   (the ResNet row, eager and compiled in
//                                           alternating rounds; medians and ratio;
//                                           KILN_NUM_THREADS=1: thread CPU time)
//   harness --profile-resnet STEPS eager|compiled   (one side only, for perf record)
// Workloads: tanh-GELU 16M, softmax and layer_norm [4096, 1024], Adam over 10M
// parameters, the MLP and CNN training steps, a transformer block fwd+bwd; each
// also at 1 thread; the MLP step's cold compile and warm start from the disk cache.
// Eager and compiled steps are timed alternately (medians), and eager alone in consecutive
// calls (JSON eager_seq_ms, the figure bench/peers compares). Eager runs twice: as shipped (fused
// composites and optimizer steps) and with both off (set_eager_fusion(false), fused = false: one
// primitive op at a time), their ratio from paired rounds.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "fashion_mnist.h"
#include "kernels/kernel_cache.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"
#include "kiln/thread_pool.h"
#include "mlp_step.h"

namespace {

using namespace kiln;
using Clock = std::chrono::steady_clock;

// Median wall time of `reps` runs of fn, in ms, after one warm-up run.
double time_ms(const std::function<void()>& fn, int reps) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// ---- hardware references ----
// Both references run on the pool's threads, like the kernels they are compared with.
double stream_copy_gbs(size_t n, int reps) {
  std::vector<float> a(n, 1.0f), b(n);
  double ms = time_ms(
      [&] {
        parallel_for(0, static_cast<int64_t>(n), 1 << 16, [&](int64_t s, int64_t e) {
          std::memcpy(b.data() + s, a.data() + s, static_cast<size_t>(e - s) * sizeof(float));
        });
      },
      reps);
  return 2.0 * static_cast<double>(n * sizeof(float)) / (ms * 1e6);
}

double stream_triad_gbs(size_t n, int reps) {
  std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);
  double ms = time_ms(
      [&] {
        parallel_for(0, static_cast<int64_t>(n), 1 << 16, [&](int64_t s, int64_t e) {
          float* __restrict pa = a.data();
          const float* __restrict pb = b.data();
          const float* __restrict pc = c.data();
          for (int64_t i = s; i < e; ++i) pa[i] = pb[i] + 3.0f * pc[i];
        });
      },
      reps);
  return 3.0 * static_cast<double>(n * sizeof(float)) / (ms * 1e6);
}

// The hardware's sgemm rate: OpenBLAS on its own threads, one per pool thread
// (kiln keeps OpenBLAS single-threaded and splits GEMMs over its pool). Its
// idle workers spin ~0.1 s after the last call (2^28 cycles) before they sleep;
// the pause keeps that spin off the cores of whatever is timed next.
double sgemm_gflops(int n, int reps) {
  std::vector<float> a(static_cast<size_t>(n) * n, 1.0f), b(a), c(a.size());
  openblas_set_num_threads(num_threads());
  double ms = time_ms(
      [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(),
                    n, 0.0f, c.data(), n);
      },
      reps);
  openblas_set_num_threads(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  return 2.0 * n * static_cast<double>(n) * n / (ms * 1e6);
}

// exp for the hand-written loop: Cephes polynomial g++ vectorizes (no libm call).
inline float fast_exp(float x) {
  x = std::min(88.0f, std::max(-88.0f, x));
  const float n = std::nearbyint(x * 1.44269504f);
  const float r = std::fma(n, 2.12194440e-4f, std::fma(n, -0.693359375f, x));
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  const float e = std::fma(r * r, p, r) + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float s;
  std::memcpy(&s, &bits, sizeof s);
  return e * s;
}

// tanh-GELU over n floats, fused by hand, split over the pool's threads.
void gelu_loop(const float* x, float* y, int64_t n) {
  parallel_for(0, n, 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float v = x[i];
      const float u = 0.7978845608f * (v + 0.044715f * v * v * v);
      const float t = 1.0f - 2.0f / (fast_exp(2.0f * u) + 1.0f);
      y[i] = 0.5f * v * (1.0f + t);
    }
  });
}

struct Row {
  std::string name;
  double eager_ms = 0, compiled_ms = 0, compiled_1t_ms = 0, max_abs_diff = 0, trace_ms = 0,
         passes_ms = 0;
  double bytes = 0, flops = 0;  // per call, for GB/s or GFLOP/s
  double ref_ratio = 0;         // compiled / the row's hardware reference time, paired rounds
  double eager_unfused_ms = 0;  // eager with fusion off (paired rounds' median)
  double eager_seq_ms = 0;      // eager alone, consecutive calls (median)
  double fusion_ratio = 0;      // eager / eager with fusion off, paired rounds
  double thread_ratio = 0;      // compiled at the pool's size / at 1 thread, paired rounds
  int64_t peak_bytes = 0;
  int traces = 0;  // of the compiled function: 1 = no re-trace after the warm-up
};

double max_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    NoGradGuard ng;
    m = std::max(m, amax(abs(cast(a[i], DType::f64) - cast(b[i], DType::f64))).item<double>());
  }
  return m;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A row's hardware reference: the time (ms) its work would take at the rate a
// reference measures right now (the sgemm floor, the hand-written loop, STREAM).
using Reference = std::function<double()>;

// Rounds behind each ratio. A round measures both sides of every ratio back to
// back, in alternating order, so a noisy stretch of the machine hits both; the
// ratio reported is the median over rounds.
int g_rounds = 5;

// Times `eager_fn` eagerly and `comp_fn` through kiln::compile, the compiled one
// at the pool's full size and at 1 thread. The two must do the same work on
// identical but separate state (training steps move their parameters): their
// second calls are compared (the compiled one is the first traced run, after the
// eager warm-up call). The ratios to `ref` and to 1 thread come from paired rounds.
// Eager mode with its fused composites off, for a scope.
struct UnfusedScope {
  UnfusedScope() { set_eager_fusion(false); }
  ~UnfusedScope() { set_eager_fusion(true); }
};

// `unfused` (optional): the eager work with fusion off (composites and optimizer steps).
template <typename E, typename C>
Row measure(const std::string& name, E eager_fn, C comp_fn, int reps, const Reference& ref = {},
            const std::function<void()>& unfused = {}) {
  Row r;
  r.name = name;
  auto c = compile(comp_fn, {.name = name});
  eager_fn();
  c();
  r.max_abs_diff = max_diff(eager_fn(), c());
  // Eager and compiled steps alternate (which goes first alternating too), so
  // load from other processes falls on both alike.
  std::vector<double> e_ms, c_ms;
  auto once = [](const auto& fn) {
    const auto t0 = Clock::now();
    fn();
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  for (int i = 0; i < reps; ++i) {
    if (i % 2 == 0) e_ms.push_back(once([&] { eager_fn(); }));
    c_ms.push_back(once([&] { c(); }));
    if (i % 2 == 1) e_ms.push_back(once([&] { eager_fn(); }));
  }
  r.eager_ms = median(e_ms);
  r.compiled_ms = median(c_ms);
  // Eager alone in consecutive calls, as the PyTorch peer (bench/peers) times
  // its rows: above, each eager call follows the compiled twin's call on state
  // of its own, whose memory traffic costs a memory-bound row several percent.
  std::vector<double> seq_ms;
  for (int i = 0; i < reps; ++i) seq_ms.push_back(once([&] { eager_fn(); }));
  r.eager_seq_ms = median(seq_ms);
  const int threads = num_threads();
  const int per_round = std::max(2, reps / 3);
  std::vector<double> ref_ratios, thread_ratios, one_ms, unfused_ms, fusion_ratios;
  for (int round = 0; round < g_rounds; ++round) {
    double full = 0, one = 0, ref_ms = 0;
    auto time_full = [&] { full = time_ms([&] { c(); }, per_round); };
    auto time_one = [&] {
      set_num_threads(1);
      one = time_ms([&] { c(); }, per_round);
      set_num_threads(threads);
    };
    auto time_ref = [&] { ref_ms = ref ? ref() : 0; };
    if (round % 2 == 0) {
      time_ref();
      time_full();
      time_one();
    } else {
      time_one();
      time_full();
      time_ref();
    }
    thread_ratios.push_back(full / one);
    one_ms.push_back(one);
    if (ref) ref_ratios.push_back(full / ref_ms);
    if (unfused) {
      double fused_ms = 0, plain_ms = 0;
      auto time_fused = [&] { fused_ms = time_ms([&] { eager_fn(); }, per_round); };
      auto time_plain = [&] { plain_ms = time_ms(unfused, per_round); };
      if (round % 2 == 0) {
        time_fused();
        time_plain();
      } else {
        time_plain();
        time_fused();
      }
      unfused_ms.push_back(plain_ms);
      fusion_ratios.push_back(fused_ms / plain_ms);
    }
  }
  if (unfused) {
    r.eager_unfused_ms = median(unfused_ms);
    r.fusion_ratio = median(fusion_ratios);
  }
  r.compiled_1t_ms = median(one_ms);
  r.thread_ratio = median(thread_ratios);
  if (ref) r.ref_ratio = median(ref_ratios);
  r.trace_ms = c.stats().trace_ms;
  r.passes_ms = c.stats().passes_ms;
  r.peak_bytes = c.stats().last_peak_bytes;
  r.traces = c.stats().traces;
  return r;
}

template <typename F>
Row measure(const std::string& name, F fn, int reps, const Reference& ref = {},
            const std::function<void()>& unfused = {}) {
  return measure(name, fn, fn, reps, ref, unfused);
}

// fn with the eager composites unfused.
template <typename F>
std::function<void()> unfused_form(F fn) {
  return [fn] {
    UnfusedScope u;
    fn();
  };
}

// An Adam step over `n` parameters (ten tensors) with fixed gradients.
struct AdamStep {
  std::vector<Tensor> params;
  std::unique_ptr<optim::Adam> opt;
  explicit AdamStep(int64_t n, bool fused = true) {
    manual_seed(1);
    for (int i = 0; i < 10; ++i) {
      Tensor p = randn({n / 10});
      p.requires_grad_(true);
      p.set_grad(randn({n / 10}));
      params.push_back(p);
    }
    opt = std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = 1e-3, .fused = fused});
  }
  std::vector<Tensor> operator()() {
    opt->step();
    return {params.front()};
  }
};

// A transformer encoder block (post-norm, ReLU, no dropout) forward + backward.
struct TransformerStep {
  std::shared_ptr<nn::TransformerEncoderLayer> layer;
  Tensor x;
  static constexpr int64_t B = 16, L = 128, D = 256, H = 4, F = 1024;
  TransformerStep() {
    manual_seed(2);
    layer = std::make_shared<nn::TransformerEncoderLayer>(
        D, H, nn::TransformerEncoderLayerOptions{.dim_feedforward = F, .dropout = 0.0});
    x = randn({B, L, D});
  }
  std::vector<Tensor> operator()() {
    layer->zero_grad();
    Tensor loss = mean(square(layer->forward(x)));
    loss.backward();
    return {loss};
  }
  // Matmul FLOPs the step performs: forward, and backward's two products per
  // matmul (2x forward) except the input gradient of the QKV projection (x
  // does not require grad, so autograd skips it).
  static double flops() {
    const double tokens = B * L;
    return 2.0 * tokens * (3 * (4.0 * D * D + 2.0 * D * F + 2.0 * L * D) - 3.0 * D * D);
  }
};

// The Fashion-MNIST CNN (examples/fashion_mnist) training step with Adam, batch 128.
struct CnnStep {
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<optim::Adam> opt;
  Tensor x, y;
  explicit CnnStep(bool fused = true) {
    manual_seed(3);
    model = examples::make_fashion_model("cnn");
    model->eval();  // no dropout: eager and compiled compare exactly
    opt = std::make_unique<optim::Adam>(model->parameters(),
                                        optim::AdamOptions{.lr = 1e-3, .fused = fused});
    x = randn({128, 1, 28, 28});
    y = randint(0, 10, {128});
  }
  std::vector<Tensor> operator()() {
    opt->zero_grad();
    Tensor loss = cross_entropy(model->forward(x), y);
    loss.backward();
    opt->step();
    return {loss};
  }
};

// A ResNet-style block: conv-BN-ReLU-conv-BN plus the input, then ReLU.
struct ResBlock : nn::Module {
  std::shared_ptr<nn::Conv2d> c1, c2;
  std::shared_ptr<nn::BatchNorm2d> b1, b2;
  explicit ResBlock(int64_t ch) : nn::Module("ResBlock") {
    const nn::Conv2dOptions same{.padding = 1, .bias = false};
    c1 = register_module("c1", std::make_shared<nn::Conv2d>(ch, ch, nn::Size2{3, 3}, same));
    b1 = register_module("b1", std::make_shared<nn::BatchNorm2d>(ch));
    c2 = register_module("c2", std::make_shared<nn::Conv2d>(ch, ch, nn::Size2{3, 3}, same));
    b2 = register_module("b2", std::make_shared<nn::BatchNorm2d>(ch));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = relu(b1->forward(c1->forward(x)));
    return relu(add(b2->forward(c2->forward(h)), x));
  }
};

// A small ResNet training step in train mode (BatchNorm batch statistics and
// running stats), SGD with momentum driven by OneCycleLR (PyTorch's defaults:
// lr and momentum cycle every step) whose step() runs inside the step.
struct ResnetStep {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::SGD> opt;
  std::unique_ptr<optim::OneCycleLR> sched;
  Tensor x, y;
  explicit ResnetStep(bool fused = true) {
    manual_seed(5);
    model = std::make_shared<nn::Sequential>();
    model->push_back(std::make_shared<nn::Conv2d>(3, 32, nn::Size2{3, 3},
                                                  nn::Conv2dOptions{.padding = 1, .bias = false}));
    model->push_back(std::make_shared<nn::BatchNorm2d>(32));
    model->push_back(std::make_shared<nn::ReLU>());
    model->push_back(std::make_shared<ResBlock>(32));
    model->push_back(std::make_shared<ResBlock>(32));
    model->push_back(std::make_shared<nn::AvgPool2d>(nn::Size2{32, 32}));
    model->push_back(std::make_shared<nn::Flatten>());
    model->push_back(std::make_shared<nn::Linear>(32, 10));
    opt = std::make_unique<optim::SGD>(
        model->parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .fused = fused});
    sched = std::make_unique<optim::OneCycleLR>(*opt, 0.1, 100000);
    x = randn({32, 3, 32, 32});
    y = randint(0, 10, {32});
  }
  std::vector<Tensor> operator()() {
    opt->zero_grad();
    Tensor loss = cross_entropy(model->forward(x), y);
    loss.backward();
    opt->step();
    sched->step();
    return {loss.detach()};
  }
};

using bench::MlpStep;

// The ResNet row's eager and compiled steps in alternating rounds of `steps`
// steps each (which side goes first alternates), so load from other processes
// falls on both alike; prints each round and the medians.
// Median CPU time of the calling thread over `reps` runs of fn (after one
// warm-up), in ms: with one pool thread all the work, without the time other
// processes took the core (the shared hosts' load).
double cpu_ms(const std::function<void()>& fn, int reps) {
  auto now = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
  };
  fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const double t0 = now();
    fn();
    t.push_back(now() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int paired_resnet(int rounds, int steps) {
  ResnetStep a, b;
  auto c = compile([&] { return b(); }, {.name = "resnet_bn_onecycle"});
  a();
  c();
  const double diff = max_diff(a(), c());
  std::vector<double> e_ms, c_ms, ratio;
  for (int r = 0; r < rounds; ++r) {
    double e = 0, k = 0;
    // One pool thread: CPU time of the one thread doing the work; else wall time.
    auto timer = num_threads() == 1 ? cpu_ms : time_ms;
    auto eager = [&] { e = timer([&] { a(); }, steps); };
    auto comp = [&] { k = timer([&] { c(); }, steps); };
    if (r % 2 == 0) {
      eager();
      comp();
    } else {
      comp();
      eager();
    }
    e_ms.push_back(e);
    c_ms.push_back(k);
    ratio.push_back(e / k);
    std::printf("round %d: eager %.2f ms, compiled %.2f ms, compiled speed %.3fx eager\n", r, e, k,
                e / k);
  }
  std::printf(
      "resnet_bn_onecycle paired (%d rounds x %d steps, %d threads%s): eager %.2f ms, compiled "
      "%.2f ms, compiled speed %.3fx eager (median of ratios), traces %lld, max|diff| %.3g\n",
      rounds, steps, num_threads(), num_threads() == 1 ? ", thread CPU time" : "", median(e_ms),
      median(c_ms), median(ratio), static_cast<long long>(c.stats().traces), diff);
  return 0;
}

// `steps` steps of one side of the ResNet row (after warm-up), for perf record.
int profile_resnet(int steps, bool compiled) {
  ResnetStep s;
  auto c = compile([&] { return s(); }, {.name = "resnet_bn_onecycle"});
  for (int i = 0; i < 3; ++i) compiled ? c() : s();
  const auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) compiled ? c() : s();
  std::printf("%s: %.2f ms/step\n", compiled ? "compiled" : "eager",
              std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / steps);
  return 0;
}

// Cold compile (empty disk cache) and warm start (disk cache filled, memory cache
// dropped) of the MLP step: the time of the first, tracing call, in ms.
struct StartTimes {
  double cold_ms = 0, cold_llvm_ms = 0, warm_ms = 0, warm_llvm_ms = 0;
  int64_t warm_disk_hits = 0;
};
StartTimes start_times() {
  StartTimes t;
  auto first_call = [&](double* llvm_ms) {
    MlpStep s;
    auto c = compile([&] { return s(); }, {.warmup = 0, .name = "mlp_start"});
    const double llvm0 = kir::kernel_cache_stats().compile_ms;
    const auto t0 = Clock::now();
    c();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    *llvm_ms = kir::kernel_cache_stats().compile_ms - llvm0;
    return ms;
  };
  t.cold_ms = first_call(&t.cold_llvm_ms);
  kir::clear_memory_cache();
  const int64_t disk0 = kir::kernel_cache_stats().disk_hits;
  t.warm_ms = first_call(&t.warm_llvm_ms);
  t.warm_disk_hits = kir::kernel_cache_stats().disk_hits - disk0;
  return t;
}

// The hardware references measured at the start of a run.
struct Hardware {
  double copy_gbs = 0, triad_gbs = 0, sgemm = 0, gelu_loop_ms = 0;
};

void print_table(const std::vector<Row>& rows, const Hardware& hw) {
  const double copy_gbs = hw.copy_gbs, triad_gbs = hw.triad_gbs, sgemm = hw.sgemm,
               gelu_loop_ms = hw.gelu_loop_ms;
  std::printf(
      "hardware (this run, %d threads): STREAM copy %.1f GB/s, triad %.1f GB/s, "
      "sgemm %.0f GFLOP/s (OpenBLAS %s), hand-written GELU loop %.2f ms\n",
      num_threads(), copy_gbs, triad_gbs, sgemm, blas_core().c_str(), gelu_loop_ms);
  std::printf("%-22s %9s %9s %8s %9s %8s %8s %8s %9s %9s %10s %6s %9s %8s\n", "workload",
              "eager ms", "compiled", "speedup", "1-thread", "trace", "passes", "GB/s", "GFLOP/s",
              "peak MB", "max|diff|", "traces", "unfused", "fused/un");
  for (const Row& r : rows) {
    const double gbs = r.bytes > 0 ? r.bytes / (r.compiled_ms * 1e6) : 0;
    const double gfl = r.flops > 0 ? r.flops / (r.compiled_ms * 1e6) : 0;
    std::printf(
        "%-22s %9.2f %9.2f %7.2fx %9.2f %8.2f %8.2f %8.1f %9.1f %9.1f %10.3g %6d %9.2f %7.2fx\n",
        r.name.c_str(), r.eager_ms, r.compiled_ms, r.eager_ms / r.compiled_ms, r.compiled_1t_ms,
        r.trace_ms, r.passes_ms, gbs, gfl, static_cast<double>(r.peak_bytes) / 1e6, r.max_abs_diff,
        r.traces, r.eager_unfused_ms, r.fusion_ratio);
  }
}

// Each target line: the paired-rounds median (see g_rounds), then the ratio
// against the run's one reference figure, for comparison.
void print_targets(const std::vector<Row>& rows, const Hardware& hw, const StartTimes* st) {
  const double copy_gbs = hw.copy_gbs, sgemm = hw.sgemm, gelu_loop_ms = hw.gelu_loop_ms;
  auto by = [&](const char* name) -> const Row* {
    for (const Row& r : rows)
      if (r.name == name) return &r;
    return nullptr;
  };
  if (const Row* gelu = by("gelu_tanh_16M"))
    std::printf(
        "GELU: compiled / hand-written loop = %.2fx (target <= 1; %.2fx against the one loop "
        "figure), eager / compiled = %.2fx (target >= 10)\n",
        gelu->ref_ratio, gelu->compiled_ms / gelu_loop_ms, gelu->eager_ms / gelu->compiled_ms);
  auto frac = [&](const Row& r) { return 100 * r.bytes / (r.compiled_ms * 1e6) / copy_gbs; };
  for (const char* n : {"softmax_4096x1024", "layer_norm_4096x1024"})
    if (const Row* r = by(n))
      std::printf("%s: %.0f%% of STREAM copy (target >= 70%%; %.0f%% against the one figure)\n", n,
                  100 / r->ref_ratio, frac(*r));
  if (const Row* r = by("adam_10M"))
    std::printf(
        "Adam: %.0f%% of its bandwidth bound (28 B/param; target >= 70%%; %.0f%% against the "
        "one figure)\n",
        100 / r->ref_ratio, frac(*r));
  auto floor = [&](const Row& r) { return r.compiled_ms / (r.flops / (sgemm * 1e6)); };
  for (const char* n : {"mlp_step_sgd", "transformer_fwd_bwd"})
    if (const Row* r = by(n))
      std::printf("%s: %.2fx its GEMM floor (target <= 1.3; %.2fx against the one sgemm figure)\n",
                  n, r->ref_ratio, floor(*r));
  double worst = 0;
  std::string worst_name;
  for (const Row& r : rows)
    if (r.thread_ratio > worst) {
      worst = r.thread_ratio;
      worst_name = r.name;
    }
  if (!rows.empty())
    std::printf("threads: worst %d-thread / 1-thread time = %.2f (%s; target <= 1)\n",
                num_threads(), worst, worst_name.c_str());
  if (st)
    std::printf(
        "MLP step start: cold compile %.0f ms (LLVM %.0f ms; target <= 1000), warm start "
        "from the disk cache %.1f ms (LLVM %.1f ms, %lld disk hits; target <= 50)\n",
        st->cold_ms, st->cold_llvm_ms, st->warm_ms, st->warm_llvm_ms,
        static_cast<long long>(st->warm_disk_hits));
}

void write_json(const std::string& path, const std::vector<Row>& rows, const Hardware& hw,
                const StartTimes& st) {
  const double copy_gbs = hw.copy_gbs, triad_gbs = hw.triad_gbs, sgemm = hw.sgemm,
               gelu_loop_ms = hw.gelu_loop_ms;
  {
    std::ofstream f(path);
    f << "{\"stream_copy_gbs\": " << copy_gbs << ", \"stream_triad_gbs\": " << triad_gbs
      << ", \"sgemm_gflops\": " << sgemm << ", \"gelu_loop_ms\": " << gelu_loop_ms
      << ", \"mlp_cold_compile_ms\": " << st.cold_ms << ", \"mlp_warm_start_ms\": " << st.warm_ms
      << ", \"workloads\": [";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      f << (i ? ", " : "") << "{\"name\": \"" << r.name << "\", \"eager_ms\": " << r.eager_ms
        << ", \"compiled_ms\": " << r.compiled_ms << ", \"compiled_1t_ms\": " << r.compiled_1t_ms
        << ", \"trace_ms\": " << r.trace_ms << ", \"passes_ms\": " << r.passes_ms
        << ", \"reference_ratio\": " << r.ref_ratio << ", \"thread_ratio\": " << r.thread_ratio
        << ", \"peak_bytes\": " << r.peak_bytes << ", \"max_abs_diff\": " << r.max_abs_diff
        << ", \"eager_unfused_ms\": " << r.eager_unfused_ms
        << ", \"eager_seq_ms\": " << r.eager_seq_ms
        << ", \"eager_fusion_ratio\": " << r.fusion_ratio << "}";
    }
    f << "]}\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string json, only;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0)
      quick = true;
    else if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc)
      json = argv[++i];
    else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc)
      only = str(",", argv[++i], ",");
    else if (std::strcmp(argv[i], "--paired-resnet") == 0 && i + 2 < argc)
      return paired_resnet(std::atoi(argv[i + 1]), std::atoi(argv[i + 2]));
    else if (std::strcmp(argv[i], "--profile-resnet") == 0 && i + 2 < argc)
      return profile_resnet(std::atoi(argv[i + 1]), std::strcmp(argv[i + 2], "compiled") == 0);
    else {
      std::fprintf(
          stderr,
          "usage: harness [--quick] [--json FILE] [--only NAME,...]\n"
          "       harness --paired-resnet ROUNDS STEPS | --profile-resnet STEPS eager|compiled\n"
          "  workloads: gelu_tanh_16M softmax_4096x1024 layer_norm_4096x1024 adam_10M\n"
          "             mlp_step_sgd transformer_fwd_bwd cnn_step_adam resnet_bn_onecycle\n"
          "             mlp_start\n");
      return 2;
    }
  }
  // --only runs a subset (the hardware references always run).
  const std::vector<std::string> names = {
      "gelu_tanh_16M", "softmax_4096x1024",  "layer_norm_4096x1024",
      "adam_10M",      "mlp_step_sgd",       "transformer_fwd_bwd",
      "cnn_step_adam", "resnet_bn_onecycle", "mlp_start"};
  for (size_t b = 1; b < only.size();) {
    const size_t e = only.find(',', b);
    const std::string n = only.substr(b, e - b);
    if (!n.empty() && std::find(names.begin(), names.end(), n) == names.end()) {
      std::fprintf(stderr, "harness: unknown workload '%s' in --only\n", n.c_str());
      return 2;
    }
    b = e + 1;
  }
  auto want = [&](const char* name) {
    return only.empty() || only.find(str(",", name, ",")) != std::string::npos;
  };
  // A private, empty disk cache, so "cold" means nothing compiled before.
  char dir_tmpl[] = "/tmp/kiln-harness-XXXXXX";
  const char* dir = mkdtemp(dir_tmpl);
  if (dir) setenv("KILN_CACHE_DIR", dir, 1);
  const int reps = quick ? 3 : 10;
  if (quick) g_rounds = 3;
  const int64_t n16m = quick ? (1 << 20) : (1 << 24);

  // Hardware references measured in this run.
  const double copy_gbs = stream_copy_gbs(static_cast<size_t>(n16m), reps);
  const double triad_gbs = stream_triad_gbs(static_cast<size_t>(n16m), reps);
  const int gemm_n = quick ? 512 : 1024;
  const double sgemm = sgemm_gflops(gemm_n, reps);
  Tensor gx = randn({n16m});
  Tensor gy = empty({n16m});
  const double gelu_loop_ms =
      time_ms([&] { gelu_loop(gx.data<float>(), gy.data<float>(), n16m); }, reps);

  // Per-round references: the rates above, measured again beside each row.
  auto bandwidth_ref = [&](double bytes) -> Reference {
    return [=] { return bytes / (stream_copy_gbs(static_cast<size_t>(n16m), 3) * 1e6); };
  };
  auto gemm_ref = [&](double flops) -> Reference {
    return [=] { return flops / (sgemm_gflops(gemm_n, 3) * 1e6); };
  };

  const StartTimes st = want("mlp_start") ? start_times() : StartTimes{};
  std::vector<Row> rows;
  if (want("gelu_tanh_16M")) {
    auto gelu = [&] { return std::vector<Tensor>{kiln::gelu(gx, "tanh")}; };
    Row r = measure(
        "gelu_tanh_16M", gelu, reps,
        [&] { return time_ms([&] { gelu_loop(gx.data<float>(), gy.data<float>(), n16m); }, 3); },
        unfused_form(gelu));
    r.bytes = 8.0 * static_cast<double>(n16m);
    rows.push_back(r);
  }
  const int64_t rws = quick ? 512 : 4096;
  Tensor x = randn({rws, 1024});
  if (want("softmax_4096x1024")) {
    const double bytes = 8.0 * static_cast<double>(x.numel());
    auto fn = [&] { return std::vector<Tensor>{softmax(x, -1)}; };
    Row r = measure("softmax_4096x1024", fn, reps, bandwidth_ref(bytes), unfused_form(fn));
    r.bytes = bytes;
    rows.push_back(r);
  }
  if (want("layer_norm_4096x1024")) {
    Tensor w = ones({1024}), b = zeros({1024});
    const double bytes = 8.0 * static_cast<double>(x.numel());
    auto fn = [&] { return std::vector<Tensor>{layer_norm(x, {1024}, w, b, 1e-5)}; };
    Row l = measure("layer_norm_4096x1024", fn, reps, bandwidth_ref(bytes), unfused_form(fn));
    l.bytes = bytes;
    rows.push_back(l);
  }
  if (want("adam_10M")) {
    const int64_t n = quick ? 1000000 : 10000000;
    AdamStep a(n), b(n), u(n, false);
    const double bytes = 28.0 * static_cast<double>(n);
    Row r = measure(
        "adam_10M", [&] { return a(); }, [&] { return b(); }, reps, bandwidth_ref(bytes),
        unfused_form([&] { u(); }));
    r.bytes = bytes;
    rows.push_back(r);
  }
  if (want("mlp_step_sgd")) {
    MlpStep a, b, u(false);
    // Matmul FLOPs the step performs: forward, every weight gradient, and the
    // input gradients of layers 2 and 3 (the batch does not require grad).
    const double fwd = 784.0 * 1024 + 1024.0 * 1024 + 1024.0 * 10;
    const double flops = 2.0 * 128 * (2 * fwd + 1024.0 * 1024 + 1024.0 * 10);
    Row r = measure(
        "mlp_step_sgd", [&] { return a(); }, [&] { return b(); }, reps, gemm_ref(flops),
        unfused_form([&] { u(); }));
    r.flops = flops;
    rows.push_back(r);
  }
  if (want("transformer_fwd_bwd")) {
    TransformerStep a, b, u;
    Row r = measure(
        "transformer_fwd_bwd", [&] { return a(); }, [&] { return b(); }, quick ? 2 : 5,
        gemm_ref(TransformerStep::flops()), unfused_form([&] { u(); }));
    r.flops = TransformerStep::flops();
    rows.push_back(r);
  }
  if (want("cnn_step_adam")) {
    CnnStep a, b, u(false);
    Row r = measure(
        "cnn_step_adam", [&] { return a(); }, [&] { return b(); }, quick ? 2 : 5, {},
        unfused_form([&] { u(); }));
    rows.push_back(r);
  }

  if (want("resnet_bn_onecycle")) {
    ResnetStep a, b, u(false);
    Row r = measure(
        "resnet_bn_onecycle", [&] { return a(); }, [&] { return b(); }, quick ? 2 : 5, {},
        unfused_form([&] { u(); }));
    rows.push_back(r);
  }

  const Hardware hw{copy_gbs, triad_gbs, sgemm, gelu_loop_ms};
  print_table(rows, hw);
  print_targets(rows, hw, want("mlp_start") ? &st : nullptr);
  if (!json.empty()) write_json(json, rows, hw, st);
  if (dir) std::filesystem::remove_all(dir);
  return 0;
}
