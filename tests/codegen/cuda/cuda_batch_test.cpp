// A compiled step's instances of one pointwise kernel in batched launches
// (gpu_printer_batch.h): the batched kernel equals one launch per instance bit
// for bit (sizes 0 to 4097, broadcast coordinates, more instances than one
// launch takes); compiled AdamW and SGD steps over parameters of 1 to 512000
// elements equal the CPU's eager steps bit for bit in ceil(instances /
// capacity) launches instead of one per parameter, replayed from a captured
// CUDA graph too; NVRTC compiles batched kernels without spills or a stack
// frame (the table read in place: __grid_constant__).
#include <regex>

#include "codegen/cuda/cuda_test_util.h"
#include "codegen/cuda/golden.h"
#include "codegen/kernel_test_util.h"
#include "common/scoped_env.h"
#include "kernels/cuda/device_ops.h"
#include "kernels/cuda/driver.h"
#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/gpu_printer_batch.h"
#include "kernels/cuda/module.h"
#include "kernels/cuda/nvrtc_lib.h"
#include "kiln/compile.h"
#include "kiln/env.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"

namespace kiln::cuda {
namespace {

using kir::testing::Builder;

class CudaBatched : public kiln::testing::CudaTest<41> {};

// out_f16 = where(x > y, x * y, x - z) with y broadcast along the rows and z
// an f64 scalar: coordinates, a narrow and a wide dtype.
kir::Kernel broadcast_kernel() {
  Builder b(2, "batched_where");
  const int x = b.load(b.in(DType::f32, {true, true}));
  const int y = b.load(b.in(DType::f32, {false, true}));
  const int z = b.op(OpId::cast, DType::f32, b.load(b.in(DType::f64, {false, false})));
  const int w = b.op(OpId::where, DType::f32, b.op(OpId::gt, DType::b8, x, y),
                     b.op(OpId::mul, DType::f32, x, y), b.op(OpId::sub, DType::f32, x, z));
  b.store(b.out(DType::f16, {true, true}), b.op(OpId::cast, DType::f16, w));
  return b.k;
}

// An Adam-like update of rank 1: 3 dense inputs, 6 scalars, 3 outputs.
kir::Kernel adam_like_kernel() {
  Builder b(1, "batched_adam");
  const DType f = DType::f32;
  const int p = b.load(b.in(f, {true})), g = b.load(b.in(f, {true}));
  const int m = b.load(b.in(f, {true}));
  std::vector<int> s;
  for (int i = 0; i < 6; ++i) s.push_back(b.op(OpId::cast, f, b.load(b.in(DType::f64, {false}))));
  const int m2 = b.op(OpId::add, f, b.op(OpId::mul, f, m, s[0]), b.op(OpId::mul, f, g, s[1]));
  const int v = b.op(OpId::add, f, b.op(OpId::sqrt, f, b.op(OpId::mul, f, g, g)), s[2]);
  const int p2 = b.op(OpId::add, f, b.op(OpId::mul, f, p, s[3]),
                      b.op(OpId::mul, f, b.op(OpId::div, f, m2, v), s[4]));
  b.store(b.out(f, {true}), p2);
  b.store(b.out(f, {true}), m2);
  b.store(b.out(f, {true}), b.op(OpId::mul, f, v, s[5]));
  return b.k;
}

// The batched kernel's text: the search, the record's locals, print_kernel's loops.
TEST(GpuPrinterBatch, GoldenBatchedKernel) {
  kiln::testing::expect_golden(
      "batched_where.cu",
      print_batched_kernel(broadcast_kernel(), "kiln_batched", kBatchWordsCuda));
}

// Instance sizes of broadcast_kernel: empty ones, single elements, a row
// longer than a block's step, more rows than one launch's blocks, repeated
// past `cap`, a launch's capacity (20 on the emulated device, 32 on a GPU:
// a fixed 25 live instances made one launch on 2026-11-27's H200).
std::vector<std::vector<int64_t>> instance_sizes(size_t cap) {
  const std::vector<std::vector<int64_t>> base = {{0, 5},    {1, 1},    {1, 3}, {2, 256},
                                                  {4097, 1}, {3, 1700}, {5, 0}};
  const size_t live_per_base = 5;
  std::vector<std::vector<int64_t>> out;
  for (size_t r = 0; r < cap / live_per_base + 2; ++r)
    out.insert(out.end(), base.begin(), base.end());
  return out;
}

// The batched kernel's outputs equal print_kernel's launched once per instance
// (launch_kernel's grid), bit for bit, and it takes ceil(live / capacity)
// launches for the live (non-empty) instances.
TEST_F(CudaBatched, BatchedKernelEqualsOneLaunchPerInstance) {
  const kir::Kernel k = broadcast_kernel();
  const int words = batch_words();
  const auto cap = static_cast<size_t>(batch_capacity(k, words));
  const std::vector<std::vector<int64_t>> sizes = instance_sizes(cap);
  std::mt19937 rng(7);
  auto pick = [](DType, std::mt19937& g) {
    return std::uniform_real_distribution<double>(-2, 2)(g);
  };
  std::vector<std::vector<kir::testing::Buffer>> bufs;
  std::vector<std::vector<DeviceBuffer>> single(sizes.size()), batched(sizes.size());
  std::vector<std::vector<void*>> ptrs(sizes.size());
  const CUfunction one = cached_kernel(0, print_kernel(k, "kiln_one"), "kiln_one");
  const CUfunction many =
      cached_kernel(0, print_batched_kernel(k, "kiln_many", words), "kiln_many");
  size_t live = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    bufs.push_back(kir::testing::make_buffers(k, sizes[i], rng, pick));
    std::vector<CUdeviceptr> p1;
    for (size_t a = 0; a < k.args.size(); ++a) {
      const size_t bytes = bufs[i][a].bytes.size() + 16;  // never 0 bytes
      for (auto* set : {&single[i], &batched[i]}) {
        set->emplace_back(bytes);
        std::vector<char> init(bytes, 0x5a);
        std::copy(bufs[i][a].bytes.begin(), bufs[i][a].bytes.end(), init.begin());
        set->back().upload(init.data(), bytes);
      }
      p1.push_back(single[i].back().get());
      ptrs[i].push_back(reinterpret_cast<void*>(batched[i].back().get()));
    }
    launch_kernel(one, k, p1, sizes[i].data());
    live += kir::work_items(k, sizes[i].data()) > 0;
  }
  std::vector<void* const*> pp;
  std::vector<const int64_t*> ss;
  for (size_t i = 0; i < sizes.size(); ++i) {
    pp.push_back(ptrs[i].data());
    ss.push_back(sizes[i].data());
  }
  EXPECT_LT(cap, live) << "more instances than one launch takes";
  EXPECT_EQ(launch_batched(many, k, pp, ss), static_cast<int64_t>((live + cap - 1) / cap));
  for (size_t i = 0; i < sizes.size(); ++i)
    for (size_t a = 0; a < k.args.size(); ++a) {
      const size_t bytes = single[i][a].bytes();
      std::vector<char> x(bytes), y(bytes);
      single[i][a].download(x.data(), bytes);
      batched[i][a].download(y.data(), bytes);
      EXPECT_EQ(x, y) << "instance " << i << " argument " << a;
    }
}

// The parameters of the compiled optimizer tests: 1 to 512000 elements,
// 37 of them (more than one batched launch takes on either device).
std::vector<Dims> parameter_shapes() {
  std::vector<Dims> out;
  for (int r = 0; r < 9; ++r)
    for (const Dims& d : std::vector<Dims>{{1}, {3}, {64, 8}, {17, 241}}) out.push_back(d);
  out.push_back({1000, 512});
  return out;
}

// Parameters and fixed gradients on `device` (the same values on each).
std::vector<Tensor> parameters(Device device) {
  manual_seed(3);
  std::vector<Tensor> ps;
  for (const Dims& d : parameter_shapes()) {
    Tensor p = randn(d).to(device);
    p.requires_grad_();
    p.set_grad(randn(d).to(device));
    ps.push_back(p);
  }
  return ps;
}

struct Counts {
  int64_t instances = 0, launches = 0, batched = 0;
};
Counts counts() {
  const GraphProgramStats s = graph_program_stats();
  return {s.instances, s.launches, s.batched_launches};
}

// `steps` compiled steps of `make`'s optimizer over device parameters against
// its eager steps on the CPU: every parameter equal bit for bit; returns the
// fused instances and launches of the last compiled call.
template <typename Make>
Counts compare_steps(Make make, int steps) {
  std::vector<Tensor> cpu = parameters(Device::cpu()), dev = parameters(Device::cuda());
  auto cpu_opt = make(cpu);
  auto dev_opt = make(dev);
  auto step = compile(
      [&](const Tensor& x) {
        dev_opt->step();
        return x + 1;
      },
      {.warmup = 0});
  const Tensor x = zeros({1}).cuda();
  Counts before, after;
  for (int s = 0; s < steps; ++s) {
    cpu_opt->step();
    before = counts();
    (void)step(x);
    synchronize();
    after = counts();
  }
  for (size_t i = 0; i < cpu.size(); ++i)
    EXPECT_EQ(kiln::testing::bits_of(dev[i].detach()), kiln::testing::bits_of(cpu[i].detach()))
        << "parameter " << i << " " << cpu[i].shape();
  return {after.instances - before.instances, after.launches - before.launches,
          after.batched - before.batched};
}

// 37 parameters: 9 of one element (a kernel of its own: dense scalars), 27
// more and the largest alone (another order of operands), and `x + 1`: 38
// instances, in 4 launches on a GPU (31 instances of the 14-argument update
// per launch) and 8 on the emulated device (7 per launch); one per instance
// before.
TEST_F(CudaBatched, CompiledAdamWStepEqualsTheCpuInBatchedLaunches) {
  kiln::testing::ScopedEnv off("KILN_CUDA_GRAPHS", "0");  // a replay launches the graph
  const Counts c = compare_steps(
      [](const std::vector<Tensor>& ps) {
        return std::make_unique<optim::AdamW>(ps,
                                              optim::AdamWOptions{.lr = 1e-2, .weight_decay = 0.1});
      },
      3);
  EXPECT_EQ(c.instances, static_cast<int64_t>(parameter_shapes().size()) + 1);
  EXPECT_GE(c.batched, 2);
  EXPECT_LE(c.launches * 4, c.instances) << c.batched << " batched";
}

// SGD with momentum and weight decay: the momentum buffers are made by the
// first (traced) step, a graph output made real on the device (it kept the
// symbolic tensor's CPU device: "input cap0 is on cpu" at the second call).
TEST_F(CudaBatched, CompiledSgdStepEqualsTheCpuInBatchedLaunches) {
  kiln::testing::ScopedEnv off("KILN_CUDA_GRAPHS", "0");
  const Counts c = compare_steps(
      [](const std::vector<Tensor>& ps) {
        return std::make_unique<optim::SGD>(
            ps, optim::SGDOptions{.lr = 1e-2, .momentum = 0.9, .weight_decay = 1e-3});
      },
      3);
  EXPECT_EQ(c.instances, static_cast<int64_t>(parameter_shapes().size()) + 1);
  EXPECT_GE(c.batched, 1);
  EXPECT_LE(c.launches * 4, c.instances) << c.batched << " batched";
}

// The fused kernel instances and launches of the last of 3 compiled calls of
// `step` (graphs off: a replay is one launch of the graph).
template <typename Step>
Counts step_counts(Step& step) {
  kiln::testing::ScopedEnv off("KILN_CUDA_GRAPHS", "0");
  Counts before, after;
  for (int s = 0; s < 3; ++s) {
    before = counts();
    (void)step();
    synchronize();
    after = counts();
  }
  return {after.instances - before.instances, after.launches - before.launches,
          after.batched - before.batched};
}

// bench/cuda_harness's training steps at its --small sizes: an MLP (Linear,
// GELU, Linear, MSE, SGD) and a transformer (embeddings, 2 pre-norm encoder
// layers, a vocabulary head, cross-entropy, AdamW). Their fused kernels'
// instances were one launch each; the optimizers' updates now batch.
TEST_F(CudaBatched, HarnessStepsLaunchFewerFusedKernels) {
  const int64_t B = 64, D = 32, H = 128;
  auto mlp = std::make_shared<nn::Sequential>();
  mlp->push_back(std::make_shared<nn::Linear>(D, H));
  mlp->push_back(std::make_shared<nn::GELU>());
  mlp->push_back(std::make_shared<nn::Linear>(H, D));
  mlp->to(Device::cuda());
  optim::SGD sgd(mlp->parameters(), optim::SGDOptions{.lr = 1e-3});
  const Tensor in = randn({B, D}).cuda(), target = randn({B, D}).cuda();
  auto mlp_step = compile([&] {
    sgd.zero_grad();
    Tensor loss = mse_loss(mlp->forward(in), target);
    loss.backward();
    sgd.step();
    return loss;
  });
  const Counts m = step_counts(mlp_step);

  const int64_t V = 50, L = 16, E = 32, NB = 4;
  auto tok = std::make_shared<nn::Embedding>(V, E), pos = std::make_shared<nn::Embedding>(L, E);
  nn::TransformerEncoderLayerOptions lo;
  lo.dim_feedforward = 4 * E;
  lo.dropout = 0.0;
  lo.norm_first = true;
  lo.activation = "gelu";
  auto enc = std::make_shared<nn::TransformerEncoder>(
      std::make_shared<nn::TransformerEncoderLayer>(E, 2, lo), 2,
      std::make_shared<nn::LayerNorm>(E));
  auto head = std::make_shared<nn::Linear>(E, V);
  std::vector<Tensor> params;
  for (nn::Module* mod :
       std::initializer_list<nn::Module*>{tok.get(), pos.get(), enc.get(), head.get()}) {
    mod->to(Device::cuda());
    for (const Tensor& p : mod->parameters()) params.push_back(p);
  }
  optim::AdamW adamw(params, optim::AdamWOptions{.lr = 1e-4});
  const Tensor tokens = randint(0, V, {NB, L}).cuda(), labels = randint(0, V, {NB * L}).cuda();
  const Tensor positions = arange(L).cuda();
  auto transformer_step = compile([&] {
    adamw.zero_grad();
    const Tensor h = (*enc)((*tok)(tokens) + (*pos)(positions));
    Tensor loss = cross_entropy((*head)(h).reshape({NB * L, V}), labels);
    loss.backward();
    adamw.step();
    return loss;
  });
  const Counts t = step_counts(transformer_step);
  std::printf(
      "fused kernel launches per step (instances before batching): MLP %lld (%lld), "
      "transformer %lld (%lld); %lld and %lld of them batched; %zu parameters\n",
      static_cast<long long>(m.launches), static_cast<long long>(m.instances),
      static_cast<long long>(t.launches), static_cast<long long>(t.instances),
      static_cast<long long>(m.batched), static_cast<long long>(t.batched), params.size());
  EXPECT_LT(m.launches, m.instances);
  EXPECT_LE(t.launches + static_cast<int64_t>(params.size()) / 2, t.instances);
}

// Captured on the plan's second run, replayed after: the batched launches'
// tables are in the graph; the parameters equal the CPU's after every step.
TEST_F(CudaBatched, ACapturedAdamWStepReplaysItsBatchedLaunches) {
  if (env::get_flag("KILN_CUDA_SYNC", false))
    GTEST_SKIP() << "KILN_CUDA_SYNC=1 synchronizes after every launch: nothing is captured";
  const GraphStats before = graph_stats();
  (void)compare_steps(
      [](const std::vector<Tensor>& ps) {
        return std::make_unique<optim::AdamW>(ps, optim::AdamWOptions{.lr = 1e-2});
      },
      5);
  const GraphStats after = graph_stats();
  EXPECT_EQ(after.fallbacks, before.fallbacks) << after.last_fallback;
  EXPECT_GE(after.captures, before.captures + 1);
  EXPECT_GE(after.replays, before.replays + 3);
}

// Batched kernels in CUDA C: PTX for sm_80 and sm_90, machine code for sm_90
// without spills and without a stack frame (the table is read in place).
TEST(Nvrtc, BatchedKernelsCompileWithoutSpills) {
  const std::string source = cuda_prelude() +
                             print_batched_kernel(broadcast_kernel(), "b0", kBatchWordsCuda) +
                             print_batched_kernel(adam_like_kernel(), "b1", kBatchWordsCuda);
  for (int arch : {80, 90})
    EXPECT_NE(nvrtc_compile(source, "batched.cu", arch, /*cubin=*/false)
                  .ptx.find(str(".target sm_", arch)),
              std::string::npos);
#ifndef KILN_TEST_SANITIZED
  const NvrtcOutput out =
      nvrtc_compile(source, "batched.cu", 90, /*cubin=*/true, {"--ptxas-options=-v"});
  EXPECT_EQ(spill_bytes(out.log), 0) << out.log;
  const std::regex frame("([0-9]+) bytes stack frame");
  int frames = 0;
  for (auto it = std::sregex_iterator(out.log.begin(), out.log.end(), frame);
       it != std::sregex_iterator(); ++it, ++frames)
    EXPECT_EQ((*it)[1].str(), "0") << out.log;
  EXPECT_EQ(frames, 2) << out.log;
#endif
  // 32 instances of the Adam-like kernel per launch on a GPU, 8 emulated.
  EXPECT_EQ(batch_capacity(adam_like_kernel(), kBatchWordsCuda), 32);
  EXPECT_EQ(batch_capacity(adam_like_kernel(), kBatchWordsOpenCl), 8);
}

}  // namespace
}  // namespace kiln::cuda
