// Verifies the MLP example trains: the loss falls and an accuracy is printed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>

#include "kiln/cuda.h"
#include "kiln/tensorboard/record.h"
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

// `mlp --logdir DIR`: per epoch a loss and a learning rate, then the accuracy,
// after the file-version record (their contents are checked by
// tests/runtime/tensorboard with TensorBoard's reader).
TEST(ExampleMlp, LogsForTensorboard) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("kiln_mlp_tb_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::ostringstream log;
  kiln::examples::train_mlp(20, log, 0.01, kiln::Device::cpu(), dir.string());
  std::vector<fs::path> files(fs::directory_iterator(dir), {});
  ASSERT_EQ(files.size(), 1u);
  const std::vector<std::string> records = kiln::tensorboard::read_records(files[0].string());
  ASSERT_EQ(records.size(), 1u + 20 * 2 + 1);
  EXPECT_NE(records[1].find("loss/train"), std::string::npos);
  EXPECT_NE(records[2].find("lr"), std::string::npos);
  EXPECT_NE(records.back().find("accuracy/train"), std::string::npos);
  fs::remove_all(dir);
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
