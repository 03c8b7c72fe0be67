// Internal: GELU's constants, rounded to T as the composites' wrapped scalars
// are (the fused kernels, ops/fused_kernels.cpp, and the erf form's per-level
// vector loops, ops/simd/loops.cpp, read them).
#pragma once

#include <numbers>

#include "math/level.h"

namespace kiln::ops::fused {
KILN_LEVEL_BEGIN

template <typename T>
struct GeluConst {
  static constexpr T c = static_cast<T>(0.044715);
  // 2 sqrt(2/pi): tanh-GELU is x sigmoid(2u).
  static constexpr T k2 = static_cast<T>(2.0 * 0.79788456080286535588);
  static constexpr T half_sqrt2 = static_cast<T>(std::numbers::sqrt2 / 2.0);
  static constexpr T inv_sqrt_2pi = static_cast<T>(0.39894228040143267794);
};

KILN_LEVEL_END
}  // namespace kiln::ops::fused
