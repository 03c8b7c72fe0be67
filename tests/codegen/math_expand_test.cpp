// The transcendental expansions (codegen/kernels/math_expand.h) in kernels: the
// compiled kernel equals the interpreter bit for bit on dense sweeps of every
// dtype (every f16/bf16 value, a stride through all f32 bit patterns, special
// values and range edges), stays within 4 ulp of libm in f32 (exp within 1),
// follows libm at ±0, ±inf and NaN, vectorizes, and the whole-kernel
// expansion pass computes what the kernel does.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <regex>
#include <vector>

#include "codegen/kernel_test_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/llvm/llvm_jit.h"
#include "kernels/math_expand.h"

namespace kiln::kir {
namespace {

using testing::Builder;
using MathExpand = testing::NoDiskCache;

#ifdef KILN_TEST_SANITIZED
constexpr int kThin = 8;  // the interpreter runs ~10x slower under ASan: sparser sweeps
#else
constexpr int kThin = 1;
#endif

#define SKIP_WITHOUT_LLVM() \
  if (!jit::available()) GTEST_SKIP() << "built without LLVM 19 (kernels are interpreted)"

constexpr OpId kUnaryMath[] = {OpId::exp,     OpId::log, OpId::log1p, OpId::tanh,
                               OpId::sigmoid, OpId::erf, OpId::sin,   OpId::cos};
constexpr DType kFloats[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

// y = op(x) (or op(x, y) for pow) over one dense dim of dtype t.
Kernel math_kernel(OpId op, DType t) {
  Builder b(1, str("math_", op_name(op), "_", dtype_name(t)));
  const int x = b.load(b.in(t, {true}));
  const int y = op == OpId::pow ? b.op(op, t, x, b.load(b.in(t, {true}))) : b.op(op, t, x);
  b.store(b.out(t, {true}), y);
  return b.k;
}

// Raw elements of one dtype.
struct Raw {
  DType t;
  std::vector<char> bytes;
  int64_t n() const { return static_cast<int64_t>(bytes.size() / dtype_size(t)); }
  uint64_t bits(int64_t i) const {
    uint64_t v = 0;
    std::memcpy(&v, bytes.data() + i * static_cast<int64_t>(dtype_size(t)), dtype_size(t));
    return v;
  }
  double value(int64_t i) const {
    const uint64_t b = bits(i);
    switch (t) {
      case DType::f32:
        return std::bit_cast<float>(static_cast<uint32_t>(b));
      case DType::f64:
        return std::bit_cast<double>(b);
      case DType::f16: {
        Half h;
        h.bits = static_cast<uint16_t>(b);
        return static_cast<float>(h);
      }
      default: {
        BFloat16 h;
        h.bits = static_cast<uint16_t>(b);
        return static_cast<float>(h);
      }
    }
  }
  void push_bits(uint64_t b) {
    const size_t s = dtype_size(t);
    bytes.resize(bytes.size() + s);
    std::memcpy(bytes.data() + bytes.size() - s, &b, s);
  }
  void push(double v) {
    switch (t) {
      case DType::f32:
        return push_bits(std::bit_cast<uint32_t>(static_cast<float>(v)));
      case DType::f64:
        return push_bits(std::bit_cast<uint64_t>(v));
      case DType::f16:
        return push_bits(Half(static_cast<float>(v)).bits);
      default:
        return push_bits(BFloat16(static_cast<float>(v)).bits);
    }
  }
};

// Special values and range edges of every function, plus subnormals.
std::vector<double> specials() {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const float fmin = std::numeric_limits<float>::min();
  const float fmax = std::numeric_limits<float>::max();
  const float fden = std::numeric_limits<float>::denorm_min();
  std::vector<double> v = {0.0,
                           -0.0,
                           inf,
                           -inf,
                           nan,
                           -nan,
                           1,
                           -1,
                           2,
                           -2,
                           0.5,
                           -0.5,
                           1000,
                           -1000,
                           1e-40,
                           -1e-40,
                           fmin,
                           -fmin,
                           fmax,
                           -fmax,
                           fden,
                           -fden,
                           0.625,
                           -0.625,
                           0.6251,
                           88.72283172607421875,
                           88.72283935546875,
                           -87.336544,
                           -103.97207,
                           -103.972084,
                           -104,
                           -150,
                           89,
                           1e-30,
                           1e30,
                           0.999,
                           -0.999,
                           1e-3,
                           -1e-3,
                           1.0000001,
                           0.9999999,
                           3.0e38,
                           -3.0e38,
                           1e5,
                           16777216,
                           16777217,
                           4,
                           -4,
                           0.0078125,
                           0.015625,
                           3.14159265358979,
                           1.5707963267948966,
                           9.1,
                           -9.1};
  for (int e = -149; e <= 127; e += 3) {  // every few binades, both signs
    v.push_back(std::ldexp(1.0, e));
    v.push_back(-std::ldexp(1.3, e));
  }
  return v;
}

// Inputs of dtype t: every f16/bf16 value; for f32 a stride through all 2^32
// bit patterns (every exponent, NaN payloads, subnormals); for f64 random bit
// patterns and random values; each with the special values.
Raw sweep(DType t) {
  Raw r{t, {}};
  if (t == DType::f16 || t == DType::bf16) {
    for (uint32_t b = 0; b < 65536; b += kThin) r.push_bits(b);
  } else if (t == DType::f32) {
    for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 16411 * kThin) r.push_bits(b);
  } else {
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<double> u(-40, 40);
    for (int i = 0; i < 20000 / kThin; ++i) {
      r.push_bits(rng());
      r.push(u(rng));
    }
  }
  for (double v : specials()) r.push(v);
  return r;
}

// Runs `k` compiled (on the pool) and interpreted over the same inputs.
struct Both {
  Raw jit, ref;
};
Both run_both(const Kernel& k, const std::vector<Raw>& in) {
  const int64_t n = in[0].n();
  const DType t = k.args.back().dtype;
  Both r{{t, std::vector<char>(static_cast<size_t>(n) * dtype_size(t), 0)}, {t, {}}};
  r.ref = r.jit;
  std::vector<void*> pj, pr;
  for (const Raw& x : in) {
    pj.push_back(const_cast<char*>(x.bytes.data()));
    pr.push_back(const_cast<char*>(x.bytes.data()));
  }
  pj.push_back(r.jit.bytes.data());
  pr.push_back(r.ref.bytes.data());
  const std::vector<int64_t> sizes{n};
  get_kernel(k)->launch(pj.data(), sizes.data());
  interpret(k, 0, n, pr.data(), sizes.data());
  return r;
}

// Same bits, or both NaN (NaN payloads are the hardware's).
void expect_bit_exact(const Kernel& k, const std::vector<Raw>& in, const Both& r) {
  int bad = 0;
  for (int64_t i = 0; i < r.jit.n() && bad < 5; ++i) {
    if (r.jit.bits(i) == r.ref.bits(i)) continue;
    if (std::isnan(r.jit.value(i)) && std::isnan(r.ref.value(i))) continue;
    ++bad;
    std::string x;
    for (const Raw& a : in) x += str(" ", a.value(i), " (0x", std::hex, a.bits(i), std::dec, ")");
    ADD_FAILURE() << k.name << " at" << x << ": compiled " << r.jit.value(i) << ", interpreter "
                  << r.ref.value(i);
  }
}

// Compiled == interpreted, bit for bit, for every function in every float
// dtype (f64: both call libm).
TEST_F(MathExpand, CompiledEqualsInterpreterBitForBit) {
  SKIP_WITHOUT_LLVM();
  for (DType t : kFloats) {
    const Raw x = sweep(t);
    for (OpId op : kUnaryMath) {
      const Kernel k = math_kernel(op, t);
      expect_bit_exact(k, {x}, run_both(k, {x}));
    }
    // pow on a grid: bases from the sweep's specials and a log-spaced range,
    // exponents including integers (odd and even), halves, ±0, ±inf and NaN.
    Raw a{t, {}}, b{t, {}};
    std::vector<double> bases = specials(), exps = specials();
    for (int i = 0; i < 200; ++i) bases.push_back(std::exp(-20.0 + 40.0 * i / 199.0));
    for (int j = -40; j <= 40; ++j) exps.push_back(j / 2.0);
    for (size_t i = 0; i < bases.size(); i += kThin)
      for (double v : exps) {
        const double u = bases[i];
        a.push(u);
        b.push(v);
      }
    const Kernel k = math_kernel(OpId::pow, t);
    expect_bit_exact(k, {a, b}, run_both(k, {a, b}));
  }
}

// Distance in units in the last place between two floats of the same sign.
double ulps(float a, float b) {
  if (a == b) return 0;
  if (std::isnan(a) || std::isnan(b) || std::signbit(a) != std::signbit(b)) return 1e30;
  auto key = [](float v) { return static_cast<int64_t>(std::bit_cast<int32_t>(std::fabs(v))); };
  return static_cast<double>(std::llabs(key(a) - key(b)));
}

// The compiled f32 kernel of `op` on x (and y).
std::vector<float> compiled_f32(OpId op, const std::vector<float>& x,
                                const std::vector<float>& y = {}) {
  const Kernel k = math_kernel(op, DType::f32);
  std::vector<float> out(x.size());
  std::vector<void*> p{const_cast<float*>(x.data())};
  if (!y.empty()) p.push_back(const_cast<float*>(y.data()));
  p.push_back(out.data());
  const std::vector<int64_t> sizes{static_cast<int64_t>(x.size())};
  get_kernel(k)->launch(p.data(), sizes.data());
  return out;
}

// libm's `op` at T's precision: float for the comparisons with libm, double
// for the exact value (to within 2^-28 f32 ulp).
template <class T>
T libm(OpId op, T x) {
  switch (op) {
    case OpId::exp:
      return std::exp(x);
    case OpId::log:
      return std::log(x);
    case OpId::log1p:
      return std::log1p(x);
    case OpId::tanh:
      return std::tanh(x);
    case OpId::sigmoid:
      return static_cast<T>(1.0 / (1.0 + std::exp(-double{x})));
    case OpId::erf:
      return std::erf(x);
    case OpId::sin:
      return std::sin(x);
    default:
      return std::cos(x);
  }
}

float ref_f32(OpId op, float x) {
  return libm<float>(op, x);
}

// Each f32 function stays within 4 ulp of libm over dense sweeps of its range.
TEST_F(MathExpand, WithinFourUlpOfLibm) {
  SKIP_WITHOUT_LLVM();
  struct Case {
    OpId op;
    float lo, hi;
  };
  const Case cases[] = {
      {OpId::exp, -87.0f, 88.5f},     {OpId::exp, -1.0f, 1.0f},      {OpId::log, 1.2e-38f, 1e-30f},
      {OpId::log, 1e-3f, 10.0f},      {OpId::log, 0.5f, 2.0f},       {OpId::log, 1.0f, 3.0e38f},
      {OpId::tanh, -10.0f, 10.0f},    {OpId::tanh, -0.7f, 0.7f},     {OpId::tanh, -1e-3f, 1e-3f},
      {OpId::sigmoid, -80.0f, 80.0f}, {OpId::erf, -5.0f, 5.0f},      {OpId::erf, -1e-3f, 1e-3f},
      {OpId::erf, 0.9f, 1.1f},        {OpId::log1p, -0.999f, 10.0f}, {OpId::log1p, -1e-3f, 1e-3f},
      {OpId::log1p, 1.0f, 3.0e38f},   {OpId::sin, -10.0f, 10.0f},    {OpId::sin, -1e5f, 1e5f},
      {OpId::sin, 1e5f, 3.0e38f},     {OpId::sin, -1e-3f, 1e-3f},    {OpId::cos, -10.0f, 10.0f},
      {OpId::cos, -1e5f, 1e5f},       {OpId::cos, -3.0e38f, -1e5f},  {OpId::cos, 0.01f, 0.03f},
  };
  const int n = 1 << 20;
  for (const Case& c : cases) {
    std::vector<float> x(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i)
      x[static_cast<size_t>(i)] =
          c.lo + (c.hi - c.lo) * static_cast<float>(i) / static_cast<float>(n - 1);
    const std::vector<float> y = compiled_f32(c.op, x);
    double worst = 0;
    float at = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const float r = ref_f32(c.op, x[i]);
      if (!std::isfinite(r) || std::fabs(r) < std::numeric_limits<float>::min()) continue;
      const double u = ulps(y[i], r);
      if (u > worst) {
        worst = u;
        at = x[i];
      }
    }
    EXPECT_LE(worst, 4.0) << op_name(c.op) << " on [" << c.lo << ", " << c.hi << "]: " << worst
                          << " ulp at x = " << at;
  }
}

// Error of an f32 result in ulps of the exact value r (a double from libm,
// itself within 2^-28 f32 ulp): 0 for matching NaN/inf/zero (with its sign),
// 1e30 for a wrong special value. Subnormal results count in 2^-149 units.
double ulps_of_exact(float y, double r) {
  const float rf = static_cast<float>(r);
  if (std::isnan(r) || std::isnan(y)) return std::isnan(r) && std::isnan(y) ? 0 : 1e30;
  if (std::isinf(rf) || std::isinf(y) || rf == 0 || y == 0)
    return y == rf && std::signbit(y) == std::signbit(rf) ? 0
                                                          : (std::isinf(y) ? 1e30 : ulps(y, rf));
  int e = 0;
  std::frexp(std::fabs(r), &e);
  return std::fabs(static_cast<double>(y) - r) / std::ldexp(1.0, std::max(e - 24, -149));
}

// The f32-only erf, sin, cos and log1p (math/expansions.h) stay within the 2
// ulp they document, measured against the exact value: on a prime stride
// through every f32 bit pattern (every exponent, subnormals, NaN payloads, the
// huge sin/cos arguments of the exact reduction), every float next to the
// edge of sin/cos's f32 reduction (2^17), and the three floats nearest each
// multiple of pi/2 below it (where the reduced argument cancels most).
TEST_F(MathExpand, F32FunctionsWithinTwoUlpOfTheExactValue) {
  SKIP_WITHOUT_LLVM();
  std::vector<float> x;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 1021 * kThin)
    x.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
  float below = 131072.0f, above = 131072.0f;
  for (int k = 0; k < 4096; ++k) {
    below = std::nextafter(below, 0.0f);
    x.push_back(below);
    x.push_back(-above);
    above = std::nextafter(above, 1e9f);
  }
  for (int k = 1; k < 83444; k += kThin) {
    const float m = static_cast<float>(k * 1.5707963267948966);
    for (float v : {std::nextafter(m, 0.0f), m, std::nextafter(m, 1e9f)}) x.push_back(v);
  }
  for (double v : specials()) x.push_back(static_cast<float>(v));
  for (OpId op : {OpId::erf, OpId::sin, OpId::cos, OpId::log1p}) {
    const std::vector<float> y = compiled_f32(op, x);
    double worst = 0;
    float at = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double u = ulps_of_exact(y[i], libm<double>(op, x[i]));
      if (u > worst) {
        worst = u;
        at = x[i];
      }
    }
    EXPECT_LE(worst, 2.0) << op_name(op) << ": " << worst << " ulp at x = " << at << " ("
                          << std::hexfloat << at << std::defaultfloat << ")";
  }
}

