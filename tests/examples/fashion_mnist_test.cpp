// Smoke-tests the Fashion-MNIST example on a small slice of the real dataset.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "fashion_mnist.h"
#include "kiln/data/fashion_mnist.h"

namespace {
bool have_data() {
  return std::filesystem::exists(std::string(kiln::data::FashionMNIST::kDefaultRoot) +
                                 "/train-images-idx3-ubyte.gz");
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

// An unknown model name is a clear error.
TEST(ExampleFashionMnist, UnknownModel) {
  EXPECT_THROW(kiln::examples::make_fashion_model("resnet"), kiln::Error);
}
