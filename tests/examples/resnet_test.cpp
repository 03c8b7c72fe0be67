// Runs the ResNet example small, eagerly and compiled: the same losses, one
// trace for the whole run (OneCycleLR's lr and momentum change every step
// without re-tracing), and a loss that falls.
#include <gtest/gtest.h>

#include <sstream>
#include <vector>

#include "kiln/cuda.h"
#include "resnet.h"

namespace {

void expect_eager_and_compiled_agree(kiln::examples::ResNetOptions o) {
  std::ostringstream log_eager, log_compiled;
  auto eager = kiln::examples::train_resnet(o, log_eager);
  o.compile = true;
  auto compiled = kiln::examples::train_resnet(o, log_compiled);
  ASSERT_EQ(eager.losses.size(), compiled.losses.size());
  ASSERT_GE(eager.losses.size(), 10u);
  for (size_t i = 0; i < eager.losses.size(); ++i)
    EXPECT_NEAR(compiled.losses[i], eager.losses[i], 1e-4 * std::abs(eager.losses[i]))
        << "step " << i + 1;
  EXPECT_NEAR(compiled.test_accuracy, eager.test_accuracy, 0.02);
  const auto& s = compiled.compile_stats;
  EXPECT_EQ(s.traces, 1) << s.last_miss;
  EXPECT_EQ(s.compiled_calls, static_cast<int>(eager.losses.size()) - 1);
  // OneCycleLR (cycle_momentum on): lr up then down, momentum the other way.
  const size_t peak = static_cast<size_t>(0.3 * static_cast<double>(eager.lrs.size()));
  EXPECT_NEAR(eager.lrs.front(), o.max_lr / 25, 1e-9);
  EXPECT_GT(eager.lrs[peak], 0.9 * o.max_lr);
  EXPECT_LT(eager.lrs.back(), eager.lrs.front());
  EXPECT_NEAR(eager.momenta.front(), 0.95, 1e-9);
  EXPECT_LT(eager.momenta[peak], 0.86);
  EXPECT_EQ(eager.lrs, compiled.lrs);
  EXPECT_EQ(eager.momenta, compiled.momenta);
}

}  // namespace

double mean_of(const std::vector<double>& v, size_t from, size_t n) {
  double s = 0;
  for (size_t i = from; i < from + n; ++i) s += v[i];
  return s / static_cast<double>(n);
}

// Synthetic Fashion-MNIST-shaped data (always available): the loss falls and
// the test images are recognised well above chance.
TEST(ExampleResNet, SyntheticDataEagerAndCompiledAgree) {
  kiln::examples::ResNetOptions o;
  o.synthetic = true;
  o.train_limit = 960;
  o.test_limit = 128;
  std::ostringstream log;
  auto r = kiln::examples::train_resnet(o, log);
  ASSERT_EQ(r.losses.size(), 30u);
  EXPECT_LT(mean_of(r.losses, 25, 5), 0.6 * mean_of(r.losses, 0, 5)) << log.str();
  EXPECT_GT(r.test_accuracy, 0.5) << log.str();
  o.train_limit = 320;  // 10 steps suffice to compare eager and compiled
  expect_eager_and_compiled_agree(o);
}

// Fashion-MNIST itself when dataset-fashion-mnist is installed (else the
// example falls back to synthetic data, tested above).
TEST(ExampleResNet, FashionMnistEagerAndCompiledAgree) {
  kiln::examples::ResNetOptions o;
  o.train_limit = 1280;
  o.test_limit = 256;
  std::ostringstream log;
  auto r = kiln::examples::train_resnet(o, log);
  if (r.synthetic_data) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  ASSERT_EQ(r.losses.size(), 40u);
  EXPECT_LT(mean_of(r.losses, 35, 5), 0.9 * mean_of(r.losses, 0, 5)) << log.str();
  EXPECT_GT(r.test_accuracy, 0.2) << log.str();
  o.train_limit = 320;
  expect_eager_and_compiled_agree(o);
}

// `resnet --device cuda`: conv2d (3x3 and strided 1x1), BatchNorm, residual
// adds, adaptive average pooling and SGD + momentum on a CUDA device (a GPU,
// or the emulated device in CI), eagerly and compiled, follow the CPU's
// losses and test predictions. Tiny: the emulated device is slow.
TEST(ExampleResNet, TrainsOnACudaDeviceLikeOnTheCpu) {
  if (!kiln::cuda::is_available())
    GTEST_SKIP() << "no CUDA device: " << kiln::cuda::unavailable_reason();
#ifdef KILN_TEST_SANITIZED
  const std::vector<bool> modes = {false};  // eager only: ~3x slower under ASan
#else
  const std::vector<bool> modes = {false, true};
#endif
  for (bool compile : modes) {
    kiln::examples::ResNetOptions o;
    o.synthetic = true;
    o.width = 4;
    o.batch_size = 4;
    o.train_limit = 12;  // three steps
    o.test_limit = 8;
    o.compile = compile;
    std::ostringstream log_cpu, log_gpu;
    auto cpu = kiln::examples::train_resnet(o, log_cpu);
    o.device = kiln::Device::cuda();
    auto gpu = kiln::examples::train_resnet(o, log_gpu);
    const char* mode = compile ? "compiled" : "eager";
    ASSERT_EQ(gpu.losses.size(), 3u);
    ASSERT_EQ(cpu.losses.size(), 3u);
    for (size_t i = 0; i < cpu.losses.size(); ++i)
      EXPECT_NEAR(gpu.losses[i], cpu.losses[i], 1e-4 * cpu.losses[i]) << mode << " step " << i + 1;
    EXPECT_EQ(gpu.lrs, cpu.lrs);
    EXPECT_DOUBLE_EQ(gpu.test_accuracy, cpu.test_accuracy) << mode;
    EXPECT_NE(log_gpu.str().find("on cuda:0"), std::string::npos) << log_gpu.str();
    if (compile) {
      EXPECT_EQ(gpu.compile_stats.traces, 1) << gpu.compile_stats.last_miss;
    }
  }
}
