// Eager against compiled kiln on a CUDA device (plain executable; run by
// tools/device/gpu_checks.sh on a lent machine): GELU, softmax and layer_norm
// over 16M f32 against the device's copy bandwidth, and an MLP and a
// transformer training step against their cuBLAS floors (each step's matmuls
// alone, through the same cuBLASLt calls). Wall-clock medians of paired rounds, the device
// synchronized after every call; the rows also in a stream (16 calls, one
// synchronization), which is their bandwidth.
//   cuda_harness [--reps R] [--small] [--only rows|overhead|mlp|transformer]
// (--small: tiny sizes, to check it runs; --only: that part alone, e.g. to
// profile it with KILN_PROFILE and KILN_CUDA_SYNC=1.)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cuda/cublaslt.h"
#include "kernels/cuda/driver.h"
#include "kernels/cuda/pocl_driver.h"
#include "kiln/compile.h"
#include "kiln/cuda.h"
#include "kiln/env.h"
#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"

using namespace kiln;

namespace {

// One call's time with the device synchronized after it; `host`: until the
// call returns (the synchronization after it untimed).
double once_ms(const std::function<void()>& f, bool host = false) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  if (!host) cuda::synchronize();
  const auto t1 = std::chrono::steady_clock::now();
  if (host) cuda::synchronize();
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

// How one round of a workload is timed (ms).
using Timer = std::function<double(const std::function<void()>&)>;

// Medians of `reps` paired rounds of a and b timed by `time` (alternating
// which runs first), after `warmups` untimed rounds of each.
std::pair<double, double> paired_by(int reps, const Timer& time, int warmups,
                                    const std::function<void()>& a,
                                    const std::function<void()>& b) {
  for (int w = 0; w < warmups; ++w) {
    time(a);
    time(b);
  }
  std::vector<double> ta, tb;
  for (int r = 0; r < reps; ++r) {
    if (r % 2) {
      ta.push_back(time(a));
      tb.push_back(time(b));
    } else {
      tb.push_back(time(b));
      ta.push_back(time(a));
    }
  }
  std::sort(ta.begin(), ta.end());
  std::sort(tb.begin(), tb.end());
  return {ta[ta.size() / 2], tb[tb.size() / 2]};
}

// Medians of `reps` paired rounds of one synchronized call of a and of b.
std::pair<double, double> paired(int reps, const std::function<void()>& a,
                                 const std::function<void()>& b, bool host = false) {
  return paired_by(
      reps, [host](const std::function<void()>& f) { return once_ms(f, host); }, 3, a, b);
}

// One call's share of `calls` calls made back to back with one
// synchronization after them: the device's time per call once the host stays
// ahead of it (each launch's fixed cost overlaps the kernels before it).
double streamed_ms(const std::function<void()>& f, int calls = 16) {
  cuda::synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int c = 0; c < calls; ++c) f();
  cuda::synchronize();
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(t1 - t0).count() / calls;
}

// Medians of `reps` paired rounds of streamed_ms(a) and streamed_ms(b).
std::pair<double, double> paired_streamed(int reps, const std::function<void()>& a,
                                          const std::function<void()>& b) {
  return paired_by(
      reps, [](const std::function<void()>& f) { return streamed_ms(f); }, 1, a, b);
}

Tensor gelu_tanh(const Tensor& x) {
  return 0.5 * x * (1 + tanh(0.7978845608 * (x + 0.044715 * x * x * x)));
}

// The copy's times: one synchronized call, and per call in a stream.
struct CopyMs {
  double synced, streamed;
};

// A row's line: eager and compiled, one synchronized call each (as a user's
// single call sees it), then per call in a stream (streamed_ms: the kernel's
// bandwidth, the launch's fixed cost hidden), each against the copy's.
void row(int reps, const char* name, const std::function<void()>& eager,
         const std::function<void()>& compiled, double bytes, CopyMs copy) {
  const auto [e, c] = paired(reps, eager, compiled);
  const auto [es, cs] = paired_streamed(reps, eager, compiled);
  std::printf(
      "%-28s eager %8.3f ms   compiled %8.3f ms (%.1fx)   compiled %6.0f GB/s = %3.0f%% of copy"
      "   in a stream: eager %8.3f ms, compiled %8.3f ms = %6.0f GB/s = %3.0f%% of copy\n",
      name, e, c, e / c, bytes / c / 1e6, 100 * copy.synced / c, es, cs, bytes / cs / 1e6,
      100 * copy.streamed / cs);
}

