// Vectorizable f32 transcendentals as LLVM IR text. Each function is scalar,
// branch-free (selects only) and alwaysinline, so once inlined into a kernel's
// loop the loop vectorizer widens it like any other arithmetic — no libm call
// blocks vectorization (NOTES.md 1.4). exp: our own minimax polynomial;
// log/tanh: the Cephes single precision polynomials (≤ 2 ulp in their reduced
// ranges); range reduction with FMA. pow/log1p/erf/sin/cos compute in double internally (Taylor
// series and our own mpmath fits) and round once. Only f32 takes this path: f64 kernels call libm
// or LLVM's intrinsics (gradcheck precision, not a hot path).
#include "kiln/vector_math_ir.h"

#include <bit>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace kiln::jit {

namespace {

// LLVM IR float literals must be exact: spell the float's value as a double hex.
std::string f(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%016llX",
                static_cast<unsigned long long>(std::bit_cast<uint64_t>(static_cast<double>(v))));
  return buf;
}

// An exact LLVM literal of a double.
std::string d(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%016llX",
                static_cast<unsigned long long>(std::bit_cast<uint64_t>(v)));
  return buf;
}

// Horner in double: c[0]*x^(n-1) + ... + c[n-1] with fma; returns the last name.
std::string horner_d(std::string& ir, const std::string& pfx, const std::string& x,
                     const std::vector<double>& c) {
  std::string acc = d(c[0]);
  for (size_t k = 1; k < c.size(); ++k) {
    std::string name = "%" + pfx + std::to_string(k);
    ir += "  " + name + " = call double @llvm.fma.f64(double " + acc + ", double " + x +
          ", double " + d(c[k]) + ")\n";
    acc = name;
  }
  return acc;
}

// Horner evaluation of c[0]*x^(n-1) + ... + c[n-1] with fma; returns the last name.
std::string horner(std::string& ir, const std::string& pfx, const std::string& x,
                   std::initializer_list<float> c) {
  auto it = c.begin();
  std::string acc = f(*it++);
  int k = 0;
  for (; it != c.end(); ++it, ++k) {
    std::string name = "%" + pfx + std::to_string(k);
    ir += "  " + name + " = call float @llvm.fma.f32(float " + acc + ", float " + x + ", float " +
          f(*it) + ")\n";
    acc = name;
  }
  return acc;
}

// exp(x) = 2^n p(r), n = rint(x / ln2), r = x - n ln2 (ln2 in an exact high
// part and a low part, with FMA), |r| <= ln2/2. p is our own minimax fit of
// e^r with p(0) = p'(0) = 1 (degree 6, relative error 3e-9; under 1 ulp in
// all). x is clamped to [-104, 89] first: below, e^x rounds to +0, above it
// overflows, and n stays in [-150, 128]. 2^n p is formed as (2^n1 p) 2^n2 with
// n1 = n >> 1, n2 = n - n1 (both in [-75, 64]): the first factor by adding n1
// to p's exponent (p is in [0.7, 1.42], so it stays normal), then one
// multiplication by a normal power of two, so subnormal results are rounded
// once and 2^128 becomes +inf.
std::string expf_ir() {
  std::string ir =
      "define internal float @kiln_expf(float %x) #0 {\n"
      "entry:\n"
      "  %xl = call float @llvm.maxnum.f32(float %x, float " +
      f(-104.0f) +
      ")\n"
      "  %xc = call float @llvm.minnum.f32(float %xl, float " +
      f(89.0f) +
      ")\n"
      "  %t = fmul float %xc, " +
      f(1.44269504088896341f) +
      "\n"
      "  %n = call float @llvm.rint.f32(float %t)\n"
      "  %r1 = call float @llvm.fma.f32(float %n, float " +
      f(-0.693359375f) +
      ", float %xc)\n"
      "  %r = call float @llvm.fma.f32(float %n, float " +
      f(2.12194440e-4f) + ", float %r1)\n";
  const std::string p = horner(ir, "p", "%r",
                               {1.3814583654e-3f, 8.3687240258e-3f, 4.1668388993e-2f,
                                1.6666521132e-1f, 4.9999994040e-1f, 1.0f, 1.0f});
  ir +=
      "  %ni = fptosi float %n to i32\n"
      "  %n1 = ashr i32 %ni, 1\n"
      "  %n2 = sub i32 %ni, %n1\n"
      "  %n1s = shl i32 %n1, 23\n"
      "  %pb = bitcast float " +
      p +
      " to i32\n"
      "  %y1b = add i32 %pb, %n1s\n"
      "  %y1 = bitcast i32 %y1b to float\n"
      "  %n2b = add i32 %n2, 127\n"
      "  %n2s = shl i32 %n2b, 23\n"
      "  %s2 = bitcast i32 %n2s to float\n"
      "  %y = fmul float %y1, %s2\n"
      "  %nan = fcmp uno float %x, 0.0\n"
      "  %res = select i1 %nan, float %x, float %y\n"
      "  ret float %res\n"
      "}\n";
  return ir;
}

