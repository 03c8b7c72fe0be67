// Conformance cases of the binary elementwise family (NumPy broadcasting,
// PyTorch promotion), where and cast.
#include <cmath>
#include <limits>

#include "op_cases.h"

namespace kiln::conformance {
namespace {

using Fn2 = double (*)(double, double);
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

enum class Cls { kArith, kDiv, kPow, kCompare, kLogical };

struct BinarySpec {
  Fn2 f;
  Cls cls = Cls::kArith;
  Values a, b;        ///< forward values (floating)
  Values ga, gb;      ///< gradcheck values
  Values ia, ib;      ///< integer values
  bool bools = true;  ///< defined on two bool tensors
};

double max_nan(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? kNaN : std::max(a, b);
}
double min_nan(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? kNaN : std::min(a, b);
}

BinarySpec spec_of(OpId op) {
  const Values any{-2, 2}, ints{-4, 4, 0, true}, ties{-2, 2, 0, true};
  const Values away{-2, 2, 0.5}, nz_ints{-4, 4, 1, true};
  auto arith = [&](Fn2 f, bool bools = true) {
    return BinarySpec{f, Cls::kArith, any, any, any, any, ints, ints, bools};
  };
  auto cmp = [&](Fn2 f) {
    return BinarySpec{f, Cls::kCompare, ties, ties, ties, ties, ints, ints, true};
  };
  auto logic = [&](Fn2 f) {
    Values z{-1, 1, 0, true};
    return BinarySpec{f, Cls::kLogical, z, z, z, z, z, z, true};
  };
  switch (op) {
    case OpId::add:
      return arith([](double a, double b) { return a + b; });
    case OpId::sub:
      return arith([](double a, double b) { return a - b; }, false);
    case OpId::mul:
      return arith([](double a, double b) { return a * b; });
    case OpId::div:
      return {[](double a, double b) { return a / b; },
              Cls::kDiv,
              any,
              away,
              any,
              away,
              ints,
              nz_ints,
              true};
    case OpId::pow:
      return {[](double a, double b) { return std::pow(a, b); },
              Cls::kPow,
              {0.5, 2},
              any,
              {0.5, 2},
              any,
              ints,
              {0, 3, 0, true},
              false};
    case OpId::maximum:
      return arith(max_nan);
    case OpId::minimum:
      return arith(min_nan);
    case OpId::eq:
      return cmp([](double a, double b) { return double(a == b); });
    case OpId::ne:
      return cmp([](double a, double b) { return double(a != b); });
    case OpId::lt:
      return cmp([](double a, double b) { return double(a < b); });
    case OpId::le:
      return cmp([](double a, double b) { return double(a <= b); });
    case OpId::gt:
      return cmp([](double a, double b) { return double(a > b); });
    case OpId::ge:
      return cmp([](double a, double b) { return double(a >= b); });
    case OpId::logical_and:
      return logic([](double a, double b) { return double(a != 0 && b != 0); });
    case OpId::logical_or:
      return logic([](double a, double b) { return double(a != 0 || b != 0); });
    default:
      return {};
  }
}

RefFn ref2(Fn2 f, DType out) {
  return [f, out](const std::vector<Ref>& in) {
    return std::vector<Ref>{map_n(in, out, [&](const double* x) { return f(x[0], x[1]); })};
  };
}

std::vector<OpCase> where_cases();
std::vector<OpCase> cast_cases();

}  // namespace

std::vector<OpCase> binary_cases(OpId op) {
  if (op == OpId::where) return where_cases();
  if (op == OpId::cast) return cast_cases();
  const BinarySpec s = spec_of(op);
  const bool diff = !op_info(op).has(kNonDiff);
  // Output dtype for the promoted (computation) dtype c.
  auto out = [&](DType c) {
    if (s.cls == Cls::kCompare || s.cls == Cls::kLogical) return DType::b8;
    if (s.cls == Cls::kDiv && !is_float_dt(c)) return DType::f32;
    return c;
  };
  std::vector<OpCase> cs;
  auto add = [&](std::string name, Kind kind, Tensor a, Tensor b, DType c, bool grad = false) {
    cs.push_back(make_case(std::move(name), kind, {a, b}, {}, ref2(s.f, out(c)), grad && diff));
  };
  using D = DType;
  using L = Layout;
  add("f32 [2,3] x [2,3]", Kind::kContiguous, make_input({2, 3}, D::f32, s.a, 1),
      make_input({2, 3}, D::f32, s.b, 2), D::f32);
  add("f64 [3,4] x [3,4]", Kind::kContiguous, make_input({3, 4}, D::f64, s.ga, 3),
      make_input({3, 4}, D::f64, s.gb, 4), D::f64, true);
  add("f64 transposed x sliced [3,4]", Kind::kStrided,
      make_input({3, 4}, D::f64, s.ga, 5, L::kTransposed),
      make_input({3, 4}, D::f64, s.gb, 6, L::kSliced), D::f64, true);
  add("f32 expanded x transposed [3,4]", Kind::kStrided,
      make_input({3, 4}, D::f32, s.a, 7, L::kExpanded),
      make_input({3, 4}, D::f32, s.b, 8, L::kTransposed), D::f32);
  add("f64 [3,1] x [1,4]", Kind::kBroadcast, make_input({3, 1}, D::f64, s.ga, 9),
      make_input({1, 4}, D::f64, s.gb, 10), D::f64, true);
  add("f64 [2,1,4] x sliced [3,1]", Kind::kBroadcast, make_input({2, 1, 4}, D::f64, s.ga, 11),
      make_input({3, 1}, D::f64, s.gb, 12, L::kSliced), D::f64, true);
  add("f64 [4] x [2,3,4]", Kind::kBroadcast, make_input({4}, D::f64, s.ga, 13),
      make_input({2, 3, 4}, D::f64, s.gb, 14), D::f64, true);
  add("f32 [2,3,4] x [4]", Kind::kBroadcast, make_input({2, 3, 4}, D::f32, s.a, 15),
      make_input({4}, D::f32, s.b, 16), D::f32);
  add("f32 transposed [256,300] x [300] (parallel)", Kind::kBroadcast,
      make_input({256, 300}, D::f32, s.a, 51, L::kTransposed), make_input({300}, D::f32, s.b, 52),
      D::f32);
  add("f64 offset x offset [2,3]", Kind::kOther, make_input({2, 3}, D::f64, s.ga, 53, L::kOffset),
      make_input({2, 3}, D::f64, s.gb, 54, L::kOffset), D::f64, true);
  add("f32 offset [3,4] x expanded [3,4]", Kind::kOther,
      make_input({3, 4}, D::f32, s.a, 55, L::kOffset),
      make_input({3, 4}, D::f32, s.b, 56, L::kExpanded), D::f32);
  add("f16 [2,3] x [2,3]", Kind::kContiguous, make_input({2, 3}, D::f16, s.a, 17),
      make_input({2, 3}, D::f16, s.b, 18), D::f16);
  add("bf16 [2,3] x [1,3]", Kind::kBroadcast, make_input({2, 3}, D::bf16, s.a, 19),
      make_input({1, 3}, D::bf16, s.b, 20), D::bf16);
  add("f16 x bf16 -> f32", Kind::kOther, make_input({2, 3}, D::f16, s.a, 21),
      make_input({2, 3}, D::bf16, s.b, 22), D::f32);
  add("i64 x f32 -> f32", Kind::kOther, make_input({2, 3}, D::i64, s.ia, 23),
      make_input({2, 3}, D::f32, s.b, 24), D::f32);
  add("f32 [3] x 0-d f64 -> f32", Kind::kBroadcast, make_input({3}, D::f32, s.a, 25),
      make_input({}, D::f64, s.b, 26), D::f32);
  add("0-d f64 x 0-d f32 -> f64", Kind::kOther, make_input({}, D::f64, s.ga, 27),
      make_input({}, D::f32, s.b, 28), D::f64);
  add("f64 0-d x 0-d (grad)", Kind::kBroadcast, make_input({}, D::f64, s.ga, 29),
      make_input({}, D::f64, s.gb, 30), D::f64, true);
  {
    Tensor w = scalar_tensor(Scalar(s.cls == Cls::kPow ? 2.0 : 1.5));
    add("f32 [3] x wrapped 1.5 -> f32", Kind::kBroadcast, make_input({3}, D::f32, s.a, 31), w,
        D::f32);
    add("i64 [3] x wrapped float -> f32", Kind::kBroadcast, make_input({3}, D::i64, s.ia, 32), w,
        D::f32);
    add("f16 [3] x wrapped float -> f16", Kind::kBroadcast, make_input({3}, D::f16, s.a, 33), w,
        D::f16);
    Tensor wi = scalar_tensor(Scalar(int64_t{2}));
    add("f16 [3] x wrapped int -> f16", Kind::kBroadcast, make_input({3}, D::f16, s.a, 57), wi,
        D::f16);
    add("i64 [3] x 0-d f64 -> f64", Kind::kBroadcast, make_input({3}, D::i64, s.ia, 58),
        make_input({}, D::f64, s.b, 59), D::f64);
    add("i32 [3] x 0-d f16 -> f16", Kind::kBroadcast, make_input({3}, D::i32, s.ia, 60),
        make_input({}, D::f16, s.b, 61), D::f16);
    add("i32 [3] x 0-d i64 -> i32", Kind::kBroadcast, make_input({3}, D::i32, s.ia, 62),
        make_input({}, D::i64, s.ib, 63), D::i32);
    if (s.bools)
      add("bool [3] x wrapped int -> i64", Kind::kBroadcast, make_input({3}, D::b8, {}, 64), wi,
          D::i64);
    add("wrapped int x f64 [2,2] -> f64", Kind::kBroadcast, wi,
        make_input({2, 2}, D::f64, s.gb, 34), D::f64);
  }
  add("i64 [2,3] x [2,3]", Kind::kContiguous, make_input({2, 3}, D::i64, s.ia, 35),
      make_input({2, 3}, D::i64, s.ib, 36), D::i64);
  add("i64 transposed x [1,3]", Kind::kStrided,
      make_input({2, 3}, D::i64, s.ia, 37, L::kTransposed), make_input({1, 3}, D::i64, s.ib, 38),
      D::i64);
  add("i32 x i64 -> i64", Kind::kOther, make_input({2, 3}, D::i32, s.ia, 39),
      make_input({2, 3}, D::i64, s.ib, 40), D::i64);
  add("i32 x i32", Kind::kContiguous, make_input({4}, D::i32, s.ia, 41),
      make_input({4}, D::i32, s.ib, 42), D::i32);
  if (s.bools) {
    add("bool x bool", Kind::kContiguous, make_input({2, 3}, D::b8, {}, 43),
        make_input({2, 3}, D::b8, {}, 44), D::b8);
    add("bool x i64 -> i64", Kind::kOther, make_input({2, 3}, D::b8, {}, 45),
        make_input({2, 3}, D::i64, s.ib, 46), D::i64);
  }
  add("f32 [0,3] x [1,3]", Kind::kZeroSize, make_input({0, 3}, D::f32, s.a, 47),
      make_input({1, 3}, D::f32, s.b, 48), D::f32);
  add("i64 [2,0] x [2,1]", Kind::kZeroSize, make_input({2, 0}, D::i64, s.ia, 49),
      make_input({2, 1}, D::i64, s.ib, 50), D::i64);
  // Broadcast shapes crossed with view layouts (the loop's dim coalescing).
  uint64_t seed = 100;
  for (const auto& [sa, sb] : std::vector<std::pair<Dims, Dims>>{
           {{2, 3, 4}, {3, 1}}, {{1, 3, 1}, {2, 1, 4}}, {{4, 1, 3}, {4, 2, 1}}}) {
    for (const auto& [la, lb] :
         {std::pair{L::kTransposed, L::kExpanded}, std::pair{L::kSliced, L::kOffset}}) {
      Tensor a = make_input(sa, D::f32, s.a, ++seed, la);
      Tensor b = make_input(sb, D::f32, s.b, ++seed, lb);
      add("f32 " + str(a.shape()) + " strides " + str(a.strides()) + " x " + str(b.shape()) +
              " strides " + str(b.strides()),
          Kind::kBroadcast, a, b, D::f32);
    }
  }
  // IEEE special values: NaN, infinities, signed zeros, division by zero.
  std::vector<double> va{kNaN, 1.0, kInf, -kInf, 0.0, kInf, 0.0, -2.0, 2.0, -0.0, 1.0};
  std::vector<double> vb{1.0, kNaN, kInf, kInf, -0.0, 1.0, 0.0, 0.0, -0.5, 3.0, -kInf};
  const Dims sh{static_cast<int64_t>(va.size())};
  for (D dt : {D::f32, D::f64, D::f16, D::bf16})
    add(std::string(dtype_name(dt)) + " special values", Kind::kOther, from_doubles(va, sh, dt),
        from_doubles(vb, sh, dt), dt);
  return cs;
}

namespace {

std::vector<OpCase> where_cases() {
  using D = DType;
  using L = Layout;
  const Values v{-2, 2};
  const Values ints{-4, 4, 0, true};
  auto ref = [](DType out) -> RefFn {
    return [out](const std::vector<Ref>& in) {
      return std::vector<Ref>{
          map_n(in, out, [](const double* x) { return x[0] != 0 ? x[1] : x[2]; })};
    };
  };
  std::vector<OpCase> cs;
  auto add = [&](std::string name, Kind k, Tensor c, Tensor a, Tensor b, DType out,
                 bool grad = false) {
    cs.push_back(make_case(std::move(name), k, {c, a, b}, {}, ref(out), grad));
  };
  auto cond = [](const Dims& s, uint64_t seed, L l = L::kContiguous) {
    return make_input(s, D::b8, {}, seed, l);
  };
  add("f32 [2,3]", Kind::kContiguous, cond({2, 3}, 1), make_input({2, 3}, D::f32, v, 2),
      make_input({2, 3}, D::f32, v, 3), D::f32);
  add("f64 [3,4]", Kind::kContiguous, cond({3, 4}, 4), make_input({3, 4}, D::f64, v, 5),
      make_input({3, 4}, D::f64, v, 6), D::f64, true);
  add("f64 strided [3,4]", Kind::kStrided, cond({3, 4}, 7, L::kTransposed),
      make_input({3, 4}, D::f64, v, 8, L::kTransposed),
      make_input({3, 4}, D::f64, v, 9, L::kSliced), D::f64, true);
  add("f32 expanded cond", Kind::kStrided, cond({3, 4}, 10, L::kExpanded),
      make_input({3, 4}, D::f32, v, 11, L::kSliced), make_input({3, 4}, D::f32, v, 12), D::f32);
  add("f64 [3,1] [1,4] [3,4]", Kind::kBroadcast, cond({3, 1}, 13),
      make_input({1, 4}, D::f64, v, 14), make_input({3, 4}, D::f64, v, 15), D::f64, true);
  add("f64 [2,3,4] 0-d [4]", Kind::kBroadcast, cond({2, 3, 4}, 16), make_input({}, D::f64, v, 17),
      make_input({4}, D::f64, v, 18), D::f64, true);
  add("i64 x f32 -> f32", Kind::kOther, cond({2, 3}, 19), make_input({2, 3}, D::i64, ints, 20),
      make_input({2, 3}, D::f32, v, 21), D::f32);
  add("f32 x wrapped 0.0 -> f32", Kind::kBroadcast, cond({2, 3}, 22),
      make_input({2, 3}, D::f32, v, 23), scalar_tensor(Scalar(0.0)), D::f32);
  add("f16 x f16", Kind::kContiguous, cond({2, 3}, 24), make_input({2, 3}, D::f16, v, 25),
      make_input({2, 3}, D::f16, v, 26), D::f16);
  add("bf16 x bf16", Kind::kContiguous, cond({2, 3}, 27), make_input({2, 3}, D::bf16, v, 28),
      make_input({2, 3}, D::bf16, v, 29), D::bf16);
  add("i64 x i64", Kind::kContiguous, cond({5}, 30), make_input({5}, D::i64, ints, 31),
      make_input({5}, D::i64, ints, 32), D::i64);
  add("bool x bool", Kind::kContiguous, cond({5}, 33), cond({5}, 34), cond({5}, 35), D::b8);
  add("wrapped float x wrapped float -> f32", Kind::kBroadcast, cond({2, 2}, 45),
      scalar_tensor(Scalar(1.5)), scalar_tensor(Scalar(-2.0)), D::f32);
  add("wrapped int x wrapped int -> i64", Kind::kBroadcast, cond({2, 2}, 46),
      scalar_tensor(Scalar(int64_t{3})), scalar_tensor(Scalar(int64_t{-1})), D::i64);
  add("i32 [3] x wrapped float -> f32", Kind::kBroadcast, cond({3}, 47),
      make_input({3}, D::i32, ints, 48), scalar_tensor(Scalar(0.5)), D::f32);
  add("f64 offset views", Kind::kOther, cond({2, 3}, 42, L::kOffset),
      make_input({2, 3}, D::f64, v, 43, L::kOffset), make_input({1, 3}, D::f64, v, 44, L::kOffset),
      D::f64, true);
  add("f32 [256,300] cond [256,1] (parallel)", Kind::kBroadcast, cond({256, 1}, 39),
      make_input({256, 300}, D::f32, v, 40, L::kTransposed), make_input({300}, D::f32, v, 41),
      D::f32);
  add("f32 [0,3] x [1,3]", Kind::kZeroSize, cond({0, 3}, 36), make_input({0, 3}, D::f32, v, 37),
      make_input({1, 3}, D::f32, v, 38), D::f32);
  return cs;
}

std::vector<OpCase> cast_cases() {
  using D = DType;
  using L = Layout;
  const Values v{-3, 3};
  const Values ints{-4, 4, 0, true};
  std::vector<OpCase> cs;
  auto add = [&](std::string name, Kind k, Tensor x, DType to, bool grad = false) {
    RefFn ref = [to](const std::vector<Ref>& in) {
      return std::vector<Ref>{map_n(in, to, [to](const double* a) { return convert(a[0], to); })};
    };
    cs.push_back(make_case(std::move(name), k, {x}, Attrs().set("dtype", to), ref, grad));
  };
  add("f32 -> f64", Kind::kContiguous, make_input({2, 3}, D::f32, v, 1), D::f64);
  add("f64 -> f64", Kind::kContiguous, make_input({3, 4}, D::f64, v, 2), D::f64, true);
  add("f64 transposed -> f64", Kind::kStrided, make_input({3, 4}, D::f64, v, 3, L::kTransposed),
      D::f64, true);
  add("f64 sliced -> f32", Kind::kStrided, make_input({3, 4}, D::f64, v, 4, L::kSliced), D::f32);
  add("f32 expanded -> i64", Kind::kStrided, make_input({3, 4}, D::f32, v, 5, L::kExpanded),
      D::i64);
  add("f32 -> i64 (truncation)", Kind::kContiguous, make_input({2, 4}, D::f32, v, 6), D::i64);
  add("f64 -> i32", Kind::kContiguous, make_input({2, 4}, D::f64, v, 7), D::i32);
  add("f32 -> bool", Kind::kContiguous, make_input({2, 4}, D::f32, {-2, 2, 0, true}, 8), D::b8);
  add("bool -> f32", Kind::kContiguous, make_input({2, 4}, D::b8, {}, 9), D::f32);
  add("bool transposed -> i64", Kind::kStrided, make_input({3, 2}, D::b8, {}, 10, L::kTransposed),
      D::i64);
  add("i64 -> f64", Kind::kContiguous, make_input({5}, D::i64, ints, 11), D::f64);
  add("i64 -> bool", Kind::kContiguous, make_input({5}, D::i64, ints, 12), D::b8);
  add("i64 -> u8", Kind::kContiguous, make_input({5}, D::i64, {0, 200, 0, true}, 13), D::u8);
  add("f64 -> f16", Kind::kContiguous, make_input({2, 3}, D::f64, v, 14), D::f16);
  add("f32 -> bf16", Kind::kContiguous, make_input({2, 3}, D::f32, v, 15), D::bf16);
  add("f16 -> f32", Kind::kContiguous, make_input({2, 3}, D::f16, v, 16), D::f32);
  add("bf16 transposed -> f16", Kind::kStrided, make_input({2, 3}, D::bf16, v, 17, L::kTransposed),
      D::f16);
  add("f32 [0,3] -> i64", Kind::kZeroSize, make_input({0, 3}, D::f32, v, 18), D::i64);
  add("f64 0-d -> f32", Kind::kOther, make_input({}, D::f64, v, 19), D::f32);
  add("f32 offset -> f64", Kind::kOther, make_input({3, 2}, D::f32, v, 21, L::kOffset), D::f64);
  add("i64 offset -> f16", Kind::kOther, make_input({3, 2}, D::i64, ints, 22, L::kOffset), D::f16);
  add("f64 transposed [256,300] -> f32 (parallel)", Kind::kStrided,
      make_input({256, 300}, D::f64, v, 20, L::kTransposed), D::f32);
  return cs;
}

}  // namespace
}  // namespace kiln::conformance
