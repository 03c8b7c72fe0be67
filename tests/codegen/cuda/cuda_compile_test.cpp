// kiln::compile on CUDA tensors: the graph runs on the device of its inputs,
// fused groups as printed GPU kernels, the other nodes through the device
// runtime; results against the same function run eagerly on the CPU. Runs on
// a real GPU, or on the emulated device (KILN_CUDA_EMULATE) in CI.
#include <cmath>
#include <fstream>
#include <iterator>

#include "common/scoped_env.h"

#include "codegen/cuda/cuda_test_util.h"
#include "kernels/cuda/device_ops.h"
#include "kiln/compile.h"
#include "kiln/cuda.h"
#include "kiln/env.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"
#include "kiln/profiler.h"

namespace kiln {
namespace {

using testing::expect_close;

class CudaCompile : public testing::CudaTest<5> {};

TEST_F(CudaCompile, PointwiseAndRowReductionsRunAsDeviceKernels) {
  auto f = [](const Tensor& x, const Tensor& y) {
    const Tensor g = 0.5 * x * (1 + tanh(0.7978845608 * (x + 0.044715 * x * x * x)));
    return softmax(g * y, -1) + layer_norm(x, {x.size(-1)});
  };
  auto cf = compile(f, {.warmup = 0});
  const Tensor x = randn({33, 70}), y = randn({70});
  const Tensor want = f(x, y);
  for (int call = 0; call < 2; ++call) expect_close(cf(x.cuda(), y.cuda()), want, 2e-5, "call");
  EXPECT_EQ(cf.stats().traces, 1);
  EXPECT_GT(cf.stats().fused_kernels, 0);
  EXPECT_GT(cf.stats().last_kernel_launches, 0);
}

// A graph's new kernels compile as one program (one NVRTC call, one module)
// at its first launch; a second graph with the same kernels compiles nothing.
TEST_F(CudaCompile, AGraphsKernelsCompileAsOneProgram) {
  auto f = [](const Tensor& x, const Tensor& w) {  // kernels on both sides of a matmul
    return softmax(matmul(tanh(x * 1.2345 + 0.5), w) * 0.75, -1);
  };
  const Tensor x = randn({9, 41}), y = randn({41, 13});
  const Tensor want = f(x, y);
  auto cf = compile(f, {.warmup = 0});
  const cuda::GraphProgramStats before = cuda::graph_program_stats();
  expect_close(cf(x.cuda(), y.cuda()), want, 2e-5, "first call");
  const cuda::GraphProgramStats after = cuda::graph_program_stats();
  ASSERT_GE(cf.stats().fused_kernels, 2);
  EXPECT_EQ(after.programs, before.programs + 1);
  EXPECT_GE(after.kernels - before.kernels, 2);
  expect_close(cf(x.cuda(), y.cuda()), want, 2e-5, "second call");
  auto again = compile(f, {.warmup = 0});  // the same kernels: found compiled
  expect_close(again(x.cuda(), y.cuda()), want, 2e-5, "another graph");
  EXPECT_EQ(cuda::graph_program_stats().programs, after.programs);
}

TEST_F(CudaCompile, ColumnSumsAndMatmulsRunOnTheDevice) {
  auto f = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    const Tensor h = relu(matmul(x, w) + b);
    return std::make_pair(h.sum({0}), (h * h).mean());
  };
  auto cf = compile(
      [&](const Tensor& x, const Tensor& w, const Tensor& b) {
        auto [s, m] = f(x, w, b);
        return s + m;
      },
      {.warmup = 0});
  const Tensor x = randn({16, 24}), w = randn({24, 8}), b = randn({8});
  auto [s, m] = f(x, w, b);
  expect_close(cf(x.cuda(), w.cuda(), b.cuda()), s + m, 1e-4, "column sum");
}

TEST_F(CudaCompile, TrainingStepGradientsMatchTheCpu) {
  const Tensor x = randn({8, 12}), w0 = randn({12, 6}) * 0.3, t = randn({8, 6});
  auto loss_of = [](const Tensor& x, const Tensor& w, const Tensor& t) {
    return ((tanh(matmul(x, w)) - t) * (tanh(matmul(x, w)) - t)).mean();
  };
  Tensor w_cpu = w0.clone().requires_grad_();
  loss_of(x, w_cpu, t).backward();
  Tensor w_gpu = w0.cuda().requires_grad_();
  auto cf = compile([&](const Tensor& x, const Tensor& t) { return loss_of(x, w_gpu, t); },
                    {.warmup = 0});
  const Tensor l = cf(x.cuda(), t.cuda());
  l.backward();
  ASSERT_TRUE(w_gpu.grad().defined());
  expect_close(w_gpu.grad(), w_cpu.grad(), 1e-4, "w.grad");
}

TEST_F(CudaCompile, MovingTheArgumentsToAnotherDeviceRetraces) {
  auto cf = compile([](const Tensor& x) { return exp(x) * 2; }, {.warmup = 0});
  const Tensor x = randn({10});
  expect_close(cf(x.cuda()), exp(x) * 2, 1e-6, "cuda");
  const Tensor c = cf(x);  // now on the CPU: a new plan, not the CUDA one
  EXPECT_EQ(c.device(), Device::cpu());
  EXPECT_TRUE(allclose(c, exp(x) * 2, 1e-6, 1e-7));
  EXPECT_EQ(cf.stats().traces, 2);
}

// Regression (found by CudaRandomPrograms): rand_like of a captured device
// tensor inside the trace moved the recorded draw `.to(device)`, which raises
// for a traced value ("moving a traced tensor from cpu to cuda:0").
TEST_F(CudaCompile, DrawsLikeACapturedDeviceTensorTrace) {
  const Tensor w = randn({6, 5}).cuda();
  auto f = [&] { return dropout(w, 0.5) + rand_like(w) * randn_like(w); };
  auto cf = compile(f, {.warmup = 0});
  manual_seed(11);
  const Tensor want = f();
  manual_seed(11);
  expect_close(cf(), want.cpu(), 2e-6, "draws");
}

// model.to(device) moves parameters and gradients behind the same handles.
TEST_F(CudaCompile, ModuleToMovesParametersInPlace) {
  auto lin = std::make_shared<nn::Linear>(3, 2);
  const Tensor w = lin->weight;
  const Tensor before = w.clone();
  (lin->forward(ones({1, 3})).sum()).backward();
  lin->to(Device::cuda());
  EXPECT_TRUE(lin->weight.is_same(w));
  EXPECT_EQ(w.device(), Device::cuda());
  EXPECT_TRUE(w.requires_grad());
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().device(), Device::cuda());
  expect_close(w, before, 0, "weight values");
  lin->to(Device::cpu());
  EXPECT_EQ(w.device(), Device::cpu());
}