std::string logf_ir() {
  std::string ir =
      "define internal float @kiln_logf(float %x0) #0 {\n"
      "entry:\n"
      // Subnormals: scale into the normal range and correct the exponent.
      "  %sub = fcmp olt float %x0, " +
      f(1.17549435e-38f) +
      "\n"
      "  %xs = fmul float %x0, " +
      f(8388608.0f) +
      "\n"
      "  %x = select i1 %sub, float %xs, float %x0\n"
      "  %eadj = select i1 %sub, i32 -23, i32 0\n"
      "  %bits = bitcast float %x to i32\n"
      "  %eb = lshr i32 %bits, 23\n"
      "  %eb8 = and i32 %eb, 255\n"
      "  %e0 = sub i32 %eb8, 126\n"
      "  %e1 = add i32 %e0, %eadj\n"
      "  %mb0 = and i32 %bits, -2139095041\n"  // 0x807fffff
      "  %mb = or i32 %mb0, 1056964608\n"      // 0x3f000000: m in [0.5, 1)
      "  %m = bitcast i32 %mb to float\n"
      "  %lo = fcmp olt float %m, " +
      f(0.707106781186547524f) +
      "\n"
      "  %m2 = fadd float %m, %m\n"
      "  %mm = select i1 %lo, float %m2, float %m\n"
      "  %e2 = sub i32 %e1, 1\n"
      "  %e = select i1 %lo, i32 %e2, i32 %e1\n"
      "  %v = fsub float %mm, " +
      f(1.0f) +
      "\n"
      "  %ef = sitofp i32 %e to float\n"
      "  %z = fmul float %v, %v\n";
  std::string p = horner(
      ir, "p", "%v",
      {7.0376836292e-2f, -1.1514610310e-1f, 1.1676998740e-1f, -1.2420140846e-1f, 1.4249322787e-1f,
       -1.6668057665e-1f, 2.0000714765e-1f, -2.4999993993e-1f, 3.3333331174e-1f});
  ir +=
      "  %vz = fmul float %v, %z\n"
      "  %y0 = fmul float %vz, " +
      p +
      "\n"
      "  %y1 = call float @llvm.fma.f32(float %ef, float " +
      f(-2.12194440e-4f) +
      ", float %y0)\n"
      "  %y2 = call float @llvm.fma.f32(float %z, float " +
      f(-0.5f) +
      ", float %y1)\n"
      "  %y3 = fadd float %v, %y2\n"
      "  %y = call float @llvm.fma.f32(float %ef, float " +
      f(0.693359375f) +
      ", float %y3)\n"
      // log(0) = -inf, log(x<0) = NaN, log(inf) = inf, NaN through.
      "  %zero = fcmp oeq float %x0, 0.0\n"
      "  %neg = fcmp olt float %x0, 0.0\n"
      "  %inf = fcmp oeq float %x0, 0x7FF0000000000000\n"
      "  %nan = fcmp uno float %x0, 0.0\n"
      "  %r1 = select i1 %zero, float 0xFFF0000000000000, float %y\n"
      "  %r2 = select i1 %neg, float 0x7FF8000000000000, float %r1\n"
      "  %r3 = select i1 %inf, float %x0, float %r2\n"
      "  %res = select i1 %nan, float %x0, float %r3\n"
      "  ret float %res\n"
      "}\n";
  return ir;
}

