// Verifies the MLP example trains: the loss falls and an accuracy is printed.
#include <gtest/gtest.h>

#include <sstream>

#include "kiln/cuda.h"
#include "mlp.h"

TEST(ExampleMlp, LossFallsAndAccuracyIsPrinted) {
  std::ostringstream log;
  auto r = kiln::examples::train_mlp(1000, log);
  ASSERT_EQ(r.losses.size(), 1000u);
  EXPECT_LT(r.losses.back(), r.losses.front());
  EXPECT_NE(log.str().find("epoch  100"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("accuracy"), std::string::npos) << log.str();
  EXPECT_GE(r.accuracy, 0.0);
  EXPECT_LE(r.accuracy, 1.0);
}

// With a larger learning rate the same network fits all three samples.
TEST(ExampleMlp, FitsWithLargerLearningRate) {
  std::ostringstream log;
  auto r = kiln::examples::train_mlp(2000, log, 0.5);
  EXPECT_DOUBLE_EQ(r.accuracy, 1.0) << log.str();
}

// `mlp --device cuda`: the same training on a CUDA device (a GPU, or the
// emulated device in CI) follows the CPU's losses.
TEST(ExampleMlp, TrainsOnACudaDeviceLikeOnTheCpu) {
  if (!kiln::cuda::is_available())
    GTEST_SKIP() << "no CUDA device: " << kiln::cuda::unavailable_reason();
  std::ostringstream log_cpu, log_gpu;
  auto cpu = kiln::examples::train_mlp(50, log_cpu, 0.5);
  auto gpu = kiln::examples::train_mlp(50, log_gpu, 0.5, kiln::Device::cuda());
  ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i)
    ASSERT_NEAR(gpu.losses[i], cpu.losses[i], 1e-5) << "epoch " << i + 1;
  EXPECT_DOUBLE_EQ(gpu.accuracy, cpu.accuracy);
}
