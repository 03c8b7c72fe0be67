// GEMM epilogues on CUDA (cuBLASLt's CUBLASLT_EPILOGUE_BIAS / RELU_BIAS /
// GELU_BIAS; on the emulated device the host product with the same contract):
// the bias is added to the f32 accumulator before the output is rounded, so
// f32 bias and bias + ReLU equal the unfused matmul + add (+ relu) bit for
// bit, and f16/bf16 at most as the unfused path. Eager `linear` on CUDA runs
// as one GEMM with a bias epilogue, with matmul + add's gradients.
#include <cmath>
#include <cstdio>

#include "cuda_test_util.h"
#include "executor/executor.h"
#include "kernels/cuda/cublaslt.h"
#include "kernels/cuda/driver.h"
#include "kiln/autograd.h"
#include "kiln/compile.h"
#include "kiln/grad_destination.h"
#include "kiln/ir/text.h"

namespace kiln {
namespace {

class CudaEpilogue : public testing::CudaTest<23> {};

using cuda::GemmEpilogue;

// out = epilogue(a . b + bias) on the device through device_matmul.
Tensor fused(const Tensor& a, const Tensor& b, GemmEpilogue e, const Tensor& bias,
             const Dims& shape) {
  Tensor out = zeros(shape, a.dtype(), a.device());
  cuda::device_matmul(a, b, out, e, bias);
  return out;
}

// f32: the epilogue adds the bias to the f32 result as the unfused add does,
// so the bits are the unfused path's on the same device.
TEST_F(CudaEpilogue, F32BiasAndReluEqualTheUnfusedPathBitForBit) {
  for (const Dims& ashape : {Dims{5, 7}, Dims{3, 4, 9}, Dims{1, 16}}) {
    const int64_t K = ashape.back(), N = 6;
    const Tensor a = randn(ashape).cuda(), b = randn({K, N}).cuda();
    for (const Dims& bshape : {Dims{N}, Dims{1}}) {
      const Tensor bias = randn(bshape).cuda();
      const Tensor plain = matmul(a, b) + bias;
      Dims oshape = ashape;
      oshape.back() = N;
      testing::expect_bits(fused(a, b, GemmEpilogue::kBias, bias, oshape), plain.cpu(), "bias");
      testing::expect_bits(fused(a, b, GemmEpilogue::kBiasRelu, bias, oshape), relu(plain).cpu(),
                           "bias + relu");
      testing::expect_bits(fused(a, b, GemmEpilogue::kRelu, bias, oshape), relu(matmul(a, b)).cpu(),
                           "relu");
    }
  }
}

// f16/bf16: on the emulated device one rounding (the f32 sum rounded once,
// bit for bit); on a GPU (H100, 2026-11-27) cuBLASLt's result is within two
// units of the unfused path but not of the once-rounded sum (5 bf16 units
// off where the bias cancels most of the product: the product is rounded to
// the half type before the bias is added, as in the unfused path).
TEST_F(CudaEpilogue, HalfTypesRoundAtMostLikeTheUnfusedPath) {
  for (DType dt : {DType::f16, DType::bf16}) {
    const Tensor a = randn({8, 32}).to(dt).cuda(), b = randn({32, 12}).to(dt).cuda();
    const Tensor bias = randn({12}).to(dt).cuda();
    const Tensor out = fused(a, b, GemmEpilogue::kBiasRelu, bias, {8, 12});
    const Tensor one_rounding =
        relu(matmul(a.cpu().to(DType::f32), b.cpu().to(DType::f32)) + bias.cpu().to(DType::f32))
            .to(dt);
    // One unit in the last place (a GPU's sum in another order may round the
    // other way; on the emulated device the bits are equal).
    const double eps = dt == DType::f16 ? 1.0 / 1024 : 1.0 / 128;
    if (cuda::driver().emulated)
      testing::expect_bits(out, one_rounding, "against the f32 sum rounded once");
    testing::expect_close(out, relu(matmul(a, b) + bias).cpu(), 2 * eps,
                          "against the unfused path");
  }
}

// GELU: cuBLASLt's own tanh form; on the emulated device kiln's tanh GELU of
// the f32 sum. Within 5e-5 of kiln's (not used by default: see cublaslt.h);
// the largest deviation is printed for a GPU's log (tools/device/gpu_checks.sh).
TEST_F(CudaEpilogue, GeluIsTheTanhForm) {
  const Tensor a = randn({64, 20}).cuda(), b = randn({20, 48}).cuda(), bias = randn({48}).cuda();
  const Tensor out = fused(a, b, GemmEpilogue::kBiasGelu, bias, {64, 48});
  const Tensor want = gelu(matmul(a, b) + bias, "tanh").cpu();
  const Tensor dev =
      (abs(out.cpu().to(DType::f64) - want.to(DType::f64)) / (abs(want.to(DType::f64)) + 1)).max();
  std::printf("[ epilogue ] %s GELU_BIAS against kiln's tanh GELU: max |d| / (1 + |x|) = %g\n",
              cuda::driver().emulated ? "the emulated device's" : "cuBLASLt's", dev.item<double>());
  testing::expect_close(out, want, 5e-5, "bias + gelu");
}

// K = 0: the epilogue of an empty sum is the bias (then the activation).
TEST_F(CudaEpilogue, EmptySumsGiveTheBias) {
  const Tensor a = zeros({3, 0}).cuda(), b = zeros({0, 4}).cuda();
  const Tensor bias = Tensor(from_vector<float>({-1, 2, -3, 4})).cuda();
  testing::expect_equal(fused(a, b, GemmEpilogue::kBiasRelu, bias, {3, 4}),
                        relu(bias.cpu()).expand({3, 4}).contiguous(), "K = 0");
  EXPECT_THROW(fused(ones({2, 3}).cuda(), ones({3, 4}).cuda(), GemmEpilogue::kBias,
                     ones({3}).cuda(), {2, 4}),
               Error);
}

// Eager linear on CUDA: one GEMM with the bias epilogue (its own backward
// node), the unfused path's bits for f32, and the CPU's gradients.
TEST_F(CudaEpilogue, EagerLinearIsOneGemmWithTheUnfusedResults) {
  const Tensor x0 = randn({4, 3, 10}), w0 = randn({6, 10}), b0 = randn({6});
  auto leaves = [](const Tensor& t, bool cuda) {
    Tensor l = (cuda ? t.cuda() : t.clone()).detach();
    l.requires_grad_(true);
    return l;
  };
  const Tensor gy = randn({4, 3, 6});
  Tensor xc = leaves(x0, false), wc = leaves(w0, false), bc = leaves(b0, false);
  Tensor yc = linear(xc, wc, bc);
  yc.backward(gy);
  for (bool fusion : {true, false}) {
    set_eager_fusion(fusion);
    Tensor x = leaves(x0, true), w = leaves(w0, true), b = leaves(b0, true);
    Tensor y = linear(x, w, b);
    ASSERT_TRUE(y.grad_fn());
    EXPECT_EQ(y.grad_fn()->name() == "LinearBackward", fusion) << y.grad_fn()->name();
    // The unfused product's bits on this device (a GPU's f32 sums run in
    // cuBLASLt's order, not the CPU's), the CPU's within rounding.
    {
      NoGradGuard no_grad;
      testing::expect_bits(y, (matmul(x, w.t()) + b).cpu(), "forward");
    }
    testing::expect_close(y, yc.detach(), 1e-5, "forward against the CPU");
    y.backward(gy.cuda());
    testing::expect_close(x.grad(), xc.grad(), 1e-5, "x grad");
    testing::expect_close(w.grad(), wc.grad(), 1e-5, "weight grad");
    testing::expect_close(b.grad(), bc.grad(), 1e-5, "bias grad");
  }
  set_eager_fusion(true);
}

// A weight with a gradient destination (DDP's bucket view) gets its gradient
// computed there, even when the input's gradient has the same size.
TEST_F(CudaEpilogue, EagerLinearWeightGradientIsComputedInItsDestination) {
  Tensor x = randn({4, 10}).cuda();
  x.requires_grad_(true);
  Tensor w = randn({4, 10}).cuda();
  w.requires_grad_(true);
  const Tensor b = randn({4}).cuda(), dst = zeros({4, 10}).cuda();
  autograd::set_grad_destination(w, dst);
  const int64_t before = autograd::grad_destination_stats().computed_in_place;
  linear(x, w, b).sum().backward();
  EXPECT_EQ(autograd::grad_destination_stats().computed_in_place, before + 1);
  EXPECT_TRUE(w.grad().is_same(dst) || w.grad().data_ptr() == dst.data_ptr());
  Tensor xc = x.detach().cpu(), wc = w.detach().cpu();
  xc.requires_grad_(true);
  wc.requires_grad_(true);
  linear(xc, wc, b.cpu()).sum().backward();
  testing::expect_close(w.grad(), wc.grad(), 1e-5, "weight grad");
  testing::expect_close(x.grad(), xc.grad(), 1e-5, "x grad");
  autograd::clear_grad_destination(w);
}

// Gradients of gradients go through the same ops (create_graph).
TEST_F(CudaEpilogue, EagerLinearDifferentiatesTwice) {
  Tensor x = randn({5, 4}).cuda().requires_grad_(true);
  Tensor w = randn({3, 4}).cuda().requires_grad_(true), b = randn({3}).cuda();
  Tensor y = linear(x, w, b);
  Tensor gx = grad({(y * y).sum()}, {x}, {}, {.create_graph = true})[0];
  Tensor gw = grad({gx.sum()}, {w})[0];
  Tensor xc = x.detach().cpu().requires_grad_(true), wc = w.detach().cpu().requires_grad_(true);
  Tensor yc = linear(xc, wc, b.cpu());
  Tensor gxc = grad({(yc * yc).sum()}, {xc}, {}, {.create_graph = true})[0];
  testing::expect_close(gx, gxc.detach(), 1e-5, "first");
  testing::expect_close(gw, grad({gxc.sum()}, {wc})[0], 1e-5, "second");
}

// ---- compiled graphs: matmul + bias add (+ relu) as one GEMM step ----

std::shared_ptr<const ir::Graph> graph(const std::string& text) {
  return std::shared_ptr<const ir::Graph>(ir::parse(text));
}

// The graph's outputs on cuda:0 with and without the epilogue rule, and the
// schedule with it.
struct Runs {
  std::vector<Tensor> folded, plain;
  std::string schedule;
};
Runs run_both(const std::string& text, const std::vector<Tensor>& in) {
  auto g = graph(text);
  Runs r;
  for (bool fold : {true, false}) {
    Executor ex(g, {.fuse = true, .gemm_epilogues = fold, .device = Device::cuda()});
    RunArgs a;
    a.inputs = in;
    (fold ? r.folded : r.plain) = ex.run(a);
    if (fold) r.schedule = ex.schedule_text();
  }
  return r;
}

const char* kBiasRelu = R"(graph(%0: f32[6, 10] "x", %1: f32[10, 7] "w", %2: f32[7] "b") {
  %3 = matmul(%0, %1) : f32[6, 7]
  %4 = add(%3, %2) : f32[6, 7]
  %5 = relu(%4) : f32[6, 7]
  return %5 "out0"
})";

