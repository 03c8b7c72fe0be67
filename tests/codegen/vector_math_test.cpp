// The generated vector math: ulp error against libm over dense sweeps of the f32
// normal range, special values, and loops that call it still vectorize.
#include "kiln/vector_math_ir.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <regex>
#include <vector>

#include "kiln/error.h"
#include "kiln/llvm_jit.h"

namespace kiln::jit {
namespace {

using Kernel = void (*)(const float*, float*, long);

// A loop applying @fn to n floats, compiled with the vector math module.
Kernel compile_map(LlvmJit& jit, const std::string& fn, CompileOutputs* out = nullptr) {
  std::string ir = vector_math_ir() + str(R"(
define void @map(ptr noalias %x, ptr noalias %y, i64 %n) {
entry:
  %empty = icmp sle i64 %n, 0
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %px = getelementptr inbounds float, ptr %x, i64 %i
  %py = getelementptr inbounds float, ptr %y, i64 %i
  %v = load float, ptr %px
  %r = call float @)",
                                          fn, R"((float %v)
  store float %r, ptr %py
  %next = add nuw nsw i64 %i, 1
  %end = icmp eq i64 %next, %n
  br i1 %end, label %done, label %loop
done:
  ret void
}
)");
  return reinterpret_cast<Kernel>(jit.compile(ir, "map", out));
}

// True if the IR calls anything but an LLVM intrinsic (a libm call, say).
bool calls_a_function(const std::string& ir) {
  static const std::regex call(R"(call [^@]*@(?!llvm\.))");
  return std::regex_search(ir, call);
}

// Distance in units in the last place between two floats of the same sign.
double ulps(float a, float b) {
  if (a == b) return 0;
  if (std::isnan(a) || std::isnan(b) || std::signbit(a) != std::signbit(b)) return 1e30;
  auto key = [](float v) { return static_cast<int64_t>(std::bit_cast<int32_t>(std::fabs(v))); };
  return static_cast<double>(std::llabs(key(a) - key(b)));
}

// Max ulp error of `fn` against `ref` on n points spread over [lo, hi].
double max_ulp(Kernel k, float (*ref)(float), float lo, float hi, int n, float* worst) {
  std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    x[static_cast<size_t>(i)] = lo + (hi - lo) * static_cast<float>(i) / static_cast<float>(n - 1);
  k(x.data(), y.data(), n);
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float r = ref(x[i]);
    if (!std::isfinite(r) || std::fabs(r) < std::numeric_limits<float>::min()) continue;
    const double u = ulps(y[i], r);
    if (u > m) {
      m = u;
      *worst = x[i];
    }
  }
  return m;
}

float ref_exp(float x) {
  return std::exp(x);
}
float ref_log(float x) {
  return std::log(x);
}
float ref_tanh(float x) {
  return std::tanh(x);
}
float ref_sigmoid(float x) {
  return static_cast<float>(1.0 / (1.0 + std::exp(-double{x})));
}
float ref_erf(float x) {
  return std::erf(x);
}
float ref_log1p(float x) {
  return std::log1p(x);
}
float ref_sin(float x) {
  return std::sin(x);
}
float ref_cos(float x) {
  return std::cos(x);
}

using Kernel2 = void (*)(const float*, const float*, float*, long);

// A loop applying the two-argument @fn (pow) to n pairs.
Kernel2 compile_map2(LlvmJit& jit, const std::string& fn, CompileOutputs* out = nullptr) {
  std::string ir = vector_math_ir() + str(R"(
define void @map2(ptr noalias %x, ptr noalias %y, ptr noalias %z, i64 %n) {
entry:
  %empty = icmp sle i64 %n, 0
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %px = getelementptr inbounds float, ptr %x, i64 %i
  %py = getelementptr inbounds float, ptr %y, i64 %i
  %pz = getelementptr inbounds float, ptr %z, i64 %i
  %a = load float, ptr %px
  %b = load float, ptr %py
  %r = call float @)",
                                          fn, R"((float %a, float %b)
  store float %r, ptr %pz
  %next = add nuw nsw i64 %i, 1
  %end = icmp eq i64 %next, %n
  br i1 %end, label %done, label %loop
done:
  ret void
}
)");
  return reinterpret_cast<Kernel2>(jit.compile(ir, "map2", out));
}

#define SKIP_WITHOUT_LLVM() \
  if (!available()) GTEST_SKIP() << "built without LLVM 19 (the backend is a stub)"

struct Case {
  const char* fn;
  float (*ref)(float);
  float lo, hi;
};

