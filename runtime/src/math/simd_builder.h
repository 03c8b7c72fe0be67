// Internal: the builder of math/expansions.h that computes values, for eager
// kernels. Simd<1> computes on plain float/double/int (for per-element code
// that the compiler vectorizes itself, such as the fused kernels' loops);
// Simd<N> on N lanes at once with GCC/Clang vector extensions, which compile
// to the host's SIMD instructions at whatever width the target has (the
// runtime builds with -march=native): vectors wider than the hardware's are
// split, operations it lacks (a 64-bit integer conversion on AVX2) are done
// per lane. kLanes is the host's float width, kLanes64 its double width.
//
// Each operation is the IEEE operation the kernel IR's interpreter applies to
// the same expression (explicit fma, round-to-nearest conversions, wrapping
// integer arithmetic, arithmetic right shifts), so the results are its bits.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "math/expansions.h"

// Vectors wider than the target's registers (f64 lanes next to f32 ones) go
// by value between these inline functions; their ABI does not matter.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace kiln::math {
KILN_LEVEL_BEGIN

/// Lanes of the host's widest float vector (4 with SSE/NEON, 8 with AVX, 16 with AVX-512).
inline constexpr int kLanes = __BIGGEST_ALIGNMENT__ >= 16 ? __BIGGEST_ALIGNMENT__ / 4 : 4;
/// Lanes of its widest double vector.
inline constexpr int kLanes64 = kLanes / 2;

namespace detail {

// The overloads taking a double constant stand aside for scalar f64 values
// (a double is then a value of the type itself).
template <class V>
concept NotF64 = !std::is_same_v<V, double>;

template <int N>
struct SimdTypes {
  typedef float F __attribute__((vector_size(4 * N)));
  typedef double D __attribute__((vector_size(8 * N)));
  typedef int32_t I __attribute__((vector_size(4 * N)));
  typedef int64_t L __attribute__((vector_size(8 * N)));
  typedef uint32_t UI __attribute__((vector_size(4 * N)));
  typedef uint64_t UL __attribute__((vector_size(8 * N)));
  using M = I;    // lane masks of f32/i32 comparisons: -1 or 0
  using M64 = L;  // of f64/i64 comparisons
};
template <>
struct SimdTypes<1> {
  using F = float;
  using D = double;
  using I = int32_t;
  using L = int64_t;
  using UI = uint32_t;
  using UL = uint64_t;
  using M = bool;
  using M64 = bool;
};

}  // namespace detail

/// The value builder on N lanes (N = 1: scalars).
template <int N>
class Simd {
  using T = detail::SimdTypes<N>;
  static constexpr bool kScalar = N == 1;

 public:
  using F = typename T::F;
  using D = typename T::D;
  using I = typename T::I;
  using L = typename T::L;
  using M = typename T::M;

  /// v in every lane of a V.
  template <class V>
  static V splat(double v) {
    if constexpr (std::is_same_v<V, F>) return broadcast<F>(static_cast<float>(v));
    if constexpr (std::is_same_v<V, D>) return broadcast<D>(v);
    if constexpr (std::is_same_v<V, I>)
      return broadcast<I>(static_cast<int32_t>(static_cast<int64_t>(v)));
    if constexpr (std::is_same_v<V, L>) return broadcast<L>(static_cast<int64_t>(v));
  }
  template <class V>
  V like(V, double v) {
    return splat<V>(v);
  }
  I ci(double v) { return splat<I>(v); }

  template <class V>
  V add(V a, V b) {
    if constexpr (is_int<V>())
      return wrap(a, b, [](auto x, auto y) { return x + y; });
    else
      return a + b;
  }
  template <class V>
  V sub(V a, V b) {
    if constexpr (is_int<V>())
      return wrap(a, b, [](auto x, auto y) { return x - y; });
    else
      return a - b;
  }
  template <class V>
  V mul(V a, V b) {
    if constexpr (is_int<V>())
      return wrap(a, b, [](auto x, auto y) { return x * y; });
    else
      return a * b;
  }
  template <class V>
  V div(V a, V b) {
    return a / b;
  }
  template <class V>
  V div_normal(V a, V b) {
    return a / b;
  }
  template <detail::NotF64 V>
  V add(V a, double v) {
    return add(a, splat<V>(v));
  }
  template <detail::NotF64 V>
  V sub(V a, double v) {
    return sub(a, splat<V>(v));
  }
  template <detail::NotF64 V>
  V mul(V a, double v) {
    return mul(a, splat<V>(v));
  }
  template <class V>
  V neg(V a) {
    return -a;
  }

