// Compile cost and step time against graph size (issue 16, "cost that grows
// with the graph"): a stack of `depth` x (Linear 64->64, LayerNorm, GELU)
// blocks on a [32, 64] batch, MSE loss, AdamW, one compiled training step
// (zero_grad, forward, loss, backward, step). Per depth it reports:
// - trace ms and stats().passes_ms of the tracing call, and the pass
//   pipeline's own per-pass times (passes::pass_totals());
// - the cold compile: the wall time of the tracing call with the disk caches
//   off (KILN_CACHE_DIR=off, memory cache cleared);
// - the warm compile: the same call for a fresh model after a first compile
//   filled a private disk cache (kernels and the optimized plan) and the
//   memory cache was cleared: medians of --compiles such starts in this
//   process, with the plan cache and without it (CompileOptions::plan_cache =
//   false: kernels from disk, passes and fusion run), and of --compiles new
//   processes (this executable re-run with --warm-child), which also pay for
//   starting the JIT;
// - the compiled and the eager step (medians), timed in paired rounds in one
//   process, alternating which side goes first.
// The tracing call includes the first compiled step; "compile" columns
// subtract the median compiled step from it.
// Plain executable:
//   compile_depth_bench [--depths 16,64,128,256] [--rounds R] [--reps K] [--compiles N]
//                       [--json FILE]
//   compile_depth_bench --profile-steps DEPTH N compiled|eager [CACHE_DIR]
//   compile_depth_bench --warm-child DEPTH CACHE_DIR  (one warm start from a filled cache)
// Run it as users run (without KILN_VERIFY=1; the verifier's cost is the
// "verify" row of the per-pass table when it is on).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kernel_cache.h"
#include "kiln/compile.h"
#include "kiln/env.h"
#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"
#include "kiln/passes/pass_manager.h"
#include "kiln/thread_pool.h"

namespace {

using namespace kiln;
using Clock = std::chrono::steady_clock;

constexpr int64_t kBatch = 32, kWidth = 64;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// One training step's state: model, optimizer and a fixed batch.
struct DeepStep {
  std::shared_ptr<nn::Sequential> model = std::make_shared<nn::Sequential>();
  std::unique_ptr<optim::AdamW> opt;
  Tensor x, y;
  explicit DeepStep(int depth) {
    manual_seed(0);
    for (int i = 0; i < depth; ++i) {
      model->push_back(std::make_shared<nn::Linear>(kWidth, kWidth));
      model->push_back(std::make_shared<nn::LayerNorm>(kWidth));
      model->push_back(std::make_shared<nn::GELU>());
    }
    opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions{.lr = 1e-3});
    x = randn({kBatch, kWidth});
    y = randn({kBatch, kWidth});
  }
  Tensor step(const Tensor& xb, const Tensor& yb) {
    opt->zero_grad();
    Tensor loss = mse_loss(model->forward(xb), yb);
    loss.backward();
    opt->step();
    return loss;
  }
};

// A compiled step over its own DeepStep.
struct CompiledStep {
  std::unique_ptr<DeepStep> s;
  Compiled<std::function<Tensor(const Tensor&, const Tensor&)>> fn;
  explicit CompiledStep(int depth, bool plan_cache = true)
      : s(std::make_unique<DeepStep>(depth)),
        fn(compile(std::function<Tensor(const Tensor&, const Tensor&)>(
                       [st = s.get()](const Tensor& a, const Tensor& b) { return st->step(a, b); }),
                   {.name = "deep_step", .plan_cache = plan_cache})) {}
  Tensor operator()() { return fn(s->x, s->y); }
};

struct FirstCall {
  double total_ms = 0, trace_ms = 0, passes_ms = 0, llvm_ms = 0;
  int64_t disk_hits = 0, compiled = 0, plan_hits = 0;
  size_t nodes = 0;
  int kernels = 0;
};

