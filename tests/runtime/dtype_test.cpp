// Verifies dtype tables, PyTorch type promotion (incl. wrapped scalars) and
// f16/bf16 conversions.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/kiln.h"

using namespace kiln;

// promote_types follows PyTorch's table.
TEST(DType, PromoteTypes) {
  EXPECT_EQ(promote_types(DType::f32, DType::f64), DType::f64);
  EXPECT_EQ(promote_types(DType::i64, DType::f16), DType::f16);
  EXPECT_EQ(promote_types(DType::f16, DType::bf16), DType::f32);
  EXPECT_EQ(promote_types(DType::u8, DType::i32), DType::i32);
  EXPECT_EQ(promote_types(DType::b8, DType::u8), DType::u8);
  EXPECT_EQ(promote_types(DType::b8, DType::b8), DType::b8);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_STREQ(dtype_name(DType::b8), "bool");
}

// Wrapped scalars and 0-d tensors do not widen dimensioned tensors of the same category.
TEST(DType, ResultTypeWithScalars) {
  Tensor f = ones({2}, DType::f32), h = ones({2}, DType::f16), i = ones({2}, DType::i32);
  EXPECT_EQ((f * 2.5).dtype(), DType::f32);
  EXPECT_EQ((h * 2.5).dtype(), DType::f16);
  EXPECT_EQ((i * 2).dtype(), DType::i32);
  EXPECT_EQ((i * 2.5).dtype(), DType::f32);  // a float scalar lifts ints to the default
  EXPECT_EQ((f + ones({}, DType::f64)).dtype(), DType::f32);  // 0-d tensor, same category
  EXPECT_EQ((i + ones({}, DType::f64)).dtype(), DType::f64);  // 0-d tensor, higher category
  EXPECT_EQ((i / i).dtype(), DType::f32);                     // true division
  EXPECT_EQ(gt(f, 1).dtype(), DType::b8);
  EXPECT_EQ(sum(ones({3}, DType::b8)).dtype(), DType::i64);
}

// f16 and bf16 round to nearest even and keep inf/NaN/subnormals.
TEST(DType, HalfConversions) {
  EXPECT_EQ(static_cast<float>(Half(1.0f)), 1.0f);
  EXPECT_EQ(Half(1.0f).bits, 0x3c00);
  EXPECT_EQ(Half(65504.0f).bits, 0x7bff);
  EXPECT_TRUE(std::isinf(static_cast<float>(Half(1e6f))));
  EXPECT_TRUE(std::isnan(static_cast<float>(Half(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_FLOAT_EQ(static_cast<float>(Half(5.96046448e-08f)),
                  5.96046448e-08f);                  // smallest subnormal
  EXPECT_EQ(Half(1.0f + 1.0f / 2048).bits, 0x3c00);  // tie rounds to even
  EXPECT_EQ(BFloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(static_cast<float>(BFloat16(3.0f)), 3.0f);
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(std::nanf("")))));
  // Round trip through tensors.
  Tensor t = cast(from_vector<float>({0.5f, -2.0f, 1000.0f}), DType::bf16);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0.5f, -2.0f, 1000.0f}));
  Tensor h = cast(from_vector<float>({0.1f}), DType::f16) * 2.0;
  EXPECT_EQ(h.dtype(), DType::f16);
  EXPECT_NEAR(h.item<float>(), 0.2f, 1e-3);
}

// Integer pow wraps around on overflow (two's complement, like PyTorch), for
// every width, instead of signed-overflow undefined behaviour.
TEST(DType, IntegerPowWrapsAround) {
  auto wrapped_pow = [](uint64_t a, int e, int bits) {
    uint64_t r = 1;
    for (int i = 0; i < e; ++i) r *= a;
    return bits == 64 ? r : r & ((uint64_t{1} << bits) - 1);
  };
  struct Case {
    DType dt;
    int bits;
  };
  for (Case c : {Case{DType::i64, 64}, Case{DType::i32, 32}, Case{DType::u8, 8}}) {
    Tensor base = full({2}, 3.0, c.dt), e = full({2}, 41.0, c.dt);
    const uint64_t want = wrapped_pow(3, 41, c.bits);
    Tensor got = pow(base, e);
    if (c.dt == DType::i64)
      EXPECT_EQ(static_cast<uint64_t>(got.to_vector<int64_t>()[0]), want);
    else if (c.dt == DType::i32)
      EXPECT_EQ(static_cast<uint32_t>(got.to_vector<int32_t>()[0]), want);
    else
      EXPECT_EQ(got.to_vector<uint8_t>()[0], want);
  }
}