// pow (float-float log and exp inside) within 2 ulp of the exact value on
// random pairs: any positive base with an exponent that keeps the result in
// range, bases near 1 with large exponents, negative bases with integer
// exponents, and random bit patterns for both (specials, NaN, huge, tiny).
TEST_F(MathExpand, PowWithinTwoUlpOfTheExactValue) {
  SKIP_WITHOUT_LLVM();
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<float> x, y;
  for (int i = 0; i < (1 << 20) / kThin; ++i) {
    switch (i % 4) {
      case 0:
        x.push_back(std::bit_cast<float>(bits(rng) & 0x7fffffffu));
        y.push_back(static_cast<float>(100 * u(rng) / std::log(double{x.back()})));
        break;
      case 1:
        x.push_back(static_cast<float>(std::exp(3 * u(rng))));
        y.push_back(static_cast<float>(500 * u(rng)));
        break;
      case 2:
        x.push_back(static_cast<float>(10 * u(rng)));
        y.push_back(static_cast<float>(std::round(30 * u(rng))));
        break;
      default:
        x.push_back(std::bit_cast<float>(bits(rng)));
        y.push_back(std::bit_cast<float>(bits(rng)));
    }
  }
  const std::vector<float> z = compiled_f32(OpId::pow, x, y);
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = ulps_of_exact(z[i], std::pow(double{x[i]}, double{y[i]}));
    if (e > worst) {
      worst = e;
      at = i;
    }
  }
  EXPECT_LE(worst, 2.0) << "pow(" << std::hexfloat << x[at] << ", " << y[at] << ") = " << z[at];
}