// The eager warm-up call, then the timed tracing call of a fresh compiled step.
FirstCall first_call(CompiledStep& c) {
  c();  // warm-up (eager: creates the optimizer state)
  const kir::KernelCacheStats k0 = kir::kernel_cache_stats();
  const auto t0 = Clock::now();
  c();
  FirstCall f;
  f.total_ms = ms_since(t0);
  const kir::KernelCacheStats k1 = kir::kernel_cache_stats();
  const CompileStats& st = c.fn.stats();
  f.trace_ms = st.trace_ms;
  f.passes_ms = st.passes_ms;
  f.nodes = st.graph_nodes;
  f.kernels = st.fused_kernels;
  f.llvm_ms = k1.compile_ms - k0.compile_ms;
  f.disk_hits = k1.disk_hits - k0.disk_hits;
  f.compiled = k1.compiled - k0.compiled;
  f.plan_hits = st.plan_cache_hits;
  if (st.traces != 1)
    std::fprintf(stderr, "warning: %d traces in the first compiled call\n", st.traces);
  return f;
}

// The median call of several starts (by total time).
FirstCall median_call(std::vector<FirstCall> v) {
  std::sort(v.begin(), v.end(),
            [](const FirstCall& a, const FirstCall& b) { return a.total_ms < b.total_ms; });
  return v.empty() ? FirstCall{} : v[v.size() / 2];
}

// --warm-child DEPTH DIR: one warm start in this new process, printed as
// "total trace passes plan_hits" for the parent.
int warm_child(int depth, const char* dir) {
  setenv("KILN_CACHE_DIR", dir, 1);
  CompiledStep c(depth);
  const FirstCall f = first_call(c);
  std::printf("%.3f %.3f %.3f %lld\n", f.total_ms, f.trace_ms, f.passes_ms,
              static_cast<long long>(f.plan_hits));
  return 0;
}

// --profile-steps DEPTH N compiled|eager [CACHE_DIR]: N steps of one side
// only after a warm-up, for `perf record` or callgrind (prints the median
// step); kernels from CACHE_DIR when given (default: the disk caches off).
int profile_steps(int depth, int n, bool compiled, const char* cache) {
  setenv("KILN_CACHE_DIR", cache, 1);
  CompiledStep c(depth);
  if (compiled) first_call(c);
  std::vector<double> t, cpu;
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    const std::clock_t c0 = std::clock();
    if (compiled)
      c();
    else
      c.s->step(c.s->x, c.s->y);
    t.push_back(ms_since(t0));
    cpu.push_back(1e3 * static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC);
  }
  std::printf("%s step, depth %d: median %.3f ms (process CPU %.3f ms) over %d\n",
              compiled ? "compiled" : "eager", depth, median(t), median(cpu), n);
  return 0;
}

// Warm starts in new processes (this executable with --warm-child).
std::vector<FirstCall> warm_processes(int depth, const std::string& dir, int n) {
  std::vector<FirstCall> out;
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  for (int i = 0; i < n; ++i) {
    const std::string cmd = str("'", exe, "' --warm-child ", depth, " '", dir, "'");
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) continue;
    FirstCall f;
    long long hits = 0;
    if (std::fscanf(p, "%lf %lf %lf %lld", &f.total_ms, &f.trace_ms, &f.passes_ms, &hits) == 4) {
      f.plan_hits = hits;
      out.push_back(f);
    }
    pclose(p);
  }
  return out;
}

struct Row {
  int depth = 0;
  FirstCall cold, warm, warm_no_plan, warm_process;
  std::vector<passes::PassTotal> pass_times;
  double compiled_ms = 0, eager_ms = 0, ratio = 0;
};