// Each function stays within 4 ulp of libm over a dense sweep of its range.
TEST(VectorMath, WithinFourUlpOfLibm) {
  SKIP_WITHOUT_LLVM();
  LlvmJit jit;
  const Case cases[] = {
      {"kiln_expf", ref_exp, -87.0f, 88.5f},     {"kiln_expf", ref_exp, -1.0f, 1.0f},
      {"kiln_logf", ref_log, 1.2e-38f, 1e-30f},  {"kiln_logf", ref_log, 1e-3f, 10.0f},
      {"kiln_logf", ref_log, 0.5f, 2.0f},        {"kiln_logf", ref_log, 1.0f, 3.0e38f},
      {"kiln_tanhf", ref_tanh, -10.0f, 10.0f},   {"kiln_tanhf", ref_tanh, -0.7f, 0.7f},
      {"kiln_tanhf", ref_tanh, -1e-3f, 1e-3f},   {"kiln_sigmoidf", ref_sigmoid, -80.0f, 80.0f},
      {"kiln_erff", ref_erf, -5.0f, 5.0f},       {"kiln_erff", ref_erf, -1e-3f, 1e-3f},
      {"kiln_erff", ref_erf, 0.9f, 1.1f},        {"kiln_log1pf", ref_log1p, -0.999f, 10.0f},
      {"kiln_log1pf", ref_log1p, -1e-3f, 1e-3f}, {"kiln_log1pf", ref_log1p, 1.0f, 3.0e38f},
      {"kiln_sinf", ref_sin, -10.0f, 10.0f},     {"kiln_sinf", ref_sin, -1e5f, 1e5f},
      {"kiln_sinf", ref_sin, 1e5f, 3.0e38f},     {"kiln_sinf", ref_sin, -1e-3f, 1e-3f},
      {"kiln_cosf", ref_cos, -10.0f, 10.0f},     {"kiln_cosf", ref_cos, -1e5f, 1e5f},
      {"kiln_cosf", ref_cos, -3.0e38f, -1e5f},   {"kiln_cosf", ref_cos, 0.01f, 0.03f},
  };
  for (const Case& c : cases) {
    Kernel k = compile_map(jit, c.fn);
    float worst = 0;
    const double u = max_ulp(k, c.ref, c.lo, c.hi, 1 << 20, &worst);
    EXPECT_LE(u, 4.0) << c.fn << " on [" << c.lo << ", " << c.hi << "]: " << u
                      << " ulp at x = " << worst;
  }
}

// inf, NaN and ±0 behave like libm.
TEST(VectorMath, SpecialValues) {
  SKIP_WITHOUT_LLVM();
  LlvmJit jit;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x{0.0f, -0.0f, inf, -inf, nan, 1000.0f, -1000.0f, -1.0f, -2.0f, 1e-40f};
  using Ref = float (*)(float);
  const std::pair<const char*, Ref> fns[] = {
      {"kiln_expf", ref_exp},         {"kiln_logf", ref_log}, {"kiln_tanhf", ref_tanh},
      {"kiln_sigmoidf", ref_sigmoid}, {"kiln_erff", ref_erf}, {"kiln_log1pf", ref_log1p},
      {"kiln_sinf", ref_sin},         {"kiln_cosf", ref_cos}};
  for (auto [fn, ref] : fns) {
    Kernel k = compile_map(jit, fn);
    std::vector<float> y(x.size());
    k(x.data(), y.data(), static_cast<long>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      const float r = ref(x[i]);
      if (std::isnan(r)) {
        EXPECT_TRUE(std::isnan(y[i])) << fn << "(" << x[i] << ") = " << y[i];
      } else {
        EXPECT_EQ(y[i], r) << fn << "(" << x[i] << ")";
        EXPECT_EQ(std::signbit(y[i]), std::signbit(r)) << fn << "(" << x[i] << ") sign";
      }
    }
  }
}

// A loop calling the functions vectorizes (no scalar libm call left in it).
TEST(VectorMath, LoopsStayVectorized) {
  SKIP_WITHOUT_LLVM();
  LlvmJit jit;
  for (const char* fn : {"kiln_expf", "kiln_logf", "kiln_tanhf", "kiln_sigmoidf", "kiln_erff",
                         "kiln_log1pf", "kiln_sinf", "kiln_cosf"}) {
    CompileOutputs out;
    compile_map(jit, fn, &out);
    EXPECT_NE(out.optimized_ir.find("x float>"), std::string::npos) << fn;
    EXPECT_FALSE(calls_a_function(out.optimized_ir)) << fn;
  }
  CompileOutputs out;
  compile_map2(jit, "kiln_powf", &out);
  EXPECT_NE(out.optimized_ir.find("x float>"), std::string::npos);
  EXPECT_FALSE(calls_a_function(out.optimized_ir));
}

// pow within 4 ulp of libm on a dense grid of bases and exponents (including
// negative bases with integer exponents), and C99's special cases exactly.
TEST(VectorMath, PowMatchesLibm) {
  SKIP_WITHOUT_LLVM();
  LlvmJit jit;
  Kernel2 k = compile_map2(jit, "kiln_powf");
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
  std::vector<float> z(x.size());
  k(x.data(), y.data(), z.data(), static_cast<long>(x.size()));
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
TEST(VectorMath, ExpWithinOneUlpIncludingSubnormals) {
  SKIP_WITHOUT_LLVM();
  LlvmJit jit;
  Kernel k = compile_map(jit, "kiln_expf");
  std::vector<float> x;
  auto sweep = [&x](float lo, float hi, int stride) {
    for (float v = lo; v < hi;) {
      x.push_back(v);
      for (int s = 0; s < stride; ++s) v = std::nextafter(v, hi);
    }
  };
  for (int i = 0; i < (1 << 20); ++i)
    x.push_back(-104.0f + 193.0f * static_cast<float>(i) / (1 << 20));
  for (int i = 0; i < (1 << 16); ++i) {
    const float m = std::pow(10.0f, -30.0f + 30.0f * static_cast<float>(i) / (1 << 16));
    x.push_back(m);
    x.push_back(-m);
  }
  sweep(-104.0f, -103.9f, 1);
  sweep(-87.4f, -87.3f, 1);
  sweep(88.6f, 88.8f, 1);
  std::vector<float> y(x.size());
  k(x.data(), y.data(), static_cast<long>(x.size()));
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
  const float edges[] = {88.72283172607421875f,
                         88.72283935546875f,
                         -87.336544f,
                         -103.97207f,
                         -103.972084f,
                         -104.0f,
                         -150.0f,
                         1e-30f};
  std::vector<float> e(std::size(edges));
  k(edges, e.data(), static_cast<long>(e.size()));
  for (size_t i = 0; i < e.size(); ++i)
    EXPECT_EQ(e[i], std::exp(edges[i])) << "exp(" << edges[i] << ")";
}

}  // namespace
}  // namespace kiln::jit