// GELU, softmax and layer_norm over x (16M f32), eager against compiled.
void rows(int reps, const Tensor& x, double bytes, CopyMs copy) {
  auto gelu_c = compile([](const Tensor& t) { return gelu_tanh(t); });
  row(
      reps, "GELU (tanh) 16M", [&] { (void)gelu_tanh(x); }, [&] { (void)gelu_c(x); }, bytes, copy);

  const Tensor xs = x.reshape({x.numel() / 1024, 1024});
  auto sm_c = compile([](const Tensor& t) { return softmax(t, -1); });
  row(
      reps, "softmax [16384, 1024]", [&] { (void)softmax(xs, -1); }, [&] { (void)sm_c(xs); }, bytes,
      copy);

  const Tensor w = randn({1024}).cuda(), b = randn({1024}).cuda();
  auto ln = [](const Tensor& t, const Tensor& w, const Tensor& b) {
    return layer_norm(t, {t.size(-1)}, w, b);
  };
  auto ln_c = compile(ln);
  row(
      reps, "layer_norm [16384, 1024]", [&] { (void)ln(xs, w, b); }, [&] { (void)ln_c(xs, w, b); },
      bytes, copy);
}

// The driver entry points `f` calls, with counts ("cuGraphLaunch 1, ..."),
// and the time spent in them: the emulated device counts them; "" and 0
// with a real driver.
std::pair<std::string, double> driver_calls(const std::function<void()>& f) {
  const auto before = cuda::emulated_driver_calls();
  f();
  std::string s;
  double ms = 0;
  for (const cuda::DriverCalls& a : cuda::emulated_driver_calls()) {
    cuda::DriverCalls was;
    for (const cuda::DriverCalls& b : before)
      if (b.name == a.name) was = b;
    if (a.calls > was.calls) s += str(s.empty() ? "" : ", ", a.name, " ", a.calls - was.calls);
    ms += static_cast<double>(a.ns - was.ns) / 1e6;
  }
  return {s, ms};
}

