// Vectorizable reduce loops (one template, instantiated per dtype and op).
// `out` may alias `a` or `b` element for element only, so there is no
// loop-carried dependence: `ivdep` lets GCC vectorize without alias checks.
// f16 converts through F16C when the build targets it; bf16 conversions are
// plain bit operations and vectorize as they are.
#include "reduce_kernels.h"

#include <bit>
#include <concepts>
#include <cstdint>
#include <type_traits>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "kiln/error.h"
#include "ops/scalar_ops.h"

namespace kiln::dist::detail {

namespace {

// The runtime's scalar rules, as eager applies them: integer sums and products
// wrap (computed unsigned, as in PyTorch), max/min propagate NaN.
using Sum = ops::scalar::add;
using Product = ops::scalar::mul;
using Max = ops::scalar::maximum;
using Min = ops::scalar::minimum;

template <typename T, typename Op>
void reduce_loop(void* o, const void* a, const void* b, size_t n) {
  T* out = static_cast<T*>(o);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
#pragma GCC ivdep
  for (size_t i = 0; i < n; ++i) out[i] = Op{}(x[i], y[i]);
}

// ---- bf16: upper half of an f32, round to nearest even ----
inline float bf16_to_f32(uint16_t h) {
  return std::bit_cast<float>(uint32_t(h) << 16);
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  return uint16_t(nan ? ((u >> 16) | 0x40u) : rounded);
}

template <typename Op>
void reduce_bf16(void* o, const void* a, const void* b, size_t n) {
  uint16_t* out = static_cast<uint16_t*>(o);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
#pragma GCC ivdep
  for (size_t i = 0; i < n; ++i) out[i] = f32_to_bf16(Op{}(bf16_to_f32(x[i]), bf16_to_f32(y[i])));
}

// ---- f16 ----
template <typename Op>
void reduce_f16(void* o, const void* a, const void* b, size_t n) {
  uint16_t* out = static_cast<uint16_t*>(o);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  size_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
  for (; i + 8 <= n; i += 8) {
    float xs[8], ys[8], rs[8];
    _mm256_storeu_ps(xs, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
    _mm256_storeu_ps(ys, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y + i))));
    for (int k = 0; k < 8; ++k) rs[k] = Op{}(xs[k], ys[k]);
    __m128i r = _mm256_cvtps_ph(_mm256_loadu_ps(rs), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), r);
  }
#endif
  for (; i < n; ++i) {
    Half hx, hy;
    hx.bits = x[i];
    hy.bits = y[i];
    out[i] = Half(Op{}(float(hx), float(hy))).bits;
  }
}

template <typename Op>
ReduceFn pick(DType dt) {
  switch (dt) {
    case DType::f32:
      return &reduce_loop<float, Op>;
    case DType::f64:
      return &reduce_loop<double, Op>;
    case DType::i64:
      return &reduce_loop<int64_t, Op>;
    case DType::i32:
      return &reduce_loop<int32_t, Op>;
    case DType::u8:
      return &reduce_loop<uint8_t, Op>;
    case DType::f16:
      return &reduce_f16<Op>;
    case DType::bf16:
      return &reduce_bf16<Op>;
    case DType::b8:
      break;
  }
  kiln::throw_error(kiln::str("[reduce] cannot reduce dtype ", dt));
}

// ---- avg: the last sum and the division in one pass ----
template <typename T>
void sum_div_loop(void* o, const void* a, const void* b, size_t n, int divisor) {
  T* out = static_cast<T*>(o);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  const T d = T(divisor);
#pragma GCC ivdep
  for (size_t i = 0; i < n; ++i) out[i] = T(x[i] + y[i]) / d;
}

void sum_div_bf16(void* o, const void* a, const void* b, size_t n, int divisor) {
  uint16_t* out = static_cast<uint16_t*>(o);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  const float d = float(divisor);
#pragma GCC ivdep
  for (size_t i = 0; i < n; ++i) {
    float s = bf16_to_f32(f32_to_bf16(bf16_to_f32(x[i]) + bf16_to_f32(y[i])));
    out[i] = f32_to_bf16(s / d);
  }
}

void sum_div_f16(void* o, const void* a, const void* b, size_t n, int divisor) {
  uint16_t* out = static_cast<uint16_t*>(o);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  const float d = float(divisor);
  size_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
  const __m256 dv = _mm256_set1_ps(d);
  for (; i + 8 <= n; i += 8) {
    __m256 xs = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    __m256 ys = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y + i)));
    __m256 s = _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_add_ps(xs, ys), _MM_FROUND_TO_NEAREST_INT));
    __m128i r = _mm256_cvtps_ph(_mm256_div_ps(s, dv), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), r);
  }
#endif
  for (; i < n; ++i) {
    Half hx, hy;
    hx.bits = x[i];
    hy.bits = y[i];
    out[i] = Half(float(Half(float(hx) + float(hy))) / d).bits;
  }
}

template <typename T>
void divide_loop(T* p, size_t n, T d) {
  for (size_t i = 0; i < n; ++i) p[i] = p[i] / d;
}

}  // namespace

ReduceFn reduce_fn(DType dt, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return pick<Sum>(dt);
    case ReduceOp::kProduct:
      return pick<Product>(dt);
    case ReduceOp::kMax:
      return pick<Max>(dt);
    case ReduceOp::kMin:
      return pick<Min>(dt);
  }
  kiln::throw_error(kiln::str("[reduce] unknown ReduceOp ", int(op)));
}

SumDivFn sum_div_fn(DType dt) {
  switch (dt) {
    case DType::f32:
      return &sum_div_loop<float>;
    case DType::f64:
      return &sum_div_loop<double>;
    case DType::f16:
      return &sum_div_f16;
    case DType::bf16:
      return &sum_div_bf16;
    default:
      break;
  }
  kiln::throw_error(kiln::str("[reduce] avg needs a floating dtype; got ", dt));
}

void divide_in_place(void* p, DType dt, size_t n, int divisor) {
  switch (dt) {
    case DType::f32:
      return divide_loop(static_cast<float*>(p), n, float(divisor));
    case DType::f64:
      return divide_loop(static_cast<double*>(p), n, double(divisor));
    case DType::bf16: {
      auto* h = static_cast<uint16_t*>(p);
      for (size_t i = 0; i < n; ++i) h[i] = f32_to_bf16(bf16_to_f32(h[i]) / float(divisor));
      return;
    }
    case DType::f16: {
      auto* h = static_cast<Half*>(p);
      for (size_t i = 0; i < n; ++i) h[i] = Half(float(h[i]) / float(divisor));
      return;
    }
    default:
      break;
  }
  KILN_ASSERT(false, "divide_in_place on ", dt);
}

}  // namespace kiln::dist::detail
