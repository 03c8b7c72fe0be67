// Smoke-tests the transformer example: a short run learns part of the reversal task.
#include <gtest/gtest.h>

#include <sstream>

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
