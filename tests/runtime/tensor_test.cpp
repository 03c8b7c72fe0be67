// Verifies tensor basics: factories, metadata, elementwise math and broadcasting.
#include <gtest/gtest.h>

#include "kiln/kiln.h"

using namespace kiln;

TEST(Tensor, ScalarPromotionKeepsF32) {
  Tensor a = make_tensor({3}, DType::f32);
  float* p = a.data<float>();
  p[0] = 1;
  p[1] = 2;
  p[2] = 3;
  Tensor b = a * 2.5 + 1;
  EXPECT_EQ(b.dtype(), DType::f32);
  auto v = b.to_vector<float>();
  EXPECT_FLOAT_EQ(v[0], 3.5f);
  EXPECT_FLOAT_EQ(v[2], 8.5f);
}
