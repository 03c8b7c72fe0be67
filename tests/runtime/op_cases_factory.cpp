// Conformance cases of the factory family: full, arange and the Philox
// random ops (recomputed from the formula documented in factory.cpp).
#include <cmath>
#include <numbers>

#include "op_cases.h"

namespace kiln::conformance {

uint32_t philox_word(uint64_t seed, uint64_t j) {
  return philox4x32(j / 4, 0, seed)[j % 4];
}

double random_reference(bool normal, DType dt, uint64_t seed, uint64_t offset, int64_t i) {
  const uint64_t W = (dt == DType::f64 ? 2u : 1u) * (normal ? 2u : 1u);
  uint32_t w[4] = {0, 0, 0, 0};
  for (uint64_t k = 0; k < W; ++k)
    w[k] = philox_word(seed, offset + static_cast<uint64_t>(i) * W + k);
  auto unit24 = [](uint32_t x) { return static_cast<float>(x >> 8) * 0x1p-24f; };
  auto unit53 = [](uint32_t hi, uint32_t lo) {
    return static_cast<double>((static_cast<uint64_t>(hi) << 32 | lo) >> 11) * 0x1p-53;
  };
  if (dt == DType::f64) {
    double u1 = unit53(w[0], w[1]);
    if (!normal) return u1;
    double u2 = unit53(w[2], w[3]);
    return std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
  if (!normal) {
    if (dt == DType::f16) return static_cast<double>(w[0] >> 21) * 0x1p-11;
    if (dt == DType::bf16) return static_cast<double>(w[0] >> 24) * 0x1p-8;
    return unit24(w[0]);
  }
  const float u1 = unit24(w[0]), u2 = unit24(w[1]);
  const float two_pi = static_cast<float>(2.0 * std::numbers::pi);
  const float z = std::sqrt(-2.0f * std::log(1.0f - u1)) * std::cos(two_pi * u2);
  return convert(z, dt);
}

namespace {

using D = DType;

std::vector<OpCase> full_cases() {
  std::vector<OpCase> cs;
  auto add = [&](std::string name, Kind k, Dims shape, DType dt, double value, bool has_iv = false,
                 int64_t iv = 0) {
    Attrs at;
    at.set("shape", shape).set("value", AttrValue(value));
    if (has_iv) at.set("ivalue", AttrValue(iv));
    at.set("dtype", dt);
    double expect = convert(has_iv ? static_cast<double>(iv) : value, dt);
    RefFn ref = [=](const std::vector<Ref>&) {
      return std::vector<Ref>{make_ref(dt, shape, expect)};
    };
    cs.push_back(make_case(std::move(name), k, {}, at, ref));
  };
  add("f32 [2,3] 1.5", Kind::kContiguous, {2, 3}, D::f32, 1.5);
  add("f64 0-d -2.25", Kind::kOther, {}, D::f64, -2.25);
  add("f64 [2,2,2] 1e300", Kind::kContiguous, {2, 2, 2}, D::f64, 1e300);
  add("i64 [4] 3.7 (truncated)", Kind::kContiguous, {4}, D::i64, 3.7);
  add("i64 [4] -3.7 (truncated)", Kind::kContiguous, {4}, D::i64, -3.7);
  add("i64 [3] ivalue 7", Kind::kContiguous, {3}, D::i64, 7.0, true, 7);
  add("i32 [2] ivalue -5", Kind::kContiguous, {2}, D::i32, -5.0, true, -5);
  add("u8 [2] ivalue 200", Kind::kContiguous, {2}, D::u8, 200.0, true, 200);
  add("bool [3] 1", Kind::kContiguous, {3}, D::b8, 1.0, true, 1);
  add("bool [3] 0.0", Kind::kContiguous, {3}, D::b8, 0.0);
  add("bool [2] 0.5", Kind::kContiguous, {2}, D::b8, 0.5);
  add("f16 [5] 0.1", Kind::kContiguous, {5}, D::f16, 0.1);
  add("bf16 [5] -3.3", Kind::kContiguous, {5}, D::bf16, -3.3);
  add("f32 [0,3]", Kind::kZeroSize, {0, 3}, D::f32, 4.0);
  add("i64 [3,0]", Kind::kZeroSize, {3, 0}, D::i64, 1.0, true, 1);
  {
    // An i64 beyond 2^53 comes from ivalue exactly; read back as double it rounds the same way.
    const int64_t big = (int64_t{1} << 62) + 3;
    add("i64 [2] ivalue 2^62+3", Kind::kOther, {2}, D::i64, static_cast<double>(big), true, big);
  }
  return cs;
}

std::vector<OpCase> arange_cases() {
  std::vector<OpCase> cs;
  auto add = [&](std::string name, Kind k, double start, double end, double step, DType dt,
                 std::vector<double> expect) {
    Attrs at;
    at.set("start", AttrValue(start)).set("end", AttrValue(end)).set("step", AttrValue(step));
    at.set("dtype", dt);
    RefFn ref = [=](const std::vector<Ref>&) {
      Ref r = make_ref(dt, {static_cast<int64_t>(expect.size())});
      for (size_t i = 0; i < expect.size(); ++i) r.v[i] = convert(expect[i], dt);
      return std::vector<Ref>{r};
    };
    cs.push_back(make_case(std::move(name), k, {}, at, ref));
  };
  add("i64 0..5", Kind::kContiguous, 0, 5, 1, D::i64, {0, 1, 2, 3, 4});
  add("i64 -3..4 step 3", Kind::kContiguous, -3, 4, 3, D::i64, {-3, 0, 3});
  add("i64 5..-1 step -2", Kind::kContiguous, 5, -1, -2, D::i64, {5, 3, 1});
  add("i32 -3..3 step 2", Kind::kContiguous, -3, 3, 2, D::i32, {-3, -1, 1});
  add("f32 0..1 step 0.1", Kind::kContiguous, 0, 1, 0.1, D::f32,
      {0, 0.1, 0.2, 0.30000000000000004, 0.4, 0.5, 0.6000000000000001, 0.7000000000000001, 0.8,
       0.9});
  add("f64 5..-1 step -1.5", Kind::kContiguous, 5, -1, -1.5, D::f64, {5, 3.5, 2, 0.5});
  add("f16 0..2 step 0.25", Kind::kContiguous, 0, 2, 0.25, D::f16,
      {0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75});
  add("bf16 1..4", Kind::kContiguous, 1, 4, 1, D::bf16, {1, 2, 3});
  add("u8 0..4 step 2", Kind::kContiguous, 0, 4, 2, D::u8, {0, 2});
  add("f64 0..2.5 (partial last step)", Kind::kContiguous, 0, 2.5, 1, D::f64, {0, 1, 2});
  add("i64 3..3 (empty)", Kind::kZeroSize, 3, 3, 1, D::i64, {});
  add("f32 1..1 step -1 (empty)", Kind::kZeroSize, 1, 1, -1, D::f32, {});
  return cs;
}

std::vector<OpCase> random_cases(bool normal) {
  std::vector<OpCase> cs;
  auto add = [&](std::string name, Kind k, Dims shape, DType dt, int64_t seed, int64_t offset) {
    Attrs at;
    at.set("shape", shape).set("dtype", dt).set("seed", AttrValue(seed));
    at.set("offset", AttrValue(offset));
    RefFn ref = [=](const std::vector<Ref>&) {
      Ref r = make_ref(dt, shape);
      for (int64_t i = 0; i < r.numel(); ++i)
        r.v[static_cast<size_t>(i)] = random_reference(normal, dt, static_cast<uint64_t>(seed),
                                                       static_cast<uint64_t>(offset), i);
      return std::vector<Ref>{r};
    };
    cs.push_back(make_case(std::move(name), k, {}, at, ref));
  };
  add("f32 [3,5] seed 42", Kind::kContiguous, {3, 5}, D::f32, 42, 0);
  add("f32 [7] offset 5 (unaligned)", Kind::kContiguous, {7}, D::f32, 42, 5);
  add("f64 [7] seed 7 offset 12", Kind::kContiguous, {7}, D::f64, 7, 12);
  add("f64 [2,3] offset 3", Kind::kContiguous, {2, 3}, D::f64, 7, 3);
  add("f16 [2,3] offset 4", Kind::kContiguous, {2, 3}, D::f16, 123, 4);
  add("bf16 [5]", Kind::kContiguous, {5}, D::bf16, 123, 0);
  add("f32 [5000] (several chunks)", Kind::kOther, {5000}, D::f32, 99, 8);
  add("f64 [4100] (several chunks)", Kind::kOther, {4100}, D::f64, -5, 1);
  add("f32 0-d", Kind::kOther, {}, D::f32, 1, 0);
  add("f32 [0,3]", Kind::kZeroSize, {0, 3}, D::f32, 1, 0);
  return cs;
}

}  // namespace

std::vector<OpCase> factory_cases(OpId op) {
  switch (op) {
    case OpId::full:
      return full_cases();
    case OpId::arange:
      return arange_cases();
    case OpId::rand_uniform:
      return random_cases(false);
    case OpId::rand_normal:
      return random_cases(true);
    default:
      return {};
  }
}

}  // namespace kiln::conformance
