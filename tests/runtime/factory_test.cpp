// Tests of the factory family: full/arange/rand ops, the public factory
// functions, their dtype rules and errors, and Philox random numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "common/error_of.h"
#include "kiln/kiln.h"
#include "symbolic_recorder.h"

using namespace kiln;

namespace {

using kiln::testing::error_of;

#define EXPECT_ERROR_HAS(stmt, ...)                                                               \
  do {                                                                                            \
    std::string msg_ = error_of([&] { (void)(stmt); });                                           \
    ASSERT_FALSE(msg_.empty()) << "no kiln::Error from " #stmt;                                   \
    for (const char* part : {__VA_ARGS__}) EXPECT_NE(msg_.find(part), std::string::npos) << msg_; \
  } while (0)

using FakeRecorder = kiln::testing::SymbolicRecorder;
using kiln::testing::RecorderScope;

Tensor call_random(OpId op, const Dims& shape, DType dt, int64_t seed, int64_t offset) {
  Attrs at;
  at.set("shape", shape).set("dtype", dt).set("seed", AttrValue(seed));
  at.set("offset", AttrValue(offset));
  return dispatch1(op, std::span<const Tensor>(), at);
}

// Sample mean and variance.
std::pair<double, double> moments(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m += x;
  m /= static_cast<double>(v.size());
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return {m, s / static_cast<double>(v.size() - 1)};
}

}  // namespace

// zeros/ones/full fill every element and use the requested dtype.
TEST(Factory, FullValuesAndDtypes) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.dtype(), DType::f32);
  EXPECT_EQ(z.shape(), (Dims{2, 3}));
  for (float v : z.to_vector<float>()) EXPECT_EQ(v, 0.0f);
  for (int64_t v : ones({4}, DType::i64).to_vector<int64_t>()) EXPECT_EQ(v, 1);
  for (double v : full({3}, 2.5, DType::f64).to_vector<double>()) EXPECT_EQ(v, 2.5);
  for (bool v : full({2}, 7, DType::b8).to_vector<bool>()) EXPECT_TRUE(v);
  EXPECT_EQ(full({}, 3, DType::i32).item<int32_t>(), 3);
  EXPECT_EQ(full({}, 3, DType::i32).dim(), 0);
  EXPECT_EQ(full({2}, 1.5, DType::f16).to_vector<float>()[1], 1.5f);
  EXPECT_EQ(full({2}, -2.0, DType::bf16).to_vector<float>()[0], -2.0f);
  EXPECT_EQ(zeros({0, 5}).numel(), 0);
}

// Large i64 fill values stay exact (they are not routed through double).
TEST(Factory, FullLargeIntegerIsExact) {
  int64_t big = (int64_t{1} << 62) + 1;
  EXPECT_EQ(full({2}, big, DType::i64).to_vector<int64_t>()[1], big);
  int64_t mx = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(full({1}, mx, DType::i64).item<int64_t>(), mx);
  // A floating value is truncated toward zero for integer dtypes (as PyTorch).
  EXPECT_EQ(full({1}, -3.7, DType::i64).item<int64_t>(), -3);
  // u8 accepts small negatives and wraps them, like PyTorch.
  EXPECT_EQ(full({1}, -1, DType::u8).item<int64_t>(), 255);
}

// full rejects negative dims and values that overflow the dtype.
TEST(Factory, FullErrors) {
  EXPECT_ERROR_HAS(zeros({2, -1}), "[full]", "-1", "[2, -1]");
  EXPECT_ERROR_HAS(full({2}, 300, DType::u8), "[full]", "300", "u8");
  EXPECT_ERROR_HAS(full({2}, int64_t{1} << 40, DType::i32), "[full]", "1099511627776", "i32");
  EXPECT_ERROR_HAS(full({2}, std::nan(""), DType::i64), "[full]", "nan", "i64");
  EXPECT_ERROR_HAS(full({2}, 1e6, DType::f16), "[full]", "f16");
  EXPECT_ERROR_HAS(full({int64_t{1} << 40, int64_t{1} << 40}, 0), "[full]", "too large");
  EXPECT_ERROR_HAS(empty({-3}), "[empty]", "-3");
}