// inf, NaN and ±0 behave like libm (other values: within 2 ulp of it).
TEST_F(MathExpand, SpecialValuesLikeLibm) {
  SKIP_WITHOUT_LLVM();
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x{0.0f, -0.0f, inf, -inf, nan, 1000.0f, -1000.0f, -1.0f, -2.0f, 1e-40f};
  for (OpId op : kUnaryMath) {
    const std::vector<float> y = compiled_f32(op, x);
    for (size_t i = 0; i < x.size(); ++i) {
      const float r = ref_f32(op, x[i]);
      if (std::isnan(r)) {
        EXPECT_TRUE(std::isnan(y[i])) << op_name(op) << "(" << x[i] << ") = " << y[i];
      } else if (std::isfinite(r) && r != 0 && std::isfinite(x[i]) && x[i] != 0) {
        // An ordinary argument (sin(-1000)): within the 2 ulp of the f32 algorithms.
        EXPECT_LE(ulps(y[i], r), 2.0) << op_name(op) << "(" << x[i] << ") = " << y[i];
      } else {
        EXPECT_EQ(y[i], r) << op_name(op) << "(" << x[i] << ")";
        EXPECT_EQ(std::signbit(y[i]), std::signbit(r)) << op_name(op) << "(" << x[i] << ") sign";
      }
    }
  }
}