std::string tanhf_ir() {
  std::string ir =
      "define internal float @kiln_tanhf(float %x) #0 {\n"
      "entry:\n"
      "  %a = call float @llvm.fabs.f32(float %x)\n"
      // Large |x|: 1 - 2/(exp(2|x|) + 1), with the sign of x.
      "  %a2 = fadd float %a, %a\n"
      "  %ex = call float @kiln_expf(float %a2)\n"
      "  %d = fadd float %ex, " +
      f(1.0f) +
      "\n"
      "  %q = fdiv float " +
      f(2.0f) +
      ", %d\n"
      "  %big0 = fsub float " +
      f(1.0f) +
      ", %q\n"
      "  %big = call float @llvm.copysign.f32(float %big0, float %x)\n"
      // Small |x|: x + x^3 P(x^2).
      "  %z = fmul float %x, %x\n";
  std::string p = horner(ir, "p", "%z",
                         {-5.70498872745e-3f, 2.06390887954e-2f, -5.37397155531e-2f,
                          1.33314422036e-1f, -3.33332819422e-1f});
  ir +=
      "  %zx = fmul float %z, %x\n"
      "  %small = call float @llvm.fma.f32(float %zx, float " +
      p +
      ", float %x)\n"
      "  %isbig = fcmp ogt float %a, " +
      f(0.625f) +
      "\n"
      "  %r = select i1 %isbig, float %big, float %small\n"
      // ±0 keeps its sign; NaN goes through the small path unchanged.
      "  %zero = fcmp oeq float %x, 0.0\n"
      "  %res = select i1 %zero, float %x, float %r\n"
      "  ret float %res\n"
      "}\n";
  return ir;
}

std::string sigmoidf_ir() {
  return "define internal float @kiln_sigmoidf(float %x) #0 {\n"
         "entry:\n"
         "  %n = fneg float %x\n"
         "  %e = call float @kiln_expf(float %n)\n"
         "  %d = fadd float %e, " +
         f(1.0f) +
         "\n"
         "  %r = fdiv float " +
         f(1.0f) +
         ", %d\n"
         "  ret float %r\n"
         "}\n";
}

// ---- double-precision helpers (internal): the f32 functions below that need
// more than f32 precision inside (pow, log1p, erf, sin, cos) compute in double
// and round once, which keeps them within 1-2 ulp and still vectorizes
// (4 doubles per AVX2 register).

// exp(z) in double, ~1e-15 relative: z = n ln2 + r, |r| <= ln2/2, Taylor to r^11,
// scaled by 2^n in two halves (so the clamped range +-800 never overflows the exponent).
std::string exp_d_ir() {
  std::string ir =
      "define internal double @kiln_exp_d(double %z0) #0 {\n"
      "entry:\n"
      "  %z1 = call double @llvm.minnum.f64(double %z0, double 800.0)\n"
      "  %z = call double @llvm.maxnum.f64(double %z1, double -800.0)\n"
      "  %t = fmul double %z, " +
      d(1.4426950408889634) +
      "\n"
      "  %n = call double @llvm.rint.f64(double %t)\n"
      "  %r1 = call double @llvm.fma.f64(double %n, double " +
      d(-0.6931471805599453) +
      ", double %z)\n"
      "  %r = call double @llvm.fma.f64(double %n, double " +
      d(-2.3190468138462996e-17) + ", double %r1)\n";
  std::vector<double> c;
  double f = 1;
  for (int k = 1; k <= 11; ++k) f *= k;
  for (int k = 11; k >= 0; --k) {  // 1/k!, highest power first
    c.push_back(1.0 / f);
    if (k > 0) f /= k;
  }
  const std::string p = horner_d(ir, "p", "%r", c);
  ir +=
      "  %ni = fptosi double %n to i64\n"
      "  %h = ashr i64 %ni, 1\n"
      "  %l = sub i64 %ni, %h\n"
      "  %hb = add i64 %h, 1023\n"
      "  %lb = add i64 %l, 1023\n"
      "  %hs = shl i64 %hb, 52\n"
      "  %ls = shl i64 %lb, 52\n"
      "  %s1 = bitcast i64 %hs to double\n"
      "  %s2 = bitcast i64 %ls to double\n"
      "  %y1 = fmul double " +
      p +
      ", %s1\n"
      "  %y = fmul double %y1, %s2\n"
      "  %nan = fcmp uno double %z0, 0.0\n"
      "  %res = select i1 %nan, double %z0, double %y\n"
      "  ret double %res\n"
      "}\n";
  return ir;
}

