// The eager-vs-compiled harness: one command runs a fixed set of workloads
// eagerly and through kiln::compile, measures the machine's own limits in the
// same run (STREAM copy/triad, sgemm, a hand-written fused GELU loop), and
// prints a table (and JSON with --json FILE). Figures are ratios within one run.
//   harness [--quick] [--json FILE]
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "mlp_step.h"
#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"
#include "kiln/thread_pool.h"

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
double stream_copy_gbs(size_t n, int reps) {
  std::vector<float> a(n, 1.0f), b(n);
  double ms = time_ms([&] { std::memcpy(b.data(), a.data(), n * sizeof(float)); }, reps);
  return 2.0 * static_cast<double>(n * sizeof(float)) / (ms * 1e6);
}

double stream_triad_gbs(size_t n, int reps) {
  std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);
  double ms = time_ms(
      [&] {
        float* __restrict pa = a.data();
        const float* __restrict pb = b.data();
        const float* __restrict pc = c.data();
        for (size_t i = 0; i < n; ++i) pa[i] = pb[i] + 3.0f * pc[i];
      },
      reps);
  return 3.0 * static_cast<double>(n * sizeof(float)) / (ms * 1e6);
}

double sgemm_gflops(int n, int reps) {
  std::vector<float> a(static_cast<size_t>(n) * n, 1.0f), b(a), c(a.size());
  double ms = time_ms(
      [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n,
                    b.data(), n, 0.0f, c.data(), n);
      },
      reps);
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
  double eager_ms = 0, compiled_ms = 0, max_abs_diff = 0, trace_ms = 0, passes_ms = 0;
  double bytes = 0, flops = 0;  // per call, for GB/s or GFLOP/s
  int64_t peak_bytes = 0;
};

double max_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    NoGradGuard ng;
    m = std::max(m, amax(abs(cast(a[i], DType::f64) - cast(b[i], DType::f64))).item<double>());
  }
  return m;
}

// Times `eager_fn` eagerly and `comp_fn` through kiln::compile. The two must do
// the same work on identical but separate state (training steps move their
// parameters): their second calls are compared (the compiled one is the first
// traced run, after the eager warm-up call).
template <typename E, typename C>
Row measure(const std::string& name, E eager_fn, C comp_fn, int reps) {
  Row r;
  r.name = name;
  auto c = compile(comp_fn, {.name = name});
  eager_fn();
  c();
  r.max_abs_diff = max_diff(eager_fn(), c());
  r.eager_ms = time_ms([&] { eager_fn(); }, reps);
  r.compiled_ms = time_ms([&] { c(); }, reps);
  r.trace_ms = c.stats().trace_ms;
  r.passes_ms = c.stats().passes_ms;
  r.peak_bytes = c.stats().last_peak_bytes;
  return r;
}
template <typename F>
Row measure(const std::string& name, F fn, int reps) {
  return measure(name, fn, fn, reps);
}