// pow within 4 ulp of libm on a dense grid of bases and exponents (including
// negative bases with integer exponents), and C99's special cases exactly.
TEST_F(MathExpand, PowMatchesLibm) {
  SKIP_WITHOUT_LLVM();
  std::vector<float> x, y;
  for (int i = 0; i < 1024; ++i)
    for (int j = 0; j < 512; ++j) {
      x.push_back(std::exp(-9.0f + 18.0f * static_cast<float>(i) / 1023.0f));
      y.push_back(-15.0f + 30.0f * static_cast<float>(j) / 511.0f);
    }
  for (int i = -300; i <= 300; ++i)
    for (int j = -20; j <= 20; ++j) {
      x.push_back(static_cast<float>(i) / 7.0f);
      y.push_back(static_cast<float>(j));
    }
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float special[] = {0.0f, -0.0f, 1.0f, -1.0f,  0.5f,        -0.5f,
                           2.0f, -2.0f, 3.0f, -3.0f,  2.5f,        -2.5f,
                           inf,  -inf,  nan,  1e-40f, 16777217.0f, -16777216.0f};
  const size_t first_special = x.size();
  for (float a : special)
    for (float b : special) {
      x.push_back(a);
      y.push_back(b);
    }
  const std::vector<float> z = compiled_f32(OpId::pow, x, y);
  double worst = 0;
  int bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float r = std::pow(x[i], y[i]);
    if (i >= first_special || !std::isfinite(r) || r == 0) {
      const bool same = std::isnan(r) ? std::isnan(z[i])
                                      : (z[i] == r && std::signbit(z[i]) == std::signbit(r)) ||
                                            (std::isfinite(r) && ulps(z[i], r) <= 4);
      if (!same && ++bad <= 10)
        ADD_FAILURE() << "pow(" << x[i] << ", " << y[i] << ") = " << z[i] << ", libm " << r;
      continue;
    }
    if (std::fabs(r) < std::numeric_limits<float>::min()) continue;
    const double u = ulps(z[i], r);
    if (u > worst) worst = u;
    if (u > 4 && ++bad <= 10)
      ADD_FAILURE() << "pow(" << x[i] << ", " << y[i] << ") = " << z[i] << ", libm " << r;
  }
  EXPECT_LE(worst, 4.0);
}

