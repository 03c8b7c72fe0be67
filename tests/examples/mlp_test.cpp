// Verifies the MLP example trains: the loss falls and an accuracy is printed.
#include <gtest/gtest.h>

#include <sstream>

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