// The *_like functions keep the dtype and shape of their argument.
TEST(Factory, LikeKeepsDtypeAndShape) {
  Tensor t = full({2, 3}, 4, DType::i32);
  for (const Tensor& r : {empty_like(t), zeros_like(t), ones_like(t), full_like(t, 9)}) {
    EXPECT_EQ(r.dtype(), DType::i32);
    EXPECT_EQ(r.shape(), (Dims{2, 3}));
  }
  EXPECT_EQ(zeros_like(t).to_vector<int32_t>()[5], 0);
  EXPECT_EQ(ones_like(t).to_vector<int32_t>()[5], 1);
  EXPECT_EQ(full_like(t, 9).to_vector<int32_t>()[0], 9);
  Tensor e = empty({3, 1}, DType::f64);
  EXPECT_EQ(e.dtype(), DType::f64);
  EXPECT_EQ(e.shape(), (Dims{3, 1}));
}

// arange values, lengths (ceil like PyTorch) and the i64 / f32 dtype rule.
TEST(Factory, ArangeValuesAndDtype) {
  Tensor a = arange(5);
  EXPECT_EQ(a.dtype(), DType::i64);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(10, 0, -3).to_vector<int64_t>(), (std::vector<int64_t>{10, 7, 4, 1}));
  Tensor f = arange(1, 2.5, 0.5);
  EXPECT_EQ(f.dtype(), DType::f32);
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{1.0f, 1.5f, 2.0f}));
  EXPECT_EQ(arange(0, 1, 0.1).numel(), 10);
  EXPECT_EQ(arange(-1.0, 1.0, 0.5).numel(), 4);
  EXPECT_EQ(arange(0.0).numel(), 0);
  EXPECT_EQ(arange(3, 3).numel(), 0);
  Tensor d = arange(0, 3, 1, DType::f64);
  EXPECT_EQ(d.dtype(), DType::f64);
  EXPECT_EQ(d.to_vector<double>(), (std::vector<double>{0, 1, 2}));
  EXPECT_EQ(arange(2, 8, 2, DType::u8).to_vector<uint8_t>(), (std::vector<uint8_t>{2, 4, 6}));
  // Integer dtypes truncate floating bounds first (arange(0.5, 3.5) as i64 = [0, 1, 2]).
  EXPECT_EQ(arange(0.5, 3.5, 1, DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2}));
  int64_t big = int64_t{1} << 53;
  EXPECT_EQ(arange(big, big + 4, 2).to_vector<int64_t>()[1], big + 2);
}

// arange errors name the op and the offending values.
TEST(Factory, ArangeErrors) {
  EXPECT_ERROR_HAS(arange(0, 5, 0), "[arange] step must be nonzero");
  EXPECT_ERROR_HAS(arange(0.0, 1.0, 0.0), "[arange] step must be nonzero");
  EXPECT_ERROR_HAS(arange(0, -5, 1), "[arange]", "step sign", "start=0", "end=-5", "step=1");
  EXPECT_ERROR_HAS(arange(5.0, 1.0, 0.5), "[arange]", "step sign", "end=1");
  EXPECT_ERROR_HAS(arange(0, 1, 0.5, DType::i64), "[arange] step must be nonzero");
  EXPECT_ERROR_HAS(arange(0, 3, 1, DType::b8), "[arange]", "bool");
  EXPECT_ERROR_HAS(arange(0, std::numeric_limits<double>::infinity()), "[arange]", "inf");
  EXPECT_ERROR_HAS(arange(0, 300, 1, DType::u8), "[arange]", "299", "u8");
}

// linspace is inclusive with exact endpoints and handles 0 and 1 steps.
TEST(Factory, Linspace) {
  EXPECT_EQ(linspace(0, 1, 5).to_vector<float>(),
            (std::vector<float>{0.0f, 0.25f, 0.5f, 0.75f, 1.0f}));
  auto v = linspace(-3.3, 7.7, 11, DType::f64).to_vector<double>();
  ASSERT_EQ(v.size(), 11u);
  EXPECT_EQ(v.front(), -3.3);
  EXPECT_EQ(v.back(), 7.7);
  EXPECT_NEAR(v[5], 2.2, 1e-12);
  EXPECT_EQ(linspace(2, 9, 1).to_vector<float>(), (std::vector<float>{2.0f}));
  EXPECT_EQ(linspace(2, 9, 0).shape(), (Dims{0}));
  EXPECT_EQ(linspace(0, 10, 4, DType::i64).to_vector<int64_t>(),
            (std::vector<int64_t>{0, 3, 6, 10}));
  EXPECT_EQ(linspace(1, 0, 3).to_vector<float>(), (std::vector<float>{1.0f, 0.5f, 0.0f}));
  EXPECT_ERROR_HAS(linspace(0, 1, -2), "[linspace]", "-2");
}

