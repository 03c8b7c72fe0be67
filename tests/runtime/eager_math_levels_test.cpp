// The eager SIMD loops' CPU levels (runtime/src/ops/cpu_level.h): every level
// this CPU runs gives the same bits (the loops are one expansion at 4, 8 or
// 16 lanes) for each transcendental, pow and the fused GELU's erf form, on
// f32/f16/bf16 sweeps and strided inputs, and for the fused softmax,
// log_softmax, layer_norm and batch_norm kernels (f32, f64), forward and
// backward; KILN_CPU_LEVEL's values and errors.
// (tests/codegen/eager_math_test.cpp compares every level with the compiled
// path.)
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "ops/cpu_level.h"
#include "ops/fused_kernels.h"
#include "ops/gelu_const.h"
#include "ops/vec_math.h"
#include "runtime/cpu_levels.h"
#include "test_util.h"

using namespace kiln;
namespace vec = kiln::ops::vec;

namespace {

#ifdef KILN_TEST_SANITIZED
constexpr uint64_t kThin = 8;
#else
constexpr uint64_t kThin = 1;
#endif

// A prime stride through every f32 bit pattern (NaNs, subnormals, huge sin/cos
// arguments), as a tensor of `t`.
Tensor sweep(DType t) {
  std::vector<float> v;
  if (t == DType::f32) {
    for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 16411 * kThin)
      v.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
  } else {  // every 16-bit pattern, as f16 or bf16
    for (uint32_t b = 0; b < 65536; b += kThin) {
      const uint16_t h = static_cast<uint16_t>(b);
      v.push_back(t == DType::bf16 ? std::bit_cast<float>(uint32_t{h} << 16)
                                   : static_cast<float>(std::bit_cast<Half>(h)));
    }
  }
  return from_vector(v, {static_cast<int64_t>(v.size())}).to(t);
}

std::vector<uint32_t> bits(const Tensor& y) {
  const std::vector<float> f = y.to(DType::f32).contiguous().to_vector<float>();
  std::vector<uint32_t> out;
  for (float x : f) out.push_back(std::isnan(x) ? 0x7fc00000u : std::bit_cast<uint32_t>(x));
  return out;  // NaN payloads are the hardware's: any NaN counts as one
}

// compute() at every level equals compute() at the lowest, bit for bit.
void expect_same_bits_at_every_level(const std::string& what,
                                     const std::function<std::vector<uint64_t>()>& compute) {
  std::vector<uint64_t> first;
  std::string first_level;
  kiln::testing::at_every_cpu_level([&](const std::string& level) {
    const std::vector<uint64_t> b = compute();
    if (first_level.empty()) {
      first = b;
      first_level = level;
      return;
    }
    ASSERT_EQ(b.size(), first.size()) << what;
    int bad = 0;
    for (size_t i = 0; i < b.size() && bad < 5; ++i)
      if (b[i] != first[i]) {
        ++bad;
        ADD_FAILURE() << what << " element " << i << ": 0x" << std::hex << b[i] << " at " << level
                      << ", 0x" << first[i] << " at " << first_level;
      }
  });
}

// f() at every level equals f() at the lowest, bit for bit.
void expect_same_at_every_level(const std::string& what, const std::function<Tensor()>& f) {
  expect_same_bits_at_every_level(what, [&] {
    const std::vector<uint32_t> b = bits(f());
    return std::vector<uint64_t>(b.begin(), b.end());
  });
}

const std::vector<std::pair<const char*, Tensor (*)(const Tensor&)>> kUnary = {
    {"exp", exp},         {"log", log}, {"log1p", log1p}, {"tanh", tanh},
    {"sigmoid", sigmoid}, {"erf", erf}, {"sin", sin},     {"cos", cos}};

TEST(EagerMathLevels, EveryLevelGivesTheSameBits) {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    const Tensor x = sweep(t);
    const Tensor strided = x.slice(0, 1, std::numeric_limits<int64_t>::max(), 3);
    const Tensor y = flip(x, {0});  // pow's exponents: the sweep reversed
    for (const auto& [name, f] : kUnary) {
      expect_same_at_every_level(str(t, " ", name), [&, f = f] { return f(x); });
      expect_same_at_every_level(str(t, " ", name, " strided"), [&, f = f] { return f(strided); });
    }
    expect_same_at_every_level(str(t, " pow"), [&] { return pow(x, y); });
    expect_same_at_every_level(str(t, " pow broadcast"), [&] { return x.pow(2.5); });
  }
}

TEST(EagerMathLevels, FusedGeluErfGivesTheSameBits) {
  // The fused kernel's erf form, forward and backward (f32), on a sweep with
  // its infinities and NaNs kept out of the backward's products.
  const Tensor x = sweep(DType::f32);
  expect_same_at_every_level("gelu", [&] { return gelu(x); });
  const Tensor xs = clamp(where(isfinite(x), x, 0.0), -1e4, 1e4);
  const Tensor w = flip(xs, {0}) * 0.5;
  expect_same_at_every_level("gelu backward", [&] {
    Tensor a = xs.detach().requires_grad_();
    sum(gelu(a) * w).backward();
    return a.grad();
  });
}

