// Conformance cases of the reduce family (sum, max, min, argmax, argmin) and
// of linalg (matmul).
#include <cmath>
#include <limits>

#include "op_cases.h"

namespace kiln::conformance {
namespace {

using D = DType;
using L = Layout;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Normalized, sorted dims (empty = all), as the op documents.
std::vector<bool> reduced_mask(const Dims& dims, size_t rank) {
  std::vector<bool> m(rank, dims.empty());
  for (int64_t d : dims)
    if (rank > 0) m[static_cast<size_t>(d < 0 ? d + static_cast<int64_t>(rank) : d)] = true;
  return m;
}

// Generic reference reduction: folds every input element into its output slot.
Ref reduce_ref(const Ref& x, const Dims& dims, bool keepdim, DType out, double init,
               const std::function<double(double, double)>& step) {
  const size_t r = x.shape.size();
  std::vector<bool> red = reduced_mask(dims, r);
  Dims keep_shape, out_shape;
  for (size_t d = 0; d < r; ++d) {
    keep_shape.push_back(red[d] ? 1 : x.shape[d]);
    if (!red[d] || keepdim) out_shape.push_back(red[d] ? 1 : x.shape[d]);
  }
  Ref o = make_ref(out, out_shape, init);
  for (int64_t i = 0; i < x.numel(); ++i) {
    std::vector<int64_t> idx = unravel(i, x.shape);
    for (size_t d = 0; d < r; ++d)
      if (red[d]) idx[d] = 0;
    double& acc = o.v[static_cast<size_t>(ravel(idx, keep_shape))];
    acc = step(acc, x.v[static_cast<size_t>(i)]);
  }
  return o;
}

std::vector<OpCase> sum_max_min_cases(OpId op) {
  const bool is_sum = op == OpId::sum;
  const double inf = std::numeric_limits<double>::infinity();
  const double init = is_sum ? 0.0 : (op == OpId::max ? -inf : inf);
  auto step = [op](double a, double v) {
    if (op == OpId::sum) return a + v;
    if (std::isnan(a) || std::isnan(v)) return kNaN;
    return op == OpId::max ? std::max(a, v) : std::min(a, v);
  };
  auto out_dt = [is_sum](DType in) { return is_sum && !is_float_dt(in) ? D::i64 : in; };
  // max/min gradients need distinct values (no ties).
  const Values v{-2, 2, 0, false, !is_sum};
  std::vector<OpCase> cs;
  auto add = [&](std::string name, Kind k, Tensor x, Dims dims, bool keepdim, bool g = false) {
    DType o = out_dt(x.dtype());
    RefFn ref = [=](const std::vector<Ref>& in) {
      return std::vector<Ref>{reduce_ref(in[0], dims, keepdim, o, init, step)};
    };
    Attrs at;
    at.set("dims", dims).set("keepdim", AttrValue(keepdim));
    cs.push_back(make_case(std::move(name), k, {x}, at, ref, g));
  };
  add("f32 [2,3,4] dims(1)", Kind::kContiguous, make_input({2, 3, 4}, D::f32, v, 1), {1}, false);
  add("f64 [3,4] dims(0) keepdim", Kind::kContiguous, make_input({3, 4}, D::f64, v, 2), {0}, true,
      true);
  add("f64 [2,3,4] dims(0,2)", Kind::kContiguous, make_input({2, 3, 4}, D::f64, v, 3), {0, 2},
      false, true);
  add("f64 [2,3,4] dims(-1) keepdim", Kind::kContiguous, make_input({2, 3, 4}, D::f64, v, 4), {-1},
      true, true);
  add("f64 [2,3] all", Kind::kContiguous, make_input({2, 3}, D::f64, v, 5), {}, false, true);
  add("f64 transposed [4,3] dims(1)", Kind::kStrided,
      make_input({4, 3}, D::f64, v, 6, L::kTransposed), {1}, false, true);
  add("f64 sliced [2,3,4] all keepdim", Kind::kStrided,
      make_input({2, 3, 4}, D::f64, v, 7, L::kSliced), {}, true, true);
  add("f64 transposed [3,2,4] dims(0,1)", Kind::kStrided,
      make_input({3, 2, 4}, D::f64, v, 8, L::kTransposed), {0, 1}, false, true);
  add("f64 [2,3,4] dims(2,0) unsorted", Kind::kContiguous, make_input({2, 3, 4}, D::f64, v, 26),
      {2, 0}, false, true);
  add("f64 [2,3,4] dims(-1,-3) keepdim", Kind::kContiguous, make_input({2, 3, 4}, D::f64, v, 27),
      {-1, -3}, true, true);
  add("f64 offset [3,4] dims(1)", Kind::kOther, make_input({3, 4}, D::f64, v, 28, L::kOffset), {1},
      false, true);
  add("f32 expanded [3,4] dims(1)", Kind::kStrided,
      make_input({3, 4}, D::f32, {-2, 2}, 29, L::kExpanded), {1}, false);
  add("f32 expanded [3,4] dims(0)", Kind::kStrided,
      make_input({3, 4}, D::f32, {-2, 2}, 9, L::kExpanded), {0}, false);
  add("f32 [5,300] dims(1) (rows)", Kind::kOther, make_input({5, 300}, D::f32, {-2, 2}, 10), {1},
      false);
  add("f32 [300,5] dims(0) (columns)", Kind::kOther, make_input({300, 5}, D::f32, {-2, 2}, 11), {0},
      false);
  add("f32 transposed [300,260] dims(1) (parallel)", Kind::kOther,
      make_input({300, 260}, D::f32, {-2, 2}, 25, L::kTransposed), {1}, false);
  add("f32 [40000] all (split)", Kind::kOther, make_input({40000}, D::f32, {-2, 2}, 12), {}, false);
  add("f64 [2,33000] dims(1) (split)", Kind::kOther, make_input({2, 33000}, D::f64, {-2, 2}, 13),
      {1}, false);
  add("i64 [2,3] dims(1)", Kind::kContiguous, make_input({2, 3}, D::i64, {-5, 5}, 14), {1}, false);
  add("i32 [3,4] dims(0)", Kind::kContiguous, make_input({3, 4}, D::i32, {-5, 5}, 15), {0}, false);
  if (is_sum) {
    add("bool [2,3] all", Kind::kContiguous, make_input({2, 3}, D::b8, {}, 16), {}, false);
    add("u8 [2,3] dims(0)", Kind::kContiguous, make_input({2, 3}, D::u8, {0, 200}, 30), {0}, false);
  }
  add("f16 [2,8] dims(1)", Kind::kContiguous, make_input({2, 8}, D::f16, {-2, 2}, 17), {1}, false);
  add("bf16 [3,4] all", Kind::kContiguous, make_input({3, 4}, D::bf16, {-2, 2}, 18), {}, false);
  add("f64 0-d all", Kind::kOther, make_input({}, D::f64, v, 19), {}, false, true);
  add("f64 0-d dims(0) keepdim", Kind::kOther, make_input({}, D::f64, v, 20), {0}, true, true);
  add("f32 [0,3] dims(1)", Kind::kZeroSize, make_input({0, 3}, D::f32, v, 21), {1}, false);
  if (is_sum) {
    add("f32 [0,3] dims(0)", Kind::kZeroSize, make_input({0, 3}, D::f32, v, 22), {0}, false);
    add("f32 [2,0] all", Kind::kZeroSize, make_input({2, 0}, D::f32, v, 23), {}, false);
    add("i64 [0,2] dims(0) keepdim", Kind::kZeroSize, make_input({0, 2}, D::i64, v, 24), {0}, true);
  }
  add("f32 [3,600] dims(0) (column chunks)", Kind::kOther,
      make_input({3, 600}, D::f32, {-2, 2}, 31), {0}, false);
  // Every dim subset of permuted [3,4,5] views (memory order != logical order).
  uint64_t seed = 100;
  for (const Dims& perm : {Dims{2, 0, 1}, Dims{1, 2, 0}}) {
    for (int mask = 1; mask < 8; ++mask) {
      Dims dims;
      for (int64_t d = 0; d < 3; ++d)
        if (mask >> d & 1) dims.push_back(d);
      Tensor x = permute(make_input({5, 3, 4}, D::f32, v, ++seed), perm);
      add("f32 permuted " + str(x.shape()) + " dims" + str(dims), Kind::kStrided, x, dims,
          mask % 2 == 1);
    }
  }
  std::vector<double> sp{1.0, kNaN, -3.0, inf, 0.5, -inf};
  add("f32 [2,3] NaN/inf dims(1)", Kind::kOther, from_doubles(sp, {2, 3}, D::f32), {1}, false);
  return cs;
}

std::vector<OpCase> arg_cases(OpId op) {
  const bool is_max = op == OpId::argmax;
  std::vector<OpCase> cs;
  auto add = [&](std::string name, Kind k, Tensor x, int64_t dim, bool keepdim, bool flat) {
    RefFn ref = [=](const std::vector<Ref>& in) {
      const Ref& x = in[0];
      const int64_t r = static_cast<int64_t>(x.shape.size());
      // View the input as [outer, K, inner] along the scanned dim.
      int64_t d = dim < 0 ? dim + r : dim;
      int64_t outer = 1, K = x.numel(), inner = 1;
      Dims shape;
      if (flat) {
        if (keepdim) shape = Dims(x.shape.size(), 1);
      } else if (r > 0) {
        K = x.shape[static_cast<size_t>(d)];
        for (int64_t i = 0; i < r; ++i) {
          int64_t s = x.shape[static_cast<size_t>(i)];
          if (i < d) outer *= s;
          if (i > d) inner *= s;
          if (i != d)
            shape.push_back(s);
          else if (keepdim)
            shape.push_back(1);
        }
      }
      Ref o = make_ref(D::i64, shape);
      for (int64_t a = 0; a < outer; ++a) {
        for (int64_t b = 0; b < inner; ++b) {
          int64_t best = 0;
          double bv = x.v[static_cast<size_t>(a * K * inner + b)];
          for (int64_t k = 1; k < K && !std::isnan(bv); ++k) {
            double v = x.v[static_cast<size_t>((a * K + k) * inner + b)];
            if (std::isnan(v) || (is_max ? v > bv : v < bv)) {
              bv = v;
              best = k;
            }
          }
          o.v[static_cast<size_t>(a * inner + b)] = static_cast<double>(best);
        }
      }
      return std::vector<Ref>{o};
    };
    Attrs at;
    at.set("dim", dim).set("keepdim", AttrValue(keepdim)).set("flat", AttrValue(flat));
    cs.push_back(make_case(std::move(name), k, {x}, at, ref));
  };
  const Values v{-2, 2};
  const Values ties{-2, 2, 0, true};
  add("f32 [3,4] dim 1", Kind::kContiguous, make_input({3, 4}, D::f32, v, 1), 1, false, false);
  add("f64 [3,4] dim 0 keepdim", Kind::kContiguous, make_input({3, 4}, D::f64, v, 2), 0, true,
      false);
  add("f32 [2,3,4] dim 1", Kind::kContiguous, make_input({2, 3, 4}, D::f32, v, 3), 1, false, false);
  add("f32 [2,3,4] flat", Kind::kContiguous, make_input({2, 3, 4}, D::f32, v, 4), 0, false, true);
  add("f32 [2,3,4] flat keepdim", Kind::kContiguous, make_input({2, 3, 4}, D::f32, v, 5), 0, true,
      true);
  add("f64 transposed [4,3] dim -1", Kind::kStrided,
      make_input({4, 3}, D::f64, v, 6, L::kTransposed), -1, false, false);
  add("f64 transposed [4,3] flat", Kind::kStrided, make_input({4, 3}, D::f64, v, 7, L::kTransposed),
      0, false, true);
  add("f32 sliced [3,5] dim 0 keepdim", Kind::kStrided,
      make_input({3, 5}, D::f32, v, 8, L::kSliced), 0, true, false);
  add("i64 ties [4,5] dim 1 (first wins)", Kind::kOther, make_input({4, 5}, D::i64, ties, 9), 1,
      false, false);
  add("f32 ties [4,5] dim 0 (first wins)", Kind::kOther, make_input({4, 5}, D::f32, ties, 10), 0,
      false, false);
  add("i32 ties [12] flat", Kind::kOther, make_input({12}, D::i32, ties, 11), 0, false, true);
  add("f32 offset [3,4] flat", Kind::kOther, make_input({3, 4}, D::f32, v, 20, L::kOffset), 0,
      false, true);
  add("f32 offset [3,4] dim 1", Kind::kOther, make_input({3, 4}, D::f32, v, 21, L::kOffset), 1,
      false, false);
  add("f32 expanded [3,4] flat", Kind::kStrided, make_input({3, 4}, D::f32, v, 22, L::kExpanded), 0,
      false, true);
  add("f32 expanded [3,4] dim 0", Kind::kStrided, make_input({3, 4}, D::f32, v, 23, L::kExpanded),
      0, false, false);
  add("f32 [3,1,2] dim 1 (size 1)", Kind::kOther, make_input({3, 1, 2}, D::f32, v, 24), 1, true,
      false);
  add("f16 [2,6] dim 1", Kind::kContiguous, make_input({2, 6}, D::f16, v, 12), 1, false, false);
  add("bf16 [6,2] dim 0", Kind::kContiguous, make_input({6, 2}, D::bf16, v, 13), 0, false, false);
  add("f32 [40000] flat (split)", Kind::kOther, make_input({40000}, D::f32, v, 14), 0, false, true);
  add("f32 [2,33000] dim 1 (split)", Kind::kOther, make_input({2, 33000}, D::f32, v, 15), 1, false,
      false);
  uint64_t seed = 100;
  for (const Dims& perm : {Dims{2, 0, 1}, Dims{1, 2, 0}})
    for (int64_t d = 0; d < 3; ++d)
      for (bool keep : {false, true}) {
        Tensor x = permute(make_input({5, 3, 4}, D::f32, v, ++seed), perm);
        add("f32 permuted " + str(x.shape()) + " dim " + std::to_string(d), Kind::kStrided, x, d,
            keep, false);
      }
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> sp{1.0, kNaN, -3.0, kNaN, inf, -inf, 2.0, 0.0};
  add("f32 NaN/inf [2,4] dim 1", Kind::kOther, from_doubles(sp, {2, 4}, D::f32), 1, false, false);
  add("f32 NaN/inf [8] flat", Kind::kOther, from_doubles(sp, {8}, D::f32), 0, false, true);
  add("f64 0-d dim 0", Kind::kOther, make_input({}, D::f64, v, 16), 0, false, false);
  add("f64 0-d flat", Kind::kOther, make_input({}, D::f64, v, 17), 0, false, true);
  add("f32 [0,3] dim 1", Kind::kZeroSize, make_input({0, 3}, D::f32, v, 18), 1, false, false);
  add("f32 [0,3] dim 1 keepdim", Kind::kZeroSize, make_input({0, 3}, D::f32, v, 19), 1, true,
      false);
  return cs;
}

}  // namespace

std::vector<OpCase> reduce_cases(OpId op) {
  if (op == OpId::argmax || op == OpId::argmin) return arg_cases(op);
  return sum_max_min_cases(op);
}

// ---------------- matmul ----------------
namespace {

Ref matmul_ref(const Ref& a, const Ref& b) {
  const bool a1 = a.shape.size() == 1, b1 = b.shape.size() == 1;
  Dims as = a.shape, bs = b.shape;
  if (a1) as.insert(0, 1);
  if (b1) bs.push_back(1);
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  Dims ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  Dims batch = bshape(ab, bb);
  Dims full = batch;
  full.push_back(M);
  full.push_back(N);
  Dims shape = batch;
  if (!a1) shape.push_back(M);
  if (!b1) shape.push_back(N);
  Ref o = make_ref(a.dtype, shape);
  Ref a2{a.dtype, as, a.v}, b2{b.dtype, bs, b.v};
  for (int64_t i = 0; i < numel_of(full); ++i) {
    std::vector<int64_t> idx = unravel(i, full);
    std::vector<int64_t> ia(idx.begin(), idx.end() - 2), ib = ia;
    ia.push_back(idx[idx.size() - 2]);
    ia.push_back(0);
    ib.push_back(0);
    ib.push_back(idx.back());
    double s = 0;
    for (int64_t k = 0; k < K; ++k) {
      ia.back() = k;
      ib[ib.size() - 2] = k;
      s += bcast_at(a2, ia) * bcast_at(b2, ib);
    }
    o.v[static_cast<size_t>(i)] = s;
  }
  return o;
}

}  // namespace

std::vector<OpCase> linalg_cases(OpId) {
  std::vector<OpCase> cs;
  RefFn ref = [](const std::vector<Ref>& in) { return std::vector<Ref>{matmul_ref(in[0], in[1])}; };
  const Values v{-2, 2};
  auto add = [&](std::string name, Kind k, Tensor a, Tensor b, bool g = false) {
    cs.push_back(make_case(std::move(name), k, {a, b}, {}, ref, g));
  };
  add("f32 [2,3]x[3,4]", Kind::kContiguous, make_input({2, 3}, D::f32, v, 1),
      make_input({3, 4}, D::f32, v, 2));
  add("f64 [3,4]x[4,2]", Kind::kContiguous, make_input({3, 4}, D::f64, v, 3),
      make_input({4, 2}, D::f64, v, 4), true);
  add("f64 transposed x transposed", Kind::kStrided,
      make_input({3, 4}, D::f64, v, 5, L::kTransposed),
      make_input({4, 2}, D::f64, v, 6, L::kTransposed), true);
  add("f64 sliced x sliced", Kind::kStrided, make_input({3, 4}, D::f64, v, 7, L::kSliced),
      make_input({4, 2}, D::f64, v, 8, L::kSliced), true);
  add("f32 expanded x transposed", Kind::kStrided, make_input({3, 4}, D::f32, v, 9, L::kExpanded),
      make_input({4, 5}, D::f32, v, 10, L::kTransposed));
  add("f64 [4]x[4,3]", Kind::kContiguous, make_input({4}, D::f64, v, 11),
      make_input({4, 3}, D::f64, v, 12), true);
  add("f64 [3,4]x[4]", Kind::kContiguous, make_input({3, 4}, D::f64, v, 13),
      make_input({4}, D::f64, v, 14), true);
  add("f64 [4]x[4] (dot)", Kind::kContiguous, make_input({4}, D::f64, v, 15),
      make_input({4}, D::f64, v, 16), true);
  add("f64 [2,3,4]x[2,4,5]", Kind::kContiguous, make_input({2, 3, 4}, D::f64, v, 17),
      make_input({2, 4, 5}, D::f64, v, 18), true);
  add("f64 [2,1,3,4]x[3,4,2]", Kind::kBroadcast, make_input({2, 1, 3, 4}, D::f64, v, 19),
      make_input({3, 4, 2}, D::f64, v, 20), true);
  add("f64 [2,3,4]x[4,5] (weight)", Kind::kBroadcast, make_input({2, 3, 4}, D::f64, v, 21),
      make_input({4, 5}, D::f64, v, 22), true);
  add("f64 [3,4]x[2,4,2]", Kind::kBroadcast, make_input({3, 4}, D::f64, v, 23),
      make_input({2, 4, 2}, D::f64, v, 24), true);
  add("f64 [4]x[2,4,3]", Kind::kBroadcast, make_input({4}, D::f64, v, 25),
      make_input({2, 4, 3}, D::f64, v, 26), true);
  add("f64 [2,3,4]x[4]", Kind::kBroadcast, make_input({2, 3, 4}, D::f64, v, 27),
      make_input({4}, D::f64, v, 28), true);
  add("f64 transposed batch [2,3,4]x[2,4,3]", Kind::kStrided,
      make_input({2, 3, 4}, D::f64, v, 29, L::kTransposed),
      transpose(make_input({4, 2, 3}, D::f64, v, 30), 0, 1), true);
  add("f64 offset x offset", Kind::kOther, make_input({3, 4}, D::f64, v, 49, L::kOffset),
      make_input({4, 2}, D::f64, v, 50, L::kOffset), true);
  add("f32 offset [2,3,4]x[4,2] (folded)", Kind::kOther,
      make_input({2, 3, 4}, D::f32, v, 51, L::kOffset), make_input({4, 2}, D::f32, v, 52));
  add("f32 [2,3,4]x offset [2,4,2]", Kind::kOther, make_input({2, 3, 4}, D::f32, v, 53),
      make_input({2, 4, 2}, D::f32, v, 54, L::kOffset));
  add("f64 expanded batch [3,2,3]x[3,3,2]", Kind::kStrided,
      make_input({3, 2, 3}, D::f64, v, 55, L::kExpanded), make_input({3, 3, 2}, D::f64, v, 56));
  add("i64 offset [2,3]x expanded [3,2]", Kind::kOther,
      make_input({2, 3}, D::i64, {-5, 5}, 57, L::kOffset),
      make_input({3, 2}, D::i64, {-5, 5}, 58, L::kExpanded));
  add("f16 transposed [3,2]x[2,4]", Kind::kStrided,
      make_input({3, 2}, D::f16, v, 59, L::kTransposed), make_input({2, 4}, D::f16, v, 60));
  // Degenerate matrix sizes (1 rows / inner / columns) in every layout pair (BLAS ld rules).
  uint64_t seed = 200;
  for (const Dims& mkn :
       {Dims{1, 3, 4}, Dims{3, 1, 4}, Dims{3, 4, 1}, Dims{1, 1, 1}, Dims{1, 4, 1}})
    for (L la : {L::kContiguous, L::kTransposed, L::kSliced})
      for (L lb : {L::kContiguous, L::kTransposed, L::kSliced}) {
        Tensor a = make_input({mkn[0], mkn[1]}, D::f32, v, ++seed, la);
        Tensor b = make_input({mkn[1], mkn[2]}, D::f32, v, ++seed, lb);
        const bool strided = !a.is_contiguous() || !b.is_contiguous();
        add("f32 " + str(a.shape()) + "x" + str(b.shape()) + " strides " + str(a.strides()) + "," +
                str(b.strides()),
            strided ? Kind::kStrided : Kind::kContiguous, a, b);
      }
  add("i64 [2,3]x[3,2]", Kind::kContiguous, make_input({2, 3}, D::i64, {-5, 5}, 31),
      make_input({3, 2}, D::i64, {-5, 5}, 32));
  add("i32 transposed [2,3]x[3]", Kind::kStrided,
      make_input({2, 3}, D::i32, {-5, 5}, 33, L::kTransposed),
      make_input({3}, D::i32, {-5, 5}, 34));
  add("f16 [2,3]x[3,2]", Kind::kContiguous, make_input({2, 3}, D::f16, v, 35),
      make_input({3, 2}, D::f16, v, 36));
  add("bf16 [2,3]x[3,2]", Kind::kContiguous, make_input({2, 3}, D::bf16, v, 37),
      make_input({3, 2}, D::bf16, v, 38));
  add("f32 [0,3]x[3,4]", Kind::kZeroSize, make_input({0, 3}, D::f32, v, 39),
      make_input({3, 4}, D::f32, v, 40));
  add("f32 [2,0]x[0,3] (zeros)", Kind::kZeroSize, make_input({2, 0}, D::f32, v, 41),
      make_input({0, 3}, D::f32, v, 42));
  add("f64 [2,3]x[3,0]", Kind::kZeroSize, make_input({2, 3}, D::f64, v, 43),
      make_input({3, 0}, D::f64, v, 44));
  add("i64 [0]x[0] (dot)", Kind::kZeroSize, make_input({0}, D::i64, v, 45),
      make_input({0}, D::i64, v, 46));
  add("f32 [0,2,3]x[3,2]", Kind::kZeroSize, make_input({0, 2, 3}, D::f32, v, 47),
      make_input({3, 2}, D::f32, v, 48));
  return cs;
}

}  // namespace kiln::conformance