  // Comparisons give masks of their operands' lane width (M for f32/i32,
  // M64 for f64/i64, bool for scalars); land, lor and sel convert where widths
  // differ, so f64 code keeps its masks at 64 bits.
  template <class V>
  auto lt(V a, V b) {
    return mask(a < b);
  }
  template <class V>
  auto gt(V a, V b) {
    return mask(a > b);
  }
  template <class V>
  auto ge(V a, V b) {
    return mask(a >= b);
  }
  template <class V>
  auto eq(V a, V b) {
    return mask(a == b);
  }
  template <class V>
  auto ne(V a, V b) {
    return mask(a != b);
  }
  template <detail::NotF64 V>
  auto lt(V a, double v) {
    return lt(a, splat<V>(v));
  }
  template <detail::NotF64 V>
  auto gt(V a, double v) {
    return gt(a, splat<V>(v));
  }
  template <detail::NotF64 V>
  auto ge(V a, double v) {
    return ge(a, splat<V>(v));
  }
  template <detail::NotF64 V>
  auto eq(V a, double v) {
    return eq(a, splat<V>(v));
  }
  template <detail::NotF64 V>
  auto ne(V a, double v) {
    return ne(a, splat<V>(v));
  }
  template <class K1, class K2>
  auto land(K1 a, K2 b) {
    if constexpr (kScalar)
      return a && b;
    else if constexpr (std::is_same_v<K1, K2>)
      return a & b;
    else
      return narrow(a) & narrow(b);
  }
  template <class K1, class K2>
  auto lor(K1 a, K2 b) {
    if constexpr (kScalar)
      return a || b;
    else if constexpr (std::is_same_v<K1, K2>)
      return a | b;
    else
      return narrow(a) | narrow(b);
  }
  template <class K>
  K lnot(K a) {
    if constexpr (kScalar)
      return !a;
    else
      return ~a;
  }

  template <class K, class V>
  V sel(K m, V a, V b) {
    if constexpr (kScalar || sizeof(K) == sizeof(V))
      return m ? a : b;
    else if constexpr (sizeof(V) == 8 * N)
      return __builtin_convertvector(m, L) ? a : b;
    else
      return __builtin_convertvector(m, I) ? a : b;
  }
  template <class K, detail::NotF64 V>
  V sel(K m, V a, double v) {
    return sel(m, a, splat<V>(v));
  }
  template <class K, detail::NotF64 V>
  V sel(K m, double v, V b) {
    return sel(m, splat<V>(v), b);
  }

  /// a * b + c rounded once (std::fma per lane; the compiler emits the
  /// vector fma instruction where the target has one).
  template <class V>
  V fma(V a, V b, V c) {
    if constexpr (kScalar) {
      return std::fma(a, b, c);
    } else {
      V r;
      for (int k = 0; k < N; ++k) r[k] = std::fma(a[k], b[k], c[k]);
      return r;
    }
  }
  template <detail::NotF64 V>
  V fma(V a, double v, V c) {
    return fma(a, splat<V>(v), c);
  }
  /// To the nearest integer, ties to even (std::rint in the default rounding
  /// mode; per lane it compiles to the vector rounding instruction where the
  /// target has one, SSE4.1 and later).
  template <class V>
  V rint(V x) {
    return per_lane(x, [](auto v) { return std::rint(v); });
  }
  /// Toward zero (f32).
  F trunc(F x) {
    return per_lane(x, [](auto v) { return std::trunc(v); });
  }

  I bits(F a) { return std::bit_cast<I>(a); }
  L bits(D a) { return std::bit_cast<L>(a); }
  F from_bits(I a) { return std::bit_cast<F>(a); }
  D from_bits(L a) { return std::bit_cast<D>(a); }
  template <class V>
  V band(V a, V b) {
    return a & b;
  }
  template <detail::NotF64 V>
  V band(V a, double v) {
    return a & splat<V>(v);
  }
  template <class V>
  V bor(V a, V b) {
    return a | b;
  }
  template <detail::NotF64 V>
  V bor(V a, double v) {
    return a | splat<V>(v);
  }
  template <class V>
  V shl(V a, int n) {
    using U = std::conditional_t<sizeof(V) == 8 * N, typename T::UL, typename T::UI>;
    return reinterpret<V>(reinterpret<U>(a) << n);
  }
  template <class V>
  V shr(V a, int n) {
    return a >> n;
  }