// Host time per call outside the driver (emulated device: the driver's time
// is counted): the medians of `reps` rounds of 64 calls of f, in microseconds.
double outside_driver_us(int reps, const std::function<void()>& f) {
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const double in_driver = driver_calls([&] {
                               for (int i = 0; i < 64; ++i) f();
                             }).second;
    const auto t1 = std::chrono::steady_clock::now();
    us.push_back(1e3 * (std::chrono::duration<double, std::milli>(t1 - t0).count() - in_driver) /
                 64);
    cuda::synchronize();
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

// The fixed cost of a compiled call (issue 19: a replayed GELU 16M costs
// about 10 us more than its kernel; the rows' "% of copy" compare it with a
// synchronous cuMemcpyDtoD): a GELU of 16 elements, replayed from a CUDA
// graph and run plainly (KILN_CUDA_GRAPHS=0), against a 64-byte copy,
// synchronized after each call; the host time until a call returns (the
// kernel runs after it; the CPU backend's for the same call), also for
// GELU 16M; and on the emulated device the driver calls of one call and the
// host time outside them.
void overhead(int reps, const Tensor& x) {
  auto graphed = compile([](const Tensor& t) { return gelu_tanh(t); });
  auto plain = compile([](const Tensor& t) { return gelu_tanh(t); });
  auto on_cpu = compile([](const Tensor& t) { return gelu_tanh(t); });
  auto big = compile([](const Tensor& t) { return gelu_tanh(t); });
  const Tensor tiny = randn({16}).cuda(), tiny_cpu = randn({16}), into = empty_like(tiny);
  auto copy = [&] {
    cuda::check(cuda::driver().cuMemcpyDtoD(reinterpret_cast<CUdeviceptr>(into.data_ptr()),
                                            reinterpret_cast<CUdeviceptr>(tiny.data_ptr()), 64),
                "cuMemcpyDtoD");
  };
  struct Side {
    double wall, copy, host, host_big, outside;
    std::string calls;
  };
  auto side = [&](auto& f) {
    Side r;
    std::tie(r.wall, r.copy) = paired(
        4 * reps, [&] { (void)f(tiny); }, copy);
    r.host = paired(
                 4 * reps, [&] { (void)f(tiny); }, [] {}, true)
                 .first;
    r.host_big = paired(
                     reps, [&] { (void)big(x); }, [] {}, true)
                     .first;
    r.calls = driver_calls([&] { (void)f(tiny); }).first;
    r.outside = r.calls.empty() ? 0 : outside_driver_us(reps, [&] { (void)f(tiny); });
    return r;
  };
  const Side g = side(graphed);
  const std::string was = env::get("KILN_CUDA_GRAPHS");  // restored after (the later parts)
  ::setenv("KILN_CUDA_GRAPHS", "0", 1);
  const Side p = side(plain);
  if (was.empty())
    ::unsetenv("KILN_CUDA_GRAPHS");
  else
    ::setenv("KILN_CUDA_GRAPHS", was.c_str(), 1);
  const double cpu = paired(
                         4 * reps, [&] { (void)on_cpu(tiny_cpu); }, [] {}, true)
                         .first;
  std::printf(
      "compiled call's fixed cost (GELU [16], synchronized): CUDA graph %.1f us, plain %.1f us; "
      "a 64-byte cuMemcpyDtoD %.1f us%s\n",
      1e3 * g.wall, 1e3 * p.wall, 1e3 * std::min(g.copy, p.copy),
      was == "0" ? " (KILN_CUDA_GRAPHS=0: both plain)" : "");
  std::printf(
      "  host time until the call returns: GELU [16] graph %.1f us, plain %.1f us (CPU "
      "backend %.1f us); GELU %lld graph %.1f us, plain %.1f us\n",
      1e3 * g.host, 1e3 * p.host, 1e3 * cpu, static_cast<long long>(x.numel()), 1e3 * g.host_big,
      1e3 * p.host_big);
  for (const Side* s : {&g, &p})
    if (!s->calls.empty())
      std::printf("  driver calls of one %s call: %s; host time outside the driver %.2f us\n",
                  s == &g ? "graph" : "plain", s->calls.c_str(), s->outside);
}

// The graph stats' line for one workload: what its compiled calls replayed
// (and why a plan could not), counted since `before`.
void graph_line(const char* what, const cuda::GraphStats& before) {
  const cuda::GraphStats gs = cuda::graph_stats();
  const bool plain = gs.fallbacks > before.fallbacks;
  std::printf("  %s CUDA graphs: %lld captured, %lld replays, %lld plans plain%s%s\n", what,
              static_cast<long long>(gs.captures - before.captures),
              static_cast<long long>(gs.replays - before.replays),
              static_cast<long long>(gs.fallbacks - before.fallbacks),
              plain ? ": last because " : "", plain ? gs.last_fallback.c_str() : "");
}

// One MLP (1024 -> 4096 -> 1024 with GELU, MSE, SGD; batch 4096) and its
// step; eager and compiled steps each train their own copy (the same start),
// so one's steps never move the other's tensors.
struct Mlp {
  std::shared_ptr<nn::Sequential> model = std::make_shared<nn::Sequential>();
  std::unique_ptr<optim::SGD> opt;
  Tensor in, target;
  Mlp(int64_t B, int64_t D, int64_t H, Device dev) {
    manual_seed(2);
    model->push_back(std::make_shared<nn::Linear>(D, H));
    model->push_back(std::make_shared<nn::GELU>());
    model->push_back(std::make_shared<nn::Linear>(H, D));
    model->to(dev);
    opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 1e-3});
    in = randn({B, D}).cuda();
    target = randn({B, D}).cuda();
  }
  Tensor step() {
    opt->zero_grad();
    Tensor loss = mse_loss(model->forward(in), target);
    loss.backward();
    opt->step();
    return loss;
  }
};

