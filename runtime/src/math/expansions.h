// Internal: the f32 transcendental functions, written once for every backend.
// Each is a template over a builder B that supplies the value types and the
// operations (interface below); the kernel compiler instantiates it with a
// builder that appends kernel-IR expressions (codegen/kernels/math_expand.cpp,
// read by the interpreter, the LLVM backend and the GPU printer), eager mode
// with one that computes on floats or SIMD vectors (math/simd_builder.h). Both
// run the same IEEE operations in the same order (explicit fma), so eager and
// compiled results are the same bits.
//
// exp: our own minimax polynomial; log/tanh: the Cephes single precision
// polynomials (<= 2 ulp in their reduced ranges); range reduction with fma.
// pow/log1p/erf/sin/cos compute in double inside (Taylor series and our own
// mpmath fits) and round once. Every function is branch-free (selects only),
// so loops over it vectorize; error <= 4 ulp from libm (exp <= 1), IEEE/C99
// behaviour at ±0, ±inf, NaN and subnormals (tests/codegen/math_expand_test.cpp,
// tests/runtime/eager_math_test.cpp). Clamps are compare-and-select, with NaN
// sent to a finite value before any float -> int conversion and restored by
// the final select. No product feeds an addition directly (products go to
// fma, selects, rint or other products), so a compiler that contracts a*b+c
// into fma (GCC's default in C++) cannot change the bits.
//
// Builder interface: value types F (f32), D (f64), I (i32), L (i64), M (the
// mask of an i32 comparison; others may have masks of their own width);
//   add, sub, mul (two values of one type, or a value and a double constant of
//   its type), div, neg (F, D); fma(a, b, c), fma(a, double, c) (F, D);
//   lt, gt, ge, eq, ne (value, value or double) -> M; ne(M, M) (xor);
//   sel(M, x, y) with x or y possibly a double constant; land, lor, lnot (M);
//   rint (F, D: to nearest, ties to even), trunc (F); bits (F -> I, D -> L),
//   from_bits (I -> F, L -> D); band, bor (I, L with a value or a double);
//   shl, shr (I, L by a constant int; shr is arithmetic); to_f32 (I, D),
//   to_f64 (F, I, L), to_i32 (F: truncating, L: low word), to_i64 (I, D);
//   like(x, v): the constant v in x's type; table(I) -> I: kTwoOverPiTable.
// Integer add/sub/mul/shl wrap around (two's complement).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>

// Vectors wider than the target's registers (f64 lanes next to f32 ones) go
// by value between these inline functions; their ABI does not matter.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

// Every function is inlined whole into its caller: eager loops that call one
// per element vectorize only if nothing in them is a call.
#define KILN_MATH_INLINE [[gnu::always_inline]] inline

