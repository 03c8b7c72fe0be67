// Internal: the f32 transcendental functions, written once for every backend.
// Each is a template over a builder B that supplies the value types and the
// operations (interface below); the kernel compiler instantiates it with a
// builder that appends kernel-IR expressions (codegen/kernels/math_expand.cpp,
// read by the interpreter, the LLVM backend and the GPU printer), eager mode
// with one that computes on floats or SIMD vectors (math/simd_builder.h). Both
// run the same IEEE operations in the same order (explicit fma), so eager and
// compiled results are the same bits.
//
// exp: our own minimax polynomial; log/tanh/log1p/sin/cos: the Cephes single
// precision polynomials (<= 2 ulp in their reduced ranges); erf: our own
// fits; pow: float-float log and exp (as SLEEF's powf); range reduction with
// fma. Everything computes in f32 lanes (twice the SIMD width of double), but
// for sin/cos of |x| >= 2^17, reduced exactly in i64/f64. Every function is
// branch-free (selects only), so loops over it vectorize; the one guarded path
// (maybe_any, below) only lets eager code skip work whose lanes are not
// selected. Error <= 4 ulp from libm (exp <= 1; erf, log1p, sin, cos and pow
// <= 2 from the exact value, over the whole f32 range), IEEE/C99
// behaviour at ±0, ±inf, NaN and subnormals (tests/codegen/math_expand_test.cpp,
// tests/codegen/eager_math_test.cpp). Clamps are compare-and-select, with NaN
// sent to a finite value before any float -> int conversion and restored by
// the final select. No product feeds an addition directly (products go to
// fma, selects, rint or other products), so a compiler that contracts a*b+c
// into fma (GCC's default in C++) cannot change the bits.
//
// Builder interface: value types F (f32), D (f64), I (i32), L (i64), M (the
// mask of an i32 comparison; others may have masks of their own width);
//   add, sub, mul (two values of one type, or a value and a double constant of
//   its type), div, neg (F, D); div_normal(a, b) (F): a / b where a, b and the
//   quotient are normal and far from the exponent range's ends (the same
//   correctly rounded quotient; a GPU may skip its division's slow path);
//   fma(a, b, c), fma(a, double, c) (F, D);
//   lt, gt, ge, eq, ne (value, value or double) -> M; ne(M, M) (xor);
//   sel(M, x, y) with x or y possibly a double constant; land, lor, lnot (M);
//   rint (F, D: to nearest, ties to even), trunc (F); bits (F -> I, D -> L),
//   from_bits (I -> F, L -> D); band, bor (I, L with a value or a double);
//   shl, shr (I, L by a constant int; shr is arithmetic); to_f32 (I, D),
//   to_f64 (F, I, L), to_i32 (F: truncating, L: low word), to_i64 (I, D);
//   like(x, v): the constant v in x's type; table(I) -> I: kTwoOverPiTable;
//   maybe_any(M) -> bool: false only if no lane of the mask is set (a builder
//   that cannot tell says true). Code under `if (b.maybe_any(m))` may only
//   compute values that are then selected by m, so skipping it changes no bit.
// Integer add/sub/mul/shl wrap around (two's complement).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>

#include "math/level.h"

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
KILN_LEVEL_BEGIN

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

/// p 2^n for p in [0.7, 1.42] and an integer n in [-150, 128] (as f32): as
/// (2^n1 p) 2^n2 with n1 = n >> 1, n2 = n - n1 (both in [-75, 64]): the first
/// factor by adding n1 to p's exponent (it stays normal), then one
/// multiplication by a normal power of two, so a subnormal result is rounded
/// once and 2^128 becomes +inf.
template <class B>
KILN_MATH_INLINE typename B::F scale_pow2(B& b, typename B::F p, typename B::F n) {
  const auto ni = b.to_i32(n);
  const auto n1 = b.shr(ni, 1);
  const auto n2 = b.sub(ni, n1);
  const auto y1 = b.from_bits(b.add(b.bits(p), b.shl(n1, 23)));
  const auto s2 = b.from_bits(b.shl(b.add(n2, 127.0), 23));
  return b.mul(y1, s2);
}

/// The minimax polynomial of exp_f32 (e^r on |r| <= ln2/2, p(0) = p'(0) = 1).
template <class B>
KILN_MATH_INLINE typename B::F exp_poly(B& b, typename B::F r) {
  return horner(b, r,
                std::array{1.3814583654e-3f, 8.3687240258e-3f, 4.1668388993e-2f, 1.6666521132e-1f,
                           4.9999994040e-1f, 1.0f, 1.0f});
}