// eye gives ones on the main diagonal of an n x m matrix.
TEST(Factory, Eye) {
  EXPECT_EQ(eye(3).to_vector<float>(), (std::vector<float>{1, 0, 0, 0, 1, 0, 0, 0, 1}));
  Tensor r = eye(2, 3, DType::i64);
  EXPECT_EQ(r.shape(), (Dims{2, 3}));
  EXPECT_EQ(r.dtype(), DType::i64);
  EXPECT_EQ(r.to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0, 0, 1, 0}));
  EXPECT_EQ(eye(3, 1).to_vector<float>(), (std::vector<float>{1, 0, 0}));
  EXPECT_EQ(eye(0).shape(), (Dims{0, 0}));
  EXPECT_ERROR_HAS(eye(-1), "[eye]", "-1");
  EXPECT_ERROR_HAS(eye(2, -4), "[eye]", "-4");
}

// from_vector copies values for every supported element type.
TEST(Factory, FromVector) {
  Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(a.shape(), (Dims{2, 3}));
  EXPECT_EQ(a.to_vector<float>()[4], 5.0f);
  Tensor b = from_vector<int64_t>({7, 8});
  EXPECT_EQ(b.shape(), (Dims{2}));
  EXPECT_EQ(b.dtype(), DType::i64);
  EXPECT_EQ(from_vector<double>({0.5}).item<double>(), 0.5);
  EXPECT_EQ(from_vector<int32_t>({-4, 4}).to_vector<int32_t>()[0], -4);
  EXPECT_EQ(from_vector<uint8_t>({200}).item<int64_t>(), 200);
  EXPECT_EQ(from_vector<bool>({true, false, true}).to_vector<bool>(),
            (std::vector<bool>{true, false, true}));
  EXPECT_EQ(from_vector<float>({}).shape(), (Dims{0}));
  EXPECT_ERROR_HAS(from_vector<float>({1, 2, 3}, {2, 2}), "[from_vector]", "3", "[2, 2]");
  EXPECT_ERROR_HAS(from_vector<float>({1, 2}, {-1, -2}), "[from_vector]", "negative");
}

// from_blob shares external memory and runs the deleter when the last view dies.
TEST(Factory, FromBlob) {
  float buf[6] = {1, 2, 3, 4, 5, 6};
  int deleted = 0;
  {
    Tensor t = from_blob(buf, {2, 3}, DType::f32, [&](void* p) {
      EXPECT_EQ(p, static_cast<void*>(buf));
      ++deleted;
    });
    EXPECT_TRUE(t.is_contiguous());
    EXPECT_EQ(t.to_vector<float>()[5], 6.0f);
    buf[0] = 42;
    EXPECT_EQ(t.to_vector<float>()[0], 42.0f);
    t.data<float>()[1] = -1;
    EXPECT_EQ(buf[1], -1.0f);
    Tensor view = t.detach();
    t = Tensor();
    EXPECT_EQ(deleted, 0);
  }
  EXPECT_EQ(deleted, 1);
  Tensor nodel = from_blob(buf, {6}, DType::f32);
  EXPECT_EQ(nodel.numel(), 6);
  EXPECT_ERROR_HAS(from_blob(nullptr, {2}, DType::f32), "[from_blob]", "null");
  EXPECT_ERROR_HAS(from_blob(buf, {-2}, DType::f32), "[from_blob]", "-2");
}

// Factories are recorded while tracing; empty becomes a full op.
TEST(Factory, RecordedWhileTracing) {
  FakeRecorder rec;
  {
    RecorderScope scope(&rec);
    Tensor e = empty({2, 2});
    EXPECT_TRUE(e.is_symbolic());
    Tensor a = arange(4);
    EXPECT_EQ(a.shape(), (Dims{4}));
    Tensor r = rand({3});
    EXPECT_TRUE(r.is_symbolic());
  }
  ASSERT_EQ(rec.ops.size(), 3u);
  EXPECT_EQ(rec.ops[0], OpId::full);
  EXPECT_EQ(rec.ops[1], OpId::arange);
  EXPECT_EQ(rec.ops[2], OpId::rand_uniform);
}

// Factory op table entries: traits, no derivative, outputs never require grad.
TEST(Factory, OpInfo) {
  for (OpId id : {OpId::full, OpId::arange, OpId::rand_uniform, OpId::rand_normal}) {
    const OpInfo& info = op_info(id);
    EXPECT_TRUE(info.has(kFactory)) << info.name;
    EXPECT_TRUE(info.has(kNonDiff)) << info.name;
    EXPECT_EQ(info.arity, 0);
    EXPECT_NE(info.infer, nullptr);
    EXPECT_NE(info.kernel, nullptr);
  }
  EXPECT_TRUE(op_info(OpId::rand_normal).has(kRandom));
  EXPECT_FALSE(rand({2}).requires_grad());
  // A hand-built call missing an attribute is a user error, not a crash.
  EXPECT_ERROR_HAS(dispatch1(OpId::full, std::span<const Tensor>(), Attrs()), "[full]", "shape");
}

