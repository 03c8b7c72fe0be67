// Eager f32 tanh (the expansion tanh_f32 of runtime/src/math/expansions.h,
// which the eager kernel, the interpreter and every backend share: a Cephes
// polynomial up to |x| = 0.625, 1 - 2 / (e^(2|x|) + 1) above) against the
// exact value on a dense sweep, with the special values, through the public op.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kiln/kiln.h"

using namespace kiln;

namespace {

// Distance in float ulps between a and the float nearest to the exact b.
int64_t ulps(float a, double b) {
  const float r = static_cast<float>(b);
  auto key = [](float f) {
    const int32_t i = std::bit_cast<int32_t>(f);
    return i < 0 ? int64_t{INT32_MIN} - i : int64_t{i};
  };
  return std::abs(key(a) - key(r));
}

TEST(Tanh, F32WithinTwoUlpOnADenseSweep) {
  std::vector<float> xs;
  // Every 64th float from 1e-30 to 12 (both signs), which covers both branches
  // densely, and the floats at the switch point 0.625.
  for (uint32_t b = std::bit_cast<uint32_t>(1e-30f); b <= std::bit_cast<uint32_t>(12.0f); b += 64) {
    xs.push_back(std::bit_cast<float>(b));
    xs.push_back(-std::bit_cast<float>(b));
  }
  for (float x : {0.625f, std::nextafter(0.625f, 0.0f), std::nextafter(0.625f, 1.0f)}) {
    xs.push_back(x);
    xs.push_back(-x);
  }
  Tensor t = from_vector(xs, {static_cast<int64_t>(xs.size())});
  std::vector<float> got = tanh(t).to_vector<float>();
  int64_t worst = 0;
  float worst_x = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const int64_t u = ulps(got[i], std::tanh(static_cast<double>(xs[i])));
    if (u > worst) {
      worst = u;
      worst_x = xs[i];
    }
  }
  EXPECT_LE(worst, 2) << "at x = " << worst_x;
}

TEST(Tanh, F32SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor t =
      from_vector(std::vector<float>{0.0f, -0.0f, inf, -inf, std::nanf(""), 100.0f, -1e-40f}, {7});
  std::vector<float> y = tanh(t).to_vector<float>();
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_FALSE(std::signbit(y[0]));
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_TRUE(std::signbit(y[1]));
  EXPECT_EQ(y[2], 1.0f);
  EXPECT_EQ(y[3], -1.0f);
  EXPECT_TRUE(std::isnan(y[4]));
  EXPECT_EQ(y[5], 1.0f);
  EXPECT_EQ(y[6], -1e-40f);  // subnormal: tanh(x) = x
}

}  // namespace
