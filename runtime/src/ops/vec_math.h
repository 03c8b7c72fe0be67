// Internal: branch-free f32 math that the compiler vectorizes at the host's
// width (the runtime builds with -march=native) when inlined into a loop over
// contiguous floats. libm calls stop vectorization; these keep the fused eager
// kernels (ops/fused_kernels.cpp) at memory speed. Accuracy matches the
// compiled path's bound (<= 4 ulp of libm) and libm's inf/NaN behaviour.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace kiln::ops::vec {

/// e^x for f32: Cephes' degree-6 polynomial on x - n ln2 (|r| <= ln2/2), scaled by
/// 2^n in two steps so that results in the subnormal range round once. Within
/// 2 ulp of the exact value; exp(NaN) = NaN, exp(+inf) = inf, exp(-inf) = 0.
inline float exp_f32(float x) {
  // Clamping keeps n in [-150, 128]: below -104 the result rounds to 0, above 88.8 to inf.
  // Written as comparisons that keep NaN (it fails both and passes through).
  float xc = x < -104.0f ? -104.0f : x;
  xc = xc > 88.8f ? 88.8f : xc;
  // Round to nearest by the 1.5 * 2^23 trick (no rounding instruction needed).
  const float t = xc * 1.44269504088896341f;
  const float n = (t + 12582912.0f) - 12582912.0f;
  float r = std::fma(n, -0.693359375f, xc);
  r = std::fma(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  const float e = std::fma(r * r, p, r) + 1.0f;
  // NaN converts to an unspecified int; the product with e (NaN) stays NaN.
  const int32_t ni = static_cast<int32_t>(n == n ? n : 0.0f);
  const int32_t n1 = ni >> 1, n2 = ni - n1;
  const float s1 = std::bit_cast<float>((n1 + 127) << 23);
  const float s2 = std::bit_cast<float>((n2 + 127) << 23);
  return (e * s1) * s2;
}

/// e^x: the vectorizable f32 form, libm for f64 (gradcheck's dtype).
template <typename T>
inline T exp(T x) {
  if constexpr (sizeof(T) == 4)
    return exp_f32(x);
  else
    return std::exp(x);
}

/// 1 / (1 + e^-x), as the primitive sigmoid computes it.
template <typename T>
inline T sigmoid(T x) {
  return T(1) / (T(1) + exp<T>(-x));
}

}  // namespace kiln::ops::vec