// The epilogue group and its matmul become one step, with the unfused bits.
TEST_F(CudaEpilogue, CompiledBiasReluIsOneGemmStep) {
  const std::vector<Tensor> in{randn({6, 10}).cuda(), randn({10, 7}).cuda(), randn({7}).cuda()};
  const Runs r = run_both(kBiasRelu, in);
  EXPECT_EQ(r.schedule, "matmul+bias+relu\n");
  testing::expect_bits(r.folded[0], r.plain[0].cpu(), "bias + relu");
  testing::expect_bits(r.folded[0], relu(matmul(in[0], in[1]) + in[2]).cpu(), "eager");
}

// Two linears of one shape: their epilogue kernels would launch as one
// batched step; each becomes its own GEMM step instead.
TEST_F(CudaEpilogue, CompiledBatchedEpiloguesEachFold) {
  const std::vector<Tensor> in{randn({5, 8}).cuda(), randn({8, 3}).cuda(), randn({3}).cuda(),
                               randn({8, 3}).cuda(), randn({3}).cuda()};
  const Runs r = run_both(R"(graph(%0: f32[5, 8] "x", %1: f32[8, 3] "w1", %2: f32[3] "b1",
                                %3: f32[8, 3] "w2", %4: f32[3] "b2") {
  %5 = matmul(%0, %1) : f32[5, 3]
  %6 = matmul(%0, %3) : f32[5, 3]
  %7 = add(%5, %2) : f32[5, 3]
  %8 = add(%6, %4) : f32[5, 3]
  return %7 "a", %8 "b"
})",
                          in);
  EXPECT_EQ(r.schedule, "matmul+bias\nmatmul+bias\n");
  for (size_t i = 0; i < 2; ++i)
    testing::expect_bits(r.folded[i], r.plain[i].cpu(), "output " + std::to_string(i));
}