// manual_seed makes draws reproducible; consecutive draws differ.
TEST(Random, ManualSeedReproducible) {
  manual_seed(42);
  auto a = rand({1000}).to_vector<float>();
  auto b = randn({1000}).to_vector<float>();
  manual_seed(42);
  EXPECT_EQ(rand({1000}).to_vector<float>(), a);
  EXPECT_EQ(randn({1000}).to_vector<float>(), b);
  EXPECT_NE(rand({1000}).to_vector<float>(), a);
  manual_seed(43);
  EXPECT_NE(rand({1000}).to_vector<float>(), a);
  // The generator advances by whole Philox blocks of the words used.
  manual_seed(7);
  rand({5});
  EXPECT_EQ(default_generator().offset, 8u);
  randn({3}, DType::f64);
  EXPECT_EQ(default_generator().offset, 8u + 12u);
}

// Element i is a pure function of (seed, offset, i): offsets shift the stream.
TEST(Random, PureFunctionOfSeedOffsetIndex) {
  auto base = call_random(OpId::rand_uniform, {64}, DType::f32, 5, 0).to_vector<float>();
  auto shifted = call_random(OpId::rand_uniform, {60}, DType::f32, 5, 4).to_vector<float>();
  for (size_t i = 0; i < shifted.size(); ++i) EXPECT_EQ(shifted[i], base[i + 4]);
  // Unaligned offsets are valid too (one word per f32 uniform).
  auto odd = call_random(OpId::rand_uniform, {10}, DType::f32, 5, 3).to_vector<float>();
  for (size_t i = 0; i < odd.size(); ++i) EXPECT_EQ(odd[i], base[i + 3]);
  // Normal f32 uses two words per element.
  auto n0 = call_random(OpId::rand_normal, {16}, DType::f32, 5, 0).to_vector<float>();
  auto n8 = call_random(OpId::rand_normal, {12}, DType::f32, 5, 8).to_vector<float>();
  for (size_t i = 0; i < n8.size(); ++i) EXPECT_EQ(n8[i], n0[i + 4]);
  auto other = call_random(OpId::rand_uniform, {64}, DType::f32, 5, 64).to_vector<float>();
  EXPECT_NE(other, base);
  auto seed6 = call_random(OpId::rand_uniform, {64}, DType::f32, 6, 0).to_vector<float>();
  EXPECT_NE(seed6, base);
  // The documented formula for element 0.
  auto w = philox4x32(0, 0, 5);
  EXPECT_EQ(base[0], uint_to_unit_float(w[0]));
  EXPECT_EQ(base[3], uint_to_unit_float(w[3]));
  auto d = call_random(OpId::rand_uniform, {2}, DType::f64, 5, 0).to_vector<double>();
  EXPECT_EQ(d[1], uint_to_unit_double(static_cast<uint64_t>(w[2]) << 32 | w[3]));
}

// The thread count never changes the numbers.
TEST(Random, SameResultWithOneAndTwoThreads) {
  int saved = num_threads();
  set_num_threads(1);
  manual_seed(123);
  auto u1 = rand({200000}).to_vector<float>();
  auto n1 = randn({200000}, DType::f64).to_vector<double>();
  auto a1 = arange(0, 100000, 1, DType::f32).to_vector<float>();
  set_num_threads(2);
  manual_seed(123);
  auto u2 = rand({200000}).to_vector<float>();
  auto n2 = randn({200000}, DType::f64).to_vector<double>();
  auto a2 = arange(0, 100000, 1, DType::f32).to_vector<float>();
  set_num_threads(saved);
  EXPECT_EQ(u1, u2);
  EXPECT_EQ(n1, n2);
  EXPECT_EQ(a1, a2);
}