// log(x) in double for x >= 0 that is normal, zero, inf or NaN (never a double
// subnormal here): x = 2^e m, m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s),
// s = (m-1)/(m+1), |s| <= 0.172, series to s^17 (~1e-16).
std::string log_d_ir() {
  std::string ir =
      "define internal double @kiln_log_d(double %x) #0 {\n"
      "entry:\n"
      "  %bits = bitcast double %x to i64\n"
      "  %eb = lshr i64 %bits, 52\n"
      "  %eb11 = and i64 %eb, 2047\n"
      "  %e0 = sub i64 %eb11, 1023\n"
      "  %mb0 = and i64 %bits, 4503599627370495\n"  // 0x000fffffffffffff
      "  %mb = or i64 %mb0, 4607182418800017408\n"  // exponent of 1.0
      "  %m0 = bitcast i64 %mb to double\n"
      "  %big = fcmp ogt double %m0, " +
      d(1.4142135623730951) +
      "\n"
      "  %mh = fmul double %m0, 0.5\n"
      "  %m = select i1 %big, double %mh, double %m0\n"
      "  %e1 = add i64 %e0, 1\n"
      "  %e = select i1 %big, i64 %e1, i64 %e0\n"
      "  %num = fsub double %m, 1.0\n"
      "  %den = fadd double %m, 1.0\n"
      "  %s = fdiv double %num, %den\n"
      "  %s2 = fmul double %s, %s\n";
  std::vector<double> c;
  for (int k = 17; k >= 1; k -= 2) c.push_back(1.0 / k);
  const std::string p = horner_d(ir, "p", "%s2", c);
  ir +=
      "  %ss = fadd double %s, %s\n"
      "  %lm = fmul double %ss, " +
      p +
      "\n"
      "  %ed = sitofp i64 %e to double\n"
      "  %y0 = call double @llvm.fma.f64(double %ed, double " +
      d(2.3190468138462996e-17) +
      ", double %lm)\n"
      "  %y = call double @llvm.fma.f64(double %ed, double " +
      d(0.6931471805599453) +
      ", double %y0)\n"
      "  %zero = fcmp oeq double %x, 0.0\n"
      "  %neg = fcmp olt double %x, 0.0\n"
      "  %inf = fcmp oeq double %x, 0x7FF0000000000000\n"
      "  %nan = fcmp uno double %x, 0.0\n"
      "  %r1 = select i1 %zero, double 0xFFF0000000000000, double %y\n"
      "  %r2 = select i1 %neg, double 0x7FF8000000000000, double %r1\n"
      "  %r3 = select i1 %inf, double %x, double %r2\n"
      "  %res = select i1 %nan, double %x, double %r3\n"
      "  ret double %res\n"
      "}\n";
  return ir;
}

// pow(x, y) = exp(y log|x|) in double (|y log|x|| error ~1e-14, so the f32
// result is within 1 ulp), with C99's special cases: pow(x, ±0) = 1,
// pow(1, y) = 1, pow(-1, ±inf) = 1, negative x with an odd integer y gives a
// negative result, negative finite x with a non-integer y is NaN; zeros and
// infinities follow from log(0) = -inf and log(inf) = inf.
std::string powf_ir() {
  return "define internal float @kiln_powf(float %x, float %y) #0 {\n"
         "entry:\n"
         "  %ax = call float @llvm.fabs.f32(float %x)\n"
         "  %axd = fpext float %ax to double\n"
         "  %yd = fpext float %y to double\n"
         "  %l = call double @kiln_log_d(double %axd)\n"
         "  %z = fmul double %yd, %l\n"
         "  %e = call double @kiln_exp_d(double %z)\n"
         "  %r = fptrunc double %e to float\n"
         // y an integer (±inf count as even integers); odd only below 2^24.
         "  %yt = call float @llvm.trunc.f32(float %y)\n"
         "  %isint = fcmp oeq float %yt, %y\n"
         "  %ay = call float @llvm.fabs.f32(float %y)\n"
         "  %small = fcmp olt float %ay, " +
         f(16777216.0f) +
         "\n"
         "  %ys = select i1 %small, float %y, float 0.0\n"
         "  %yi = fptosi float %ys to i32\n"
         "  %yodd = and i32 %yi, 1\n"
         "  %odd0 = icmp ne i32 %yodd, 0\n"
         "  %odd1 = and i1 %odd0, %isint\n"
         "  %xbits = bitcast float %x to i32\n"
         "  %xsign = icmp slt i32 %xbits, 0\n"
         "  %flip = and i1 %xsign, %odd1\n"
         "  %nr = fneg float %r\n"
         "  %r1 = select i1 %flip, float %nr, float %r\n"
         "  %xneg = fcmp olt float %x, 0.0\n"
         "  %xfin = fcmp one float %ax, 0x7FF0000000000000\n"
         "  %frac = xor i1 %isint, true\n"
         "  %bad0 = and i1 %xneg, %xfin\n"
         "  %bad = and i1 %bad0, %frac\n"
         "  %r2 = select i1 %bad, float 0x7FF8000000000000, float %r1\n"
         "  %y0 = fcmp oeq float %y, 0.0\n"
         "  %x1 = fcmp oeq float %x, 1.0\n"
         "  %xm1 = fcmp oeq float %x, -1.0\n"
         "  %yinf = fcmp oeq float %ay, 0x7FF0000000000000\n"
         "  %m1inf = and i1 %xm1, %yinf\n"
         "  %one0 = or i1 %y0, %x1\n"
         "  %one = or i1 %one0, %m1inf\n"
         "  %res = select i1 %one, float 1.0, float %r2\n"
         "  ret float %res\n"
         "}\n";
}