// Not folded: the product read elsewhere, a bias that is not one row, more
// work in the group (it stays a kernel).
TEST_F(CudaEpilogue, CompiledRuleLeavesOtherGroupsAlone) {
  const Tensor x = randn({4, 5}).cuda(), w = randn({5, 3}).cuda(), b = randn({3}).cuda();
  const Runs shared = run_both(R"(graph(%0: f32[4, 5] "x", %1: f32[5, 3] "w", %2: f32[3] "b") {
  %3 = matmul(%0, %1) : f32[4, 3]
  %4 = add(%3, %2) : f32[4, 3]
  return %4 "out0", %3 "mm"
})",
                               {x, w, b});
  EXPECT_EQ(shared.schedule.find("matmul+bias"), std::string::npos) << shared.schedule;
  const Runs full = run_both(R"(graph(%0: f32[4, 5] "x", %1: f32[5, 3] "w", %2: f32[4, 3] "b") {
  %3 = matmul(%0, %1) : f32[4, 3]
  %4 = add(%3, %2) : f32[4, 3]
  return %4 "out0"
})",
                             {x, w, randn({4, 3}).cuda()});
  EXPECT_EQ(full.schedule.find("matmul+bias"), std::string::npos) << full.schedule;
  const Runs more = run_both(R"(graph(%0: f32[4, 5] "x", %1: f32[5, 3] "w", %2: f32[3] "b") {
  %3 = matmul(%0, %1) : f32[4, 3]
  %4 = add(%3, %2) : f32[4, 3]
  %5 = mul(%4, %4) : f32[4, 3]
  return %5 "out0"
})",
                             {x, w, b});
  EXPECT_EQ(more.schedule.find("matmul+bias"), std::string::npos) << more.schedule;
  testing::expect_bits(more.folded[0], more.plain[0].cpu(), "unchanged");
}