/// {n, p(r)} of exp(xc) = 2^n p(r) below (xc already clamped); then
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
KILN_MATH_INLINE std::pair<typename B::F, typename B::F> exp_reduce(B& b, typename B::F xc) {
  const auto n = b.rint(b.mul(xc, double{1.44269504088896341f}));
  auto r = b.fma(n, double{-0.693359375f}, xc);
  r = b.fma(n, double{2.12194440e-4f}, r);
  return {n, exp_poly(b, r)};
}
template <class B>
KILN_MATH_INLINE typename B::F exp_f32(B& b, typename B::F x) {
  const auto [n, p] = exp_reduce(b, clamp(b, x, -104.0, 89.0));
  const auto y = scale_pow2(b, p, n);
  return b.sel(isnan(b, x), x, y);
}

/// e ln2 + log(1 + v) for v in [sqrt(1/2) - 1, sqrt(2) - 1] and e an integer
/// (as f32): Cephes' polynomial, ln2 in an exact high part and a low part.
template <class B>
KILN_MATH_INLINE typename B::F log_tail(B& b, typename B::F v, typename B::F ef) {
  const auto z = b.mul(v, v);
  const auto p = horner(b, v,
                        std::array{7.0376836292e-2f, -1.1514610310e-1f, 1.1676998740e-1f,
                                   -1.2420140846e-1f, 1.4249322787e-1f, -1.6668057665e-1f,
                                   2.0000714765e-1f, -2.4999993993e-1f, 3.3333331174e-1f});
  const auto y0 = b.mul(b.mul(v, z), p);
  const auto y1 = b.fma(ef, double{-2.12194440e-4f}, y0);
  const auto y2 = b.fma(z, -0.5, y1);
  return b.fma(ef, double{0.693359375f}, b.add(v, y2));
}

/// {m, e} with x = 2^e m, m in [sqrt(1/2), sqrt(2)), for a positive finite f32
/// (subnormals scaled into the normal range first); other x give garbage.
template <class B>
KILN_MATH_INLINE std::pair<typename B::F, typename B::I> log_reduce(B& b, typename B::F x0) {
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
  return {mm, e};
}

/// log(x) = e ln2 + log(m), x = 2^e m, m in [sqrt(1/2), sqrt(2)) (subnormals
/// scaled into the normal range first): Cephes' polynomial in v = m - 1.
template <class B>
KILN_MATH_INLINE typename B::F log_f32(B& b, typename B::F x0) {
  const auto [mm, e] = log_reduce(b, x0);
  const auto v = b.sub(mm, 1.0);
  const auto y = log_tail(b, v, b.to_f32(e));
  // log(0) = -inf, log(x < 0) = NaN, log(inf) = inf, NaN through.
  auto r = b.sel(b.eq(x0, 0.0), -kInf, y);
  r = b.sel(b.lt(x0, 0.0), kNaN, r);
  r = b.sel(b.eq(x0, kInf), x0, r);
  return b.sel(isnan(b, x0), x0, r);
}

