// Tensor casts f32<->f16 (F16C when the CPU has it) and f32<->bf16 (vectorized
// bit operations) give exactly the scalar Half / BFloat16 conversions: all
// 65536 halves and bfloat16s, every float near a rounding boundary, and a
// sweep of the float range (inf, NaN with payloads, subnormals, ties).
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kiln/functional.h"

namespace kiln {
namespace {

// Floats as bit patterns -> tensor.
Tensor floats_of(const std::vector<uint32_t>& bits) {
  Tensor t = empty({int64_t(bits.size())}, DType::f32);
  std::memcpy(t.data_ptr(), bits.data(), bits.size() * 4);
  return t;
}

Tensor halves_of(DType dt) {
  Tensor t = empty({65536}, dt);
  auto* p = static_cast<uint16_t*>(t.data_ptr());
  for (uint32_t b = 0; b < 65536; ++b) p[b] = uint16_t(b);
  return t;
}

// Every 16-bit pattern of `dt` -> f32 equals the scalar conversion, bit for bit.
template <typename H>
void expect_widening_exact(DType dt) {
  Tensor f = halves_of(dt).to(DType::f32);
  const auto* out = static_cast<const uint32_t*>(f.data_ptr());
  int bad = 0;
  for (uint32_t b = 0; b < 65536 && bad < 5; ++b) {
    H h;
    h.bits = uint16_t(b);
    const uint32_t want = std::bit_cast<uint32_t>(static_cast<float>(h));
    if (out[b] != want) {
      ADD_FAILURE() << dtype_name(dt) << " 0x" << std::hex << b << " -> 0x" << out[b]
                    << ", scalar 0x" << want;
      ++bad;
    }
  }
}

// Floats that probe f16 and bf16 rounding: each 16-bit value widened, its
// neighbours and the midpoints to the next value (±1 ulp), plus a strided
// sweep of all 2^32 patterns (NaN payloads, subnormals, overflow).
std::vector<uint32_t> probe_floats() {
  std::vector<uint32_t> v;
  for (uint32_t b = 0; b < 65536; ++b) {
    Half h;
    h.bits = uint16_t(b);
    Half next;
    next.bits = uint16_t(b + 1);
    const uint32_t x = std::bit_cast<uint32_t>(static_cast<float>(h));
    const float mid = (static_cast<float>(h) + static_cast<float>(next)) / 2;
    const uint32_t m = std::bit_cast<uint32_t>(mid);
    for (uint32_t u : {x, x + 1, x - 1, m, m + 1, m - 1}) v.push_back(u);
    const uint32_t bf = b << 16;  // bf16 values and their midpoints
    for (uint32_t u : {bf, bf + 0x8000u, bf + 0x7fffu, bf + 0x8001u}) v.push_back(u);
  }
#if defined(KILN_TEST_SANITIZED)
  const uint64_t stride = 65521 * 7;
#else
  const uint64_t stride = 4099;
#endif
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += stride) v.push_back(uint32_t(u));
  return v;
}

TEST(HalfCast, F16ToF32MatchesScalarForAllHalves) {
  expect_widening_exact<Half>(DType::f16);
}

TEST(HalfCast, BF16ToF32MatchesScalarForAllValues) {
  expect_widening_exact<BFloat16>(DType::bf16);
}

// f32 -> f16 / bf16 of the probe floats equals the scalar rounding, including
// the odd-length tail (the cast of every length 0..17 too).
TEST(HalfCast, F32ToHalfMatchesScalar) {
  const std::vector<uint32_t> bits = probe_floats();
  Tensor f = floats_of(bits);
  Tensor h = f.to(DType::f16), b = f.to(DType::bf16);
  const auto* hp = static_cast<const uint16_t*>(h.data_ptr());
  const auto* bp = static_cast<const uint16_t*>(b.data_ptr());
  int bad = 0;
  for (size_t i = 0; i < bits.size() && bad < 5; ++i) {
    const float x = std::bit_cast<float>(bits[i]);
    if (hp[i] != Half(x).bits) {
      ADD_FAILURE() << "f16 of 0x" << std::hex << bits[i] << " is 0x" << hp[i] << ", scalar 0x"
                    << Half(x).bits;
      ++bad;
    }
    if (bp[i] != BFloat16(x).bits) {
      ADD_FAILURE() << "bf16 of 0x" << std::hex << bits[i] << " is 0x" << bp[i] << ", scalar 0x"
                    << BFloat16(x).bits;
      ++bad;
    }
  }
  for (int64_t n = 0; n <= 17; ++n) {
    Tensor small = f.narrow(0, 1000, n).contiguous();
    Tensor sh = small.to(DType::f16);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(static_cast<const uint16_t*>(sh.data_ptr())[i],
                Half(static_cast<const float*>(small.data_ptr())[i]).bits)
          << "length " << n << " element " << i;
  }
}

// Spot values with known answers, so the scalar reference itself is pinned:
// ties to even, overflow to inf, the smallest subnormal, NaN stays NaN and quiet.
TEST(HalfCast, KnownValues) {
  Tensor f = from_vector<float>({1.0f, 65504.0f, 65520.0f, 1.0f + 1.0f / 2048, 5.9604645e-08f,
                                 2.9802322e-08f, -0.0f, std::bit_cast<float>(0x7f800001u)});
  Tensor h = f.to(DType::f16);
  const auto* p = static_cast<const uint16_t*>(h.data_ptr());
  EXPECT_EQ(p[0], 0x3c00);
  EXPECT_EQ(p[1], 0x7bff);
  EXPECT_EQ(p[2], 0x7c00);  // rounds up to inf
  EXPECT_EQ(p[3], 0x3c00);  // tie to even
  EXPECT_EQ(p[4], 0x0001);
  EXPECT_EQ(p[5], 0x0000);  // tie to even (zero)
  EXPECT_EQ(p[6], 0x8000);
  EXPECT_EQ(p[7] & 0x7e00, 0x7e00);  // signalling NaN comes back quiet
  Tensor back = h.to(DType::f32);
  EXPECT_EQ(back.to_vector<float>()[4], 5.9604645e-08f);
}

}  // namespace
}  // namespace kiln
