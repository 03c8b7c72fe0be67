// Conformance cases of the unary elementwise family.
#include <cmath>
#include <limits>

#include "op_cases.h"

namespace kiln::conformance {
namespace {

using Fn = std::function<double(double)>;

struct UnarySpec {
  Fn f;
  Values dom;       ///< forward values (floating inputs)
  Values grad_dom;  ///< gradcheck values (away from non-smooth points)
  Values int_dom;   ///< integer inputs
  bool keeps_int = false;
};

UnarySpec spec_of(OpId op) {
  const Values any{-2, 2};
  const Values away{-2, 2, 0.1};
  const Values pos{0.2, 3};
  const Values ints{-3, 3, 0, true};
  const Values pos_ints{1, 6, 0, true};
  switch (op) {
    case OpId::neg:
      return {[](double x) { return -x; }, any, any, ints, true};
    case OpId::abs:
      return {[](double x) { return std::abs(x); }, any, away, ints, true};
    case OpId::exp:
      return {[](double x) { return std::exp(x); }, any, any, ints};
    case OpId::log:
      return {[](double x) { return std::log(x); }, pos, pos, pos_ints};
    case OpId::log1p:
      return {[](double x) { return std::log1p(x); }, {-0.5, 3}, {-0.5, 3}, {0, 5, 0, true}};
    case OpId::sqrt:
      return {[](double x) { return std::sqrt(x); }, pos, pos, pos_ints};
    case OpId::rsqrt:
      return {[](double x) { return 1.0 / std::sqrt(x); }, pos, pos, pos_ints};
    case OpId::tanh:
      return {[](double x) { return std::tanh(x); }, any, any, ints};
    case OpId::sigmoid:
      return {[](double x) { return 1.0 / (1.0 + std::exp(-x)); }, any, any, ints};
    case OpId::relu:
      return {[](double x) { return std::isnan(x) ? x : (x > 0 ? x : 0.0); }, any, away, ints,
              true};
    case OpId::sin:
      return {[](double x) { return std::sin(x); }, any, any, ints};
    case OpId::cos:
      return {[](double x) { return std::cos(x); }, any, any, ints};
    case OpId::erf:
      return {[](double x) { return std::erf(x); }, any, any, ints};
    case OpId::sign:
      return {[](double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); }, any, away, ints, true};
    case OpId::logical_not:
      return {[](double x) { return x == 0 ? 1.0 : 0.0; }, ints, ints, ints};
    default:
      return {};
  }
}

RefFn unary_ref(Fn f, DType out) {
  return [f, out](const std::vector<Ref>& in) {
    return std::vector<Ref>{map_n(in, out, [&](const double* a) { return f(a[0]); })};
  };
}

}  // namespace

std::vector<OpCase> unary_cases(OpId op) {
  const UnarySpec s = spec_of(op);
  const bool lnot = op == OpId::logical_not;
  const bool diff = !op_info(op).has(kNonDiff);
  // Output dtype for a given input dtype.
  auto out = [&](DType in) {
    if (lnot) return DType::b8;
    if (is_float_dt(in)) return in;
    return s.keeps_int ? in : DType::f32;
  };
  std::vector<OpCase> cs;
  auto add = [&](std::string name, Kind kind, Tensor x, bool grad = false) {
    DType o = out(x.dtype());
    cs.push_back(make_case(std::move(name), kind, {x}, {}, unary_ref(s.f, o), grad && diff));
  };
  const Values& fd = lnot ? Values{-2, 2, 0, true} : s.dom;  // logical_not: hit zeros
  add("f32 [2,3]", Kind::kContiguous, make_input({2, 3}, DType::f32, fd, 1));
  add("f64 [3,4]", Kind::kContiguous, make_input({3, 4}, DType::f64, s.grad_dom, 2), true);
  add("f64 transposed [4,3]", Kind::kStrided,
      make_input({4, 3}, DType::f64, s.grad_dom, 3, Layout::kTransposed), true);
  add("f64 sliced [2,3,5]", Kind::kStrided,
      make_input({2, 3, 5}, DType::f64, s.grad_dom, 4, Layout::kSliced), true);
  add("f32 sliced [3,5]", Kind::kStrided, make_input({3, 5}, DType::f32, fd, 5, Layout::kSliced));
  add("f32 expanded [3,4]", Kind::kStrided,
      make_input({3, 4}, DType::f32, fd, 6, Layout::kExpanded));
  add("f16 [2,4]", Kind::kContiguous, make_input({2, 4}, DType::f16, fd, 7));
  add("bf16 [2,4]", Kind::kContiguous, make_input({2, 4}, DType::bf16, fd, 8));
  add("f16 transposed [3,2]", Kind::kStrided,
      make_input({3, 2}, DType::f16, fd, 9, Layout::kTransposed));
  add("i64 [6]", Kind::kContiguous, make_input({6}, DType::i64, s.int_dom, 10));
  add("i32 [2,3]", Kind::kContiguous, make_input({2, 3}, DType::i32, s.int_dom, 11));
  add("f32 [0,3]", Kind::kZeroSize, make_input({0, 3}, DType::f32, fd, 12));
  add("i64 [3,0]", Kind::kZeroSize, make_input({3, 0}, DType::i64, s.int_dom, 13));
  add("f64 0-d", Kind::kOther, make_input({}, DType::f64, s.grad_dom, 14), true);
  // Special values: zeros, infinities, NaN, large magnitudes.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> sp{0.0, -0.0, 1.0, -1.0, 0.5, -3.0, 30.0, -30.0, inf, -inf};
  if (op != OpId::sign) sp.push_back(std::numeric_limits<double>::quiet_NaN());
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16})
    add(std::string(dtype_name(dt)) + " special values", Kind::kOther,
        from_doubles(sp, {static_cast<int64_t>(sp.size())}, dt));
  add("f32 offset view [3,4]", Kind::kOther,
      make_input({3, 4}, DType::f32, fd, 18, Layout::kOffset));
  add("f64 offset view [2,3]", Kind::kOther,
      make_input({2, 3}, DType::f64, s.grad_dom, 19, Layout::kOffset), true);
  add("f32 transposed [256,300] (parallel)", Kind::kStrided,
      make_input({256, 300}, DType::f32, fd, 17, Layout::kTransposed));
  if (lnot || op == OpId::sign) {
    add("bool [2,3]", Kind::kContiguous, make_input({2, 3}, DType::b8, {}, 15));
    add("bool transposed [3,2]", Kind::kStrided,
        make_input({3, 2}, DType::b8, {}, 16, Layout::kTransposed));
  }
  return cs;
}

}  // namespace kiln::conformance