// rand: uniform on [0, 1) with mean 1/2 and variance 1/12 (1e6 samples).
TEST(Random, UniformStatistics) {
  manual_seed(2024);
  for (DType dt : {DType::f32, DType::f64}) {
    auto v = rand({1000000}, dt).to_vector<double>();
    double lo = 1, hi = 0;
    for (double x : v) {
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    EXPECT_GE(lo, 0.0);
    EXPECT_LT(hi, 1.0);
    auto [m, var] = moments(v);
    EXPECT_NEAR(m, 0.5, 0.002) << dtype_name(dt);
    EXPECT_NEAR(var, 1.0 / 12.0, 0.001) << dtype_name(dt);
  }
  // Half types keep values strictly below 1 after rounding.
  for (DType dt : {DType::f16, DType::bf16}) {
    auto v = rand({100000}, dt).to_vector<double>();
    for (double x : v) ASSERT_TRUE(x >= 0.0 && x < 1.0) << x;
    EXPECT_NEAR(moments(v).first, 0.5, 0.01);
  }
}

// randn: standard normal mean 0 and variance 1 (1e6 samples), finite tails.
TEST(Random, NormalStatistics) {
  manual_seed(99);
  for (DType dt : {DType::f32, DType::f64}) {
    auto v = randn({1000000}, dt).to_vector<double>();
    for (double x : v) ASSERT_TRUE(std::isfinite(x));
    auto [m, var] = moments(v);
    EXPECT_NEAR(m, 0.0, 0.005) << dtype_name(dt);
    EXPECT_NEAR(var, 1.0, 0.01) << dtype_name(dt);
    size_t within1 = 0;
    for (double x : v) within1 += std::fabs(x) < 1.0;
    EXPECT_NEAR(static_cast<double>(within1) / 1e6, 0.6827, 0.003);
  }
}

// rand_like / randn_like copy shape and dtype; integer dtypes are rejected.
TEST(Random, LikeAndDtypeErrors) {
  Tensor t = zeros({3, 2}, DType::f64);
  EXPECT_EQ(rand_like(t).shape(), (Dims{3, 2}));
  EXPECT_EQ(randn_like(t).dtype(), DType::f64);
  EXPECT_ERROR_HAS(rand({2}, DType::i64), "[rand]", "i64");
  EXPECT_ERROR_HAS(randn({2}, DType::b8), "[randn]", "bool");
  EXPECT_ERROR_HAS(rand({-2}), "[rand]", "-2");
  EXPECT_ERROR_HAS(call_random(OpId::rand_normal, {2}, DType::i32, 0, 0), "[rand_normal]", "i32");
}

// randint stays in [low, high), covers the range and honours the dtype.
TEST(Random, Randint) {
  manual_seed(1);
  Tensor r = randint(-3, 4, {100000});
  EXPECT_EQ(r.dtype(), DType::i64);
  std::vector<int> count(7, 0);
  for (int64_t v : r.to_vector<int64_t>()) {
    ASSERT_TRUE(v >= -3 && v < 4) << v;
    ++count[static_cast<size_t>(v + 3)];
  }
  for (int c : count) EXPECT_NEAR(c / 1e5, 1.0 / 7.0, 0.01);
  Tensor u = randint(0, 256, {1000}, DType::u8);
  EXPECT_EQ(u.dtype(), DType::u8);
  Tensor f = randint(5, 6, {4}, DType::f32);
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{5, 5, 5, 5}));
  int64_t lo = std::numeric_limits<int64_t>::min() / 2;
  for (int64_t v : randint(lo, lo + 3, {100}).to_vector<int64_t>())
    EXPECT_TRUE(v >= lo && v < lo + 3);
  EXPECT_ERROR_HAS(randint(5, 5, {2}), "[randint]", "low=5", "high=5");
  EXPECT_ERROR_HAS(randint(0, 300, {2}, DType::u8), "[randint]", "300", "u8");
  EXPECT_ERROR_HAS(randint(std::numeric_limits<int64_t>::min(), 1, {2}), "[randint]", "too large");
}

// bernoulli fires with probability p and keeps p's dtype.
TEST(Random, BernoulliFrequency) {
  manual_seed(5);
  Tensor p = full({200000}, 0.3);
  Tensor b = bernoulli(p);
  EXPECT_EQ(b.dtype(), DType::f32);
  double ones_n = 0;
  for (float v : b.to_vector<float>()) {
    ASSERT_TRUE(v == 0.0f || v == 1.0f);
    ones_n += v;
  }
  EXPECT_NEAR(ones_n / 200000.0, 0.3, 0.005);
  for (double v : bernoulli(zeros({100}, DType::f64)).to_vector<double>()) EXPECT_EQ(v, 0.0);
  for (double v : bernoulli(ones({100}, DType::f64)).to_vector<double>()) EXPECT_EQ(v, 1.0);
  EXPECT_ERROR_HAS(bernoulli(ones({2}, DType::i64)), "[bernoulli]", "i64");
}