// The MLP step against its cuBLAS floor.
void mlp(int reps, bool small, Device dev) {
  const int64_t B = small ? 64 : 4096, D = small ? 32 : 1024, H = 4 * D;
  const cuda::GraphStats before = cuda::graph_stats();
  Mlp eager(B, D, H, dev), traced(B, D, H, dev);
  auto step_c = compile([&] { return traced.step(); });
  auto [me, mc] = paired(
      reps, [&] { (void)eager.step(); }, [&] { (void)step_c(); });
  const Tensor& in = eager.in;
  // The floor: the step's five products (two forward; dW2, dh, dW1 backward).
  const Tensor h = randn({B, H}).cuda(), g = randn({B, D}).cuda(), w2 = randn({D, H}).cuda();
  const Tensor w1 = randn({H, D}).cuda(), dh = randn({B, H}).cuda();
  const double floor_ms = paired(
                              reps,
                              [&] {
                                (void)matmul(in, w1.t());
                                (void)matmul(h, w2.t());
                                (void)matmul(g.t(), h);
                                (void)matmul(g, w2);
                                (void)matmul(dh.t(), in);
                              },
                              [] {})
                              .first;
  std::printf(
      "MLP step (4096x1024 -> 4096 -> 1024, f32) eager %.3f ms  compiled %.3f ms  cuBLAS floor "
      "%.3f ms  -> eager %.2fx, compiled %.2fx of the floor (traces %d)\n",
      me, mc, floor_ms, me / floor_ms, mc / floor_ms, step_c.stats().traces);
  graph_line("MLP step", before);
}

// A transformer (token + position embeddings, pre-norm encoder layers, a
// vocabulary head, cross-entropy, AdamW: the harness's CPU workload, larger)
// and its step; eager and compiled steps each train their own copy.
struct Transformer {
  std::shared_ptr<nn::Embedding> tok, pos;
  std::shared_ptr<nn::TransformerEncoder> enc;
  std::shared_ptr<nn::Linear> head;
  std::unique_ptr<optim::AdamW> adamw;
  Tensor tokens, labels, positions;
  int64_t rows, vocab;
  Transformer(int64_t V, int64_t L, int64_t E, int64_t NB, int64_t layers, Device dev)
      : rows(NB * L), vocab(V) {
    manual_seed(1);
    tok = std::make_shared<nn::Embedding>(V, E);
    pos = std::make_shared<nn::Embedding>(L, E);
    nn::TransformerEncoderLayerOptions lo;
    lo.dim_feedforward = 4 * E;
    lo.dropout = 0.0;
    lo.norm_first = true;
    lo.activation = "gelu";
    enc = std::make_shared<nn::TransformerEncoder>(
        std::make_shared<nn::TransformerEncoderLayer>(E, E / 64 > 0 ? E / 64 : 2, lo), layers,
        std::make_shared<nn::LayerNorm>(E));
    head = std::make_shared<nn::Linear>(E, V);
    std::vector<Tensor> params;
    for (nn::Module* m :
         std::initializer_list<nn::Module*>{tok.get(), pos.get(), enc.get(), head.get()}) {
      m->to(dev);
      for (const Tensor& p : m->parameters()) params.push_back(p);
    }
    adamw = std::make_unique<optim::AdamW>(params, optim::AdamWOptions{.lr = 1e-4});
    tokens = randint(0, V, {NB, L}).cuda();
    labels = randint(0, V, {NB * L}).cuda();
    positions = arange(L).cuda();
  }
  Tensor step() {
    adamw->zero_grad();
    const Tensor h = (*enc)((*tok)(tokens) + (*pos)(positions));
    Tensor loss = cross_entropy((*head)(h).reshape({rows, vocab}), labels);
    loss.backward();
    adamw->step();
    return loss;
  }
};

