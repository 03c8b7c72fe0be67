// Conformance cases of the sort family: argsort (full orders and topk's first
// k, ascending and descending, ties in input order, NaN as the largest value)
// and multinomial (given uniforms, with and without replacement), against naive
// references written with std::stable_sort and linear scans.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "op_cases.h"

namespace kiln::conformance {
namespace {

using D = DType;
using L = Layout;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Positions of x along dim in sorted order (stable; NaN largest), first k kept.
Ref argsort_ref(const Ref& x, int64_t dim, bool desc, int64_t k) {
  const int64_t r = static_cast<int64_t>(x.shape.size());
  if (r == 0) return make_ref(D::i64, {}, 0.0);
  const int64_t d = dim < 0 ? dim + r : dim, K = x.shape[static_cast<size_t>(d)];
  const int64_t keep = k < 0 ? K : k;
  Dims shape = x.shape;
  shape[static_cast<size_t>(d)] = keep;
  Ref o = make_ref(D::i64, shape);
  for (int64_t i = 0; i < o.numel(); ++i) {
    std::vector<int64_t> idx = unravel(i, shape);
    if (idx[static_cast<size_t>(d)] != 0) continue;  // one pass per row
    std::vector<double> row;
    for (int64_t j = 0; j < K; ++j) {
      idx[static_cast<size_t>(d)] = j;
      row.push_back(x.at(idx));
    }
    std::vector<int64_t> pos(static_cast<size_t>(K));
    std::iota(pos.begin(), pos.end(), int64_t{0});
    std::stable_sort(pos.begin(), pos.end(), [&](int64_t a, int64_t b) {
      const double va = row[static_cast<size_t>(a)], vb = row[static_cast<size_t>(b)];
      const bool na = std::isnan(va), nb = std::isnan(vb);
      if (na != nb) return desc ? na : nb;  // NaN above every number
      if (na) return false;
      return desc ? va > vb : va < vb;
    });
    for (int64_t j = 0; j < keep; ++j) {
      idx[static_cast<size_t>(d)] = j;
      o.at(idx) = static_cast<double>(pos[static_cast<size_t>(j)]);
    }
  }
  return o;
}

// Categories drawn from the rows of p by the uniforms u (see kiln::multinomial).
Ref multinomial_ref(const Ref& p, const Ref& u, int64_t n, bool repl) {
  const bool two_d = p.shape.size() == 2;
  const int64_t rows = two_d ? p.shape[0] : 1, C = p.shape.back();
  Ref o = make_ref(D::i64, two_d ? Dims{rows, n} : Dims{n});
  const int64_t uc = u.shape.back();
  for (int64_t r = 0; r < rows; ++r) {
    const double* w = p.v.data() + r * C;
    const double* us = u.v.data() + r * uc;
    double total = 0;
    for (int64_t c = 0; c < C; ++c) total += w[c];
    for (int64_t s = 0; s < n; ++s) {
      int64_t pick = 0;
      if (repl) {
        const double t = us[s] * total;
        double run = 0;
        pick = -1;
        for (int64_t c = 0; c < C && pick < 0; ++c) {
          run += w[c];
          if (run > t && w[c] > 0) pick = c;
        }
        if (pick < 0)
          for (int64_t c = 0; c < C; ++c)
            if (w[c] > 0) pick = c;
      } else {
        // The s-th largest log(1 - u) / p, lower category first on ties.
        std::vector<int64_t> order(static_cast<size_t>(C));
        std::iota(order.begin(), order.end(), int64_t{0});
        auto key = [&](int64_t c) {
          return w[c] > 0 ? std::log1p(-us[c]) / w[c] : -std::numeric_limits<double>::infinity();
        };
        std::stable_sort(order.begin(), order.end(),
                         [&](int64_t a, int64_t b) { return key(a) > key(b); });
        pick = order[static_cast<size_t>(s)];
      }
      o.v[static_cast<size_t>(r * n + s)] = static_cast<double>(pick);
    }
  }
  return o;
}

std::vector<OpCase> argsort_cases() {
  std::vector<OpCase> cs;
  auto add = [&](std::string name, Kind kind, Tensor x, int64_t dim, bool desc, int64_t k = -1) {
    Attrs at;
    at.set("dim", dim).set("descending", desc).set("k", k);
    RefFn ref = [=](const std::vector<Ref>& in) {
      return std::vector<Ref>{argsort_ref(in[0], dim, desc, k)};
    };
    cs.push_back(make_case(std::move(name), kind, {x}, at, ref));
  };
  const Values v{-2, 2};
  const Values ties{-2, 2, 0, true};
  add("f32 [3,5] dim 1", Kind::kContiguous, make_input({3, 5}, D::f32, v, 1), 1, false);
  add("f64 [4,3] dim 0 descending", Kind::kContiguous, make_input({4, 3}, D::f64, v, 2), 0, true);
  add("f32 [3,7] dim 1 top 3", Kind::kContiguous, make_input({3, 7}, D::f32, v, 3), 1, true, 3);
  add("f32 [7,3] dim 0 bottom 2", Kind::kContiguous, make_input({7, 3}, D::f32, v, 4), 0, false, 2);
  add("f64 transposed [4,3] dim 1", Kind::kStrided,
      make_input({4, 3}, D::f64, v, 5, L::kTransposed), 1, false);
  add("f32 sliced [3,5] dim 1 top 2", Kind::kStrided, make_input({3, 5}, D::f32, v, 6, L::kSliced),
      1, true, 2);
  add("f32 expanded [3,4] dim 0", Kind::kStrided, make_input({3, 4}, D::f32, v, 7, L::kExpanded), 0,
      false);
  add("i64 ties [4,6] dim 1 (input order)", Kind::kOther, make_input({4, 6}, D::i64, ties, 8), 1,
      false);
  add("f32 ties [4,6] dim 1 descending", Kind::kOther, make_input({4, 6}, D::f32, ties, 9), 1,
      true);
  add("i32 ties [12] top 5", Kind::kOther, make_input({12}, D::i32, ties, 10), 0, true, 5);
  add("bool [2,5] dim 1", Kind::kOther, make_input({2, 5}, D::b8, ties, 11), 1, false);
  add("f16 [2,6] dim 1 descending", Kind::kOther, make_input({2, 6}, D::f16, v, 12), 1, true);
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> sp{1.0, kNaN, -3.0, kNaN, inf, -inf, 2.0, 0.0};
  add("f32 NaN/inf [2,4] dim 1", Kind::kOther, from_doubles(sp, {2, 4}, D::f32), 1, false);
  add("f32 NaN/inf [8] descending", Kind::kOther, from_doubles(sp, {8}, D::f32), 0, true);
  add("f32 NaN/inf [8] top 3", Kind::kOther, from_doubles(sp, {8}, D::f32), 0, true, 3);
  add("f64 0-d", Kind::kOther, make_input({}, D::f64, v, 13), 0, false);
  add("f32 [3,4] dim 1 top 0", Kind::kZeroSize, make_input({3, 4}, D::f32, v, 14), 1, true, 0);
  add("f32 [0,3] dim 1", Kind::kZeroSize, make_input({0, 3}, D::f32, v, 15), 1, false);
  add("f32 [2,2000] dim 1 top 7", Kind::kOther, make_input({2, 2000}, D::f32, v, 16), 1, true, 7);
  return cs;
}

std::vector<OpCase> multinomial_cases() {
  std::vector<OpCase> cs;
  auto add = [&](std::string name, Kind kind, Tensor p, int64_t n, bool repl, uint64_t seed) {
    Dims us = p.shape();
    us.back() = repl ? n : p.size(-1);
    Tensor u = make_input(us, D::f64, Values{0, 1}, seed);
    Attrs at;
    at.set("num_samples", n).set("replacement", repl);
    RefFn ref = [=](const std::vector<Ref>& in) {
      return std::vector<Ref>{multinomial_ref(in[0], in[1], n, repl)};
    };
    cs.push_back(make_case(std::move(name), kind, {p, u}, at, ref));
  };
  const Values w{0, 3};
  add("f32 [4,6] 5 with replacement", Kind::kContiguous, make_input({4, 6}, D::f32, w, 1), 5, true,
      2);
  add("f32 [4,6] 3 without", Kind::kContiguous, make_input({4, 6}, D::f32, w, 3), 3, false, 4);
  add("f64 [6] 6 without (a permutation)", Kind::kContiguous, make_input({6}, D::f64, w, 5), 6,
      false, 6);
  add("f64 [6] 20 with replacement", Kind::kContiguous, make_input({6}, D::f64, w, 7), 20, true, 8);
  add("f32 transposed [5,4] 3 with", Kind::kStrided,
      make_input({5, 4}, D::f32, w, 9, L::kTransposed), 3, true, 10);
  add("f64 sliced [3,5] 2 without", Kind::kStrided, make_input({3, 5}, D::f64, w, 11, L::kSliced),
      2, false, 12);
  // Zero weights are never drawn; the last category ends with zeros.
  std::vector<double> z{0, 1, 0, 2, 0, 0, 0.5, 0, 0, 3, 0, 0};
  add("f32 zeros [2,6] 8 with", Kind::kOther, from_doubles(z, {2, 6}, D::f32), 8, true, 13);
  add("f32 zeros [2,6] 2 without", Kind::kOther, from_doubles(z, {2, 6}, D::f32), 2, false, 14);
  add("f16 [3,4] 2 with", Kind::kOther, make_input({3, 4}, D::f16, w, 15), 2, true, 16);
  add("f32 [0,4] 2 with", Kind::kZeroSize, make_input({0, 4}, D::f32, w, 17), 2, true, 18);
  return cs;
}

}  // namespace

std::vector<OpCase> sort_cases(OpId op) {
  return op == OpId::argsort ? argsort_cases() : multinomial_cases();
}

}  // namespace kiln::conformance