// exp (the hot function of softmax and sigmoid) is tighter than the 4 ulp
// budget: within 1 ulp of libm over its whole range (2^20 evenly spaced points,
// 2^16 points spread over [1e-30, 1] by magnitude, and every float next to the
// underflow and overflow edges), subnormal results included (rounded once), and
// its edges exact.
TEST_F(MathExpand, ExpWithinOneUlpIncludingSubnormals) {
  SKIP_WITHOUT_LLVM();
  std::vector<float> x;
  auto sweep_edge = [&x](float lo, float hi) {
    for (float v = lo; v < hi; v = std::nextafter(v, hi)) x.push_back(v);
  };
  for (int i = 0; i < (1 << 20); ++i)
    x.push_back(-104.0f + 193.0f * static_cast<float>(i) / (1 << 20));
  for (int i = 0; i < (1 << 16); ++i) {
    const float m = std::pow(10.0f, -30.0f + 30.0f * static_cast<float>(i) / (1 << 16));
    x.push_back(m);
    x.push_back(-m);
  }
  sweep_edge(-104.0f, -103.9f);
  sweep_edge(-87.4f, -87.3f);
  sweep_edge(88.6f, 88.8f);
  const std::vector<float> y = compiled_f32(OpId::exp, x);
  double worst = 0;
  float at = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double u = ulps(y[i], std::exp(x[i]));
    if (u > worst) {
      worst = u;
      at = x[i];
    }
  }
  EXPECT_LE(worst, 1.0) << "at x = " << at;
  const std::vector<float> edges = {88.72283172607421875f,
                                    88.72283935546875f,
                                    -87.336544f,
                                    -103.97207f,
                                    -103.972084f,
                                    -104.0f,
                                    -150.0f,
                                    1e-30f};
  const std::vector<float> e = compiled_f32(OpId::exp, edges);
  for (size_t i = 0; i < e.size(); ++i)
    EXPECT_EQ(e[i], std::exp(edges[i])) << "exp(" << edges[i] << ")";
}