// The transformer step against its cuBLAS floor.
void transformer(int reps, bool small, Device dev) {
  const int64_t V = small ? 50 : 1000, L = small ? 16 : 256, E = small ? 32 : 512;
  const int64_t NB = small ? 4 : 32, layers = 2;
  const cuda::GraphStats before = cuda::graph_stats();
  const int64_t arrays_at_start = cuda::pointer_batches();
  Transformer eager(V, L, E, NB, layers, dev), traced(V, L, E, NB, layers, dev);
  auto tstep_c = compile([&] { return traced.step(); });
  auto [te, tc] = paired(
      reps, [&] { (void)eager.step(); }, [&] { (void)tstep_c(); });
  // The floor: every product of the step alone. Forward per layer: the QKV
  // projection, the heads' scores and weighted values, the output projection
  // and the feed-forward pair; then the vocabulary head. Backward: each
  // forward product C = A B gives dA = dC B^T and dB = A^T dC.
  const int64_t T = NB * L, heads = E / 64 > 0 ? E / 64 : 2, hd = E / heads;
  struct Product {
    int64_t batch, m, k, n;
  };
  std::vector<Product> products;
  for (int64_t l = 0; l < layers; ++l) {
    products.push_back({1, T, E, 3 * E});
    products.push_back({NB * heads, L, hd, L});
    products.push_back({NB * heads, L, L, hd});
    products.push_back({1, T, E, E});
    products.push_back({1, T, E, 4 * E});
    products.push_back({1, T, 4 * E, E});
  }
  products.push_back({1, T, E, V});
  struct Operands {
    Tensor a, b, dc;
  };
  std::vector<Operands> operands;
  auto shape = [](int64_t batch, int64_t r, int64_t c) {
    return batch == 1 ? std::vector<int64_t>{r, c} : std::vector<int64_t>{batch, r, c};
  };
  for (const Product& p : products)
    operands.push_back({randn(shape(p.batch, p.m, p.k)).cuda(),
                        randn(shape(p.batch, p.k, p.n)).cuda(),
                        randn(shape(p.batch, p.m, p.n)).cuda()});
  const double tfloor_ms = paired(
                               reps,
                               [&] {
                                 for (const Operands& o : operands) {
                                   (void)matmul(o.a, o.b);
                                   (void)matmul(o.dc, o.b.transpose(-2, -1));
                                   (void)matmul(o.a.transpose(-2, -1), o.dc);
                                 }
                               },
                               [] {})
                               .first;
  // Per product of one layer and the head (forward, dA and dB together), with
  // contiguous operands as above; the attention's two batched products also
  // with the heads viewed as the model has them ([NB, L, heads, hd] permuted:
  // cuBLASLt takes one batch stride, so such an operand is copied first).
  auto triple_ms = [&](const Tensor& a, const Tensor& b, const Tensor& dc) {
    return paired(
               reps,
               [&] {
                 (void)matmul(a, b);
                 (void)matmul(dc, b.transpose(-2, -1));
                 (void)matmul(a.transpose(-2, -1), dc);
               },
               [] {})
        .first;
  };
  auto head_view = [&](int64_t r, int64_t c, bool t) {  // [NB, heads, r, c], the model's layout
    return t ? randn({NB, c, heads, r}).cuda().permute({0, 2, 3, 1})
             : randn({NB, r, heads, c}).cuda().permute({0, 2, 1, 3});
  };
  std::printf("  floor per product (fwd + dA + dB):");
  for (size_t i = 0; i < products.size(); ++i) {
    if (i >= 6 && i + 1 < products.size()) continue;  // one layer and the head
    const Product& p = products[i];
    const Operands& o = operands[i];
    std::printf(" [%lld x %lld x %lld x %lld] %.3f ms", static_cast<long long>(p.batch),
                static_cast<long long>(p.m), static_cast<long long>(p.k),
                static_cast<long long>(p.n), triple_ms(o.a, o.b, o.dc));
  }
  const Tensor probs = randn({NB, heads, L, L}).cuda();
  // In place on cuBLASLt's pointer arrays (where it runs them), then copied.
  auto laid_out = [&] {
    return std::pair{triple_ms(head_view(L, hd, false), head_view(hd, L, true), probs),
                     triple_ms(probs, head_view(L, hd, false), head_view(L, hd, false))};
  };
  const int64_t arrays_before = cuda::pointer_batches();
  const auto [scores_in_place, values_in_place] = laid_out();
  const bool arrays = cuda::pointer_batches() > arrays_before;
  cuda::set_pointer_batches(false);
  const auto [scores_copied, values_copied] = laid_out();
  cuda::set_pointer_batches(true);
  std::printf(
      "; heads as laid out: scores %.3f ms, weighted values %.3f ms (%s), copied first %.3f ms, "
      "%.3f ms\n",
      scores_in_place, values_in_place,
      arrays ? "in place on pointer arrays" : "cuBLASLt refused the arrays: copied", scores_copied,
      values_copied);
  // The copies kiln makes of such operands (out of [NB, L, heads, hd]): the
  // heads as rows and (K^T) transposed, each kept in its own orientation.
  const Tensor x4 = randn({NB, L, heads, hd}).cuda();
  const double head_copy = paired(
                               reps,
                               [&] {
                                 (void)x4.permute({0, 2, 1, 3}).contiguous();
                               },
                               [] {})
                               .first;
  std::printf(
      "  head copy [%lld, %lld, %lld, %lld] out of the model's layout %.3f ms (%.0f GB/s)\n",
      static_cast<long long>(NB), static_cast<long long>(heads), static_cast<long long>(L),
      static_cast<long long>(hd), head_copy,
      2.0 * static_cast<double>(x4.numel()) * 4 / head_copy / 1e6);
  std::printf(
      "transformer step (batch %lld x %lld tokens, d_model %lld, %lld layers, vocab %lld, "
      "AdamW) eager %.3f ms  compiled %.3f ms (%.2fx) (traces %d)  cuBLAS floor %.3f ms "
      "(%zu products) -> eager %.2fx, compiled %.2fx of the floor\n",
      static_cast<long long>(NB), static_cast<long long>(L), static_cast<long long>(E),
      static_cast<long long>(layers), static_cast<long long>(V), te, tc, te / tc,
      tstep_c.stats().traces, tfloor_ms, 3 * products.size(), te / tfloor_ms, tc / tfloor_ms);
  std::printf("  products on pointer arrays: %lld in all (KILN_CUDA_POINTER_BATCHES=0: none)\n",
              static_cast<long long>(cuda::pointer_batches() - arrays_at_start));
  graph_line("transformer step", before);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 15;
  bool small = false;
  const char* only = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--small")) small = true;
    if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
  }
  if (!cuda::is_available()) {
    std::printf("no CUDA device: %s\n", cuda::unavailable_reason().c_str());
    return 0;
  }
  auto want = [&](const char* part) { return only == nullptr || !std::strcmp(only, part); };
  try {
    const Device dev = Device::cuda();
    const int64_t n = small ? int64_t{1} << 14 : int64_t{1} << 24;
    manual_seed(0);
    const Tensor x = randn({n}).cuda();
    Tensor y = empty_like(x);
    const double bytes = 2.0 * static_cast<double>(n) * 4;  // read + write once
    // The baseline: a device-to-device copy of the same bytes.
    auto copy = [&] {
      cuda::check(cuda::driver().cuMemcpyDtoD(reinterpret_cast<CUdeviceptr>(y.data_ptr()),
                                              reinterpret_cast<CUdeviceptr>(x.data_ptr()),
                                              static_cast<size_t>(n) * 4),
                  "cuMemcpyDtoD");
    };
    const CopyMs copy_ms = {paired(reps, copy, [] {}).first,
                            paired_streamed(reps, copy, [] {}).first};
    std::printf("cuMemcpyDtoD 16M f32 %.3f ms (%.0f GB/s); in a stream %.3f ms (%.0f GB/s)\n",
                copy_ms.synced, bytes / copy_ms.synced / 1e6, copy_ms.streamed,
                bytes / copy_ms.streamed / 1e6);

    if (want("rows")) rows(reps, x, bytes, copy_ms);
    if (want("overhead")) overhead(reps, x);
    if (want("mlp")) mlp(reps, small, dev);
    if (want("transformer")) transformer(reps, small, dev);
    // Whether the compiled calls replayed CUDA graphs (and why a plan could not).
    const cuda::GraphStats gs = cuda::graph_stats();
    std::printf("CUDA graphs: %lld captured, %lld replays, %lld plans plain%s%s\n",
                static_cast<long long>(gs.captures), static_cast<long long>(gs.replays),
                static_cast<long long>(gs.fallbacks), gs.fallbacks ? ": last because " : "",
                gs.last_fallback.c_str());
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
  return 0;
}