  template <class V>
  F to_f32(V a) {
    return convert<F>(a);
  }
  template <class V>
  D to_f64(V a) {
    return convert<D>(a);
  }
  template <class V>
  I to_i32(V a) {
    return convert<I>(a);
  }
  template <class V>
  L to_i64(V a) {
    return convert<L>(a);
  }
  /// Whether any lane of m is set. Scalars say true: per-element code stays
  /// branch-free, so the loops around it still vectorize.
  bool maybe_any(M m) {
    if constexpr (kScalar) {
      (void)m;
      return true;
    } else {
      int32_t acc = 0;
      for (int k = 0; k < N; ++k) acc |= m[k];
      return acc != 0;
    }
  }
  /// kTwoOverPiTable[idx] per lane.
  I table(I idx) {
    if constexpr (kScalar) {
      return kTwoOverPiTable[static_cast<size_t>(idx)];
    } else {
      I r;
      for (int k = 0; k < N; ++k) r[k] = kTwoOverPiTable[static_cast<size_t>(idx[k])];
      return r;
    }
  }

 private:
  template <class V>
  static constexpr bool is_int() {
    return std::is_same_v<V, I> || std::is_same_v<V, L>;
  }
  template <class V, class S>
  static V broadcast(S s) {
    if constexpr (kScalar) {
      return s;
    } else {
      V r;
      for (int k = 0; k < N; ++k) r[k] = s;
      return r;
    }
  }
  template <class To, class From>
  static To reinterpret(From a) {
    if constexpr (kScalar)
      return static_cast<To>(a);
    else
      return std::bit_cast<To>(a);
  }
  template <class To, class From>
  static To convert(From a) {
    if constexpr (kScalar) {
      return static_cast<To>(a);
    } else if constexpr (sizeof(To) > 64 || sizeof(From) > 64) {
      // Wider than a 512-bit register: half by half (GCC 12 at -O0 with
      // AVX-512 stops with an internal compiler error on i32x16 -> f64x16).
      using FE = std::remove_cvref_t<decltype(a[0])>;
      using TE = std::remove_cvref_t<decltype(To{}[0])>;
      typedef FE FH __attribute__((vector_size(sizeof(From) / 2)));
      typedef TE TH __attribute__((vector_size(sizeof(To) / 2)));
      FH lo, hi;
      std::memcpy(&lo, &a, sizeof lo);
      std::memcpy(&hi, reinterpret_cast<const char*>(&a) + sizeof lo, sizeof hi);
      const TH rlo = __builtin_convertvector(lo, TH), rhi = __builtin_convertvector(hi, TH);
      To r;
      std::memcpy(&r, &rlo, sizeof rlo);
      std::memcpy(reinterpret_cast<char*>(&r) + sizeof rlo, &rhi, sizeof rhi);
      return r;
    } else {
      return __builtin_convertvector(a, To);
    }
  }
  // Integer arithmetic in the unsigned type: wraps around.
  template <class V, class Op>
  static V wrap(V a, V b, Op op) {
    using U = std::conditional_t<std::is_same_v<V, L>, typename T::UL, typename T::UI>;
    return reinterpret<V>(op(reinterpret<U>(a), reinterpret<U>(b)));
  }
  // A comparison's result as M or M64 (bool for scalars).
  template <class C>
  static auto mask(C c) {
    if constexpr (kScalar)
      return static_cast<bool>(c);
    else if constexpr (sizeof(C) == 8 * N)
      return std::bit_cast<L>(c);
    else
      return std::bit_cast<I>(c);
  }
  // A mask as M.
  template <class K>
  static M narrow(K m) {
    if constexpr (std::is_same_v<K, M>)
      return m;
    else
      return __builtin_convertvector(m, M);
  }
  // f applied to each lane.
  template <class V, class Fn>
  static V per_lane(V x, Fn f) {
    if constexpr (kScalar) {
      return f(x);
    } else {
      V r;
      for (int k = 0; k < N; ++k) r[k] = f(x[k]);
      return r;
    }
  }
};

KILN_LEVEL_END
}  // namespace kiln::math

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