// log1p(x) = log(u) * x / (u - 1) with u = 1 + x in double (the quotient
// corrects the rounding of u); x itself when u == 1 (tiny x, ±0).
std::string log1pf_ir() {
  return "define internal float @kiln_log1pf(float %x) #0 {\n"
         "entry:\n"
         "  %xd = fpext float %x to double\n"
         "  %u = fadd double %xd, 1.0\n"
         "  %l = call double @kiln_log_d(double %u)\n"
         "  %um1 = fsub double %u, 1.0\n"
         "  %q = fdiv double %xd, %um1\n"
         "  %r0 = fmul double %l, %q\n"
         "  %one = fcmp oeq double %u, 1.0\n"
         "  %inf = fcmp oeq double %xd, 0x7FF0000000000000\n"
         "  %keep = or i1 %one, %inf\n"
         "  %r = select i1 %keep, double %xd, double %r0\n"
         "  %res = fptrunc double %r to float\n"
         "  ret float %res\n"
         "}\n";
}

// erf in double: |x| < 1: x (1 + Q(x^2)); 1 <= |x|: 1 - exp(R(|x|)) with R a fit
// of log(erfc) on [1, 4] (|x| clamped to 4, where erf rounds to 1 in f32).
// Q (degree 7, error 3e-11) and R (degree 12 in u = (|x| - 2.5) / 1.5, error
// 6e-11) are least-squares Chebyshev fits made with mpmath.
std::string erff_ir() {
  std::string ir =
      "define internal float @kiln_erff(float %x) #0 {\n"
      "entry:\n"
      "  %xd = fpext float %x to double\n"
      "  %a0 = call float @llvm.fabs.f32(float %x)\n"
      "  %a = fpext float %a0 to double\n"
      "  %t = fmul double %a, %a\n";
  const std::string q = horner_d(
      ir, "q", "%t",
      {-9.667044571486996e-06, 0.00011265959025606609, -0.0008484080405535107, 0.005221031807858023,
       -0.026865430727670243, 0.11283782495236845, -0.3761263846802871, 0.12837916706154343});
  ir += "  %small = call double @llvm.fma.f64(double %xd, double " + q +
        ", double %xd)\n"
        "  %ac0 = call double @llvm.minnum.f64(double %a, double 4.0)\n"
        "  %ac = call double @llvm.maxnum.f64(double %ac0, double 1.0)\n"
        "  %uc = fsub double %ac, 2.5\n"
        "  %u = fmul double %uc, " +
        d(2.0 / 3.0) + "\n";
  const std::string r =
      horner_d(ir, "r", "%u",
               {-6.114282755563654e-07, 1.5370764294050848e-06, -5.328029808335207e-07,
                -6.757626194616484e-06, 4.5220782080017823e-05, -0.0002174824535634764,
                0.0008774628746405798, -0.003196592603743613, 0.010962722573368389,
                -0.03664597843665769, -2.1237609002783895, -8.02902112708958, -7.806815272727264});
  ir += "  %ec = call double @kiln_exp_d(double " + r +
        ")\n"
        "  %om = fsub double 1.0, %ec\n"
        "  %large = call double @llvm.copysign.f64(double %om, double %xd)\n"
        "  %big = fcmp oge double %a, 1.0\n"
        "  %rd = select i1 %big, double %large, double %small\n"
        "  %res = fptrunc double %rd to float\n"
        "  ret float %res\n"
        "}\n";
  return ir;
}