// The fused GELU (tanh form) and SiLU, forward and backward (f32), at every
// level, against their per-element formulas with the shared sigmoid (what
// the fused kernels computed before they ran the per-level loops).
TEST(EagerMathLevels, FusedGeluTanhAndSiluKeepTheirPerElementBits) {
  using K = ops::fused::GeluConst<float>;
  auto sig = [](float z) { return ops::vec::sigmoid<float>(z); };
  auto gelu_tanh = [&](float v) { return v * sig((v + v * v * v * K::c) * K::k2); };
  auto gelu_tanh_grad = [&](float v, float g) {
    const float s = sig((v + v * v * v * K::c) * K::k2);
    const float dz = K::k2 * (1.0f + 3.0f * K::c * v * v);
    return g * (s + v * s * (1.0f - s) * dz);
  };
  auto silu_ref = [&](float v) { return v * sig(v); };
  auto silu_grad = [&](float v, float g) {
    const float s = sig(v);
    return g * (s * (1.0f + v * (1.0f - s)));
  };
  const Tensor sweep_x = sweep(DType::f32);
  const Tensor x = clamp(where(isfinite(sweep_x), sweep_x, 0.0), -1e4, 1e4);
  const Tensor w = flip(x, {0}) * 0.5;
  const std::vector<float> xv = x.to_vector<float>(), wv = w.to_vector<float>();
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&)> f;
    std::function<float(float, float)> want;  // (x, upstream gradient)
    bool grad;
  };
  const Case cases[] = {
      {"gelu tanh", [](const Tensor& a) { return gelu(a, "tanh"); },
       [&](float v, float) { return gelu_tanh(v); }, false},
      {"gelu tanh backward", [](const Tensor& a) { return gelu(a, "tanh"); }, gelu_tanh_grad, true},
      {"silu", [](const Tensor& a) { return kiln::silu(a); },
       [&](float v, float) { return silu_ref(v); }, false},
      {"silu backward", [](const Tensor& a) { return kiln::silu(a); }, silu_grad, true},
  };
  for (const Case& c : cases) {
    kiln::testing::at_every_cpu_level([&](const std::string&) {
      Tensor y;
      if (c.grad) {
        Tensor a = x.detach().requires_grad_();
        sum(c.f(a) * w).backward();
        y = a.grad();
      } else {
        y = c.f(x);
      }
      const std::vector<float> got = y.to_vector<float>();
      int bad = 0;
      for (size_t i = 0; i < got.size() && bad < 5; ++i) {
        const float want = c.want(xv[i], wv[i]);
        if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want) &&
            !(std::isnan(got[i]) && std::isnan(want))) {
          ++bad;
          ADD_FAILURE() << c.name << " at x = " << xv[i] << ": " << got[i] << ", per element "
                        << want;
        }
      }
    });
  }
}