namespace kiln::math {

inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

namespace detail {

// Bits of 2/pi after the binary point, in hex (enough for every f32 exponent).
inline constexpr char kTwoOverPi[] =
    "a2f9836e4e441529fc2757d1f534ddc0db6295993c439041fe5163abdebbc561b7246e3a";

constexpr std::array<int32_t, 320> two_over_pi_table() {
  auto bit = [](int k) -> uint32_t {  // k-th bit after the point (1-based)
    const char ch = kTwoOverPi[(k - 1) / 4];
    const int v = ch <= '9' ? ch - '0' : ch - 'a' + 10;
    return static_cast<uint32_t>(v >> (3 - (k - 1) % 4)) & 1u;
  };
  std::array<int32_t, 320> t{};
  for (int i = 0; i < 320; ++i) {
    const int j = i - 120;
    uint32_t w = 0;
    for (int k = j - 31; k <= j; ++k)
      if (k >= 1) w |= bit(k) << (j - k);
    t[static_cast<size_t>(i)] = static_cast<int32_t>(w);
  }
  return t;
}

// 1/k! for k = 11 down to 0 (exp_f64's Taylor polynomial, highest power first).
constexpr std::array<double, 12> exp_f64_coeffs() {
  std::array<double, 12> cs{};
  double f = 1;
  for (int k = 1; k <= 11; ++k) f *= k;
  for (int k = 11; k >= 0; --k) {
    cs[static_cast<size_t>(11 - k)] = 1.0 / f;
    if (k > 0) f /= k;
  }
  return cs;
}

// 1/k for odd k = 17 down to 1 (log_f64's atanh series).
constexpr std::array<double, 9> log_f64_coeffs() {
  std::array<double, 9> cs{};
  for (int k = 17, i = 0; k >= 1; k -= 2, ++i) cs[static_cast<size_t>(i)] = 1.0 / k;
  return cs;
}

// Taylor coefficients of sin(r)/r (7 terms) and cos(r) (8 terms) in r^2,
// highest power first.
struct SinCosCoeffs {
  std::array<double, 7> sin{};
  std::array<double, 8> cos{};
};
constexpr SinCosCoeffs sincos_coeffs() {
  SinCosCoeffs c;
  for (int k = 7; k >= 0; --k) {
    double fs = 1, fc = 1;
    for (int i = 2; i <= 2 * k + 1; ++i) fs *= i;
    for (int i = 2; i <= 2 * k; ++i) fc *= i;
    if (k <= 6) c.sin[static_cast<size_t>(6 - k)] = (k % 2 ? -1.0 : 1.0) / fs;
    c.cos[static_cast<size_t>(7 - k)] = (k % 2 ? -1.0 : 1.0) / fc;
  }
  return c;
}

}  // namespace detail

/// T[i] = floor(2/pi * 2^(i - 120)) mod 2^32, i in [0, 320): the three words of
/// 2/pi that line up with an f32 of biased exponent E are T[E], T[E + 32], T[E + 64].
inline constexpr std::array<int32_t, 320> kTwoOverPiTable = detail::two_over_pi_table();

// ---- helpers on builder values

/// NaN test (x != x).
template <class B, class V>
KILN_MATH_INLINE auto isnan(B& b, V x) {
  return b.ne(x, x);
}
/// |x| of an f32, through its bits.
template <class B>
KILN_MATH_INLINE typename B::F fabs(B& b, typename B::F x) {
  return b.from_bits(b.band(b.bits(x), 2147483647.0));
}
/// The magnitude of `mag` with the sign of `sgn` (f32).
template <class B>
KILN_MATH_INLINE typename B::F copysign(B& b, typename B::F mag, typename B::F sgn) {
  const auto m = b.band(b.bits(mag), 2147483647.0);
  const auto s = b.band(b.bits(sgn), -2147483648.0);
  return b.from_bits(b.bor(m, s));
}
/// x clamped to [lo, hi]; NaN becomes lo.
template <class B, class V>
KILN_MATH_INLINE V clamp(B& b, V x, double lo, double hi) {
  const V l = b.sel(b.gt(x, lo), x, lo);
  return b.sel(b.lt(l, hi), l, hi);
}
/// Horner: cs[0] x^(K-1) + ... + cs[K-1], with fma (unrolled).
template <class B, class V, class T, size_t K, size_t... J>
KILN_MATH_INLINE V horner_steps(B& b, V x, V acc, const std::array<T, K>& cs,
                                std::index_sequence<J...>) {
  ((acc = b.fma(acc, x, b.like(x, static_cast<double>(cs[J + 1])))), ...);
  return acc;
}
template <class B, class V, class T, size_t K>
KILN_MATH_INLINE V horner(B& b, V x, const std::array<T, K>& cs) {
  const V acc = b.like(x, static_cast<double>(cs[0]));
  return horner_steps(b, x, acc, cs, std::make_index_sequence<K - 1>{});
}

// ---- f32 functions

/// exp(x) = 2^n p(r), n = rint(x / ln2), r = x - n ln2 (ln2 in an exact high
/// part and a low part, with fma), |r| <= ln2/2. p is our own minimax fit of
/// e^r with p(0) = p'(0) = 1 (degree 6, relative error 3e-9; under 1 ulp in
/// all). x is clamped to [-104, 89] first: below, e^x rounds to +0, above it
/// overflows, and n stays in [-150, 128]. 2^n p is formed as (2^n1 p) 2^n2 with
/// n1 = n >> 1, n2 = n - n1 (both in [-75, 64]): the first factor by adding n1
/// to p's exponent (p is in [0.7, 1.42], so it stays normal), then one
/// multiplication by a normal power of two, so subnormal results are rounded
/// once and 2^128 becomes +inf.
template <class B>
KILN_MATH_INLINE typename B::F exp_f32(B& b, typename B::F x) {
  const auto xc = clamp(b, x, -104.0, 89.0);
  const auto n = b.rint(b.mul(xc, double{1.44269504088896341f}));
  auto r = b.fma(n, double{-0.693359375f}, xc);
  r = b.fma(n, double{2.12194440e-4f}, r);
  const auto p = horner(b, r,
                        std::array{1.3814583654e-3f, 8.3687240258e-3f, 4.1668388993e-2f,
                                   1.6666521132e-1f, 4.9999994040e-1f, 1.0f, 1.0f});
  const auto ni = b.to_i32(n);
  const auto n1 = b.shr(ni, 1);
  const auto n2 = b.sub(ni, n1);
  const auto y1 = b.from_bits(b.add(b.bits(p), b.shl(n1, 23)));
  const auto s2 = b.from_bits(b.shl(b.add(n2, 127.0), 23));
  return b.sel(isnan(b, x), x, b.mul(y1, s2));
}

/// log(x) = e ln2 + log(m), x = 2^e m, m in [sqrt(1/2), sqrt(2)) (subnormals
/// scaled into the normal range first): Cephes' polynomial in v = m - 1.
template <class B>
KILN_MATH_INLINE typename B::F log_f32(B& b, typename B::F x0) {
  const auto sub = b.lt(x0, double{1.17549435e-38f});
  const auto x = b.sel(sub, b.mul(x0, 8388608.0), x0);
  const auto eadj = b.sel(sub, b.ci(-23), b.ci(0));
  const auto bits = b.bits(x);
  const auto eb = b.band(b.shr(bits, 23), 255.0);
  const auto e1 = b.add(b.sub(eb, 126.0), eadj);
  const auto mb = b.bor(b.band(bits, -2139095041.0),  // 0x807fffff
                        1056964608.0);                // 0x3f000000: m in [0.5, 1)
  const auto m = b.from_bits(mb);
  const auto lo = b.lt(m, double{0.707106781186547524f});
  const auto mm = b.sel(lo, b.add(m, m), m);
  const auto e = b.sel(lo, b.sub(e1, 1.0), e1);
  const auto v = b.sub(mm, 1.0);
  const auto ef = b.to_f32(e);
  const auto z = b.mul(v, v);
  const auto p = horner(b, v,
                        std::array{7.0376836292e-2f, -1.1514610310e-1f, 1.1676998740e-1f,
                                   -1.2420140846e-1f, 1.4249322787e-1f, -1.6668057665e-1f,
                                   2.0000714765e-1f, -2.4999993993e-1f, 3.3333331174e-1f});
  const auto y0 = b.mul(b.mul(v, z), p);
  const auto y1 = b.fma(ef, double{-2.12194440e-4f}, y0);
  const auto y2 = b.fma(z, -0.5, y1);
  const auto y = b.fma(ef, double{0.693359375f}, b.add(v, y2));
  // log(0) = -inf, log(x < 0) = NaN, log(inf) = inf, NaN through.
  auto r = b.sel(b.eq(x0, 0.0), -kInf, y);
  r = b.sel(b.lt(x0, 0.0), kNaN, r);
  r = b.sel(b.eq(x0, kInf), x0, r);
  return b.sel(isnan(b, x0), x0, r);
}

/// tanh: x + x^3 P(x^2) (Cephes) for |x| <= 0.625, else 1 - 2 / (e^(2|x|) + 1)
/// with the sign of x; ±0 keeps its sign, NaN goes through the small path.
template <class B>
KILN_MATH_INLINE typename B::F tanh_f32(B& b, typename B::F x) {
  const auto a = fabs(b, x);
  const auto ex = exp_f32(b, b.add(a, a));
  const auto q = b.div(b.like(x, 2.0), b.add(ex, 1.0));
  const auto big = copysign(b, b.sub(b.like(x, 1.0), q), x);
  const auto z = b.mul(x, x);
  const auto p = horner(b, z,
                        std::array{-5.70498872745e-3f, 2.06390887954e-2f, -5.37397155531e-2f,
                                   1.33314422036e-1f, -3.33332819422e-1f});
  const auto small = b.fma(b.mul(z, x), p, x);
  const auto r = b.sel(b.gt(a, 0.625), big, small);
  return b.sel(b.eq(x, 0.0), x, r);
}

/// 1 / (1 + e^-x).
template <class B>
KILN_MATH_INLINE typename B::F sigmoid_f32(B& b, typename B::F x) {
  const auto e = exp_f32(b, b.neg(x));
  return b.div(b.like(x, 1.0), b.add(e, 1.0));
}

// ---- double-precision helpers: the f32 functions that need more than f32
// precision inside (pow, log1p, erf, sin, cos) compute in double and round
// once, which keeps them within 1-2 ulp and still vectorizes.

/// exp(z) in double, ~1e-15 relative: z = n ln2 + r, |r| <= ln2/2, Taylor to
/// r^11, scaled by 2^n in two halves (so the clamped range ±800 never
/// overflows the exponent).
template <class B>
KILN_MATH_INLINE typename B::D exp_f64(B& b, typename B::D z0) {
  static constexpr std::array<double, 12> kCoeffs = detail::exp_f64_coeffs();
  const auto z = clamp(b, z0, -800.0, 800.0);
  const auto n = b.rint(b.mul(z, 1.4426950408889634));
  auto r = b.fma(n, -0.6931471805599453, z);
  r = b.fma(n, -2.3190468138462996e-17, r);
  const auto p = horner(b, r, kCoeffs);
  // n is in [-1155, 1155]: converted through i32 (AVX2 converts only 32-bit lanes).
  const auto ni = b.to_i64(b.to_i32(n));
  const auto h = b.shr(ni, 1);
  const auto l = b.sub(ni, h);
  const auto s1 = b.from_bits(b.shl(b.add(h, 1023.0), 52));
  const auto s2 = b.from_bits(b.shl(b.add(l, 1023.0), 52));
  const auto y = b.mul(b.mul(p, s1), s2);
  return b.sel(isnan(b, z0), z0, y);
}

/// log(x) in double for x >= 0 that is normal, zero, inf or NaN (never a double
/// subnormal here): x = 2^e m, m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s),
/// s = (m-1)/(m+1), |s| <= 0.172, series to s^17 (~1e-16).
template <class B>
KILN_MATH_INLINE typename B::D log_f64(B& b, typename B::D x) {
  static constexpr std::array<double, 9> kCoeffs = detail::log_f64_coeffs();
  const auto bits = b.bits(x);
  const auto eb = b.band(b.shr(bits, 52), 2047.0);
  const auto e0 = b.sub(eb, 1023.0);
  const auto mb = b.bor(b.band(bits, 4503599627370495.0),  // 2^52 - 1
                        4607182418800017408.0);            // bits of 1.0
  const auto m0 = b.from_bits(mb);
  const auto big = b.gt(m0, 1.4142135623730951);
  const auto m = b.sel(big, b.mul(m0, 0.5), m0);
  const auto e = b.sel(big, b.add(e0, 1.0), e0);
  const auto s = b.div(b.sub(m, 1.0), b.add(m, 1.0));
  const auto s2 = b.mul(s, s);
  const auto p = horner(b, s2, kCoeffs);
  const auto lm = b.mul(b.add(s, s), p);
  const auto ed = b.to_f64(b.to_i32(e));  // e in [-1023, 1024], as in exp_f64
  const auto y0 = b.fma(ed, 2.3190468138462996e-17, lm);
  const auto y = b.fma(ed, 0.6931471805599453, y0);
  auto r = b.sel(b.eq(x, 0.0), -kInf, y);
  r = b.sel(b.lt(x, 0.0), kNaN, r);
  r = b.sel(b.eq(x, kInf), x, r);
  return b.sel(isnan(b, x), x, r);
}

/// pow(x, y) = exp(y log|x|) in double (|y log|x|| error ~1e-14, so the f32
/// result is within 1 ulp), with C99's special cases: pow(x, ±0) = 1,
/// pow(1, y) = 1, pow(-1, ±inf) = 1, negative x with an odd integer y gives a
/// negative result, negative finite x with a non-integer y is NaN; zeros and
/// infinities follow from log(0) = -inf and log(inf) = inf.
template <class B>
KILN_MATH_INLINE typename B::F pow_f32(B& b, typename B::F x, typename B::F y) {
  const auto ax = fabs(b, x);
  const auto l = log_f64(b, b.to_f64(ax));
  const auto r = b.to_f32(exp_f64(b, b.mul(b.to_f64(y), l)));
  // y an integer (±inf count as even integers); odd only below 2^24.
  const auto isint = b.eq(b.trunc(y), y);
  const auto ay = fabs(b, y);
  const auto ys = b.sel(b.lt(ay, 16777216.0), y, 0.0);
  const auto odd0 = b.ne(b.band(b.to_i32(ys), 1.0), b.ci(0));
  const auto odd = b.land(odd0, isint);
  const auto xsign = b.lt(b.bits(x), b.ci(0));
  const auto r1 = b.sel(b.land(xsign, odd), b.neg(r), r);
  const auto xneg = b.lt(x, 0.0);
  const auto xfin = b.ne(ax, kInf);
  const auto bad = b.land(b.land(xneg, xfin), b.lnot(isint));
  const auto r2 = b.sel(bad, kNaN, r1);
  const auto m1inf = b.land(b.eq(x, -1.0), b.eq(ay, kInf));
  const auto one = b.lor(b.lor(b.eq(y, 0.0), b.eq(x, 1.0)), m1inf);
  return b.sel(one, 1.0, r2);
}

/// log1p(x) = log(u) * x / (u - 1) with u = 1 + x in double (the quotient
/// corrects the rounding of u); x itself when u == 1 (tiny x, ±0) or x = inf.
template <class B>
KILN_MATH_INLINE typename B::F log1p_f32(B& b, typename B::F x) {
  const auto xd = b.to_f64(x);
  const auto u = b.add(xd, 1.0);
  const auto q = b.div(xd, b.sub(u, 1.0));
  const auto r0 = b.mul(log_f64(b, u), q);
  const auto keep = b.lor(b.eq(u, 1.0), b.eq(xd, kInf));
  return b.to_f32(b.sel(keep, xd, r0));
}

/// erf in double: |x| < 1: x (1 + Q(x^2)); 1 <= |x|: 1 - exp(R(|x|)) with R a
/// fit of log(erfc) on [1, 4] (|x| clamped to 4, where erf rounds to 1 in f32).
/// Q (degree 7, error 3e-11) and R (degree 12 in u = (|x| - 2.5) / 1.5, error
/// 6e-11) are least-squares Chebyshev fits made with mpmath.
template <class B>
KILN_MATH_INLINE typename B::F erf_f32(B& b, typename B::F x) {
  const auto xd = b.to_f64(x);
  const auto a = b.to_f64(fabs(b, x));
  const auto t = b.mul(a, a);
  const auto q =
      horner(b, t,
             std::array{-9.667044571486996e-06, 0.00011265959025606609, -0.0008484080405535107,
                        0.005221031807858023, -0.026865430727670243, 0.11283782495236845,
                        -0.3761263846802871, 0.12837916706154343});
  const auto small = b.fma(xd, q, xd);
  const auto ac = clamp(b, a, 1.0, 4.0);
  const auto u = b.mul(b.sub(ac, 2.5), 2.0 / 3.0);
  const auto r = horner(
      b, u,
      std::array{-6.114282755563654e-07, 1.5370764294050848e-06, -5.328029808335207e-07,
                 -6.757626194616484e-06, 4.5220782080017823e-05, -0.0002174824535634764,
                 0.0008774628746405798, -0.003196592603743613, 0.010962722573368389,
                 -0.03664597843665769, -2.1237609002783895, -8.02902112708958, -7.806815272727264});
  const auto om = b.sub(b.like(xd, 1.0), exp_f64(b, r));  // in [0.84, 1]: positive
  const auto large = b.sel(b.lt(xd, 0.0), b.neg(om), om);
  return b.to_f32(b.sel(b.ge(a, 1.0), large, small));
}

/// Table word at index `idx` (i32), zero-extended to i64.
template <class B>
KILN_MATH_INLINE typename B::L table_word(B& b, typename B::I idx) {
  return b.band(b.to_i64(b.table(idx)), 4294967295.0);
}

/// sin/cos: exact range reduction of |x| by pi/2 for every f32 (Payne-Hanek in
/// integer arithmetic: the 24-bit mantissa times 96 bits of 2/pi, keeping the
/// quadrant n and the remainder r in 2^-62 units), then Taylor polynomials in
/// double on |r| <= pi/4 (error ~1e-14). |x| < 2^-6 needs no reduction.
template <class B>
KILN_MATH_INLINE typename B::F sincos_f32(B& b, typename B::F x, bool sine) {
  static constexpr detail::SinCosCoeffs kCoeffs = detail::sincos_coeffs();
  const auto xi = b.bits(x);
  const auto e = b.band(b.shr(xi, 23), 255.0);
  const auto m = b.to_i64(b.bor(b.band(xi, 8388607.0), 8388608.0));
  const auto w0 = table_word(b, e);
  const auto w1 = table_word(b, b.add(e, 32.0));
  const auto w2 = table_word(b, b.add(e, 64.0));
  const auto ah = b.shl(b.mul(m, w0), 32);
  const auto cl = b.shr(b.mul(m, w2), 32);  // < 2^56: no sign
  const auto h = b.add(b.add(ah, b.mul(m, w1)), cl);
  // + 2^61 rounds to the nearest quadrant; the top two bits are n (mod 4).
  const auto n = b.shr(b.add(h, 2305843009213693952.0), 62);
  const auto rem = b.sub(h, b.shl(n, 62));
  // rem (|rem| <= 2^61) to double as hi 2^32 + lo with lo its low word taken as
  // signed: every conversion is from i32 (AVX2 converts only 32-bit lanes).
  const auto lo = b.to_i32(rem);
  const auto hi = b.to_i32(b.shr(b.sub(rem, b.to_i64(lo)), 32));
  const auto remd = b.fma(b.to_f64(hi), 4294967296.0, b.to_f64(lo));
  const auto ang0 = b.mul(remd, 3.4061215800865545e-19);  // pi/2 * 2^-62
  const auto tiny = b.lt(e, b.ci(121));
  const auto ang = b.sel(tiny, b.to_f64(fabs(b, x)), ang0);
  const auto q = b.sel(tiny, b.ci(0), b.band(b.to_i32(n), 3.0));
  const auto a2 = b.mul(ang, ang);
  const auto sv = b.mul(ang, horner(b, a2, kCoeffs.sin));
  const auto pc = horner(b, a2, kCoeffs.cos);
  const auto zero = b.ci(0);
  const auto odd = b.ne(b.band(q, 1.0), zero);
  typename B::D v;
  typename B::M neg;
  if (sine) {
    v = b.sel(odd, pc, sv);
    const auto neg1 = b.ne(b.band(q, 2.0), zero);
    neg = b.ne(neg1, b.lt(xi, zero));  // mask xor
  } else {
    v = b.sel(odd, sv, pc);
    neg = b.ne(b.band(b.add(q, 1.0), 2.0), zero);
  }
  const auto r = b.to_f32(b.sel(neg, b.neg(v), v));
  // inf or NaN: NaN.
  return b.sel(b.eq(e, b.ci(255)), b.sub(x, x), r);
}

}  // namespace kiln::math

#undef KILN_MATH_INLINE

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
