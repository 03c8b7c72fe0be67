// Runs the ResNet example small, eagerly and compiled: the same losses, one
// trace for the whole run (OneCycleLR's lr and momentum change every step
// without re-tracing), and a loss that falls.
#include <gtest/gtest.h>

#include <sstream>
#include <vector>

#include "examples/cpu_and_cuda.h"
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
  kiln::examples::ResNetOptions o;
  o.synthetic = true;
  o.width = 4;
  o.batch_size = 4;
  o.train_limit = 12;  // three steps
  o.test_limit = 8;
  kiln::examples::testing::train_on_cpu_and_cuda(
      o, kiln::examples::train_resnet, [](const auto& r) {
        ASSERT_EQ(r.cpu.losses.size(), 3u);
        kiln::examples::testing::expect_losses_follow(r.gpu.losses, r.cpu.losses, 1e-4, r.mode);
        EXPECT_EQ(r.gpu.lrs, r.cpu.lrs);
        EXPECT_DOUBLE_EQ(r.gpu.test_accuracy, r.cpu.test_accuracy) << r.mode;
        EXPECT_NE(r.gpu_log.find("on cuda:0"), std::string::npos) << r.gpu_log;
        if (r.compiled) {
          EXPECT_EQ(r.gpu.compile_stats.traces, 1) << r.gpu.compile_stats.last_miss;
        }
      });
}
