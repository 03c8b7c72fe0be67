// Eager transcendentals (runtime/src/ops/vec_math.h) against the compiled
// path: exp, log, log1p, tanh, sigmoid, erf, sin, cos and pow in f32, f16 and
// bf16 run the same expansions (runtime/src/math/expansions.h) in both, so
// eager results equal compile()'s (interpreted kernels and LLVM) bit for bit
// on dense sweeps: a prime stride through all 2^32 f32 bit patterns (every
// exponent, subnormals, NaN payloads, huge arguments of sin/cos), every
// f16/bf16 value, special values, and strided (non-contiguous) inputs; the
// eager side at every x86-64 level of its SIMD loops that this CPU runs (v2,
// v3, v4: one set of bits at every width).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kernels/llvm/llvm_jit.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "kiln/op_table.h"
#include "runtime/cpu_levels.h"

namespace kiln {
namespace {

#ifdef KILN_TEST_SANITIZED
constexpr uint64_t kThin = 8;  // sparser sweeps under ASan
#else
constexpr uint64_t kThin = 1;
#endif

constexpr OpId kUnaryMath[] = {OpId::exp,     OpId::log, OpId::log1p, OpId::tanh,
                               OpId::sigmoid, OpId::erf, OpId::sin,   OpId::cos};

// Special values and range edges, as floats.
std::vector<float> specials() {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> v = {0.0f,
                          -0.0f,
                          inf,
                          -inf,
                          nan,
                          -nan,
                          1.0f,
                          -1.0f,
                          2.0f,
                          -2.0f,
                          0.5f,
                          -0.5f,
                          1e-40f,
                          -1e-40f,
                          1e-45f,
                          -1e-45f,
                          1.17549435e-38f,
                          3.4e38f,
                          -3.4e38f,
                          88.7228f,
                          88.72284f,
                          89.0f,
                          -87.33654f,
                          -103.97f,
                          -104.0f,
                          -150.0f,
                          0.625f,
                          -0.625f,
                          16777216.0f,
                          1e5f,
                          -1e5f,
                          1e30f,
                          3.14159265f,
                          1.57079633f,
                          0.9999999f};
  for (int e = -149; e <= 127; e += 3) {
    v.push_back(std::ldexp(1.0f, e));
    v.push_back(-std::ldexp(1.3f, e));
  }
  return v;
}

// A prime stride through every f32 bit pattern, then the specials.
std::vector<float> f32_sweep() {
  std::vector<float> v;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 16411 * kThin)
    v.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
  for (float s : specials()) v.push_back(s);
  return v;
}

// Every f16 or bf16 value (as floats, exact), then the specials rounded to it.
std::vector<float> half_sweep(DType t) {
  std::vector<float> bits;
  for (uint32_t b = 0; b < 65536; b += kThin) {
    if (t == DType::f16) {
      Half h;
      h.bits = static_cast<uint16_t>(b);
      bits.push_back(static_cast<float>(h));
    } else {
      BFloat16 h;
      h.bits = static_cast<uint16_t>(b);
      bits.push_back(static_cast<float>(h));
    }
  }
  for (float s : specials()) bits.push_back(s);
  return bits;
}

// The elements of `y` (any float dtype) as floats.
std::vector<float> values(const Tensor& y) {
  return y.to(DType::f32).contiguous().to_vector<float>();
}

// Same bits, or both NaN (NaN payloads are the hardware's).
void expect_same(const std::string& what, const Tensor& x, const std::vector<float>& a,
                 const std::vector<float>& b, const Tensor* x2 = nullptr) {
  ASSERT_EQ(a.size(), b.size()) << what;
  const std::vector<float> in = values(x);
  const std::vector<float> in2 = x2 ? values(*x2) : std::vector<float>{};
  int bad = 0;
  for (size_t i = 0; i < a.size() && bad < 5; ++i) {
    if (std::bit_cast<uint32_t>(a[i]) == std::bit_cast<uint32_t>(b[i])) continue;
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    ++bad;
    ADD_FAILURE() << what << " at x = " << in[i] << " (0x" << std::hex
                  << std::bit_cast<uint32_t>(in[i]) << std::dec << ")"
                  << (x2 ? str(", y = ", in2[i]) : std::string()) << ": eager " << a[i]
                  << ", compiled " << b[i];
  }
}

Tensor apply(OpId op, const Tensor& x) {
  switch (op) {
    case OpId::exp:
      return exp(x);
    case OpId::log:
      return log(x);
    case OpId::log1p:
      return log1p(x);
    case OpId::tanh:
      return tanh(x);
    case OpId::sigmoid:
      return sigmoid(x);
    case OpId::erf:
      return erf(x);
    case OpId::sin:
      return sin(x);
    default:
      return cos(x);
  }
}

// f() evaluated eagerly at every SIMD level this CPU runs: (level, values).
template <class F>
std::vector<std::pair<std::string, std::vector<float>>> eager_at_levels(F&& f) {
  std::vector<std::pair<std::string, std::vector<float>>> out;
  testing::at_every_cpu_level(
      [&](const std::string& level) { out.emplace_back(level, values(f())); });
  return out;
}

// eager op(x) at every level == compile(op)(x), interpreted and with LLVM (where built).
void check_unary(OpId op, const Tensor& x, const std::string& what) {
  const auto eager = eager_at_levels([&] { return apply(op, x); });
  for (bool interp : {true, false}) {
    if (!interp && !jit::available()) continue;
    auto f = compile([op](const Tensor& a) { return apply(op, a); },
                     {.warmup = 0, .interpret_kernels = interp});
    const std::vector<float> compiled = values(f(x));
    for (const auto& [level, e] : eager)
      expect_same(str(what, " ", op_name(op), " at ", level, interp ? " (interpreter)" : " (LLVM)"),
                  x, e, compiled);
  }
}

void check_pow(const Tensor& x, const Tensor& y, const std::string& what) {
  const auto eager = eager_at_levels([&] { return pow(x, y); });
  const Dims shape = broadcast_shapes(x.shape(), y.shape(), "pow");
  const Tensor xs = x.expand(shape), ys = y.expand(shape);  // for the messages
  for (bool interp : {true, false}) {
    if (!interp && !jit::available()) continue;
    auto f = compile([](const Tensor& a, const Tensor& b) { return pow(a, b); },
                     {.warmup = 0, .interpret_kernels = interp});
    const std::vector<float> compiled = values(f(x, y));
    for (const auto& [level, e] : eager)
      expect_same(str(what, " pow at ", level, interp ? " (interpreter)" : " (LLVM)"), xs, e,
                  compiled, &ys);
  }
}

TEST(EagerMath, EqualsCompiledBitForBitOnDenseSweeps) {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    const std::vector<float> v = t == DType::f32 ? f32_sweep() : half_sweep(t);
    const Tensor x = from_vector(v, {static_cast<int64_t>(v.size())}).to(t);
    for (OpId op : kUnaryMath) check_unary(op, x, str(t));
  }
}

