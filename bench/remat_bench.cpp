// Rematerialization (issue 17): peak memory and step time of two training
// steps, each run as
//   eager | eager with kiln::checkpoint per block | compiled without the remat
//   pass | compiled (default remat policy) | compiled with memory_budget = 50%
//   and 25% of the default plan's predicted peak.
// Workloads: a deep MLP (16 x (Linear 256->256, GELU), batch 256; --batch N) and a stack
// of 4 transformer encoder blocks (d 256, 4 heads, ff 1024, GELU, batch 16 x
// 128 tokens); MSE-to-zero loss, backward, SGD with momentum, zero_grad
// (set to none) after the step.
// Peak memory is the caching allocator's peak above what was allocated before
// the step (parameters, optimizer state, inputs: resident anyway; the previous
// step's gradients dropped first, so every variant counts its new ones), so eager
// and compiled are measured alike; compiled rows also show the executor's
// measured and predicted peaks (stats()). Step time: median of --reps steps,
// the variants taking turns (paired rounds).
// Plain executable:  remat_bench [--reps N] [--only mlp|transformer] [--batch N]
//   [--variants 50%,25%] (eager and the default compiled plan always run)
//   [--budget-mib X] (one more compiled variant, under X MiB)
//   [--peaks] (after the rounds: what each compiled plan holds at its measured peak)
//   [--profile] (after the rounds: each compiled plan's profiler table, 5 steps)
//   [--erf-cost] (only: erf's cost per element in a compiled kernel, against one operand's)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/allocator.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"
#include "kiln/passes/pass_manager.h"
#include "kiln/profiler.h"

namespace {

using namespace kiln;
using Clock = std::chrono::steady_clock;
using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// A model as blocks, so eager checkpointing can wrap each one.
struct Workload {
  const char* name = "";
  std::vector<std::shared_ptr<nn::Module>> blocks;
  std::shared_ptr<nn::Sequential> all = std::make_shared<nn::Sequential>();
  Tensor x;
  Tensor forward(const Tensor& in, bool ck) const {
    Tensor h = in;
    for (const auto& b : blocks) {
      Fn fn = [b](const std::vector<Tensor>& v) -> std::vector<Tensor> {
        return {b->forward(v[0])};
      };
      h = ck ? checkpoint(fn, {h})[0] : b->forward(h);
    }
    return h;
  }
};

int64_t mlp_batch = 256;    // --batch
std::string variants_only;  // --variants: a comma list of substrings (default and eager always run)
bool print_peaks = false;   // --peaks
bool print_table = false;   // --profile
double extra_mib = 0;       // --budget-mib: one more compiled variant under this budget

Workload make(const std::string& which) {
  manual_seed(11);
  Workload w;
  w.name =
      which == "mlp" ? "deep MLP 16 x (Linear 256, GELU)" : "transformer 4 blocks, 16 x 128 x 256";
  if (which == "mlp") {
    for (int i = 0; i < 16; ++i) {
      auto b = std::make_shared<nn::Sequential>();
      b->push_back(std::make_shared<nn::Linear>(256, 256));
      b->push_back(std::make_shared<nn::GELU>());
      w.blocks.push_back(b);
    }
    w.x = randn({mlp_batch, 256});
  } else {
    for (int i = 0; i < 4; ++i)
      w.blocks.push_back(std::make_shared<nn::TransformerEncoderLayer>(
          256, 4,
          nn::TransformerEncoderLayerOptions{
              .dim_feedforward = 1024, .dropout = 0.0, .activation = "gelu"}));
    w.x = randn({16, 128, 256});
  }
  for (const auto& b : w.blocks) w.all->push_back(b);
  return w;
}

struct Row {
  std::string variant;
  double ms = 0;
  int64_t alloc_peak = 0;  // allocator bytes above the resident state
  int64_t exec_peak = -1, predicted = -1;
  Tensor loss;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One variant of a workload: its own model (same seed), optimizer and step.
struct Variant {
  Workload w;
  optim::SGD opt;
  Row r;
  std::vector<double> ms;
  using Step = std::function<Tensor(const Tensor&)>;
  std::unique_ptr<Compiled<Step>> holder;
  bool compiled = false;