using bench::MlpStep;

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    else if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) json = argv[++i];
    else {
      std::fprintf(stderr, "usage: harness [--quick] [--json FILE]\n");
      return 2;
    }
  }
  const int reps = quick ? 3 : 10;
  const int64_t n16m = quick ? (1 << 20) : (1 << 24);

  // Hardware references measured in this run.
  const double copy_gbs = stream_copy_gbs(static_cast<size_t>(n16m), reps);
  const double triad_gbs = stream_triad_gbs(static_cast<size_t>(n16m), reps);
  const double sgemm = sgemm_gflops(quick ? 512 : 1024, reps);
  Tensor gx = randn({n16m});
  Tensor gy = empty({n16m});
  const double gelu_loop_ms =
      time_ms([&] { gelu_loop(gx.data<float>(), gy.data<float>(), n16m); }, reps);

  std::vector<Row> rows;
  {
    auto gelu = [&] { return std::vector<Tensor>{kiln::gelu(gx, "tanh")}; };
    Row r = measure("gelu_tanh_16M", gelu, reps);
    r.bytes = 8.0 * static_cast<double>(n16m);
    rows.push_back(r);
  }
  {
    const int64_t rws = quick ? 512 : 4096;
    Tensor x = randn({rws, 1024});
    Row r = measure("softmax_4096x1024", [&] { return std::vector<Tensor>{softmax(x, -1)}; }, reps);
    r.bytes = 8.0 * static_cast<double>(x.numel());
    rows.push_back(r);
    Tensor w = ones({1024}), b = zeros({1024});
    Row l = measure("layer_norm_4096x1024",
                    [&] { return std::vector<Tensor>{layer_norm(x, {1024}, w, b, 1e-5)}; }, reps);
    l.bytes = 8.0 * static_cast<double>(x.numel());
    rows.push_back(l);
  }
  {
    MlpStep a, b;
    Row r = measure("mlp_step_sgd", [&] { return a(); }, [&] { return b(); }, reps);
    r.flops = 3 * 2.0 * 128 * (784.0 * 1024 + 1024.0 * 1024 + 1024.0 * 10);
    rows.push_back(r);
  }

  std::printf("hardware (this run): STREAM copy %.1f GB/s, triad %.1f GB/s, sgemm %.0f GFLOP/s, "
              "hand-written GELU loop %.2f ms\n",
              copy_gbs, triad_gbs, sgemm, gelu_loop_ms);
  std::printf("%-22s %10s %10s %8s %9s %9s %10s %10s %12s\n", "workload", "eager ms",
              "compiled", "speedup", "trace ms", "passes", "GB/s", "GFLOP/s", "max|diff|");
  for (const Row& r : rows) {
    const double gbs = r.bytes > 0 ? r.bytes / (r.compiled_ms * 1e6) : 0;
    const double gfl = r.flops > 0 ? r.flops / (r.compiled_ms * 1e6) : 0;
    std::printf("%-22s %10.2f %10.2f %7.2fx %9.2f %9.2f %10.1f %10.1f %12.3g\n", r.name.c_str(),
                r.eager_ms, r.compiled_ms, r.eager_ms / r.compiled_ms, r.trace_ms, r.passes_ms,
                gbs, gfl, r.max_abs_diff);
  }
  std::printf("GELU: compiled / hand-written loop = %.2fx (target <= 1), eager / compiled = %.2fx "
              "(target >= 10)\n",
              rows[0].compiled_ms / gelu_loop_ms, rows[0].eager_ms / rows[0].compiled_ms);
  std::printf("softmax: %.0f%% of STREAM copy (target >= 70%%); layer_norm: %.0f%%\n",
              100 * rows[1].bytes / (rows[1].compiled_ms * 1e6) / copy_gbs,
              100 * rows[2].bytes / (rows[2].compiled_ms * 1e6) / copy_gbs);
  std::printf("MLP step: %.2fx its GEMM floor (target <= 1.3)\n",
              rows[3].compiled_ms / (rows[3].flops / (sgemm * 1e6)));
  if (!json.empty()) {
    std::ofstream f(json);
    f << "{\"stream_copy_gbs\": " << copy_gbs << ", \"stream_triad_gbs\": " << triad_gbs
      << ", \"sgemm_gflops\": " << sgemm << ", \"gelu_loop_ms\": " << gelu_loop_ms
      << ", \"workloads\": [";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      f << (i ? ", " : "") << "{\"name\": \"" << r.name << "\", \"eager_ms\": " << r.eager_ms
        << ", \"compiled_ms\": " << r.compiled_ms << ", \"trace_ms\": " << r.trace_ms
        << ", \"passes_ms\": " << r.passes_ms << ", \"peak_bytes\": " << r.peak_bytes
        << ", \"max_abs_diff\": " << r.max_abs_diff << "}";
    }
    f << "]}\n";
  }
  return 0;
}