// The fused row kernels' outputs (ops/fused_kernels.h, ops/simd/rows.h) on
// rows of lengths around the 16 lanes and longer, with -inf, NaN and huge
// elements, as bits of T (any NaN counts as one).
template <typename T>
std::vector<uint64_t> row_kernel_bits(uint32_t seed) {
  namespace fused = kiln::ops::fused;
  std::vector<uint64_t> out;
  auto put = [&](const std::vector<T>& v) {
    for (T x : v) {
      if (std::isnan(x))
        out.push_back(1);
      else if constexpr (sizeof(T) == 4)
        out.push_back(std::bit_cast<uint32_t>(x));
      else
        out.push_back(std::bit_cast<uint64_t>(x));
    }
  };
  uint32_t state = seed;
  auto rnd = [&] {  // in [-4, 4), a 24-bit lattice
    state = state * 1664525u + 1013904223u;
    return static_cast<T>(static_cast<int32_t>(state >> 8) - (1 << 23)) / static_cast<T>(1 << 21);
  };
  constexpr T kInf = std::numeric_limits<T>::infinity();
  for (int64_t n : {1, 15, 16, 17, 33, 1000, 4099}) {
    const int64_t rows = 6;
    std::vector<T> x(rows * n), g(rows * n), w(n), b(n);
    for (T& v : x) v = rnd();
    for (T& v : g) v = rnd();
    for (T& v : w) v = rnd();
    for (T& v : b) v = rnd();
    std::vector<T> xs = x;  // softmax rows: all -inf, one NaN, one -inf, huge
    for (int64_t i = 0; i < n; ++i) xs[i] = -kInf;
    xs[n + n / 2] = std::numeric_limits<T>::quiet_NaN();
    xs[2 * n + n / 3] = -kInf;
    for (int64_t i = 0; i < n; ++i) xs[3 * n + i] *= T(1e4);
    std::vector<T> y(rows * n), gx(rows * n);
    for (bool log : {false, true}) {
      for (bool safe : {false, true}) {
        if (log && safe) continue;
        fused::softmax_fwd<T>(xs.data(), y.data(), rows, n, log, safe);
        put(y);
      }
      fused::softmax_fwd<T>(x.data(), y.data(), rows, n, log, false);
      fused::softmax_bwd<T>(y.data(), g.data(), gx.data(), rows, n, log);
      put(gx);
    }
    std::vector<T> mean(rows), rstd(rows), gw(n), gb(n);
    for (int affine = 0; affine < 4; ++affine) {
      const T* wp = affine & 1 ? w.data() : nullptr;
      const T* bp = affine & 2 ? b.data() : nullptr;
      fused::layer_norm_fwd<T>(x.data(), wp, bp, y.data(), mean.data(), rstd.data(), rows, n,
                               T(1e-5));
      put(y);
      put(mean);
      put(rstd);
      fused::layer_norm_bwd<T>(x.data(), g.data(), wp, mean.data(), rstd.data(), gx.data(),
                               gw.data(), gb.data(), rows, n);
      put(gx);
      put(gw);
      put(gb);
    }
    // batch_norm over [rows / 2, 2, n]: each channel's N rows of n.
    const int64_t N = rows / 2, C = 2;
    std::vector<T> bw = {rnd(), rnd()}, bb = {rnd(), rnd()};
    std::vector<T> bmean(C), bvar(C), brstd(C), bgw(C), bgb(C);
    for (bool batch_stats : {true, false}) {
      fused::batch_norm_fwd<T>(x.data(), bw.data(), bb.data(), y.data(), bmean.data(), bvar.data(),
                               brstd.data(), N, C, n, T(1e-5), batch_stats);
      put(y);
      put(bmean);
      put(bvar);
      fused::batch_norm_bwd<T>(x.data(), g.data(), bw.data(), bmean.data(), brstd.data(), gx.data(),
                               bgw.data(), bgb.data(), N, C, n, batch_stats);
      put(gx);
      put(bgw);
      put(bgb);
    }
  }
  return out;
}

TEST(EagerMathLevels, FusedRowKernelsGiveTheSameBits) {
  // Failed with GCC contracting a * b + c into fma at v3 and v4 only.
  expect_same_bits_at_every_level("f32", [] { return row_kernel_bits<float>(7); });
  expect_same_bits_at_every_level("f64", [] { return row_kernel_bits<double>(11); });
}

TEST(EagerMathLevels, KilnCpuLevelValues) {
#if defined(__x86_64__) || defined(_M_X64)
  using L = vec::CpuLevel;
  const std::vector<L> v3_cpu = {L::kV2, L::kV3};  // an AVX2 host
  EXPECT_EQ(vec::parse_cpu_level("native", v3_cpu), L::kV3);
  EXPECT_EQ(vec::parse_cpu_level("", v3_cpu), L::kV3);
  EXPECT_EQ(vec::parse_cpu_level("v2", v3_cpu), L::kV2);
  EXPECT_EQ(vec::parse_cpu_level("v3", v3_cpu), L::kV3);
  EXPECT_EQ(vec::parse_cpu_level("v4", {L::kV2, L::kV3, L::kV4}), L::kV4);
  // Above the CPU: an error naming the variable, the value and the CPU's best.
  kiln::testing::expect_error([&] { vec::parse_cpu_level("v4", v3_cpu); },
                              {"KILN_CPU_LEVEL=v4", "runs up to v3", "v2|v3|v4|native"});
  kiln::testing::expect_error([&] { vec::parse_cpu_level("avx2", v3_cpu); },
                              {"KILN_CPU_LEVEL=avx2", "not a level", "v2|v3|v4|native"});
  kiln::testing::expect_error([&] { vec::parse_cpu_level("native", {}); }, {"x86-64-v2"});
#else
  EXPECT_EQ(vec::parse_cpu_level("native", {vec::CpuLevel::kNative}), vec::CpuLevel::kNative);
  kiln::testing::expect_error([&] { vec::parse_cpu_level("v3", {vec::CpuLevel::kNative}); },
                              {"KILN_CPU_LEVEL=v3"});
#endif
}

TEST(EagerMathLevels, DefaultIsTheBestLevelAndOthersAreErrors) {
  const std::vector<vec::CpuLevel> levels = vec::cpu_levels();
  ASSERT_FALSE(levels.empty());
  if (std::getenv("KILN_CPU_LEVEL") == nullptr) {
    EXPECT_EQ(vec::cpu_level(), levels.back());
  }
#if defined(__x86_64__) || defined(_M_X64)
  // A level this CPU lacks is an error, never an illegal instruction.
  for (vec::CpuLevel l : {vec::CpuLevel::kV2, vec::CpuLevel::kV3, vec::CpuLevel::kV4}) {
    if (std::find(levels.begin(), levels.end(), l) == levels.end())
      kiln::testing::expect_error([&] { vec::set_cpu_level_for_testing(l); }, {"runs up to"});
  }
#endif
}

}  // namespace
