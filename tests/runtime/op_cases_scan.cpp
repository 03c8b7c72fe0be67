// Conformance cases of the scan family (cumsum, cumprod): naive running
// sums/products in double along one dim, any layout, integer promotion to
// i64, the internal reverse form (cumsum's derivative), gradchecks with zeros.
#include <cmath>

#include "op_cases.h"

namespace kiln::conformance {
namespace {

using D = DType;
using L = Layout;

// Running sum/product of x along dim (from the end when reverse).
Ref scan_ref(const Ref& x, int64_t dim, bool prod, bool reverse) {
  const int64_t r = static_cast<int64_t>(x.shape.size());
  const DType out = is_float_dt(x.dtype) ? x.dtype : D::i64;
  Ref o = make_ref(out, x.shape);
  if (r == 0) {
    o.v = x.v;
    return o;
  }
  const int64_t d = dim < 0 ? dim + r : dim, K = x.shape[static_cast<size_t>(d)];
  for (int64_t i = 0; i < x.numel(); ++i) {
    std::vector<int64_t> idx = unravel(i, x.shape);
    double acc = prod ? 1.0 : 0.0;
    const int64_t at = idx[static_cast<size_t>(d)];
    for (int64_t k = reverse ? K - 1 : 0; reverse ? k >= at : k <= at; k += reverse ? -1 : 1) {
      idx[static_cast<size_t>(d)] = k;
      acc = prod ? acc * x.at(idx) : acc + x.at(idx);
    }
    o.v[static_cast<size_t>(i)] = convert(acc, out);
  }
  return o;
}

}  // namespace

std::vector<OpCase> scan_cases(OpId op) {
  const bool prod = op == OpId::cumprod;
  std::vector<OpCase> cs;
  auto add = [&](std::string name, Kind k, Tensor x, int64_t dim, bool grad, bool reverse = false) {
    Attrs at;
    at.set("dim", dim);
    if (reverse) at.set("reverse", true);
    RefFn ref = [=](const std::vector<Ref>& in) {
      return std::vector<Ref>{scan_ref(in[0], dim, prod, reverse)};
    };
    cs.push_back(make_case(std::move(name), k, {x}, at, ref, grad));
  };
  // Products stay moderate with |x| in [0.5, 1.5].
  const Values v = prod ? Values{-1.5, 1.5, 0.5} : Values{-2, 2};
  const Values ints{-3, 3, 0, true};
  add("f32 [3,5] dim 1", Kind::kContiguous, make_input({3, 5}, D::f32, v, 1), 1, false);
  add("f32 [3,5] dim 0", Kind::kContiguous, make_input({3, 5}, D::f32, v, 2), 0, false);
  add("f64 [2,3,4] dim -1", Kind::kContiguous, make_input({2, 3, 4}, D::f64, v, 3), -1, true);
  add("f64 [4,3] dim 0", Kind::kContiguous, make_input({4, 3}, D::f64, v, 4), 0, true);
  add("f64 transposed [4,3] dim 1", Kind::kStrided,
      make_input({4, 3}, D::f64, v, 5, L::kTransposed), 1, true);
  add("f32 sliced [3,5] dim 1", Kind::kStrided, make_input({3, 5}, D::f32, v, 6, L::kSliced), 1,
      false);
  add("f32 expanded [3,4] dim 0", Kind::kStrided, make_input({3, 4}, D::f32, v, 7, L::kExpanded), 0,
      false);
  add("f32 offset [3,4] dim 1", Kind::kOther, make_input({3, 4}, D::f32, v, 8, L::kOffset), 1,
      false);
  add("i32 [3,4] dim 1 (-> i64)", Kind::kOther, make_input({3, 4}, D::i32, ints, 9), 1, false);
  add("i64 [5] dim 0", Kind::kOther, make_input({5}, D::i64, ints, 10), 0, false);
  add("bool [2,5] dim 1 (-> i64)", Kind::kOther, make_input({2, 5}, D::b8, ints, 11), 1, false);
  add("f16 [2,6] dim 1", Kind::kOther, make_input({2, 6}, D::f16, v, 12), 1, false);
  add("bf16 [6,2] dim 0", Kind::kOther, make_input({6, 2}, D::bf16, v, 13), 0, false);
  add("f64 0-d dim 0", Kind::kOther, make_input({}, D::f64, v, 14), 0, true);
  add("f32 [0,3] dim 0", Kind::kZeroSize, make_input({0, 3}, D::f32, v, 15), 0, false);
  add("f32 [2,0] dim 0", Kind::kZeroSize, make_input({2, 0}, D::f32, v, 16), 0, false);
  add("f32 [2,3000] dim 1 (long rows)", Kind::kOther,
      make_input({2, 3000}, D::f32, Values{0, 1e-3}, 17), 1, false);
  if (!prod) {
    add("f64 [3,4] dim 1 reverse", Kind::kOther, make_input({3, 4}, D::f64, v, 18), 1, true, true);
  } else {
    // Exact zeros: the gradient before, at and after a row's first zero, and with two zeros.
    std::vector<double> z{0.5, 0.0, 1.5, -1.2, 0.0, 0.7, 1.1, -0.9, 0.8, 1.3, 0.0, 0.6};
    add("f64 [2,6] dim 1 with zeros", Kind::kOther, from_doubles(z, {2, 6}, D::f64), 1, true);
    add("f64 [4,3] dim 0 with zeros", Kind::kOther, from_doubles(z, {4, 3}, D::f64), 0, true);
  }
  return cs;
}

}  // namespace kiln::conformance
