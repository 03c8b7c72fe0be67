// Rematerialization (issue 17): peak memory and step time of two training
// steps, each run as
//   eager | eager with kiln::checkpoint per block | compiled without the remat
//   pass | compiled (default remat policy) | compiled with memory_budget = 50%
//   and 25% of the default plan's predicted peak.
// Workloads: a deep MLP (16 x (Linear 256->256, GELU), batch 1024) and a stack
// of 4 transformer encoder blocks (d 256, 4 heads, ff 1024, GELU, batch 16 x
// 128 tokens); MSE-to-zero loss, backward, SGD with momentum.
// Peak memory is the caching allocator's peak above what was allocated before
// the step (parameters, optimizer state, inputs: resident anyway), so eager
// and compiled are measured alike; compiled rows also show the executor's
// measured and predicted peaks (stats()). Step time: median of --reps steps.
// Plain executable:  remat_bench [--reps N] [--only mlp|transformer]
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

Workload make(const std::string& which) {
  manual_seed(11);
  Workload w;
  w.name = which == "mlp" ? "deep MLP 16 x (Linear 256, GELU), batch 1024"
                          : "transformer 4 blocks, 16 x 128 x 256";
  if (which == "mlp") {
    for (int i = 0; i < 16; ++i) {
      auto b = std::make_shared<nn::Sequential>();
      b->push_back(std::make_shared<nn::Linear>(256, 256));
      b->push_back(std::make_shared<nn::GELU>());
      w.blocks.push_back(b);
    }
    w.x = randn({1024, 256});
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

// Runs `variant` of workload `which` for `reps` timed steps after 3 warm-ups.
Row run(const std::string& which, const std::string& variant, int reps, int64_t budget) {
  Workload w = make(which);
  optim::SGD opt(w.all->parameters(), {.lr = 1e-3, .momentum = 0.9});
  const bool ck = variant == "eager + checkpoint";
  auto step = [&](const Tensor& x) {
    opt.zero_grad();
    Tensor loss = mean(square(w.forward(x, ck)));
    loss.backward();
    opt.step();
    return loss.detach();
  };
  const bool compiled = variant.rfind("compiled", 0) == 0;
  CompileOptions opts{.enabled = compiled, .memory_budget = budget};
  if (variant == "compiled, no remat")
    opts.pipeline = passes::standard_pipeline();  // remat is late
  auto f = compile(step, opts);
  Row r;
  r.variant = variant;
  for (int i = 0; i < 3; ++i) r.loss = f(w.x);
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    Allocator& a = cpu_allocator();
    const int64_t before = a.stats().current_bytes;
    a.reset_peak();
    const auto t0 = Clock::now();
    r.loss = f(w.x);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    r.alloc_peak = std::max(r.alloc_peak, a.stats().peak_bytes - before);
  }
  r.ms = median(ms);
  if (compiled) {
    r.exec_peak = f.stats().last_peak_bytes;
    r.predicted = f.stats().predicted_peak_bytes;
  }
  return r;
}

double mib(int64_t b) {
  return static_cast<double>(b) / (1024.0 * 1024.0);
}

void bench(const std::string& which, int reps) {
  std::vector<Row> rows;
  rows.push_back(run(which, "eager", reps, 0));
  rows.push_back(run(which, "eager + checkpoint", reps, 0));
  rows.push_back(run(which, "compiled, no remat", reps, 0));
  rows.push_back(run(which, "compiled", reps, 0));
  const int64_t base = rows.back().predicted;
  rows.push_back(run(which, "compiled, budget 50%", reps, base / 2));
  rows.push_back(run(which, "compiled, budget 25%", reps, base / 4));
  std::printf("\n%s (median of %d steps)\n", make(which).name, reps);
  std::printf(
      "| variant | step ms | x compiled | peak MiB (allocator) | x eager | executor peak MiB "
      "(measured / predicted) | loss |\n| --- | --- | --- | --- | --- | --- | --- |\n");
  const Row& eager = rows[0];
  const Row& comp = rows[3];
  for (const Row& r : rows) {
    std::printf("| %s | %.1f | %.2f | %.1f | %.2f | ", r.variant.c_str(), r.ms, r.ms / comp.ms,
                mib(r.alloc_peak), static_cast<double>(r.alloc_peak) / eager.alloc_peak);
    if (r.exec_peak >= 0)
      std::printf("%.1f / %.1f", mib(r.exec_peak), mib(r.predicted));
    else
      std::printf("—");
    std::printf(" | %.6g |\n", r.loss.item<double>());
  }
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
    else {
      std::fprintf(stderr, "usage: remat_bench [--reps N] [--only mlp|transformer]\n");
      return 2;
    }
  }
  for (const char* w : {"mlp", "transformer"})
    if (only.empty() || only == w) bench(w, reps);
  return 0;
}