Row measure(int depth, const std::string& cache, int rounds, int reps, int compiles) {
  Row r;
  r.depth = depth;
  // Cold: no disk cache, nothing in memory.
  setenv("KILN_CACHE_DIR", "off", 1);
  kir::clear_memory_cache();
  passes::reset_pass_totals();
  {
    CompiledStep c(depth);
    r.cold = first_call(c);
  }
  r.pass_times = passes::pass_totals();
  // Fill the private disk cache, then a warm start from it.
  setenv("KILN_CACHE_DIR", cache.c_str(), 1);
  kir::clear_memory_cache();
  {
    CompiledStep c(depth);
    first_call(c);
  }
  // Warm starts: medians of `compiles` fresh models (the machine is shared),
  // with and without the plan cache, alternating.
  std::vector<FirstCall> with_plan, without_plan;
  for (int i = 0; i < compiles; ++i)
    for (bool plan : {true, false}) {
      kir::clear_memory_cache();
      CompiledStep w(depth, plan);
      (plan ? with_plan : without_plan).push_back(first_call(w));
    }
  r.warm = median_call(with_plan);
  r.warm_no_plan = median_call(without_plan);
  r.warm_process = median_call(warm_processes(depth, cache, compiles));
  CompiledStep c(depth);
  first_call(c);
  // Steady state: paired rounds, alternating which side runs first.
  DeepStep e(depth);
  e.step(e.x, e.y);
  c();
  auto time_side = [&](bool compiled) {
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
      const auto t0 = Clock::now();
      if (compiled)
        c();
      else
        e.step(e.x, e.y);
      t.push_back(ms_since(t0));
    }
    return median(t);
  };
  std::vector<double> cm, em, ratios;
  for (int round = 0; round < rounds; ++round) {
    double a = 0, b = 0;
    if (round % 2 == 0) {
      a = time_side(true);
      b = time_side(false);
    } else {
      b = time_side(false);
      a = time_side(true);
    }
    cm.push_back(a);
    em.push_back(b);
    ratios.push_back(a / b);
  }
  if (c.fn.stats().traces != 1)
    std::fprintf(stderr, "warning: depth %d re-traced (%d traces): %s\n", depth,
                 c.fn.stats().traces, c.fn.stats().last_miss.c_str());
  r.compiled_ms = median(cm);
  r.eager_ms = median(em);
  r.ratio = median(ratios);
  return r;
}