/// tanh: x + x^3 P(x^2) (Cephes) for |x| <= 0.625, else 1 - 2 / (e^(2|x|) + 1)
/// with the sign of x; ±0 keeps its sign, NaN goes through the small path.
/// e^(2|x|) is exp_f32's value for 2|x| <= 20, where its scaling is one
/// exponent addition (2^n p is normal, n in [0, 29]); 2|x| is clamped to 20,
/// where 2 / (e^20 + 1) < 2^-27 already rounds 1 - q to 1, as every larger
/// |x| does. Same bits as with exp_f32 for every f32 (checked exhaustively),
/// in about six operations fewer: GPUs run GELU's tanh instruction-bound.
template <class B>
KILN_MATH_INLINE typename B::F tanh_f32(B& b, typename B::F x) {
  const auto a = fabs(b, x);
  const auto a2 = b.add(a, a);
  const auto [n, pn] = exp_reduce(b, b.sel(b.lt(a2, 20.0), a2, 20.0));  // NaN: 20 (not selected)
  const auto ex = b.from_bits(b.add(b.bits(pn), b.shl(b.to_i32(n), 23)));
  const auto q = b.div_normal(b.like(x, 2.0), b.add(ex, 1.0));  // selected: e + 1 in [4.49, 4.86e8]
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

// ---- pow: float-float (an f32 pair hi + lo) log and exp, as SLEEF's powf.
// Products whose value is added to something are formed as fma(a, b, 0)
// (prod): a compiler may contract a plain product into the addition that
// follows, which would change its bits in eager code only.

/// a * c rounded once, as an fma (never contracted into a later addition).
template <class B>
KILN_MATH_INLINE typename B::F prod(B& b, typename B::F a, typename B::F c) {
  return b.fma(a, c, b.like(a, 0.0));
}

/// ln(a) for a positive finite f32 as hi + lo (relative error < 2^-33): a =
/// 2^e m (log_reduce), ln m = 2 atanh(s), s = (m - 1) / (m + 1) as a pair,
/// 2s + 2s^3/3 + s^5 Q(s^2) with the s^3 term as a pair too; e ln2 with ln2
/// split so that e * hi is exact.
template <class B>
KILN_MATH_INLINE std::pair<typename B::F, typename B::F> log_pair(B& b, typename B::F a) {
  using F = typename B::F;
  const auto [m, e] = log_reduce(b, a);
  const F f = b.sub(m, 1.0);   // exact
  const F dh = b.add(m, 1.0);  // m + 1 = dh + dl exactly
  const F dl = b.sub(m, b.sub(dh, 1.0));
  const F sh = b.div(f, dh);  // s = sh + sl
  const F rem = b.fma(b.neg(sh), dl, b.fma(b.neg(sh), dh, f));
  const F sl = b.div(rem, dh);
  const F zh = prod(b, sh, sh);  // sh^2 = zh + zl
  const F zl = b.fma(sh, sh, b.neg(zh));
  const F c = prod(b, sh, zh);  // s^3 = c + cl
  const F cl = b.fma(b.mul(zh, 3.0), sl, b.fma(sh, zl, b.fma(sh, zh, b.neg(c))));
  const F t3h = prod(b, c, b.like(c, double{0.6666666865348816f}));  // (2/3) s^3
  const F t3l = b.fma(cl, double{0.6666666865348816f},
                      b.fma(c, double{-1.9868215517249155e-08f},
                            b.fma(c, double{0.6666666865348816f}, b.neg(t3h))));
  const F q = horner(b, zh, std::array{2.0f / 13, 2.0f / 11, 2.0f / 9, 2.0f / 7, 2.0f / 5});
  const F small = b.fma(b.mul(c, zh), q, b.fma(sl, 2.0, t3l));
  const F s2 = b.add(sh, sh);
  const F u = b.add(s2, t3h);  // |s2| >= |t3h|: fast two-sum
  const F ul = b.add(b.sub(t3h, b.sub(u, s2)), small);
  const F ef = b.to_f32(e);
  const F th = prod(b, ef, b.like(ef, 0.693145751953125));  // exact (16-bit ln2 head)
  const F hi = b.add(th, u);                                // |th| >= |u| unless th = 0
  const F err = b.sub(u, b.sub(hi, th));
  const F lo = b.fma(ef, double{1.428606765330187e-06f}, b.add(err, ul));
  const F rh = b.add(hi, lo);  // renormalized: |lo| <= ulp(hi) / 2 (exp_pair's premise)
  return {rh, b.sub(lo, b.sub(rh, hi))};
}

/// e^(h + l) for a pair with |l| <= 2^-17 |h|: n = rint(h / ln2), r = h - n ln2
/// as a pair (rh, rl) (the first step exact), e^rh (exp_f32's polynomial)
/// times 1 + rl, scaled by 2^n. h is clamped to [-104, 89] (e^h rounds to 0
/// below, overflows above; l dropped there); NaN goes through.
template <class B>
KILN_MATH_INLINE typename B::F exp_pair(B& b, typename B::F h, typename B::F l) {
  using F = typename B::F;
  const auto inr = b.land(b.gt(h, -104.0), b.lt(h, 89.0));
  const F hc = clamp(b, h, -104.0, 89.0);
  const F lc = b.sel(inr, l, 0.0);
  const F n = b.rint(b.mul(hc, double{1.44269504088896341f}));
  const F r1 = b.fma(n, double{-0.693359375f}, hc);
  const F th = prod(b, n, b.like(n, double{2.12194440e-4f}));  // ln2 = 0.693359375 - lo - lo3
  const F tl = b.fma(n, double{2.12194440e-4f}, b.neg(th));
  const F rh = b.add(r1, th);  // two-sum
  const F bb = b.sub(rh, r1);
  const F err = b.add(b.sub(r1, b.sub(rh, bb)), b.sub(th, bb));
  const F rl = b.fma(n, double{-1.6465949582897082e-12f}, b.add(b.add(err, tl), lc));
  const F p = exp_poly(b, rh);
  const F y = scale_pow2(b, b.fma(p, rl, p), n);
  return b.sel(isnan(b, h), h, y);
}

/// pow(x, y) = e^(y ln|x|) with ln|x| and the product as float-float pairs
/// (error <= 2 ulp), and C99's special cases: pow(x, ±0) = 1, pow(1, y) = 1,
/// pow(-1, ±inf) = 1, negative x with an odd integer y gives a negative
/// result, negative finite x with a non-integer y is NaN; zeros and
/// infinities follow from ln(0) = -inf and ln(inf) = inf.
template <class B>
KILN_MATH_INLINE typename B::F pow_f32(B& b, typename B::F x, typename B::F y) {
  const auto ax = fabs(b, x);
  const auto [lh0, ll] = log_pair(b, ax);
  auto lh = b.sel(b.eq(ax, 0.0), -kInf, lh0);
  lh = b.sel(b.eq(ax, kInf), kInf, lh);
  lh = b.sel(isnan(b, ax), ax, lh);
  const auto ph = prod(b, lh, y);
  const auto pl = b.fma(ll, y, b.fma(lh, y, b.neg(ph)));
  const auto r = exp_pair(b, ph, pl);
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

/// log1p(x) = e ln2 + log(1 + v) with 1 + x = 2^e (1 + v), 1 + v in
/// [sqrt(1/2), sqrt(2)) (log_tail's range): e from the rounded u = 1 + x, then
/// v = x 2^-e + (2^-e - 1) with one fma from x itself, so the rounding of u
/// is not in v (v = x exactly when e = 0: tiny x and subnormals keep every
/// bit). 2^-e (e in [-24, 128]) is a product of two powers of two, exact even
/// where it is subnormal (2^-128 for x near FLT_MAX). Error <= 2 ulp (sweeps
/// in tests/codegen/math_expand_test.cpp). ±0 and NaN give x, -1 -> -inf,
/// x < -1 -> NaN, inf -> inf.
template <class B>
KILN_MATH_INLINE typename B::F log1p_f32(B& b, typename B::F x) {
  const auto bits = b.bits(b.add(x, 1.0));
  const auto e0 = b.sub(b.band(b.shr(bits, 23), 255.0), 127.0);
  const auto e = b.sel(b.gt(b.band(bits, 8388607.0), 3474675.0),  // mantissa > sqrt(2)
                       b.add(e0, 1.0), e0);
  const auto e1 = b.shr(e, 1);
  const auto p1 = b.from_bits(b.shl(b.sub(b.ci(127), e1), 23));
  const auto p2 = b.from_bits(b.shl(b.sub(b.ci(127), b.sub(e, e1)), 23));
  // t is exact, so a compiler contracting t * ... - 1 into an fma changes nothing.
  const auto t = b.mul(p1, p2);
  const auto v = b.fma(x, t, b.sub(t, 1.0));
  const auto y = log_tail(b, v, b.to_f32(e));
  auto r = b.sel(b.eq(x, 0.0), x, y);
  r = b.sel(b.eq(x, -1.0), -kInf, r);
  r = b.sel(b.lt(x, -1.0), kNaN, r);
  r = b.sel(b.eq(x, kInf), x, r);
  return b.sel(isnan(b, x), x, r);
}

/// erf in f32: |x| < 1: x + x Q(x^2); 1 <= |x|: 1 - e^R(|x| - 2.5) with R a fit
/// of log(erfc) on [1, 4] (|x| clamped to 4, where erf rounds to 1 in f32;
/// |x| - 2.5 is exact). Q (degree 6) and R (degree 8) are our own weighted
/// least-squares fits (mpmath values), rounded to f32: Q's relative error is
/// 2.3e-8, R's costs at most 0.2 ulp of erf; with exp_f32 and the final
/// roundings erf stays within 2 ulp (tests/codegen/math_expand_test.cpp).
template <class B>
KILN_MATH_INLINE typename B::F erf_f32(B& b, typename B::F x) {
  const auto a = fabs(b, x);
  const auto q =
      horner(b, b.mul(a, a),
             std::array{7.869151886552572e-05f, -0.0008013442275114357f, 0.005188505630940199f,
                        -0.02685377188026905f, 0.11283579468727112f, -0.376126229763031f,
                        0.12837916612625122f});
  const auto small = b.fma(x, q, x);
  const auto w = b.sub(clamp(b, a, 1.0, 4.0), 2.5);
  const auto r =
      horner(b, w,
             std::array{1.563845557939203e-06f, -1.3272639080241788e-05f, 7.760265725664794e-05f,
                        -0.00042027299059554935f, 0.002164893550798297f, -0.010858394205570221f,
                        -0.943893551826477f, -5.352680683135986f, -7.806815147399902f});
  const auto om = b.sub(b.like(x, 1.0), exp_f32(b, r));  // in [0.84, 1]: positive
  const auto large = copysign(b, om, x);
  return b.sel(b.ge(a, 1.0), large, small);
}

/// Table word at index `idx` (i32), zero-extended to i64.
template <class B>
KILN_MATH_INLINE typename B::L table_word(B& b, typename B::I idx) {
  return b.band(b.to_i64(b.table(idx)), 4294967295.0);
}

/// The exact reduction of |x| by pi/2 for every finite f32 (Payne-Hanek in
/// integer arithmetic: the 24-bit mantissa times 96 bits of 2/pi, keeping the
/// quadrant n and the remainder in 2^-62 units): {remainder in radians (f32,
/// |r| <= pi/4), n}.
template <class B>
KILN_MATH_INLINE std::pair<typename B::F, typename B::I> reduce_pio2_exact(B& b, typename B::I xi) {
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
  return {b.to_f32(b.mul(remd, 3.4061215800865545e-19)), b.to_i32(n)};  // pi/2 * 2^-62
}

/// sin/cos in f32: |x| = n pi/2 + r, |r| <= pi/4 (a little more), then Cephes'
/// polynomials for sin and cos on r (<= 1 ulp there). Below 2^17 the
/// reduction is Cody-Waite in f32: pi/2 in three f32 parts, with fma; the
/// first step is exact, and the error stays under 2^-24 |r| even at the f32
/// nearest to a multiple of pi/2 (exhaustive check over every f32 below 2^17).
/// From 2^17 on, reduce_pio2_exact. The builder may skip that path when no
/// lane needs it (maybe_any): it is selected per lane, so the bits are the same.
/// Error <= 2 ulp over the whole f32 range; inf and NaN give NaN.
template <class B>
KILN_MATH_INLINE typename B::F sincos_f32(B& b, typename B::F x, bool sine) {
  const auto xi = b.bits(x);
  const auto a = fabs(b, x);
  const auto near = b.lt(a, 131072.0);
  const auto an = b.sel(near, a, 0.0);  // NaN and huge lanes: 0
  const auto nf = b.rint(b.mul(an, double{0.636619746685028f}));
  auto r = b.fma(nf, double{-1.5707963705062866f}, an);
  r = b.fma(nf, double{4.371138828673793e-08f}, r);
  r = b.fma(nf, double{1.7151245100058819e-15f}, r);
  auto q = b.to_i32(nf);
  if (b.maybe_any(b.lnot(near))) {
    const auto [rh, qh] = reduce_pio2_exact(b, xi);
    r = b.sel(near, r, rh);
    q = b.sel(near, q, qh);
  }
  const auto z = b.mul(r, r);
  const auto ps = horner(b, z, std::array{-1.9515295891e-4f, 8.3321608736e-3f, -1.6666654611e-1f});
  const auto sv = b.fma(b.mul(r, z), ps, r);
  const auto pc = horner(
      b, z, std::array{2.443315711809948e-5f, -1.388731625493765e-3f, 4.166664568298827e-2f});
  const auto cv = b.fma(b.mul(z, z), pc, b.fma(z, -0.5, b.like(z, 1.0)));
  const auto zero = b.ci(0);
  const auto odd = b.ne(b.band(q, 1.0), zero);
  typename B::F v;
  typename B::M neg;
  if (sine) {
    v = b.sel(odd, cv, sv);
    const auto neg1 = b.ne(b.band(q, 2.0), zero);
    neg = b.ne(neg1, b.lt(xi, zero));  // mask xor
  } else {
    v = b.sel(odd, sv, cv);
    neg = b.ne(b.band(b.add(q, 1.0), 2.0), zero);
  }
  // inf or NaN: NaN.
  return b.sel(b.lt(a, kInf), b.sel(neg, b.neg(v), v), b.sub(x, x));
}

KILN_LEVEL_END
}  // namespace kiln::math

#undef KILN_MATH_INLINE

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
