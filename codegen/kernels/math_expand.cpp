// The transcendental expansions (see math_expand.h). exp: our own minimax
// polynomial; log/tanh: the Cephes single precision polynomials (<= 2 ulp in
// their reduced ranges); range reduction with fma. pow/log1p/erf/sin/cos
// compute in double inside (Taylor series and our own mpmath fits) and round
// once. Clamps are written as compare-and-select, with NaN sent to a finite
// value before any float -> int cast (a NaN cast is undefined) and restored by
// the final select.
#include "kernels/math_expand.h"

#include <array>
#include <initializer_list>
#include <limits>
#include <mutex>

#include "kernels/kernel_ir_util.h"
#include "kiln/error.h"

namespace kiln::kir {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Appends expressions; every helper returns the index of its result.
class B {
 public:
  std::vector<Expr> ex;

  int push(const Expr& e) {
    ex.push_back(e);
    return static_cast<int>(ex.size()) - 1;
  }
  DType dt(int i) const { return ex[static_cast<size_t>(i)].dtype; }
  int input(int i, DType t) { return push(Expr::load(i, t)); }
  int c(DType t, double v) { return push(Expr::constant(v, t)); }
  int op(OpId o, int a, int b = -1) { return push(Expr::make_op(o, dt(a), a, b)); }
  int op(OpId o, int a, double v) { return op(o, a, c(dt(a), v)); }
  int cmp(OpId o, int a, int b) { return push(Expr::make_op(o, DType::b8, a, b)); }
  int cmp(OpId o, int a, double v) { return cmp(o, a, c(dt(a), v)); }
  int sel(int cond, int a, int b) { return push(Expr::make_op(OpId::where, dt(a), cond, a, b)); }
  int sel(int cond, int a, double v) { return sel(cond, a, c(dt(a), v)); }
  int sel(int cond, double v, int b) { return sel(cond, c(dt(b), v), b); }
  int cast(int a, DType t) { return push(Expr::make_op(OpId::cast, t, a)); }
  int prim(Prim p, int a, int b = -1, int cc = -1) {
    return push(Expr::make_prim(p, dt(a), a, b, cc));
  }
  int prim(Prim p, int a, double v) { return prim(p, a, c(dt(a), v)); }
  int fma(int a, int b, int cc) { return prim(Prim::kFma, a, b, cc); }
  int shl(int a, int n) { return prim(Prim::kShl, a, static_cast<double>(n)); }
  int shr(int a, int n) { return prim(Prim::kShr, a, static_cast<double>(n)); }
  int fma(int a, double b, int cc) { return fma(a, c(dt(a), b), cc); }
  int bits(int x) {
    return push(Expr::make_prim(Prim::kBitcast, dt(x) == DType::f32 ? DType::i32 : DType::i64, x));
  }
  int from_bits(int x) {
    return push(Expr::make_prim(Prim::kBitcast, dt(x) == DType::i32 ? DType::f32 : DType::f64, x));
  }
  int isnan(int x) { return cmp(OpId::ne, x, x); }
  // |x| and copysign of an f32, through its bits.
  int fabs(int x) { return from_bits(prim(Prim::kAnd, bits(x), 2147483647.0)); }
  int copysign(int mag, int sgn) {
    const int m = prim(Prim::kAnd, bits(mag), 2147483647.0);
    const int s = prim(Prim::kAnd, bits(sgn), -2147483648.0);
    return from_bits(prim(Prim::kOr, m, s));
  }
  // x clamped to [lo, hi]; NaN becomes lo.
  int clamp(int x, double lo, double hi) {
    const int l = sel(cmp(OpId::gt, x, lo), x, lo);
    return sel(cmp(OpId::lt, l, hi), l, hi);
  }
  // Horner: cs[0] x^(n-1) + ... + cs[n-1], with fma.
  int horner(int x, std::initializer_list<double> cs) { return horner(x, std::vector<double>(cs)); }
  int horner(int x, const std::vector<double>& cs) {
    int acc = c(dt(x), cs[0]);
    for (size_t k = 1; k < cs.size(); ++k) acc = fma(acc, x, c(dt(x), cs[k]));
    return acc;
  }
};

constexpr DType F = DType::f32;
constexpr DType D = DType::f64;
constexpr DType I = DType::i32;
constexpr DType L = DType::i64;

// exp(x) = 2^n p(r), n = rint(x / ln2), r = x - n ln2 (ln2 in an exact high
// part and a low part, with fma), |r| <= ln2/2. p is our own minimax fit of
// e^r with p(0) = p'(0) = 1 (degree 6, relative error 3e-9; under 1 ulp in
// all). x is clamped to [-104, 89] first: below, e^x rounds to +0, above it
// overflows, and n stays in [-150, 128]. 2^n p is formed as (2^n1 p) 2^n2 with
// n1 = n >> 1, n2 = n - n1 (both in [-75, 64]): the first factor by adding n1
// to p's exponent (p is in [0.7, 1.42], so it stays normal), then one
// multiplication by a normal power of two, so subnormal results are rounded
// once and 2^128 becomes +inf.
int exp_f32(B& b, int x) {
  const int xc = b.clamp(x, -104.0, 89.0);
  const int n = b.prim(Prim::kRint, b.op(OpId::mul, xc, double{1.44269504088896341f}));
  int r = b.fma(n, double{-0.693359375f}, xc);
  r = b.fma(n, double{2.12194440e-4f}, r);
  const int p = b.horner(r, {1.3814583654e-3f, 8.3687240258e-3f, 4.1668388993e-2f, 1.6666521132e-1f,
                             4.9999994040e-1f, 1.0f, 1.0f});
  const int ni = b.cast(n, I);
  const int n1 = b.shr(ni, 1);
  const int n2 = b.op(OpId::sub, ni, n1);
  const int y1 = b.from_bits(b.op(OpId::add, b.bits(p), b.shl(n1, 23)));
  const int s2 = b.from_bits(b.shl(b.op(OpId::add, n2, 127.0), 23));
  return b.sel(b.isnan(x), x, b.op(OpId::mul, y1, s2));
}

// log(x) = e ln2 + log(m), x = 2^e m, m in [sqrt(1/2), sqrt(2)) (subnormals
// scaled into the normal range first): Cephes' polynomial in v = m - 1.
int log_f32(B& b, int x0) {
  const int sub = b.cmp(OpId::lt, x0, double{1.17549435e-38f});
  const int x = b.sel(sub, b.op(OpId::mul, x0, 8388608.0), x0);
  const int eadj = b.sel(sub, b.c(I, -23), b.c(I, 0));
  const int bits = b.bits(x);
  const int eb = b.prim(Prim::kAnd, b.shr(bits, 23), 255.0);
  const int e1 = b.op(OpId::add, b.op(OpId::sub, eb, 126.0), eadj);
  const int mb = b.prim(Prim::kOr, b.prim(Prim::kAnd, bits, -2139095041.0),  // 0x807fffff
                        1056964608.0);  // 0x3f000000: m in [0.5, 1)
  const int m = b.from_bits(mb);
  const int lo = b.cmp(OpId::lt, m, double{0.707106781186547524f});
  const int mm = b.sel(lo, b.op(OpId::add, m, m), m);
  const int e = b.sel(lo, b.op(OpId::sub, e1, 1.0), e1);
  const int v = b.op(OpId::sub, mm, 1.0);
  const int ef = b.cast(e, F);
  const int z = b.op(OpId::mul, v, v);
  const int p = b.horner(v, {7.0376836292e-2f, -1.1514610310e-1f, 1.1676998740e-1f,
                             -1.2420140846e-1f, 1.4249322787e-1f, -1.6668057665e-1f,
                             2.0000714765e-1f, -2.4999993993e-1f, 3.3333331174e-1f});
  const int y0 = b.op(OpId::mul, b.op(OpId::mul, v, z), p);
  const int y1 = b.fma(ef, double{-2.12194440e-4f}, y0);
  const int y2 = b.fma(z, -0.5, y1);
  const int y = b.fma(ef, double{0.693359375f}, b.op(OpId::add, v, y2));
  // log(0) = -inf, log(x < 0) = NaN, log(inf) = inf, NaN through.
  int r = b.sel(b.cmp(OpId::eq, x0, 0.0), -kInf, y);
  r = b.sel(b.cmp(OpId::lt, x0, 0.0), kNaN, r);
  r = b.sel(b.cmp(OpId::eq, x0, kInf), x0, r);
  return b.sel(b.isnan(x0), x0, r);
}

// tanh: x + x^3 P(x^2) (Cephes) for |x| <= 0.625, else 1 - 2 / (e^(2|x|) + 1)
// with the sign of x; ±0 keeps its sign, NaN goes through the small path.
int tanh_f32(B& b, int x) {
  const int a = b.fabs(x);
  const int ex = exp_f32(b, b.op(OpId::add, a, a));
  const int q = b.op(OpId::div, b.c(F, 2.0), b.op(OpId::add, ex, 1.0));
  const int big = b.copysign(b.op(OpId::sub, b.c(F, 1.0), q), x);
  const int z = b.op(OpId::mul, x, x);
  const int p = b.horner(z, {-5.70498872745e-3f, 2.06390887954e-2f, -5.37397155531e-2f,
                             1.33314422036e-1f, -3.33332819422e-1f});
  const int small = b.fma(b.op(OpId::mul, z, x), p, x);
  const int r = b.sel(b.cmp(OpId::gt, a, 0.625), big, small);
  return b.sel(b.cmp(OpId::eq, x, 0.0), x, r);
}

int sigmoid_f32(B& b, int x) {
  const int e = exp_f32(b, b.op(OpId::neg, x));
  return b.op(OpId::div, b.c(F, 1.0), b.op(OpId::add, e, 1.0));
}

// ---- double-precision helpers: the f32 functions that need more than f32
// precision inside (pow, log1p, erf, sin, cos) compute in double and round
// once, which keeps them within 1-2 ulp and still vectorizes.

// exp(z) in double, ~1e-15 relative: z = n ln2 + r, |r| <= ln2/2, Taylor to
// r^11, scaled by 2^n in two halves (so the clamped range ±800 never
// overflows the exponent).
int exp_f64(B& b, int z0) {
  const int z = b.clamp(z0, -800.0, 800.0);
  const int n = b.prim(Prim::kRint, b.op(OpId::mul, z, 1.4426950408889634));
  int r = b.fma(n, -0.6931471805599453, z);
  r = b.fma(n, -2.3190468138462996e-17, r);
  std::vector<double> cs;
  double f = 1;
  for (int k = 1; k <= 11; ++k) f *= k;
  for (int k = 11; k >= 0; --k) {  // 1/k!, highest power first
    cs.push_back(1.0 / f);
    if (k > 0) f /= k;
  }
  const int p = b.horner(r, cs);
  const int ni = b.cast(n, L);
  const int h = b.shr(ni, 1);
  const int l = b.op(OpId::sub, ni, h);
  const int s1 = b.from_bits(b.shl(b.op(OpId::add, h, 1023.0), 52));
  const int s2 = b.from_bits(b.shl(b.op(OpId::add, l, 1023.0), 52));
  const int y = b.op(OpId::mul, b.op(OpId::mul, p, s1), s2);
  return b.sel(b.isnan(z0), z0, y);
}

// log(x) in double for x >= 0 that is normal, zero, inf or NaN (never a double
// subnormal here): x = 2^e m, m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s),
// s = (m-1)/(m+1), |s| <= 0.172, series to s^17 (~1e-16).
int log_f64(B& b, int x) {
  const int bits = b.bits(x);
  const int eb = b.prim(Prim::kAnd, b.shr(bits, 52), 2047.0);
  const int e0 = b.op(OpId::sub, eb, 1023.0);
  const int mb = b.prim(Prim::kOr, b.prim(Prim::kAnd, bits, 4503599627370495.0),  // 2^52 - 1
                        4607182418800017408.0);                                   // bits of 1.0
  const int m0 = b.from_bits(mb);
  const int big = b.cmp(OpId::gt, m0, 1.4142135623730951);
  const int m = b.sel(big, b.op(OpId::mul, m0, 0.5), m0);
  const int e = b.sel(big, b.op(OpId::add, e0, 1.0), e0);
  const int s = b.op(OpId::div, b.op(OpId::sub, m, 1.0), b.op(OpId::add, m, 1.0));
  const int s2 = b.op(OpId::mul, s, s);
  std::vector<double> cs;
  for (int k = 17; k >= 1; k -= 2) cs.push_back(1.0 / k);
  const int p = b.horner(s2, cs);
  const int lm = b.op(OpId::mul, b.op(OpId::add, s, s), p);
  const int ed = b.cast(e, D);
  const int y0 = b.fma(ed, 2.3190468138462996e-17, lm);
  const int y = b.fma(ed, 0.6931471805599453, y0);
  int r = b.sel(b.cmp(OpId::eq, x, 0.0), -kInf, y);
  r = b.sel(b.cmp(OpId::lt, x, 0.0), kNaN, r);
  r = b.sel(b.cmp(OpId::eq, x, kInf), x, r);
  return b.sel(b.isnan(x), x, r);
}

// pow(x, y) = exp(y log|x|) in double (|y log|x|| error ~1e-14, so the f32
// result is within 1 ulp), with C99's special cases: pow(x, ±0) = 1,
// pow(1, y) = 1, pow(-1, ±inf) = 1, negative x with an odd integer y gives a
// negative result, negative finite x with a non-integer y is NaN; zeros and
// infinities follow from log(0) = -inf and log(inf) = inf.
int pow_f32(B& b, int x, int y) {
  const int ax = b.fabs(x);
  const int l = log_f64(b, b.cast(ax, D));
  const int r = b.cast(exp_f64(b, b.op(OpId::mul, b.cast(y, D), l)), F);
  // y an integer (±inf count as even integers); odd only below 2^24.
  const int isint = b.cmp(OpId::eq, b.prim(Prim::kTrunc, y), y);
  const int ay = b.fabs(y);
  const int ys = b.sel(b.cmp(OpId::lt, ay, 16777216.0), y, 0.0);
  const int odd0 = b.cmp(OpId::ne, b.prim(Prim::kAnd, b.cast(ys, I), 1.0), b.c(I, 0));
  const int odd = b.op(OpId::logical_and, odd0, isint);
  const int xsign = b.cmp(OpId::lt, b.bits(x), b.c(I, 0));
  const int r1 = b.sel(b.op(OpId::logical_and, xsign, odd), b.op(OpId::neg, r), r);
  const int xneg = b.cmp(OpId::lt, x, 0.0);
  const int xfin = b.cmp(OpId::ne, ax, kInf);
  const int bad = b.op(OpId::logical_and, b.op(OpId::logical_and, xneg, xfin),
                       b.push(Expr::make_op(OpId::logical_not, DType::b8, isint)));
  const int r2 = b.sel(bad, kNaN, r1);
  const int m1inf = b.op(OpId::logical_and, b.cmp(OpId::eq, x, -1.0), b.cmp(OpId::eq, ay, kInf));
  const int one =
      b.op(OpId::logical_or,
           b.op(OpId::logical_or, b.cmp(OpId::eq, y, 0.0), b.cmp(OpId::eq, x, 1.0)), m1inf);
  return b.sel(one, 1.0, r2);
}

// log1p(x) = log(u) * x / (u - 1) with u = 1 + x in double (the quotient
// corrects the rounding of u); x itself when u == 1 (tiny x, ±0) or x = inf.
int log1p_f32(B& b, int x) {
  const int xd = b.cast(x, D);
  const int u = b.op(OpId::add, xd, 1.0);
  const int q = b.op(OpId::div, xd, b.op(OpId::sub, u, 1.0));
  const int r0 = b.op(OpId::mul, log_f64(b, u), q);
  const int keep = b.op(OpId::logical_or, b.cmp(OpId::eq, u, 1.0), b.cmp(OpId::eq, xd, kInf));
  return b.cast(b.sel(keep, xd, r0), F);
}

// erf in double: |x| < 1: x (1 + Q(x^2)); 1 <= |x|: 1 - exp(R(|x|)) with R a
// fit of log(erfc) on [1, 4] (|x| clamped to 4, where erf rounds to 1 in f32).
// Q (degree 7, error 3e-11) and R (degree 12 in u = (|x| - 2.5) / 1.5, error
// 6e-11) are least-squares Chebyshev fits made with mpmath.
int erf_f32(B& b, int x) {
  const int xd = b.cast(x, D);
  const int a = b.cast(b.fabs(x), D);
  const int t = b.op(OpId::mul, a, a);
  const int q = b.horner(t, {-9.667044571486996e-06, 0.00011265959025606609, -0.0008484080405535107,
                             0.005221031807858023, -0.026865430727670243, 0.11283782495236845,
                             -0.3761263846802871, 0.12837916706154343});
  const int small = b.fma(xd, q, xd);
  const int ac = b.clamp(a, 1.0, 4.0);
  const int u = b.op(OpId::mul, b.op(OpId::sub, ac, 2.5), 2.0 / 3.0);
  const int r = b.horner(
      u, {-6.114282755563654e-07, 1.5370764294050848e-06, -5.328029808335207e-07,
          -6.757626194616484e-06, 4.5220782080017823e-05, -0.0002174824535634764,
          0.0008774628746405798, -0.003196592603743613, 0.010962722573368389, -0.03664597843665769,
          -2.1237609002783895, -8.02902112708958, -7.806815272727264});
  const int om = b.op(OpId::sub, b.c(D, 1.0), exp_f64(b, r));  // in [0.84, 1]: positive
  const int large = b.sel(b.cmp(OpId::lt, xd, 0.0), b.op(OpId::neg, om), om);
  return b.cast(b.sel(b.cmp(OpId::ge, a, 1.0), large, small), F);
}

// Bits of 2/pi after the binary point, in hex (enough for every f32 exponent).
constexpr const char* kTwoOverPi =
    "a2f9836e4e441529fc2757d1f534ddc0db6295993c439041fe5163abdebbc561b7246e3a";

// T[i] = floor(2/pi * 2^(i - 120)) mod 2^32, i in [0, 320): the three words of
// 2/pi that line up with an f32 of biased exponent E are T[E], T[E + 32] and
// T[E + 64].
std::array<int32_t, 320> two_over_pi_table() {
  auto bit = [](int k) -> uint32_t {  // k-th bit after the point (1-based)
    const int digit = (k - 1) / 4;
    const char ch = kTwoOverPi[digit];
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

// Table word at index `idx` (i32), zero-extended to i64.
int table_word(B& b, int idx) {
  Expr e = Expr::make_prim(Prim::kTable, I, idx);
  e.arg = 0;
  return b.prim(Prim::kAnd, b.cast(b.push(e), L), 4294967295.0);
}

// sin/cos: exact range reduction of |x| by pi/2 for every f32 (Payne-Hanek in
// integer arithmetic: the 24-bit mantissa times 96 bits of 2/pi, keeping the
// quadrant n and the remainder r in 2^-62 units), then Taylor polynomials in
// double on |r| <= pi/4 (error ~1e-14). |x| < 2^-6 needs no reduction.
int sincos_f32(B& b, int x, bool sine) {
  const int xi = b.bits(x);
  const int e = b.prim(Prim::kAnd, b.shr(xi, 23), 255.0);
  const int m = b.cast(b.prim(Prim::kOr, b.prim(Prim::kAnd, xi, 8388607.0), 8388608.0), L);
  const int w0 = table_word(b, e);
  const int w1 = table_word(b, b.op(OpId::add, e, 32.0));
  const int w2 = table_word(b, b.op(OpId::add, e, 64.0));
  const int ah = b.shl(b.op(OpId::mul, m, w0), 32);
  const int cl = b.shr(b.op(OpId::mul, m, w2), 32);  // < 2^56: no sign
  const int h = b.op(OpId::add, b.op(OpId::add, ah, b.op(OpId::mul, m, w1)), cl);
  // + 2^61 rounds to the nearest quadrant; the top two bits are n (mod 4).
  const int n = b.shr(b.op(OpId::add, h, 2305843009213693952.0), 62);
  const int rem = b.op(OpId::sub, h, b.shl(n, 62));
  // rem (|rem| <= 2^61) to double as hi 2^32 + lo with lo its low word taken as
  // signed: every conversion is from i32 (AVX2 converts only 32-bit lanes).
  const int lo = b.cast(rem, I);
  const int hi = b.cast(b.shr(b.op(OpId::sub, rem, b.cast(lo, L)), 32), I);
  const int remd = b.fma(b.cast(hi, D), 4294967296.0, b.cast(lo, D));
  const int ang0 = b.op(OpId::mul, remd, 3.4061215800865545e-19);  // pi/2 * 2^-62
  const int tiny = b.cmp(OpId::lt, e, b.c(I, 121));
  const int ang = b.sel(tiny, b.cast(b.fabs(x), D), ang0);
  const int q = b.sel(tiny, b.c(I, 0), b.prim(Prim::kAnd, b.cast(n, I), 3.0));
  const int a2 = b.op(OpId::mul, ang, ang);
  std::vector<double> sc, cc;  // Taylor coefficients, highest power first
  for (int k = 7; k >= 0; --k) {
    double fs = 1, fc = 1;
    for (int i = 2; i <= 2 * k + 1; ++i) fs *= i;
    for (int i = 2; i <= 2 * k; ++i) fc *= i;
    if (k <= 6) sc.push_back((k % 2 ? -1.0 : 1.0) / fs);
    cc.push_back((k % 2 ? -1.0 : 1.0) / fc);
  }
  const int sv = b.op(OpId::mul, ang, b.horner(a2, sc));
  const int pc = b.horner(a2, cc);
  const int zero = b.c(I, 0);
  const int odd = b.cmp(OpId::ne, b.prim(Prim::kAnd, q, 1.0), zero);
  int v, neg;
  if (sine) {
    v = b.sel(odd, pc, sv);
    const int neg1 = b.cmp(OpId::ne, b.prim(Prim::kAnd, q, 2.0), zero);
    neg = b.cmp(OpId::ne, neg1, b.cmp(OpId::lt, xi, zero));  // bool xor
  } else {
    v = b.sel(odd, sv, pc);
    neg = b.cmp(OpId::ne, b.prim(Prim::kAnd, b.op(OpId::add, q, 1.0), 2.0), zero);
  }
  const int r = b.cast(b.sel(neg, b.op(OpId::neg, v), v), F);
  // inf or NaN: NaN.
  return b.sel(b.cmp(OpId::eq, e, b.c(I, 255)), b.op(OpId::sub, x, x), r);
}

// pow and the float math ops of the table (kFloatMath) except sqrt and rsqrt,
// which are correctly rounded instructions everywhere.
constexpr bool expandable_op(OpId op) {
  return op == OpId::pow || (detail::is_float_math(op) && op != OpId::sqrt && op != OpId::rsqrt);
}

// The f32 body of `op` on inputs x (and y for pow).
int expand_f32(B& b, OpId op, int x, int y) {
  switch (op) {
    case OpId::exp:
      return exp_f32(b, x);
    case OpId::log:
      return log_f32(b, x);
    case OpId::log1p:
      return log1p_f32(b, x);
    case OpId::tanh:
      return tanh_f32(b, x);
    case OpId::sigmoid:
      return sigmoid_f32(b, x);
    case OpId::erf:
      return erf_f32(b, x);
    case OpId::sin:
      return sincos_f32(b, x, true);
    case OpId::cos:
      return sincos_f32(b, x, false);
    case OpId::pow:
      return pow_f32(b, x, y);
    default:
      break;
  }
  KILN_ASSERT(false, "no math expansion for ", op_name(op));
  return -1;
}

std::vector<Expr> build(OpId op, DType t) {
  B b;
  const int arity = op == OpId::pow ? 2 : 1;
  int in[2] = {-1, -1};
  for (int i = 0; i < arity; ++i) in[i] = b.input(i, t);
  if (t == F) {
    expand_f32(b, op, in[0], in[1]);
  } else {  // f16/bf16: compute in float, round once
    for (int i = 0; i < arity; ++i) in[i] = b.cast(in[i], F);
    b.cast(expand_f32(b, op, in[0], in[1]), t);
  }
  return b.ex;
}

constexpr int dtype_slot(DType t) {
  return t == DType::f32 ? 0 : (t == DType::f16 ? 1 : 2);
}

}  // namespace

bool has_math_expansion(OpId op, DType t) {
  return expandable_op(op) && (t == DType::f32 || t == DType::f16 || t == DType::bf16);
}

const std::vector<Expr>& math_expansion(OpId op, DType t) {
  KILN_ASSERT(has_math_expansion(op, t), "no math expansion for ", op_name(op), " in ", t);
  static const auto table = [] {
    std::vector<std::array<std::vector<Expr>, 3>> all(static_cast<size_t>(kNumOps));
    for (int o = 0; o < kNumOps; ++o) {
      const auto op = static_cast<OpId>(o);
      if (!expandable_op(op)) continue;
      for (DType dt : {DType::f32, DType::f16, DType::bf16})
        all[static_cast<size_t>(o)][static_cast<size_t>(dtype_slot(dt))] = build(op, dt);
    }
    return all;
  }();
  return table[static_cast<size_t>(op)][static_cast<size_t>(dtype_slot(t))];
}

Kernel expand_math(const Kernel& k) {
  Kernel out = k;
  out.exprs.clear();
  std::vector<int> map(k.exprs.size(), -1);
  auto remap = [](Expr e, const std::vector<int>& m) {
    if (e.kind == ExprKind::kOp || e.kind == ExprKind::kPrim) {
      for (int* o : {&e.a, &e.b, &e.c})
        if (*o >= 0) *o = m[static_cast<size_t>(*o)];
    }
    return e;
  };
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    const Expr& e = k.exprs[i];
    const DType in =
        e.kind == ExprKind::kOp && e.a >= 0 ? k.exprs[static_cast<size_t>(e.a)].dtype : e.dtype;
    if (e.kind != ExprKind::kOp || !has_math_expansion(e.op, in)) {
      out.exprs.push_back(remap(e, map));
      map[i] = static_cast<int>(out.exprs.size()) - 1;
      continue;
    }
    const std::vector<Expr>& f = math_expansion(e.op, in);
    std::vector<int> fm(f.size(), -1);
    const int operands[2] = {e.a, e.b};
    for (size_t j = 0; j < f.size(); ++j) {
      if (f[j].kind == ExprKind::kLoad) {
        fm[j] = map[static_cast<size_t>(operands[f[j].arg])];
        continue;
      }
      out.exprs.push_back(remap(f[j], fm));
      fm[j] = static_cast<int>(out.exprs.size()) - 1;
    }
    map[i] = fm.back();
  }
  for (Reduction& r : out.reductions) r.expr = map[static_cast<size_t>(r.expr)];
  for (Store& s : out.stores) s.expr = map[static_cast<size_t>(s.expr)];
  return out;
}

std::span<const int32_t> math_table(int id) {
  KILN_ASSERT(id >= 0 && id < kNumMathTables, "no math table ", id);
  static const std::array<int32_t, 320> two_over_pi = two_over_pi_table();
  return two_over_pi;
}

}  // namespace kiln::kir