std::vector<int> parse_list(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p;) {
    v.push_back(std::atoi(p));
    const char* comma = std::strchr(p, ',');
    if (!comma) break;
    p = comma + 1;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> depths = {16, 64, 128, 256};
  int rounds = 5, reps = 5, compiles = 3;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--depths") == 0 && i + 1 < argc) {
      depths = parse_list(argv[++i]);
    } else if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--compiles") == 0 && i + 1 < argc) {
      compiles = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      json = argv[++i];
    } else if (std::strcmp(argv[i], "--warm-child") == 0 && i + 2 < argc) {
      return warm_child(std::atoi(argv[i + 1]), argv[i + 2]);
    } else if (std::strcmp(argv[i], "--profile-steps") == 0 && i + 3 < argc) {
      return profile_steps(std::atoi(argv[i + 1]), std::atoi(argv[i + 2]),
                           std::strcmp(argv[i + 3], "eager") != 0,
                           i + 4 < argc ? argv[i + 4] : "off");
    } else {
      std::fprintf(
          stderr,
          "usage: compile_depth_bench [--depths 16,64,128,256] [--rounds R] [--reps K] "
          "[--compiles N] [--json FILE] | --profile-steps DEPTH N compiled|eager [CACHE_DIR] | "
          "--warm-child DEPTH CACHE_DIR\n");
      return 2;
    }
  }
  char dir_tmpl[] = "/tmp/kiln-depth-bench-XXXXXX";
  const char* dir = mkdtemp(dir_tmpl);
  if (!dir) {
    std::perror("mkdtemp");
    return 1;
  }
  std::printf("threads %d, KILN_VERIFY=%s, batch [%lld, %lld], AdamW\n", num_threads(),
              env::get("KILN_VERIFY").empty() ? "unset" : env::get("KILN_VERIFY").c_str(),
              static_cast<long long>(kBatch), static_cast<long long>(kWidth));
  std::vector<Row> rows;
  for (int d : depths) {
    rows.push_back(measure(d, dir, rounds, reps, compiles));
    const Row& r = rows.back();
    std::fprintf(stderr, "depth %d done (cold %.0f ms)\n", d, r.cold.total_ms);
  }
  std::printf(
      "\n| depth | nodes | kernels | trace | passes_ms | pipeline | cold call (LLVM) | warm call: "
      "plan cache (trace, passes_ms, plan hits) | warm call: new process (trace, passes_ms) | "
      "warm call: no plan cache (passes_ms) | warm compile = call - step: plan cache / new "
      "process / none | compiled step | eager step | compiled/eager |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const Row& r : rows) {
    double pipeline = 0;
    for (const auto& t : r.pass_times)
      if (t.pass != "verify") pipeline += t.ms;
    std::printf(
        "| %d | %zu | %d | %.1f ms | %.0f ms | %.1f ms | %.0f ms (%.0f ms) | %.0f ms (%.0f, %.0f, "
        "%lld) | %.0f ms (%.0f, %.0f) | %.0f ms (%.0f) | %.0f / %.0f / %.0f ms | %.2f ms | %.2f "
        "ms | %.2fx |\n",
        r.depth, r.cold.nodes, r.cold.kernels, r.cold.trace_ms, r.cold.passes_ms, pipeline,
        r.cold.total_ms, r.cold.llvm_ms, r.warm.total_ms, r.warm.trace_ms, r.warm.passes_ms,
        static_cast<long long>(r.warm.plan_hits), r.warm_process.total_ms, r.warm_process.trace_ms,
        r.warm_process.passes_ms, r.warm_no_plan.total_ms, r.warm_no_plan.passes_ms,
        r.warm.total_ms - r.compiled_ms, r.warm_process.total_ms - r.compiled_ms,
        r.warm_no_plan.total_ms - r.compiled_ms, r.compiled_ms, r.eager_ms, r.ratio);
  }
  std::printf("\nper-pass times of the cold compile (ms, runs):\n| pass |");
  for (const Row& r : rows) std::printf(" depth %d |", r.depth);
  std::printf("\n| --- |");
  for (size_t i = 0; i < rows.size(); ++i) std::printf(" --- |");
  std::printf("\n");
  std::vector<std::string> names;
  for (const Row& r : rows)
    for (const auto& t : r.pass_times)
      if (std::find(names.begin(), names.end(), t.pass) == names.end()) names.push_back(t.pass);
  for (const std::string& n : names) {
    std::printf("| %s |", n.c_str());
    for (const Row& r : rows) {
      auto it = std::find_if(r.pass_times.begin(), r.pass_times.end(),
                             [&](const passes::PassTotal& t) { return t.pass == n; });
      if (it == r.pass_times.end())
        std::printf(" - |");
      else
        std::printf(" %.1f (%d) |", it->ms, it->runs);
    }
    std::printf("\n");
  }
  if (!json.empty()) {
    std::ofstream f(json);
    f << "[";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      f << (i ? ",\n " : "") << "{\"depth\": " << r.depth << ", \"nodes\": " << r.cold.nodes
        << ", \"trace_ms\": " << r.cold.trace_ms << ", \"passes_ms\": " << r.cold.passes_ms
        << ", \"cold_ms\": " << r.cold.total_ms << ", \"warm_ms\": " << r.warm.total_ms
        << ", \"warm_process_ms\": " << r.warm_process.total_ms
        << ", \"warm_no_plan_ms\": " << r.warm_no_plan.total_ms
        << ", \"warm_passes_ms\": " << r.warm.passes_ms << ", \"compiled_ms\": " << r.compiled_ms
        << ", \"eager_ms\": " << r.eager_ms << ", \"ratio\": " << r.ratio << "}";
    }
    f << "]\n";
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}