// Bits of 2/pi after the binary point, in hex (enough for every f32 exponent).
constexpr const char* kTwoOverPi =
    "a2f9836e4e441529fc2757d1f534ddc0db6295993c439041fe5163abdebbc561b7246e3a";

// Table T[i] = floor(2/pi * 2^(i - 120)) mod 2^32, i in [0, 320): the three
// words of 2/pi that line up with an f32 of biased exponent E are T[E],
// T[E + 32] and T[E + 64].
std::string two_over_pi_ir() {
  auto bit = [](int k) -> uint32_t {  // k-th bit after the point (1-based)
    const int digit = (k - 1) / 4;
    const char c = kTwoOverPi[digit];
    const int v = c <= '9' ? c - '0' : c - 'a' + 10;
    return static_cast<uint32_t>(v >> (3 - (k - 1) % 4)) & 1u;
  };
  std::string ir = "@kiln_two_over_pi = internal unnamed_addr constant [320 x i32] [";
  for (int i = 0; i < 320; ++i) {
    const int j = i - 120;
    uint32_t w = 0;
    for (int k = j - 31; k <= j; ++k)
      if (k >= 1) w |= bit(k) << (j - k);
    ir += (i ? ", i32 " : "i32 ") + std::to_string(static_cast<int32_t>(w));
  }
  return ir + "]\n";
}

