// Eager-runtime benchmarks: dispatch overhead (dense fast path, autograd
// recording, general path), elementwise throughput on 16M floats (with page
// faults per iteration), the transcendentals on 16M floats, sgemm 1024^3 through matmul, and a 3x3
// convolution forward and backward. Each kiln figure has a baseline measured in the same process: a
// plain C++ loop for elementwise and the SGD step, a direct cblas_sgemm call for matmul.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <sys/resource.h>

#include <memory>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/optim/optim.h"
#include "kiln/profiler.h"

using namespace kiln;

namespace {

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// Per-op cost of kiln::add on 1-element tensors (dispatch + allocation + kernel).
void BM_DispatchAdd1(benchmark::State& state) {
  Tensor a = ones({1}), b = ones({1});
  for (auto _ : state) {
    Tensor c = add(a, b);
    benchmark::DoNotOptimize(c.impl());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DispatchAdd1);

// The same with a Scalar operand (wraps a 0-d tensor first).
void BM_DispatchAddScalar1(benchmark::State& state) {
  Tensor a = ones({1});
  for (auto _ : state) {
    Tensor c = a + 1.0;
    benchmark::DoNotOptimize(c.impl());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DispatchAddScalar1);

// Per-op cost of a unary op (neg) on a 1-element tensor.
void BM_DispatchNeg1(benchmark::State& state) {
  Tensor a = ones({1});
  for (auto _ : state) {
    Tensor c = neg(a);
    benchmark::DoNotOptimize(c.impl());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DispatchNeg1);

// kiln::mul on 1-element tensors, one requiring grad (the op records a tape node).
void BM_DispatchMulGrad1(benchmark::State& state) {
  Tensor a = ones({1}).requires_grad_(), b = ones({1});
  for (auto _ : state) {
    Tensor c = mul(a, b);
    benchmark::DoNotOptimize(c.impl());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DispatchMulGrad1);

// kiln::add of a transposed [2, 2] and a contiguous one: not dense, so it
// takes the general path (shape and type rules, strided kernel).
void BM_DispatchAddStrided4(benchmark::State& state) {
  Tensor a = ones({2, 2}).t(), b = ones({2, 2});
  for (auto _ : state) {
    Tensor c = add(a, b);
    benchmark::DoNotOptimize(c.impl());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DispatchAddStrided4);

// BM_DispatchAdd1 while a profile records (arg 1: with shapes and the
// allocator's events). The profile restarts every 100k ops, untimed, so its
// buffers stay small.
void BM_DispatchAdd1Profiled(benchmark::State& state) {
  const profiler::Options opts{.record_shapes = state.range(0) != 0,
                               .profile_memory = state.range(0) != 0};
  Tensor a = ones({1}), b = ones({1});
  auto p = std::make_unique<profiler::Profile>(opts);
  int64_t n = 0;
  for (auto _ : state) {
    Tensor c = add(a, b);
    benchmark::DoNotOptimize(c.impl());
    if (++n % 100000 == 0) {
      state.PauseTiming();
      p.reset();
      p = std::make_unique<profiler::Profile>(opts);
      state.ResumeTiming();
    }
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DispatchAdd1Profiled)->Arg(0)->Arg(1);

constexpr int64_t kBig = 16 * 1024 * 1024;

// kiln::add on 16M floats, threads = state.range(0).
void BM_AddBig(benchmark::State& state) {
  set_num_threads(static_cast<int>(state.range(0)));
  Tensor a = ones({kBig}), b = ones({kBig});
  { Tensor warm = add(a, b); }
  long f0 = minor_faults();
  for (auto _ : state) {
    Tensor c = add(a, b);
    benchmark::DoNotOptimize(c.impl());
  }
  state.counters["faults/iter"] =
      static_cast<double>(minor_faults() - f0) / static_cast<double>(state.iterations());
  state.SetBytesProcessed(state.iterations() * kBig * 12);
  set_num_threads(2);
}
BENCHMARK(BM_AddBig)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// kiln::add on 64K floats (a training step's typical activation), threads =
// state.range(0): 2 threads should not be slower than 1, which is the pool's
// cost of handing out a job and collecting it.
void BM_AddSmall(benchmark::State& state) {
  set_num_threads(static_cast<int>(state.range(0)));
  Tensor a = ones({65536}), b = ones({65536});
  for (auto _ : state) {
    Tensor c = add(a, b);
    benchmark::DoNotOptimize(c.impl());
  }
  state.SetBytesProcessed(state.iterations() * 65536 * 12);
  set_num_threads(2);
}
BENCHMARK(BM_AddSmall)->Arg(1)->Arg(2)->UseRealTime();

// Baseline: a plain single-thread C++ loop into a preallocated buffer.
void BM_AddBigBaselineLoop(benchmark::State& state) {
  std::vector<float> a(kBig, 1.f), b(kBig, 1.f), c(kBig);
  for (auto _ : state) {
    float* __restrict cp = c.data();
    const float* __restrict ap = a.data();
    const float* __restrict bp = b.data();
    for (int64_t i = 0; i < kBig; ++i) cp[i] = ap[i] + bp[i];
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kBig * 12);
}
BENCHMARK(BM_AddBigBaselineLoop)->Unit(benchmark::kMillisecond)->UseRealTime();

// SGD with momentum over one 1.875M-float parameter (the harness MLP's size):
// the fused step (state.range(0) = 1) against the per-op form (0). 20 bytes a
// parameter (p and buf read and written, g read).
constexpr int64_t kSgdParams = 1875000;
void BM_SgdMomentumStep(benchmark::State& state) {
  Tensor p = randn({kSgdParams}).requires_grad_(true);
  p.set_grad(randn({kSgdParams}));
  optim::SGD opt({p}, optim::SGDOptions{.lr = 1e-3, .momentum = 0.9, .fused = state.range(0) != 0});
  opt.step();  // creates the momentum buffer
  for (auto _ : state) opt.step();
  state.SetBytesProcessed(state.iterations() * kSgdParams * 20);
}
BENCHMARK(BM_SgdMomentumStep)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();

// Baseline: the same update as a plain single-thread loop.
void BM_SgdMomentumBaselineLoop(benchmark::State& state) {
  std::vector<float> p(kSgdParams, 1.f), g(kSgdParams, 0.5f), buf(kSgdParams, 0.1f);
  for (auto _ : state) {
    float* __restrict pp = p.data();
    float* __restrict bp = buf.data();
    const float* __restrict gp = g.data();
    for (int64_t i = 0; i < kSgdParams; ++i) {
      const float b = bp[i] * 0.9f + gp[i];
      bp[i] = b;
      pp[i] = pp[i] + b * -1e-3f;
    }
    benchmark::DoNotOptimize(p.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kSgdParams * 20);
}
BENCHMARK(BM_SgdMomentumBaselineLoop)->Unit(benchmark::kMillisecond)->UseRealTime();

// A fused-looking chain in eager mode: each op is its own pass (exp then mul).
void BM_ExpMulBig(benchmark::State& state) {
  set_num_threads(static_cast<int>(state.range(0)));
  Tensor a = ones({kBig}), b = ones({kBig});
  for (auto _ : state) {
    Tensor c = exp(a) * b;
    benchmark::DoNotOptimize(c.impl());
  }
  state.SetBytesProcessed(state.iterations() * kBig * 4 * 5);
  set_num_threads(2);
}
BENCHMARK(BM_ExpMulBig)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// One eager transcendental on 16M floats in [-4, 4] (2 threads): arg 0..9 =
// exp, tanh, sigmoid, erf, log (of |x| + 0.1), sin, pow (x ^ 1.5, x > 0),
// cos, log1p (of |x| + 0.1), erf-GELU (kiln::gelu's exact form).
void BM_Transcendental16M(benchmark::State& state) {
  static const char* const kNames[] = {"exp", "tanh", "sigmoid", "erf",   "log",
                                       "sin", "pow",  "cos",     "log1p", "gelu_erf"};
  const int64_t op = state.range(0);
  Tensor x = rand({kBig}) * 8.0 - 4.0;
  if (op == 4 || op == 6 || op == 8) x = abs(x) + 0.1;
  auto run = [&]() -> Tensor {
    switch (op) {
      case 0:
        return exp(x);
      case 1:
        return tanh(x);
      case 2:
        return sigmoid(x);
      case 3:
        return erf(x);
      case 4:
        return log(x);
      case 5:
        return sin(x);
      case 6:
        return x.pow(1.5);
      case 7:
        return cos(x);
      case 8:
        return log1p(x);
      default:
        return gelu(x);
    }
  };
  { Tensor warm = run(); }
  for (auto _ : state) {
    Tensor c = run();
    benchmark::DoNotOptimize(c.impl());
  }
  state.SetLabel(kNames[op]);
  state.SetBytesProcessed(state.iterations() * kBig * 8);
}
BENCHMARK(BM_Transcendental16M)->DenseRange(0, 9)->Unit(benchmark::kMillisecond)->UseRealTime();

constexpr int64_t kN = 1024;

// kiln::matmul 1024^3 f32, threads = state.range(0) (kiln pool and OpenBLAS).
void BM_Sgemm1024(benchmark::State& state) {
  set_num_threads(static_cast<int>(state.range(0)));
  Tensor a = rand({kN, kN}), b = rand({kN, kN});
  for (auto _ : state) {
    Tensor c = matmul(a, b);
    benchmark::DoNotOptimize(c.impl());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * kN * kN * kN * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  set_num_threads(2);
}
BENCHMARK(BM_Sgemm1024)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// Baseline: cblas_sgemm directly on preallocated buffers, on OpenBLAS's own
// threads (kiln keeps OpenBLAS single-threaded and splits GEMMs itself).
void BM_Sgemm1024BaselineCblas(benchmark::State& state) {
  set_num_threads(static_cast<int>(state.range(0)));
  openblas_set_num_threads(static_cast<int>(state.range(0)));
  std::vector<float> a(kN * kN, 0.5f), b(kN * kN, 0.25f), c(kN * kN);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kN, kN, kN, 1.f, a.data(), kN, b.data(),
                kN, 0.f, c.data(), kN);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * kN * kN * kN * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  set_num_threads(2);  // also puts OpenBLAS back to one thread
}
BENCHMARK(BM_Sgemm1024BaselineCblas)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// Autograd overhead: forward + backward of a tiny expression.
void BM_TinyForwardBackward(benchmark::State& state) {
  Tensor x = ones({4}).requires_grad_();
  for (auto _ : state) {
    Tensor y = (x * x + x).sum();
    y.backward();
  }
}
BENCHMARK(BM_TinyForwardBackward);

// The ResNet step's 3x3 convolution ([32, 32, 32, 32], 32 output channels,
// padding 1; the direct kernels of ops/conv_direct.cpp): arg 0 the forward,
// arg 1 the input and weight gradients (conv2d_grad_input, conv2d_grad_weight).
void BM_Conv3x3(benchmark::State& state) {
  manual_seed(1);
  Tensor x = randn({32, 32, 32, 32}), w = randn({32, 32, 3, 3});
  Conv2dFuncOptions same;
  same.padding = {1, 1};
  Tensor gy = randn({32, 32, 32, 32});
  const bool backward = state.range(0) != 0;
  for (auto _ : state) {
    if (backward) {
      Tensor xg = x.detach().requires_grad_(), wg = w.detach().requires_grad_();
      conv2d(xg, wg, {}, same).backward(gy);
      benchmark::DoNotOptimize(wg.grad().impl());
    } else {
      Tensor y = conv2d(x, w, {}, same);
      benchmark::DoNotOptimize(y.impl());
    }
  }
  state.SetItemsProcessed(state.iterations() * 32 * 32 * 32 * 32 * 9 * 32 * (backward ? 3 : 1));
}
BENCHMARK(BM_Conv3x3)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