TEST(EagerMath, EqualsCompiledOnStridedInputs) {
  // Every other element of the sweep (a non-contiguous view), and a transposed matrix.
  const std::vector<float> v = f32_sweep();
  const Tensor all = from_vector(v, {static_cast<int64_t>(v.size())});
  const Tensor strided = all.slice(0, 0, std::numeric_limits<int64_t>::max(), 3);
  // 64 rows of up to 1000 (the sweep is 8x sparser under ASan).
  const int64_t cols = std::min<int64_t>(1000, static_cast<int64_t>(v.size()) / 64);
  const Tensor t = all.slice(0, 0, 64 * cols).reshape({64, cols}).t();
  for (OpId op : kUnaryMath) {
    check_unary(op, strided, "strided");
    check_unary(op, t, "transposed");
  }
}

TEST(EagerMath, SinCosWithHugeArgumentsInSomeLanes) {
  // Eager sin/cos run the exact reduction only for SIMD vectors holding an
  // argument of 2^17 or more: runs of small arguments with one huge (or inf,
  // NaN) argument at every position of a 64-element block, and blocks with
  // none, still equal the compiled kernels (which reduce every lane both ways).
  const float odd[] = {131072.0f,
                       -131072.0f,
                       3.0e38f,
                       1e6f,
                       std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN(),
                       131071.99f};
  std::vector<float> v;
  for (int block = 0; block < 64 * 7; ++block)
    for (int k = 0; k < 64; ++k)
      v.push_back(k == block % 64 && block % 2 == 0
                      ? odd[block % 7]
                      : 0.37f * static_cast<float>(k - 30) + 0.01f * block);
  const Tensor x = from_vector(v, {static_cast<int64_t>(v.size())});
  for (OpId op : {OpId::sin, OpId::cos}) check_unary(op, x, "mixed lanes");
}

TEST(EagerMath, PowEqualsCompiledOnAGrid) {
  // Bases: the specials and a log-spaced range of both signs; exponents: the
  // specials, integers (odd and even) and halves; as a full grid (contiguous)
  // and with a broadcast exponent.
  std::vector<float> bases = specials(), exps = specials();
  for (int i = 0; i < 200; ++i) {
    const float b = std::exp(-20.0f + 40.0f * static_cast<float>(i) / 199.0f);
    bases.push_back(b);
    bases.push_back(-b);
  }
  for (int j = -40; j <= 40; ++j) exps.push_back(static_cast<float>(j) / 2.0f);
  std::vector<float> a, b;
  for (size_t i = 0; i < bases.size(); i += kThin)
    for (float e : exps) {
      a.push_back(bases[i]);
      b.push_back(e);
    }
  const int64_t n = static_cast<int64_t>(a.size());
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    check_pow(from_vector(a, {n}).to(t), from_vector(b, {n}).to(t), str(t));
    const Tensor base = from_vector(bases, {static_cast<int64_t>(bases.size())}).to(t);
    check_pow(base, scalar_tensor(2.5, t), str(t, " broadcast exponent"));
    // Every pair as a broadcast grid ([n, 1] ^ [1, m]): each run of the eager
    // loop has one operand broadcast (a regression: a broadcast -0 became +0).
    const Tensor col = base.reshape({-1, 1});
    const Tensor row = from_vector(exps, {1, static_cast<int64_t>(exps.size())}).to(t);
    check_pow(col, row, str(t, " grid"));
    check_pow(row.reshape({-1, 1}), col.reshape({1, -1}), str(t, " grid (transposed)"));
  }
}

}  // namespace
}  // namespace kiln