  Variant(const std::string& which, const std::string& variant, int64_t budget)
      : w(make(which)), opt(w.all->parameters(), {.lr = 1e-3, .momentum = 0.9}) {
    r.variant = variant;
    const bool ck = variant == "eager + checkpoint";
    // The usual training step: the gradients are dropped after the update
    // (zero_grad sets them to none), so the compiled step need not return
    // them, and each parameter's update may run as soon as its gradient is
    // complete (remat.cpp's rule 0).
    auto step = [this, ck](const Tensor& x) {
      Tensor loss = mean(square(w.forward(x, ck)));
      loss.backward();
      opt.step();
      opt.zero_grad();
      return loss.detach();
    };
    CompileOptions opts{.enabled = variant.rfind("compiled", 0) == 0, .memory_budget = budget};
    if (variant == "compiled, no remat")
      opts.pipeline = passes::standard_pipeline();  // remat is late
    compiled = opts.enabled;
    holder = std::make_unique<Compiled<Step>>(compile(Step(step), opts));
    for (int i = 0; i < 3; ++i) r.loss = (*holder)(w.x);  // warm-up (traces)
  }
  // One timed step; the allocator's peak above the resident state.
  void step() {
    // No gradients are left from the previous step (the step drops them).
    Allocator& a = cpu_allocator();
    const int64_t before = a.stats().current_bytes;
    a.reset_peak();
    const auto t0 = Clock::now();
    r.loss = (*holder)(w.x);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    r.alloc_peak = std::max(r.alloc_peak, a.stats().peak_bytes - before);
  }
  Row finish() {
    r.ms = median(ms);
    if (compiled) {
      r.exec_peak = holder->stats().last_peak_bytes;
      r.predicted = holder->stats().predicted_peak_bytes;
    }
    return r;
  }
};

double mib(int64_t b) {
  return static_cast<double>(b) / (1024.0 * 1024.0);
}

// Paired runs: the variants take turns, one step each per round, so load
// that drifts over the run (a shared host) affects them alike.
void bench(const std::string& which, int reps) {
  // The MLP's step runs 47 matmuls [batch, 256] x [256, 256] (16 forward, 16
  // weight and 15 input gradients): timed alone in each round, their share of
  // the compiled step bounds what a budget's recomputed matmuls can cost.
  // Compiled first: KILN_DUMP then keeps the variants' graphs (same name).
  Tensor p = randn({mlp_batch, 256}), q = randn({256, 256});
  auto mm = compile([](const Tensor& a, const Tensor& b) { return matmul(a, b); });
  std::vector<double> gemm_ms;
  if (which == "mlp")
    for (int i = 0; i < 2; ++i) mm(p, q);  // warm-up (traces)
  std::vector<std::unique_ptr<Variant>> vs;
  auto wanted = [](const std::string& v) {
    if (variants_only.empty() || v == "eager" || v == "compiled") return true;
    size_t at = 0;
    while (at <= variants_only.size()) {
      const size_t end = std::min(variants_only.find(',', at), variants_only.size());
      const std::string part = variants_only.substr(at, end - at);
      if (!part.empty() && v.find(part) != std::string::npos) return true;
      at = end + 1;
    }
    return false;
  };
  for (const char* v : {"eager", "eager + checkpoint", "compiled, no remat", "compiled"})
    if (wanted(v)) vs.push_back(std::make_unique<Variant>(which, v, 0));
  const int64_t base = vs.back()->holder->stats().predicted_peak_bytes;
  for (const auto& [v, b] : {std::pair<const char*, int64_t>{"compiled, budget 50%", base / 2},
                             {"compiled, budget 25%", base / 4}})
    if (wanted(v)) vs.push_back(std::make_unique<Variant>(which, v, b));
  if (extra_mib > 0)
    vs.push_back(std::make_unique<Variant>(which, str("compiled, budget ", extra_mib, " MiB"),
                                           static_cast<int64_t>(extra_mib * 1024 * 1024)));
  for (int i = 0; i < reps; ++i) {
    for (auto& v : vs) v->step();
    if (which != "mlp") continue;
    const auto t0 = Clock::now();
    for (int k = 0; k < 47; ++k) mm(p, q);
    gemm_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::vector<Row> rows;
  for (auto& v : vs) rows.push_back(v->finish());
  if (print_table)  // where each compiled plan's time goes (5 steps)
    for (auto& v : vs) {
      if (!v->compiled) continue;
      profiler::Profile p{profiler::Options{}};
      for (int i = 0; i < 5; ++i) (*v->holder)(v->w.x);
      p.stop();
      std::printf(
          "%s, 5 steps (per step: %lld kernel launches, %lld outputs written in place):\n%s\n",
          v->r.variant.c_str(), static_cast<long long>(v->holder->stats().last_kernel_launches),
          static_cast<long long>(v->holder->stats().last_in_place),
          p.table(profiler::SortBy::kTotal, 12).c_str());
    }
  if (print_peaks)  // what each compiled plan holds at its measured peak
    for (auto& v : vs) {
      if (!v->compiled) continue;
      profiler::Profile p({.profile_memory = true});
      (*v->holder)(v->w.x);
      for (const PeakReport& r : memory_snapshot().compiled_peaks) {
        std::printf("%s: %s peak %.2f MiB at %s\n", v->r.variant.c_str(), r.plan.c_str(),
                    mib(r.peak_bytes), r.step.c_str());
        for (const PeakValue& pv : r.values)
          std::printf("  %s %s %s %.2f MiB\n", pv.value.c_str(), pv.type.c_str(), pv.op.c_str(),
                      mib(pv.bytes));
      }
      p.stop();
    }
  std::printf("\n%s%s (median of %d steps; OpenBLAS %s)\n", make(which).name,
              which == "mlp" ? str(", batch ", mlp_batch).c_str() : "", reps, blas_core().c_str());
  std::printf(
      "| variant | step ms | x compiled | peak MiB (allocator) | x eager | executor peak MiB "
      "(measured / predicted) | loss |\n| --- | --- | --- | --- | --- | --- | --- |\n");
  const Row& eager = rows[0];
  const Row& comp =
      *std::find_if(rows.begin(), rows.end(), [](const Row& r) { return r.variant == "compiled"; });
  for (const Row& r : rows) {
    std::printf("| %s | %.1f | %.2f | %.1f | %.2f | ", r.variant.c_str(), r.ms, r.ms / comp.ms,
                mib(r.alloc_peak), static_cast<double>(r.alloc_peak) / eager.alloc_peak);
    if (r.exec_peak >= 0)
      std::printf("%.1f / %.1f", mib(r.exec_peak), mib(r.predicted));
    else
      std::printf("—");
    std::printf(" | %.6g |\n", r.loss.item<double>());
  }
  if (!gemm_ms.empty())
    std::printf("the step's 47 matmuls alone: %.1f ms, %.2f of the compiled step (paired)\n",
                median(gemm_ms), median(gemm_ms) / comp.ms);
  std::fflush(stdout);
}

// What erf costs inside a compiled elementwise kernel, against what one more
// operand costs (the cut's unit: recompute_cost in passes/src/remat_model.cpp
// prices a cheap op at 1 per element, kCostly math at 16): y = 0.7x + 0.1,
// y = 0.7x + z and y = erf(0.7x) + 0.1, paired rounds, ~16M elements a timing.
void erf_cost(int reps) {
  std::printf("\nerf in a compiled kernel (median of %d paired rounds)\n", reps);
  std::printf(
      "| elements | 0.7x+0.1 ns/elem | one more operand ns/elem | erf ns/elem | erf / operand |\n"
      "| --- | --- | --- | --- | --- |\n");
  for (int64_t n : {int64_t{65536}, int64_t{4194304}}) {
    manual_seed(5);
    Tensor x = randn({n}), z = randn({n});
    auto a = compile([](const Tensor& t) { return t * 0.7 + 0.1; });
    auto b = compile([](const Tensor& t, const Tensor& u) { return t * 0.7 + u; });
    auto c = compile([](const Tensor& t) { return erf(t * 0.7) + 0.1; });
    const int k = static_cast<int>(std::max<int64_t>(1, (int64_t{1} << 24) / n));
    std::vector<double> ta, tb, tc;
    auto time = [&](auto&& f, std::vector<double>& out) {
      const auto t0 = Clock::now();
      for (int i = 0; i < k; ++i) f();
      out.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() /
                    static_cast<double>(k * n));
    };
    for (int i = 0; i < reps + 2; ++i) {  // the first two rounds warm up (traces)
      time([&] { a(x); }, ta);
      time([&] { b(x, z); }, tb);
      time([&] { c(x); }, tc);
    }
    ta.erase(ta.begin(), ta.begin() + 2);
    tb.erase(tb.begin(), tb.begin() + 2);
    tc.erase(tc.begin(), tc.begin() + 2);
    const double ma = median(ta), mb = median(tb), mc = median(tc);
    std::printf("| %lld | %.3f | %.3f | %.3f | %.1f |\n", static_cast<long long>(n), ma, mb - ma,
                mc - ma, (mc - ma) / std::max(1e-9, mb - ma));
  }
  // A matmul with K = 256 (the MLP's layer), per output element: the cut prices it K/4 = 64.
  Tensor p = randn({256, 256}), q = randn({256, 256});
  auto mm = compile([](const Tensor& a, const Tensor& b) { return matmul(a, b); });
  std::vector<double> tm;
  for (int i = 0; i < reps + 2; ++i) {
    const auto t0 = Clock::now();
    for (int j = 0; j < 64; ++j) mm(p, q);
    tm.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() /
                 (64.0 * 65536));
  }
  tm.erase(tm.begin(), tm.begin() + 2);
  std::printf("matmul [256, 256] x [256, 256]: %.3f ns per output element\n", median(tm));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 10;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
    else if (!std::strcmp(argv[i], "--batch") && i + 1 < argc)
      mlp_batch = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--variants") && i + 1 < argc)
      variants_only = argv[++i];
    else if (!std::strcmp(argv[i], "--peaks"))
      print_peaks = true;
    else if (!std::strcmp(argv[i], "--profile"))
      print_table = true;
    else if (!std::strcmp(argv[i], "--budget-mib") && i + 1 < argc)
      extra_mib = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--erf-cost"))
      only = "erf";
    else {
      std::fprintf(stderr,
                   "usage: remat_bench [--reps N] [--only mlp|transformer] [--batch N] "
                   "[--variants a,b] [--budget-mib X] [--peaks] [--profile] [--erf-cost]\n");
      return 2;
    }
  }
  if (only == "erf") {
    erf_cost(reps);
    return 0;
  }
  for (const char* w : {"mlp", "transformer"})
    if (only.empty() || only == w) bench(w, reps);
  return 0;
}