// sin/cos: exact range reduction of |x| by pi/2 for every f32 (Payne-Hanek in
// integer arithmetic: the 24-bit mantissa times 96 bits of 2/pi, keeping the
// quadrant n and the remainder r in 2^-62 units), then Taylor polynomials in
// double on |r| <= pi/4 (error ~1e-14). |x| < 2^-6 needs no reduction.
std::string sincosf_ir(bool sine) {
  const std::string fn = sine ? "kiln_sinf" : "kiln_cosf";
  std::string ir =
      "define internal float @" + fn +
      "(float %x) #0 {\n"
      "entry:\n"
      "  %xi = bitcast float %x to i32\n"
      "  %eb = lshr i32 %xi, 23\n"
      "  %e = and i32 %eb, 255\n"
      "  %m0 = and i32 %xi, 8388607\n"
      "  %m1 = or i32 %m0, 8388608\n"
      "  %m = zext i32 %m1 to i64\n"
      "  %i0 = zext i32 %e to i64\n"
      "  %i1 = add i64 %i0, 32\n"
      "  %i2 = add i64 %i0, 64\n"
      "  %pw0 = getelementptr inbounds [320 x i32], ptr @kiln_two_over_pi, i64 0, i64 %i0\n"
      "  %pw1 = getelementptr inbounds [320 x i32], ptr @kiln_two_over_pi, i64 0, i64 %i1\n"
      "  %pw2 = getelementptr inbounds [320 x i32], ptr @kiln_two_over_pi, i64 0, i64 %i2\n"
      "  %w0s = load i32, ptr %pw0\n"
      "  %w1s = load i32, ptr %pw1\n"
      "  %w2s = load i32, ptr %pw2\n"
      "  %w0 = zext i32 %w0s to i64\n"
      "  %w1 = zext i32 %w1s to i64\n"
      "  %w2 = zext i32 %w2s to i64\n"
      "  %a = mul i64 %m, %w0\n"
      "  %ah = shl i64 %a, 32\n"
      "  %b = mul i64 %m, %w1\n"
      "  %c = mul i64 %m, %w2\n"
      "  %cl = lshr i64 %c, 32\n"
      "  %h0 = add i64 %ah, %b\n"
      "  %h = add i64 %h0, %cl\n"
      "  %hr = add i64 %h, 2305843009213693952\n"  // + 2^61: round to the nearest quadrant
      "  %n = lshr i64 %hr, 62\n"
      "  %ns = shl i64 %n, 62\n"
      "  %rem = sub i64 %h, %ns\n"
      // int64 -> double from two 32-bit halves (AVX2 converts only 32-bit lanes).
      "  %remh0 = ashr i64 %rem, 32\n"
      "  %remh = trunc i64 %remh0 to i32\n"
      "  %reml = trunc i64 %rem to i32\n"
      "  %remhd = sitofp i32 %remh to double\n"
      "  %remld = uitofp i32 %reml to double\n"
      "  %remd = call double @llvm.fma.f64(double %remhd, double 4294967296.0, double %remld)\n"
      "  %ang0 = fmul double %remd, " +
      d(3.4061215800865545e-19) +
      "\n"  // pi/2 * 2^-62
      "  %ax = call float @llvm.fabs.f32(float %x)\n"
      "  %axd = fpext float %ax to double\n"
      "  %tiny = icmp ult i32 %e, 121\n"
      "  %ang = select i1 %tiny, double %axd, double %ang0\n"
      "  %n32 = trunc i64 %n to i32\n"
      "  %q0 = and i32 %n32, 3\n"
      "  %q = select i1 %tiny, i32 0, i32 %q0\n"
      "  %a2 = fmul double %ang, %ang\n";
  std::vector<double> sc, cc;  // Taylor coefficients, highest power first
  for (int k = 7; k >= 0; --k) {
    double fs = 1, fc = 1;
    for (int i = 2; i <= 2 * k + 1; ++i) fs *= i;
    for (int i = 2; i <= 2 * k; ++i) fc *= i;
    if (k <= 6) sc.push_back((k % 2 ? -1.0 : 1.0) / fs);
    cc.push_back((k % 2 ? -1.0 : 1.0) / fc);
  }
  const std::string ps = horner_d(ir, "s", "%a2", sc);
  const std::string pc = horner_d(ir, "c", "%a2", cc);
  ir += "  %sv = fmul double %ang, " + ps + "\n";
  if (sine) {
    ir +=
        "  %odd0 = and i32 %q, 1\n"
        "  %odd = icmp ne i32 %odd0, 0\n"
        "  %v = select i1 %odd, double " +
        pc +
        ", double %sv\n"
        "  %neg0 = and i32 %q, 2\n"
        "  %neg1 = icmp ne i32 %neg0, 0\n"
        "  %xs = icmp slt i32 %xi, 0\n"
        "  %neg = xor i1 %neg1, %xs\n";
  } else {
    ir +=
        "  %odd0 = and i32 %q, 1\n"
        "  %odd = icmp ne i32 %odd0, 0\n"
        "  %v = select i1 %odd, double %sv, double " +
        pc +
        "\n"
        "  %q1 = add i32 %q, 1\n"
        "  %neg0 = and i32 %q1, 2\n"
        "  %neg = icmp ne i32 %neg0, 0\n";
  }
  ir +=
      "  %nv = fneg double %v\n"
      "  %rv = select i1 %neg, double %nv, double %v\n"
      "  %r = fptrunc double %rv to float\n"
      "  %special = icmp eq i32 %e, 255\n"  // inf or NaN: NaN
      "  %nan = fsub float %x, %x\n"
      "  %res = select i1 %special, float %nan, float %r\n"
      "  ret float %res\n"
      "}\n";
  return ir;
}

}  // namespace

std::string vector_math_ir() {
  std::string ir = expf_ir() + logf_ir() + tanhf_ir() + sigmoidf_ir() + exp_d_ir() + log_d_ir() +
                   powf_ir() + log1pf_ir() + erff_ir() + two_over_pi_ir() + sincosf_ir(true) +
                   sincosf_ir(false);
  ir +=
      "declare float @llvm.fma.f32(float, float, float)\n"
      "declare float @llvm.rint.f32(float)\n"
      "declare float @llvm.minnum.f32(float, float)\n"
      "declare float @llvm.maxnum.f32(float, float)\n"
      "declare float @llvm.fabs.f32(float)\n"
      "declare float @llvm.copysign.f32(float, float)\n"
      "declare float @llvm.trunc.f32(float)\n"
      "declare double @llvm.fma.f64(double, double, double)\n"
      "declare double @llvm.rint.f64(double)\n"
      "declare double @llvm.minnum.f64(double, double)\n"
      "declare double @llvm.maxnum.f64(double, double)\n"
      "declare double @llvm.copysign.f64(double, double)\n"
      "attributes #0 = { alwaysinline nounwind willreturn memory(none) }\n";
  return ir;
}

}  // namespace kiln::jit