// Fusion rule 13: a bias add whose sum the group would store (here a graph
// output, as GELU's input is for its backward) becomes the GEMM's epilogue,
// the rest of the group a kernel reading the sum; the unfused bits.
TEST_F(CudaEpilogue, CompiledBiasWhoseSumIsStoredFoldsAndTheRestReadsIt) {
  const std::vector<Tensor> in{randn({6, 10}).cuda(), randn({10, 7}).cuda(), randn({7}).cuda()};
  const Runs r = run_both(R"(graph(%0: f32[6, 10] "x", %1: f32[10, 7] "w", %2: f32[7] "b") {
  %3 = matmul(%0, %1) : f32[6, 7]
  %4 = add(%3, %2) : f32[6, 7]
  %5 = erf(%4) : f32[6, 7]
  %6 = mul(%4, %5) : f32[6, 7]
  return %6 "y", %4 "z"
})",
                          in);
  EXPECT_EQ(r.schedule.rfind("matmul+bias\nkernel ", 0), 0u) << r.schedule;
  for (size_t i = 0; i < 2; ++i)
    testing::expect_bits(r.folded[i], r.plain[i].cpu(), "output " + std::to_string(i));
  const Tensor z = matmul(in[0], in[1]) + in[2];
  testing::expect_bits(r.folded[1], z.cpu(), "eager sum");
}

// kiln::compile of an MLP's loss on CUDA: the forward's linears run as GEMM
// steps with their bias (+ relu) epilogues (in CUDA graphs from the second
// call on); the loss keeps eager's bits, the gradients eager's values.
TEST_F(CudaEpilogue, CompiledMlpLossKeepsEagersBits) {
  const Tensor x = randn({16, 12}).cuda(), t = randn({16, 4}).cuda();
  const std::vector<Tensor> init{(randn({24, 12}) * 0.3).cuda(), randn({24}).cuda(),
                                 (randn({4, 24}) * 0.3).cuda(), randn({4}).cuda()};
  auto leaves = [&] {
    std::vector<Tensor> ps;
    for (const Tensor& p : init) {
      Tensor l = p.clone();
      l.requires_grad_(true);
      ps.push_back(l);
    }
    return ps;
  };
  auto loss_of = [](const std::vector<Tensor>& ps, const Tensor& x, const Tensor& t) {
    const Tensor h = relu(linear(x, ps[0], ps[1]));
    const Tensor d = linear(h, ps[2], ps[3]) - t;
    return (d * d).mean();
  };
  const std::vector<Tensor> pe = leaves(), pc = leaves();
  set_eager_fusion(false);  // eager as traced: matmul, then add
  const Tensor want = loss_of(pe, x, t);
  want.backward();
  set_eager_fusion(true);
  auto cf =
      compile([&](const Tensor& x, const Tensor& t) { return loss_of(pc, x, t); }, {.warmup = 0});
  for (int call = 0; call < 3; ++call) {
    const Tensor got = cf(x, t);
    testing::expect_bits(got, want.detach().cpu(), "loss, call " + std::to_string(call));
    if (call < 2) continue;
    EXPECT_EQ(cf.stats().traces, 1);
    got.backward();
    for (size_t i = 0; i < pc.size(); ++i)
      testing::expect_close(pc[i].grad(), pe[i].grad().cpu(), 1e-5, "grad " + std::to_string(i));
  }
}

}  // namespace
}  // namespace kiln
