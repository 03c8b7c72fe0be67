// Vectorizable f32 transcendentals as LLVM IR text. Each function is scalar,
// branch-free (selects only) and alwaysinline, so once inlined into a kernel's
// loop the loop vectorizer widens it like any other arithmetic — no libm call
// blocks vectorization (NOTES.md 1.4). Polynomials are the Cephes single
// precision ones (≤ 2 ulp in their reduced ranges); range reduction uses FMA.
#include "kiln/vector_math_ir.h"

#include <bit>
#include <cstdint>
#include <cstdio>
#include <string>

namespace kiln::jit {

namespace {

// LLVM IR float literals must be exact: spell the float's value as a double hex.
std::string f(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%016llX",
                static_cast<unsigned long long>(std::bit_cast<uint64_t>(static_cast<double>(v))));
  return buf;
}

// Horner evaluation of c[0]*x^(n-1) + ... + c[n-1] with fma; returns the last name.
std::string horner(std::string& ir, const std::string& pfx, const std::string& x,
                   std::initializer_list<float> c) {
  auto it = c.begin();
  std::string acc = f(*it++);
  int k = 0;
  for (; it != c.end(); ++it, ++k) {
    std::string name = "%" + pfx + std::to_string(k);
    ir += "  " + name + " = call float @llvm.fma.f32(float " + acc + ", float " + x +
          ", float " + f(*it) + ")\n";
    acc = name;
  }
  return acc;
}

std::string expf_ir() {
  std::string ir =
      "define internal float @kiln_expf(float %x) #0 {\n"
      "entry:\n"
      "  %t = fmul float %x, " + f(1.44269504088896341f) + "\n"
      "  %n = call float @llvm.rint.f32(float %t)\n"
      // r = x - n*ln2, with ln2 split in an exact high part and a low part.
      "  %r1 = call float @llvm.fma.f32(float %n, float " + f(-0.693359375f) + ", float %x)\n"
      "  %r = call float @llvm.fma.f32(float %n, float " + f(2.12194440e-4f) + ", float %r1)\n";
  std::string p = horner(ir, "p", "%r",
                         {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f,
                          1.6666665459e-1f, 5.0000001201e-1f});
  ir +=
      "  %rr = fmul float %r, %r\n"
      "  %q = call float @llvm.fma.f32(float %rr, float " + p + ", float %r)\n"
      "  %e = fadd float %q, " + f(1.0f) + "\n"
      // 2^n in two halves, so results near the overflow and subnormal edges scale exactly.
      "  %nc = call float @llvm.minnum.f32(float %n, float " + f(254.0f) + ")\n"
      "  %nc2 = call float @llvm.maxnum.f32(float %nc, float " + f(-252.0f) + ")\n"
      "  %ni = fptosi float %nc2 to i32\n"
      "  %h = ashr i32 %ni, 1\n"
      "  %l = sub i32 %ni, %h\n"
      "  %hb = add i32 %h, 127\n"
      "  %lb = add i32 %l, 127\n"
      "  %hs = shl i32 %hb, 23\n"
      "  %ls = shl i32 %lb, 23\n"
      "  %s1 = bitcast i32 %hs to float\n"
      "  %s2 = bitcast i32 %ls to float\n"
      "  %y1 = fmul float %e, %s1\n"
      "  %y = fmul float %y1, %s2\n"
      // Overflow to +inf, underflow to +0, NaN through.
      "  %big = fcmp ogt float %x, " + f(88.72283935546875f) + "\n"
      "  %small = fcmp olt float %x, " + f(-103.97283935546875f) + "\n"
      "  %y2 = select i1 %big, float 0x7FF0000000000000, float %y\n"
      "  %y3 = select i1 %small, float 0.0, float %y2\n"
      "  %nan = fcmp uno float %x, 0.0\n"
      "  %res = select i1 %nan, float %x, float %y3\n"
      "  ret float %res\n"
      "}\n";
  return ir;
}

std::string logf_ir() {
  std::string ir =
      "define internal float @kiln_logf(float %x0) #0 {\n"
      "entry:\n"
      // Subnormals: scale into the normal range and correct the exponent.
      "  %sub = fcmp olt float %x0, " + f(1.17549435e-38f) + "\n"
      "  %xs = fmul float %x0, " + f(8388608.0f) + "\n"
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
      "  %lo = fcmp olt float %m, " + f(0.707106781186547524f) + "\n"
      "  %m2 = fadd float %m, %m\n"
      "  %mm = select i1 %lo, float %m2, float %m\n"
      "  %e2 = sub i32 %e1, 1\n"
      "  %e = select i1 %lo, i32 %e2, i32 %e1\n"
      "  %v = fsub float %mm, " + f(1.0f) + "\n"
      "  %ef = sitofp i32 %e to float\n"
      "  %z = fmul float %v, %v\n";
  std::string p = horner(ir, "p", "%v",
                         {7.0376836292e-2f, -1.1514610310e-1f, 1.1676998740e-1f,
                          -1.2420140846e-1f, 1.4249322787e-1f, -1.6668057665e-1f,
                          2.0000714765e-1f, -2.4999993993e-1f, 3.3333331174e-1f});
  ir +=
      "  %vz = fmul float %v, %z\n"
      "  %y0 = fmul float %vz, " + p + "\n"
      "  %y1 = call float @llvm.fma.f32(float %ef, float " + f(-2.12194440e-4f) + ", float %y0)\n"
      "  %y2 = call float @llvm.fma.f32(float %z, float " + f(-0.5f) + ", float %y1)\n"
      "  %y3 = fadd float %v, %y2\n"
      "  %y = call float @llvm.fma.f32(float %ef, float " + f(0.693359375f) + ", float %y3)\n"
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
      "  %d = fadd float %ex, " + f(1.0f) + "\n"
      "  %q = fdiv float " + f(2.0f) + ", %d\n"
      "  %big0 = fsub float " + f(1.0f) + ", %q\n"
      "  %big = call float @llvm.copysign.f32(float %big0, float %x)\n"
      // Small |x|: x + x^3 P(x^2).
      "  %z = fmul float %x, %x\n";
  std::string p = horner(ir, "p", "%z",
                         {-5.70498872745e-3f, 2.06390887954e-2f, -5.37397155531e-2f,
                          1.33314422036e-1f, -3.33332819422e-1f});
  ir +=
      "  %zx = fmul float %z, %x\n"
      "  %small = call float @llvm.fma.f32(float %zx, float " + p + ", float %x)\n"
      "  %isbig = fcmp ogt float %a, " + f(0.625f) + "\n"
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
         "  %d = fadd float %e, " + f(1.0f) + "\n"
         "  %r = fdiv float " + f(1.0f) + ", %d\n"
         "  ret float %r\n"
         "}\n";
}

}  // namespace

std::string vector_math_ir() {
  std::string ir = expf_ir() + logf_ir() + tanhf_ir() + sigmoidf_ir();
  ir +=
      "declare float @llvm.fma.f32(float, float, float)\n"
      "declare float @llvm.rint.f32(float)\n"
      "declare float @llvm.minnum.f32(float, float)\n"
      "declare float @llvm.maxnum.f32(float, float)\n"
      "declare float @llvm.fabs.f32(float)\n"
      "declare float @llvm.copysign.f32(float, float)\n"
      "attributes #0 = { alwaysinline nounwind willreturn memory(none) }\n";
  return ir;
}

}  // namespace kiln::jit
