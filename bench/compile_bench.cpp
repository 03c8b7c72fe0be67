// Tracing and compiled steps: trace+optimize time of a training step, the
// per-call guard check, and compiled (LLVM kernels; the interpreter without
// LLVM) vs eager step time.
#include <benchmark/benchmark.h>

#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"
#include "mlp_step.h"

namespace {

using namespace kiln;

using bench::MlpStep;

// Trace + pass pipeline of the MLP step (first call of a fresh compiled function
// after its eager warm-up); the counters split it into trace and passes.
void BM_TraceOptimizeMlpStep(benchmark::State& state) {
  MlpStep m;
  m.step(m.x, m.y);  // optimizer state exists, as after a warm-up call
  double trace_ms = 0, passes_ms = 0;
  size_t nodes = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto f = compile([&](const Tensor& x, const Tensor& y) { return m.step(x, y); }, {.warmup = 0});
    state.ResumeTiming();
    f(m.x, m.y);
    state.PauseTiming();
    trace_ms = f.stats().trace_ms;
    passes_ms = f.stats().passes_ms;
    nodes = f.stats().graph_nodes;
    state.ResumeTiming();
  }
  state.counters["trace_ms"] = trace_ms;
  state.counters["passes_ms"] = passes_ms;
  state.counters["graph_nodes"] = static_cast<double>(nodes);
}
BENCHMARK(BM_TraceOptimizeMlpStep)->Unit(benchmark::kMillisecond)->Iterations(5);

// Guard check of the MLP step's plan per call (2 args, 6 params + grads +
// momentum buffers captured, module and optimizer guards).
void BM_GuardCheckMlpStep(benchmark::State& state) {
  MlpStep m;
  auto f = compile([&](const Tensor& x, const Tensor& y) { return m.step(x, y); });
  f(m.x, m.y);
  f(m.x, m.y);
  if (!f.has_plan(m.x, m.y)) state.SkipWithError("no plan");
  for (auto _ : state) benchmark::DoNotOptimize(f.has_plan(m.x, m.y));
}
BENCHMARK(BM_GuardCheckMlpStep);

// The MLP training step, eager vs compiled, same process.
void BM_MlpStepEager(benchmark::State& state) {
  MlpStep m;
  for (auto _ : state) benchmark::DoNotOptimize(m.step(m.x, m.y));
}
BENCHMARK(BM_MlpStepEager)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_MlpStepCompiledInterpreter(benchmark::State& state) {
  MlpStep m;
  auto f = compile([&](const Tensor& x, const Tensor& y) { return m.step(x, y); });
  f(m.x, m.y);
  f(m.x, m.y);
  for (auto _ : state) benchmark::DoNotOptimize(f(m.x, m.y));
  state.counters["peak_MB"] = static_cast<double>(f.stats().last_peak_bytes) / 1e6;
}
BENCHMARK(BM_MlpStepCompiledInterpreter)->Unit(benchmark::kMillisecond)->UseRealTime();

// A small MLP (launch overhead dominates: 20-32-10, batch 16), eager vs compiled.
void BM_SmallStep(benchmark::State& state) {
  manual_seed(0);
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(20, 32));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::Linear>(32, 10));
  optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
  Tensor x = randn({16, 20}), y = randint(0, 10, {16});
  auto step = [&](const Tensor& xb, const Tensor& yb) {
    opt.zero_grad();
    Tensor loss = cross_entropy(model->forward(xb), yb);
    loss.backward();
    opt.step();
    return loss;
  };
  auto f = compile(step);
  f(x, y);
  f(x, y);
  const bool compiled = state.range(0) == 1;
  for (auto _ : state) benchmark::DoNotOptimize(compiled ? f(x, y) : step(x, y));
}
BENCHMARK(BM_SmallStep)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
