// Smoke-tests the transformer example: a short run learns part of the reversal task.
#include <gtest/gtest.h>

#include <sstream>

#include "kiln/cuda.h"
#include "transformer.h"

// 150 steps of a smaller model bring the loss well below chance (ln 10 = 2.30).
TEST(ExampleTransformer, LossFalls) {
  kiln::examples::ReverseOptions o;
  o.steps = 150;
  o.d_model = 32;
  o.layers = 1;
  o.batch_size = 32;
  std::ostringstream log;
  auto r = kiln::examples::train_reverse(o, log);
  ASSERT_EQ(r.losses.size(), 150u);
  EXPECT_LT(r.losses.back(), 0.8 * r.losses.front()) << log.str();
  EXPECT_GT(r.token_accuracy, 0.2) << log.str();
}

// `transformer --device cuda`: the same steps on a CUDA device (a GPU, or the
// emulated device in CI) follow the CPU's losses.
TEST(ExampleTransformer, TrainsOnACudaDeviceLikeOnTheCpu) {
  if (!kiln::cuda::is_available())
    GTEST_SKIP() << "no CUDA device: " << kiln::cuda::unavailable_reason();
  kiln::examples::ReverseOptions o;
  o.steps = 8;
  o.d_model = 16;
  o.layers = 1;
  o.batch_size = 8;
  std::ostringstream log_cpu, log_gpu;
  auto cpu = kiln::examples::train_reverse(o, log_cpu);
  o.device = kiln::Device::cuda();
  auto gpu = kiln::examples::train_reverse(o, log_gpu);
  ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i)
    ASSERT_NEAR(gpu.losses[i], cpu.losses[i], 1e-4) << "step " << i + 1;
  EXPECT_NEAR(gpu.token_accuracy, cpu.token_accuracy, 0.01);
}