// The examples' MLP (2-5-1, ReLU, sigmoid, BCE, SGD) trained on the device,
// eagerly and as one compiled step, follows the CPU's losses.
TEST_F(CudaCompile, MlpTrainsOnTheDeviceLikeOnTheCpu) {
  auto make = [] {
    manual_seed(0);
    auto m = std::make_shared<nn::Sequential>();
    m->push_back(std::make_shared<nn::Linear>(2, 5));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::Linear>(5, 1));
    m->push_back(std::make_shared<nn::Sigmoid>());
    return m;
  };
  const Tensor x = from_vector<float>({0.1f, 0.9f, 0.8f, 0.2f, 0.3f, 0.7f}, {3, 2});
  const Tensor y = from_vector<float>({1.f, 0.f, 1.f}, {3, 1});
  auto train = [&](Device dev, bool compiled) {
    auto model = make();
    model->to(dev);
    const Tensor xd = x.to(dev), yd = y.to(dev);
    nn::BCELoss criterion;
    optim::SGD opt(model->parameters(), {.lr = 0.5});
    auto step = [&] {
      opt.zero_grad();
      Tensor loss = criterion(model->forward(xd), yd);
      loss.backward();
      opt.step();
      return loss;
    };
    auto cstep = compile(step);
    std::vector<double> losses;
    for (int i = 0; i < 30; ++i) {
      const Tensor l = compiled ? cstep() : step();
      EXPECT_EQ(l.device(), dev);
      losses.push_back(l.item<double>());
    }
    if (compiled) {
      EXPECT_EQ(cstep.stats().traces, 1);
    }
    return losses;
  };
  const std::vector<double> cpu = train(Device::cpu(), false);
  for (bool compiled : {false, true}) {
    const std::vector<double> gpu = train(Device::cuda(), compiled);
    for (size_t i = 0; i < cpu.size(); ++i)
      ASSERT_NEAR(gpu[i], cpu[i], 1e-5) << (compiled ? "compiled" : "eager") << " step " << i;
  }
  EXPECT_LT(cpu.back(), cpu.front());
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// While a profile records, a plan's steps on the device are timed by events
// in its stream (executor/device_timeline.h): one span per step on the track
// "cuda:0", named like the step, in stream order, inside the profile.
TEST_F(CudaCompile, AProfileTimesEachStepOnTheDevice) {
  if (env::get_flag("KILN_CUDA_SYNC", false))
    GTEST_SKIP() << "KILN_CUDA_SYNC=1: the host spans time the device";
  kiln::testing::ScopedEnv plain("KILN_CUDA_GRAPHS", "0");  // a replay runs no steps
  auto f = [](const Tensor& x, const Tensor& w) {
    return softmax(matmul(tanh(x * 1.5 + 0.25), w), -1).sum({0});
  };
  auto cf = compile(f, {.warmup = 0});
  const Tensor x = randn({64, 32}).cuda(), w = randn({32, 48}).cuda();
  (void)cf(x, w);  // compiled outside the profile
  profiler::Profile prof;
  (void)cf(x, w);
  prof.stop();
  int64_t track = -1;
  std::vector<const profiler::Event*> spans;
  for (const profiler::Event& e : prof.events())
    if (e.cat == "device") {
      spans.push_back(&e);
      track = e.tid;
    }
  ASSERT_FALSE(spans.empty()) << "no device spans";
  int64_t kernels = 0;
  bool named = false;
  for (size_t i = 0; i < spans.size(); ++i) {
    EXPECT_EQ(spans[i]->tid, track);
    EXPECT_GE(spans[i]->dur_ns, 0);
    if (i > 0) {
      EXPECT_GE(spans[i]->ts_ns, spans[i - 1]->ts_ns + spans[i - 1]->dur_ns) << i;
    }
    kernels += spans[i]->args.find("\"instances\":") != std::string::npos;
    named |= spans[i]->name == "matmul";
  }
  EXPECT_EQ(kernels, cf.stats().last_kernel_launches) << "one span per kernel step";
  EXPECT_TRUE(named) << "the matmul step has its node's name";
  EXPECT_GE(track, int64_t{1} << 40) << "a track of its own, not a thread";
  const std::string path = ::testing::TempDir() + "kiln_device_timeline.json";
  prof.export_chrome_trace(path);
  std::ifstream in(path);
  const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(json.find("\"cuda:0\""), std::string::npos) << "the track is named";
}

}  // namespace
}  // namespace kiln
