// Smoke-tests the Fashion-MNIST example on a small slice of the real dataset.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <vector>

#include "examples/cpu_and_cuda.h"
#include "fashion_mnist.h"
#include "kiln/data/fashion_mnist.h"
#include "kiln/tensorboard/record.h"

namespace {
bool have_data() {
  return std::filesystem::exists(std::filesystem::path(kiln::data::FashionMNIST::kDefaultRoot) /
                                 "train-images-idx3-ubyte.gz");
}
}  // namespace

// Both models train on 1500 images for one epoch and beat chance clearly.
TEST(ExampleFashionMnist, TrainsOnASlice) {
  if (!have_data()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  for (const char* model : {"mlp", "cnn"}) {
    kiln::examples::FashionOptions o;
    o.model = model;
    o.epochs = 1;
    o.train_limit = 1500;
    o.test_limit = 500;
    std::ostringstream log;
    auto stats = kiln::examples::train_fashion_mnist(o, log);
    ASSERT_EQ(stats.size(), 1u);
    EXPECT_GT(stats[0].test_accuracy, 0.5) << model << "\n" << log.str();
    EXPECT_NE(log.str().find("test accuracy"), std::string::npos);
  }
}

// `fashion_mnist --device cuda`: the CNN (conv, pooling, cross-entropy, Adam)
// trains on a CUDA device (a GPU, or the emulated device) eagerly and
// compiled, with the CPU's losses and accuracy (same seed, same batches).
TEST(ExampleFashionMnist, CnnTrainsOnACudaDeviceLikeOnTheCpu) {
  if (!have_data()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  kiln::examples::FashionOptions o;
  o.epochs = 1;
  o.train_limit = 48;  // the emulated device runs kernels slowly: two steps
  o.test_limit = 32;
  o.batch_size = 24;
  kiln::examples::testing::train_on_cpu_and_cuda(
      o, kiln::examples::train_fashion_mnist, [](const auto& r) {
        ASSERT_EQ(r.cpu.size(), 1u);
        ASSERT_EQ(r.gpu.size(), 1u);
        EXPECT_NEAR(r.gpu[0].train_loss, r.cpu[0].train_loss, 1e-3 * (1 + r.cpu[0].train_loss))
            << r.mode << "\n"
            << r.gpu_log;
        EXPECT_NEAR(r.gpu[0].test_accuracy, r.cpu[0].test_accuracy, 1.0 / 32) << r.gpu_log;
      });
}

// `fashion_mnist --logdir DIR`: a loss per step, then per epoch the mean loss,
// the test accuracy and the learning rate, on disk when the epoch ends.
TEST(ExampleFashionMnist, LogsForTensorboard) {
  if (!have_data()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("kiln_fashion_tb_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  kiln::examples::FashionOptions o;
  o.model = "mlp";
  o.epochs = 2;
  o.batch_size = 50;
  o.train_limit = 100;
  o.test_limit = 100;
  o.logdir = dir.string();
  std::ostringstream log;
  kiln::examples::train_fashion_mnist(o, log);
  std::vector<fs::path> files(fs::directory_iterator(dir), {});
  ASSERT_EQ(files.size(), 1u);
  const std::vector<std::string> records = kiln::tensorboard::read_records(files[0].string());
  ASSERT_EQ(records.size(), 1u + 2 * (2 + 3));
  EXPECT_NE(records[1].find("loss/train_step"), std::string::npos);
  EXPECT_NE(records[4].find("accuracy/test"), std::string::npos);
  EXPECT_NE(records[5].find("lr"), std::string::npos);
  fs::remove_all(dir);
}

// The compiled training step (traced forward + backward + Adam, dynamic batch)
// trains like the eager one: same per-epoch loss and accuracy on a slice.
TEST(ExampleFashionMnist, CompiledStepMatchesEager) {
  if (!have_data()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  kiln::examples::FashionOptions o;
  o.model = "mlp";
  o.epochs = 2;
  o.train_limit = 1000;  // 15 batches of 64 and a last batch of 40
  o.test_limit = 500;
  o.num_workers = 0;
  std::ostringstream log_e, log_c;
  auto eager = kiln::examples::train_fashion_mnist(o, log_e);
  o.compile = true;
  auto compiled = kiln::examples::train_fashion_mnist(o, log_c);
  ASSERT_EQ(compiled.size(), 2u);
  for (size_t e = 0; e < 2; ++e) {
    EXPECT_NEAR(compiled[e].train_loss, eager[e].train_loss, 1e-4) << log_c.str();
    EXPECT_NEAR(compiled[e].test_accuracy, eager[e].test_accuracy, 0.004) << log_c.str();
  }
  EXPECT_NE(log_c.str().find("(compiled)"), std::string::npos);
}

// An unknown model name is a clear error.
TEST(ExampleFashionMnist, UnknownModel) {
  EXPECT_THROW(kiln::examples::make_fashion_model("resnet"), kiln::Error);
}