// Loops over every expansion vectorize at the host's full width and call no
// function (no libm call is left to block the vectorizer).
TEST_F(MathExpand, LoopsStayVectorized) {
  SKIP_WITHOUT_LLVM();
  const jit::CpuInfo host = jit::host_cpu();
  const std::string vec = str("<", host.vector_bits / 32, " x float>");
  std::vector<OpId> ops(std::begin(kUnaryMath), std::end(kUnaryMath));
  ops.push_back(OpId::pow);
  for (OpId op : ops)
    for (DType t : {DType::f32, DType::bf16}) {
      const std::string ir = optimized_ir_for_cpu(math_kernel(op, t), host.cpu);
      EXPECT_NE(ir.find(vec), std::string::npos) << op_name(op) << " " << t;
      EXPECT_FALSE(std::regex_search(ir, std::regex(R"(call [^@]*@(?!llvm\.))")))
          << op_name(op) << " " << t << " calls a function";
    }
}

// The whole-kernel pass (what the GPU printer prints): no expandable op is
// left, the result verifies and prints its primitives, and it computes the
// original kernel's bits, compiled and interpreted.
TEST_F(MathExpand, ExpandedKernelComputesTheSameBits) {
  SKIP_WITHOUT_LLVM();
  for (DType t : {DType::f32, DType::f16, DType::f64}) {
    // softmax-like row kernel mixing every function, so reductions and stores are remapped.
    Builder b(2, str("expand_", dtype_name(t)));
    b.k.reassoc = false;  // the row max in index order: exact
    const int x = b.load(b.in(t, {true, true}));
    const int c = b.load(b.in(t, {false, true}));
    int acc = b.op(OpId::pow, t, b.op(OpId::abs, t, x), c);
    for (OpId op : kUnaryMath) acc = b.op(OpId::add, t, acc, b.op(op, t, b.op(OpId::mul, t, x, c)));
    const int mx = b.reduce(OpId::max, acc, 0, t);
    b.store(b.out(t, {true, true}), b.op(OpId::sub, t, acc, mx));
    b.store(b.out(t, {true, false}), mx);
    const Kernel& k = b.k;
    const Kernel e = expand_math(k);
    EXPECT_NO_THROW(verify(e));
    for (const Expr& x2 : e.exprs) {
      if (x2.kind == ExprKind::kOp && x2.a >= 0) {
        EXPECT_FALSE(has_math_expansion(x2.op, e.exprs[static_cast<size_t>(x2.a)].dtype))
            << op_name(x2.op) << " left in the expanded kernel";
      }
    }
    if (t != DType::f64) {
      EXPECT_NE(to_string(e).find(str("fma f32 %")), std::string::npos);
      EXPECT_NE(to_string(e).find("table i32 t0 %"), std::string::npos);
      EXPECT_GT(e.exprs.size(), k.exprs.size() + 100);
    } else {
      EXPECT_EQ(to_string(e), to_string(k));  // f64 calls libm: nothing to expand
    }
    const std::vector<int64_t> sizes{5, 37};
    std::mt19937 rng(3);
    auto pick = [](DType, std::mt19937& g) {
      return std::uniform_real_distribution<double>(0.05, 3)(g);  // no NaN
    };
    auto in = testing::make_buffers(k, sizes, rng, pick);
    auto runs = std::vector<std::vector<testing::Buffer>>(4, in);
    std::vector<std::vector<void*>> p;
    for (auto& r : runs) p.push_back(testing::pointers(r));
    get_kernel(k)->launch(p[0].data(), sizes.data());
    get_kernel(e)->launch(p[1].data(), sizes.data());
    interpret(k, 0, work_items(k, sizes.data()), p[2].data(), sizes.data());
    interpret(e, 0, work_items(e, sizes.data()), p[3].data(), sizes.data());
    for (size_t a = 2; a < 4; ++a)
      for (size_t r = 1; r < 4; ++r)
        EXPECT_EQ(runs[r][a].bytes, runs[0][a].bytes) << t << " run " << r << " arg " << a;
  }
}

