// The scalar rules every backend follows (runtime/src/ops/scalar_ops.h): the
// eager kernels apply them, the kernel IR interpreter applies the same
// functors, and the LLVM and GPU printers are checked against the interpreter.
// Integer rules are defined for every input: no trap, no undefined behaviour.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "ops/scalar_ops.h"

namespace {

namespace scalar = kiln::ops::scalar;

template <typename T>
void check_integer_division() {
  constexpr T lo = std::numeric_limits<T>::min();
  EXPECT_EQ(scalar::div{}(lo, T(-1)), lo) << "the most negative integer / -1 wraps to itself";
  EXPECT_EQ(scalar::div{}(T(7), T(-1)), T(-7));
  EXPECT_EQ(scalar::div{}(T(7), T(0)), T(0)) << "division by zero is defined as 0";
  EXPECT_EQ(scalar::div{}(T(-7), T(2)), T(-4)) << "floor division";
  EXPECT_EQ(scalar::div{}(T(7), T(2)), T(3));
}

TEST(ScalarRules, IntegerDivisionIsDefinedEverywhere) {
  check_integer_division<int8_t>();
  check_integer_division<int16_t>();
  check_integer_division<int32_t>();
  check_integer_division<int64_t>();
  EXPECT_EQ(scalar::div{}(uint8_t(255), uint8_t(0)), uint8_t(0));
}

TEST(ScalarRules, IntegerPowWrapsLikePyTorch) {
  EXPECT_EQ(scalar::pow{}(int8_t(3), int8_t(5)), int8_t(-13));  // 243 wrapped to int8
  EXPECT_EQ(scalar::pow{}(int32_t(2), int32_t(31)), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(scalar::pow{}(int64_t(3), int64_t(40)),
            int64_t(-6289078614652622815));  // 3^40 mod 2^64
  EXPECT_EQ(scalar::pow{}(int32_t(-1), int32_t(-3)), -1);
  EXPECT_EQ(scalar::pow{}(int32_t(-1), int32_t(-4)), 1);
  EXPECT_EQ(scalar::pow{}(int32_t(1), int32_t(-4)), 1);
  EXPECT_EQ(scalar::pow{}(int32_t(5), int32_t(-1)), 0);
  EXPECT_EQ(scalar::pow{}(uint8_t(2), uint8_t(9)), uint8_t(0));
}

}  // namespace