// A pointwise kernel stays bit-exact with reassociation allowed: a division by
// a value that is the same along the row (here a per-row scale) is a division,
// not a multiplication by a reciprocal hoisted out of the loop.
TEST_F(MathExpand, PointwiseDivisionByARowValueIsExact) {
  SKIP_WITHOUT_LLVM();
  for (DType t : {DType::f32, DType::f64, DType::bf16}) {
    Builder b(2, str("rowdiv_", dtype_name(t)));
    ASSERT_TRUE(b.k.reassoc);
    const int x = b.load(b.in(t, {true, true}));
    const int r = b.load(b.in(t, {true, false}));
    b.store(b.out(t, {true, true}), b.op(OpId::div, t, x, b.op(OpId::exp, t, r)));
    const std::vector<int64_t> sizes{16, 1000};
    std::mt19937 rng(9);
    auto in = testing::make_buffers(b.k, sizes, rng, [](DType, std::mt19937& g) {
      return std::uniform_real_distribution<double>(-3, 3)(g);
    });
    auto ref = in;
    auto pj = testing::pointers(in), pr = testing::pointers(ref);
    get_kernel(b.k)->launch(pj.data(), sizes.data());
    interpret(b.k, 0, work_items(b.k, sizes.data()), pr.data(), sizes.data());
    int64_t differ = 0;
    for (int64_t i = 0; i < ref[2].numel; ++i) differ += in[2].get(i) != ref[2].get(i);
    EXPECT_EQ(differ, 0) << t << ": elements where compiled != interpreted";
  }
}

// Verifier errors name the bad primitive.
TEST_F(MathExpand, VerifierChecksPrimitives) {
  auto expect = [](const Kernel& k, const std::string& what) {
    try {
      verify(k);
      ADD_FAILURE() << "expected an error containing: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  {
    Builder b(1);
    const int x = b.load(b.in(DType::f32, {true}));
    b.store(b.out(DType::i64, {true}), b.push(Expr::make_prim(Prim::kBitcast, DType::i64, x)));
    expect(b.k, "bitcast from f32 to i64");
  }
  {
    Builder b(1);
    const int x = b.load(b.in(DType::i32, {true}));
    b.store(b.out(DType::i32, {true}),
            b.push(Expr::make_prim(Prim::kShl, DType::i32, x, b.cnst(DType::i32, 32))));
    expect(b.k, "shl needs a constant shift in [0, 32)");
  }
  {
    Builder b(1);
    const int x = b.load(b.in(DType::i32, {true}));
    b.store(b.out(DType::i32, {true}), b.push(Expr::make_prim(Prim::kFma, DType::i32, x, x, x)));
    expect(b.k, "fma yields f32 or f64, not i32");
  }
  {
    Builder b(1);
    const int x = b.load(b.in(DType::i32, {true}));
    Expr t = Expr::make_prim(Prim::kTable, DType::i32, x);
    t.arg = 7;
    b.store(b.out(DType::i32, {true}), b.push(t));
    expect(b.k, "no table t7");
  }
}

}  // namespace
}  // namespace kiln::kir
