// Conformance cases of the movement family: reshape, permute, expand, slice,
// copy, pad, cat, gather, index_select, scatter_add.
#include <algorithm>

#include "op_cases.h"

namespace kiln::conformance {
namespace {

using D = DType;
using L = Layout;
const Values kV{-2, 2};

// An integer index tensor with values in [0, n).
Tensor index(const Dims& shape, int64_t n, uint64_t seed, D dt = D::i64, L l = L::kContiguous) {
  return make_input(shape, dt, {0, static_cast<double>(n - 1), 0, true}, seed, l);
}

// ---- reshape ----
std::vector<OpCase> reshape_cases() {
  std::vector<OpCase> cs;
  auto add = [&](std::string name, Kind k, Tensor x, Dims shape, Dims expect, bool g = false) {
    RefFn ref = [expect](const std::vector<Ref>& in) {
      return std::vector<Ref>{Ref{in[0].dtype, expect, in[0].v}};
    };
    cs.push_back(make_case(std::move(name), k, {x}, Attrs().set("shape", shape), ref, g));
  };
  add("f32 [2,3,4] -> [6,4]", Kind::kContiguous, make_input({2, 3, 4}, D::f32, kV, 1), {6, 4},
      {6, 4});
  add("f64 [3,4] -> [2,-1]", Kind::kContiguous, make_input({3, 4}, D::f64, kV, 2), {2, -1}, {2, 6},
      true);
  add("f64 transposed [4,3] -> [12]", Kind::kStrided,
      make_input({4, 3}, D::f64, kV, 3, L::kTransposed), {12}, {12}, true);
  add("f64 sliced [2,3] -> [3,2]", Kind::kStrided, make_input({2, 3}, D::f64, kV, 4, L::kSliced),
      {3, 2}, {3, 2}, true);
  add("f64 permuted [2,4,3] -> [-1,12]", Kind::kStrided,
      transpose(make_input({3, 4, 2}, D::f64, kV, 5), 0, 2), {-1, 12}, {2, 12}, true);
  add("f32 expanded [3,4] -> [4,3]", Kind::kStrided,
      make_input({3, 4}, D::f32, kV, 6, L::kExpanded), {4, 3}, {4, 3});
  add("f64 transposed [3,4] -> [3,2,2] (view)", Kind::kStrided,
      make_input({3, 4}, D::f64, kV, 14, L::kTransposed), {3, 2, 2}, {3, 2, 2}, true);
  add("f64 sliced [2,1,3] -> [2,3]", Kind::kStrided,
      make_input({2, 1, 3}, D::f64, kV, 15, L::kSliced), {2, 3}, {2, 3}, true);
  add("f32 expanded [3,4] -> [3,2,2]", Kind::kStrided,
      make_input({3, 4}, D::f32, kV, 16, L::kExpanded), {3, 2, 2}, {3, 2, 2});
  add("f64 offset [2,3] -> [3,2]", Kind::kOther, make_input({2, 3}, D::f64, kV, 17, L::kOffset),
      {3, 2}, {3, 2}, true);
  add("i64 [2,3] -> [3,1,2]", Kind::kContiguous, make_input({2, 3}, D::i64, kV, 7), {3, 1, 2},
      {3, 1, 2});
  add("bool [4] -> [2,2]", Kind::kContiguous, make_input({4}, D::b8, {}, 8), {2, 2}, {2, 2});
  add("f16 [2,3] -> [6]", Kind::kContiguous, make_input({2, 3}, D::f16, kV, 9), {6}, {6});
  add("f32 [0,3] -> [3,0]", Kind::kZeroSize, make_input({0, 3}, D::f32, kV, 10), {3, 0}, {3, 0});
  add("f32 [0,3] -> [-1,3]", Kind::kZeroSize, make_input({0, 3}, D::f32, kV, 11), {-1, 3}, {0, 3});
  add("f64 0-d -> [1,1]", Kind::kOther, make_input({}, D::f64, kV, 12), {1, 1}, {1, 1}, true);
  add("f64 [1] -> 0-d", Kind::kOther, make_input({1}, D::f64, kV, 13), {}, {}, true);
  return cs;
}

// ---- permute ----
std::vector<OpCase> permute_cases() {
  std::vector<OpCase> cs;
  auto add = [&](std::string name, Kind k, Tensor x, Dims perm, bool g = false) {
    RefFn ref = [perm](const std::vector<Ref>& in) {
      const Ref& x = in[0];
      const size_t r = x.shape.size();
      Dims p(r), shape(r);
      for (size_t i = 0; i < r; ++i) {
        p[i] = perm[i] < 0 ? perm[i] + static_cast<int64_t>(r) : perm[i];
        shape[i] = x.shape[static_cast<size_t>(p[i])];
      }
      Ref o = make_ref(x.dtype, shape);
      std::vector<int64_t> src(r);
      for (int64_t i = 0; i < o.numel(); ++i) {
        std::vector<int64_t> idx = unravel(i, shape);
        for (size_t d = 0; d < r; ++d) src[static_cast<size_t>(p[d])] = idx[d];
        o.v[static_cast<size_t>(i)] = x.at(src);
      }
      return std::vector<Ref>{o};
    };
    cs.push_back(make_case(std::move(name), k, {x}, Attrs().set("dims", perm), ref, g));
  };
  add("f32 [2,3,4] (2,0,1)", Kind::kContiguous, make_input({2, 3, 4}, D::f32, kV, 1), {2, 0, 1});
  add("f64 [3,4] (1,0)", Kind::kContiguous, make_input({3, 4}, D::f64, kV, 2), {1, 0}, true);
  add("f64 transposed [3,4,2] (1,2,0)", Kind::kStrided,
      make_input({3, 4, 2}, D::f64, kV, 3, L::kTransposed), {1, 2, 0}, true);
  add("f64 sliced [2,3] (-1,0)", Kind::kStrided, make_input({2, 3}, D::f64, kV, 4, L::kSliced),
      {-1, 0}, true);
  add("f32 expanded [3,4,2] (2,0,1)", Kind::kStrided,
      make_input({3, 4, 2}, D::f32, kV, 9, L::kExpanded), {2, 0, 1});
  add("f64 offset [2,3] (1,0)", Kind::kOther, make_input({2, 3}, D::f64, kV, 10, L::kOffset),
      {1, 0}, true);
  add("i64 [2,1,3] (0,2,1)", Kind::kContiguous, make_input({2, 1, 3}, D::i64, kV, 5), {0, 2, 1});
  add("bool [2,3] (1,0)", Kind::kContiguous, make_input({2, 3}, D::b8, {}, 6), {1, 0});
  add("f32 [2,0,3] (2,1,0)", Kind::kZeroSize, make_input({2, 0, 3}, D::f32, kV, 7), {2, 1, 0});
  add("f64 0-d ()", Kind::kOther, make_input({}, D::f64, kV, 8), {}, true);
  return cs;
}

// ---- expand ----
std::vector<OpCase> expand_cases() {
  std::vector<OpCase> cs;
  auto add = [&](std::string name, Kind k, Tensor x, Dims shape, Dims expect, bool g = false) {
    RefFn ref = [expect](const std::vector<Ref>& in) {
      Ref o = make_ref(in[0].dtype, expect);
      for (int64_t i = 0; i < o.numel(); ++i)
        o.v[static_cast<size_t>(i)] = bcast_at(in[0], unravel(i, expect));
      return std::vector<Ref>{o};
    };
    cs.push_back(make_case(std::move(name), k, {x}, Attrs().set("shape", shape), ref, g));
  };
  add("f32 [3,1] -> [3,4]", Kind::kBroadcast, make_input({3, 1}, D::f32, kV, 1), {3, 4}, {3, 4});
  add("f64 [1,4] -> [2,3,4]", Kind::kBroadcast, make_input({1, 4}, D::f64, kV, 2), {2, 3, 4},
      {2, 3, 4}, true);
  add("f64 [3,1] -> [-1,5]", Kind::kBroadcast, make_input({3, 1}, D::f64, kV, 3), {-1, 5}, {3, 5},
      true);
  add("f64 transposed [3,2] -> [4,3,2]", Kind::kStrided,
      make_input({3, 2}, D::f64, kV, 4, L::kTransposed), {4, 3, 2}, {4, 3, 2}, true);
  add("f64 sliced [2,1,3] -> [2,2,3]", Kind::kStrided,
      make_input({2, 1, 3}, D::f64, kV, 5, L::kSliced), {2, 2, 3}, {2, 2, 3}, true);
  add("f64 [2,3] -> [2,3] (same)", Kind::kContiguous, make_input({2, 3}, D::f64, kV, 6), {2, 3},
      {2, 3}, true);
  add("f64 0-d -> [2,3]", Kind::kBroadcast, make_input({}, D::f64, kV, 7), {2, 3}, {2, 3}, true);
  add("f64 offset [1,3] -> [2,2,3]", Kind::kOther, make_input({1, 3}, D::f64, kV, 13, L::kOffset),
      {2, 2, 3}, {2, 2, 3}, true);
  add("f32 expanded [2,3] -> [2,2,3]", Kind::kStrided,
      make_input({2, 3}, D::f32, kV, 14, L::kExpanded), {2, 2, 3}, {2, 2, 3});
  add("i64 [1,3] -> [2,3]", Kind::kBroadcast, make_input({1, 3}, D::i64, kV, 8), {2, 3}, {2, 3});
  add("bool [2,1] -> [2,2]", Kind::kBroadcast, make_input({2, 1}, D::b8, {}, 9), {2, 2}, {2, 2});
  add("f32 [0,1] -> [0,4]", Kind::kZeroSize, make_input({0, 1}, D::f32, kV, 10), {0, 4}, {0, 4});
  add("f32 [1] -> [0]", Kind::kZeroSize, make_input({1}, D::f32, kV, 11), {0}, {0});
  add("f32 [2] -> [0,2]", Kind::kZeroSize, make_input({2}, D::f32, kV, 12), {0, 2}, {0, 2});
  return cs;
}

// ---- slice ----
std::vector<OpCase> slice_cases() {
  std::vector<OpCase> cs;
  auto add = [&](std::string name, Kind k, Tensor x, int64_t dim, int64_t start, int64_t end,
                 int64_t step, bool g = false) {
    RefFn ref = [=](const std::vector<Ref>& in) {
      const Ref& x = in[0];
      const size_t d =
          static_cast<size_t>(dim < 0 ? dim + static_cast<int64_t>(x.shape.size()) : dim);
      Dims shape = x.shape;
      shape[d] = (end - start + step - 1) / step;
      Ref o = make_ref(x.dtype, shape);
      for (int64_t i = 0; i < o.numel(); ++i) {
        std::vector<int64_t> idx = unravel(i, shape);
        idx[d] = start + idx[d] * step;
        o.v[static_cast<size_t>(i)] = x.at(idx);
      }
      return std::vector<Ref>{o};
    };
    Attrs at;
    at.set("dim", dim).set("start", start).set("end", end).set("step", step);
    cs.push_back(make_case(std::move(name), k, {x}, at, ref, g));
  };
  add("f32 [4,5] d1 [1,4)", Kind::kContiguous, make_input({4, 5}, D::f32, kV, 1), 1, 1, 4, 1);
  add("f64 [5,4] d0 [1,5) step 2", Kind::kContiguous, make_input({5, 4}, D::f64, kV, 2), 0, 1, 5, 2,
      true);
  add("f64 [2,3,4] d-1 [0,4) step 3", Kind::kContiguous, make_input({2, 3, 4}, D::f64, kV, 3), -1,
      0, 4, 3, true);
  add("f64 transposed [4,6] d1 [2,6)", Kind::kStrided,
      make_input({4, 6}, D::f64, kV, 4, L::kTransposed), 1, 2, 6, 1, true);
  add("f64 sliced [3,5] d0 [0,3) step 2", Kind::kStrided,
      make_input({3, 5}, D::f64, kV, 5, L::kSliced), 0, 0, 3, 2, true);
  add("f64 offset [4,3] d0 [1,4) step 2", Kind::kOther,
      make_input({4, 3}, D::f64, kV, 10, L::kOffset), 0, 1, 4, 2, true);
  add("f32 expanded [3,4] d0 [1,3)", Kind::kStrided,
      make_input({3, 4}, D::f32, kV, 11, L::kExpanded), 0, 1, 3, 1);
  add("i64 [6] d0 [1,6) step 4", Kind::kContiguous, make_input({6}, D::i64, kV, 6), 0, 1, 6, 4);
  add("bool [3,3] d1 [0,2)", Kind::kContiguous, make_input({3, 3}, D::b8, {}, 7), 1, 0, 2, 1);
  add("f32 [3,4] d1 [2,2) (empty)", Kind::kZeroSize, make_input({3, 4}, D::f32, kV, 8), 1, 2, 2, 1);
  add("f32 [0,4] d1 [1,3)", Kind::kZeroSize, make_input({0, 4}, D::f32, kV, 9), 1, 1, 3, 1);
  return cs;
}

// ---- copy ----
std::vector<OpCase> copy_cases() {
  std::vector<OpCase> cs;
  RefFn ref = [](const std::vector<Ref>& in) { return std::vector<Ref>{in[0]}; };
  auto add = [&](std::string name, Kind k, Tensor x, bool g = false) {
    cs.push_back(make_case(std::move(name), k, {x}, {}, ref, g));
  };
  add("f32 [2,3]", Kind::kContiguous, make_input({2, 3}, D::f32, kV, 1));
  add("f64 [3,4]", Kind::kContiguous, make_input({3, 4}, D::f64, kV, 2), true);
  add("f64 transposed [3,4]", Kind::kStrided, make_input({3, 4}, D::f64, kV, 3, L::kTransposed),
      true);
  add("f64 sliced [2,3,2]", Kind::kStrided, make_input({2, 3, 2}, D::f64, kV, 4, L::kSliced), true);
  add("f32 expanded [3,4]", Kind::kStrided, make_input({3, 4}, D::f32, kV, 5, L::kExpanded));
  add("i64 transposed [2,3]", Kind::kStrided, make_input({2, 3}, D::i64, kV, 6, L::kTransposed));
  add("bool [5]", Kind::kContiguous, make_input({5}, D::b8, {}, 7));
  add("f16 sliced [2,3]", Kind::kStrided, make_input({2, 3}, D::f16, kV, 8, L::kSliced));
  add("bf16 [4]", Kind::kContiguous, make_input({4}, D::bf16, kV, 9));
  add("f32 [0,3]", Kind::kZeroSize, make_input({0, 3}, D::f32, kV, 10));
  add("f64 0-d", Kind::kOther, make_input({}, D::f64, kV, 11), true);
  add("f32 transposed [256,300] (parallel)", Kind::kStrided,
      make_input({256, 300}, D::f32, kV, 12, L::kTransposed));
  add("f64 offset [3,2]", Kind::kOther, make_input({3, 2}, D::f64, kV, 13, L::kOffset), true);
  return cs;
}

// ---- pad ----
std::vector<OpCase> pad_cases() {
  std::vector<OpCase> cs;
  auto add = [&](std::string name, Kind k, Tensor x, Dims pads, double value, bool g = false) {
    RefFn ref = [=](const std::vector<Ref>& in) {
      const Ref& x = in[0];
      const size_t r = x.shape.size();
      Dims shape = x.shape, lo(r, 0);
      for (size_t p = 0; p < pads.size() / 2; ++p) {
        lo[r - 1 - p] = pads[2 * p];
        shape[r - 1 - p] += pads[2 * p] + pads[2 * p + 1];
      }
      Ref o = make_ref(x.dtype, shape, convert(value, x.dtype));
      for (int64_t i = 0; i < o.numel(); ++i) {
        std::vector<int64_t> idx = unravel(i, shape);
        bool inside = true;
        for (size_t d = 0; d < r; ++d) {
          idx[d] -= lo[d];
          inside = inside && idx[d] >= 0 && idx[d] < x.shape[d];
        }
        if (inside) o.v[static_cast<size_t>(i)] = x.at(idx);
      }
      return std::vector<Ref>{o};
    };
    Attrs at;
    at.set("pads", pads).set("value", AttrValue(value));
    cs.push_back(make_case(std::move(name), k, {x}, at, ref, g));
  };
  add("f32 [2,3] (1,2)", Kind::kContiguous, make_input({2, 3}, D::f32, kV, 1), {1, 2}, 0.0);
  add("f64 [2,3] (1,0,0,2) value 1.5", Kind::kContiguous, make_input({2, 3}, D::f64, kV, 2),
      {1, 0, 0, 2}, 1.5, true);
  add("f64 transposed [3,4] (-1,1) crop", Kind::kStrided,
      make_input({3, 4}, D::f64, kV, 3, L::kTransposed), {-1, 1}, 0.0, true);
  add("f64 sliced [2,3,4] (0,0,1,1,2,0)", Kind::kStrided,
      make_input({2, 3, 4}, D::f64, kV, 4, L::kSliced), {0, 0, 1, 1, 2, 0}, -1.0, true);
  add("f64 [3,4] (2,-1,-1,0)", Kind::kContiguous, make_input({3, 4}, D::f64, kV, 5), {2, -1, -1, 0},
      0.25, true);
  add("f64 offset [2,3] (1,1,1,0)", Kind::kOther, make_input({2, 3}, D::f64, kV, 12, L::kOffset),
      {1, 1, 1, 0}, 0.5, true);
  add("f32 expanded [3,4] (-1,1,1,-1)", Kind::kStrided,
      make_input({3, 4}, D::f32, kV, 13, L::kExpanded), {-1, 1, 1, -1}, 2.0);
  add("i64 [3] (2,1) value 7", Kind::kContiguous, make_input({3}, D::i64, kV, 6), {2, 1}, 7.0);
  add("bool [2,2] (1,1) value 1", Kind::kContiguous, make_input({2, 2}, D::b8, {}, 7), {1, 1}, 1.0);
  add("f16 [2,2] (0,1) value 0.5", Kind::kContiguous, make_input({2, 2}, D::f16, kV, 8), {0, 1},
      0.5);
  add("f32 [0,3] (1,1)", Kind::kZeroSize, make_input({0, 3}, D::f32, kV, 9), {1, 1}, 2.0);
  add("f32 [2,0] (1,1) value 3", Kind::kZeroSize, make_input({2, 0}, D::f32, kV, 10), {1, 1}, 3.0);
  add("f32 [2,3] (-2,-1) -> [2,0]", Kind::kZeroSize, make_input({2, 3}, D::f32, kV, 11), {-2, -1},
      0.0);
  return cs;
}

// ---- cat ----
std::vector<OpCase> cat_cases() {
  std::vector<OpCase> cs;
  auto add = [&](std::string name, Kind k, std::vector<Tensor> xs, int64_t dim, DType out,
                 bool g = false) {
    RefFn ref = [=](const std::vector<Ref>& in) {
      std::vector<const Ref*> used;
      for (const Ref& r : in)
        if (!(r.shape.size() == 1 && r.shape[0] == 0)) used.push_back(&r);  // legacy skip
      if (used.empty()) return std::vector<Ref>{make_ref(out, {0})};
      const size_t r = used[0]->shape.size();
      const size_t d = static_cast<size_t>(dim < 0 ? dim + static_cast<int64_t>(r) : dim);
      Dims shape = used[0]->shape;
      shape[d] = 0;
      for (const Ref* t : used) shape[d] += t->shape[d];
      Ref o = make_ref(out, shape);
      for (int64_t i = 0; i < o.numel(); ++i) {
        std::vector<int64_t> idx = unravel(i, shape);
        for (const Ref* t : used) {
          if (idx[d] < t->shape[d]) {
            o.v[static_cast<size_t>(i)] = t->at(idx);
            break;
          }
          idx[d] -= t->shape[d];
        }
      }
      return std::vector<Ref>{o};
    };
    cs.push_back(make_case(std::move(name), k, std::move(xs), Attrs().set("dim", dim), ref, g));
  };
  add("f32 [2,3]+[1,3] d0", Kind::kContiguous,
      {make_input({2, 3}, D::f32, kV, 1), make_input({1, 3}, D::f32, kV, 2)}, 0, D::f32);
  add("f64 [2,3]+[2,2]+[2,1] d1", Kind::kContiguous,
      {make_input({2, 3}, D::f64, kV, 3), make_input({2, 2}, D::f64, kV, 4),
       make_input({2, 1}, D::f64, kV, 5)},
      1, D::f64, true);
  add("f64 transposed+sliced d-1", Kind::kStrided,
      {make_input({3, 2}, D::f64, kV, 6, L::kTransposed),
       make_input({3, 4}, D::f64, kV, 7, L::kSliced)},
      -1, D::f64, true);
  add("f64 [2,2,3] x3 d1", Kind::kContiguous,
      {make_input({2, 2, 3}, D::f64, kV, 8), make_input({2, 1, 3}, D::f64, kV, 9),
       make_input({2, 2, 3}, D::f64, kV, 10, L::kTransposed)},
      1, D::f64, true);
  add("f64 single", Kind::kContiguous, {make_input({2, 3}, D::f64, kV, 11)}, 0, D::f64, true);
  add("f64 offset + expanded d0", Kind::kOther,
      {make_input({2, 3}, D::f64, kV, 24, L::kOffset),
       make_input({2, 3}, D::f64, kV, 25, L::kExpanded)},
      0, D::f64);
  add("f16 [2] + f32 [1] + i64 [2] -> f32", Kind::kOther,
      {make_input({2}, D::f16, kV, 26), make_input({1}, D::f32, kV, 27),
       make_input({2}, D::i64, kV, 28)},
      0, D::f32);
  add("bool [2] + i32 [2] -> i32", Kind::kOther,
      {make_input({2}, D::b8, {}, 29), make_input({2}, D::i32, kV, 30)}, 0, D::i32);
  add("i64 [2] + f32 [3] -> f32", Kind::kOther,
      {make_input({2}, D::i64, kV, 12), make_input({3}, D::f32, kV, 13)}, 0, D::f32);
  add("bool [2] + bool [1]", Kind::kContiguous,
      {make_input({2}, D::b8, {}, 14), make_input({1}, D::b8, {}, 15)}, 0, D::b8);
  add("f16 [1,2] + [1,2] d0", Kind::kContiguous,
      {make_input({1, 2}, D::f16, kV, 16), make_input({1, 2}, D::f16, kV, 17)}, 0, D::f16);
  add("f32 [0,3]+[2,3] d0", Kind::kZeroSize,
      {make_input({0, 3}, D::f32, kV, 18), make_input({2, 3}, D::f32, kV, 19)}, 0, D::f32);
  add("f32 [0] (legacy skip) + [2,3]", Kind::kZeroSize,
      {make_input({0}, D::f32, kV, 20), make_input({2, 3}, D::f32, kV, 21)}, 1, D::f32);
  add("f32 [0]+[0] (all legacy-empty)", Kind::kZeroSize,
      {make_input({0}, D::f32, kV, 31), make_input({0}, D::f32, kV, 32)}, 0, D::f32);
  add("f32 [0,2]+[0,3] d1", Kind::kZeroSize,
      {make_input({0, 2}, D::f32, kV, 22), make_input({0, 3}, D::f32, kV, 23)}, 1, D::f32);
  return cs;
}

// ---- gather / index_select / scatter_add ----
std::vector<OpCase> gather_cases() {
  std::vector<OpCase> cs;
  auto add = [&](std::string name, Kind k, Tensor x, Tensor idx, int64_t dim, bool g = false) {
    RefFn ref = [dim](const std::vector<Ref>& in) {
      const Ref& x = in[0];
      const Ref& ix = in[1];
      const size_t d =
          static_cast<size_t>(dim < 0 ? dim + static_cast<int64_t>(x.shape.size()) : dim);
      Ref o = make_ref(x.dtype, ix.shape);
      for (int64_t i = 0; i < o.numel(); ++i) {
        std::vector<int64_t> idx = unravel(i, ix.shape);
        idx[d] = static_cast<int64_t>(ix.v[static_cast<size_t>(i)]);
        o.v[static_cast<size_t>(i)] = x.at(idx);
      }
      return std::vector<Ref>{o};
    };
    cs.push_back(make_case(std::move(name), k, {x, idx}, Attrs().set("dim", dim), ref, g));
  };
  add("f32 [3,4] d0 idx [2,4]", Kind::kContiguous, make_input({3, 4}, D::f32, kV, 1),
      index({2, 4}, 3, 2), 0);
  add("f64 [3,4] d1 idx [3,6]", Kind::kContiguous, make_input({3, 4}, D::f64, kV, 3),
      index({3, 6}, 4, 4), 1, true);
  add("f64 transposed [4,3] d1 idx transposed [4,5]", Kind::kStrided,
      make_input({4, 3}, D::f64, kV, 5, L::kTransposed),
      index({4, 5}, 3, 6, D::i64, L::kTransposed), 1, true);
  add("f64 sliced [3,4] d0 idx [2,2] (partial)", Kind::kStrided,
      make_input({3, 4}, D::f64, kV, 7, L::kSliced), index({2, 2}, 3, 8), 0, true);
  add("f64 offset x, offset idx", Kind::kOther, make_input({3, 4}, D::f64, kV, 17, L::kOffset),
      index({3, 2}, 4, 18, D::i64, L::kOffset), 1, true);
  add("f32 expanded x, expanded idx", Kind::kStrided,
      make_input({3, 4}, D::f32, kV, 19, L::kExpanded), index({3, 4}, 3, 20, D::i64, L::kExpanded),
      0);
  add("i64 [2,3,2] d2 idx i32 [2,3,3]", Kind::kOther, make_input({2, 3, 2}, D::i64, kV, 9),
      index({2, 3, 3}, 2, 10, D::i32), 2);
  add("bool [3,3] d0", Kind::kOther, make_input({3, 3}, D::b8, {}, 11), index({2, 3}, 3, 12), 0);
  add("f64 [2,3] d-1", Kind::kContiguous, make_input({2, 3}, D::f64, kV, 21), index({2, 4}, 3, 22),
      -1, true);
  add("f32 [3,4] d1 idx [0,4]", Kind::kZeroSize, make_input({3, 4}, D::f32, kV, 13),
      index({0, 4}, 4, 14), 1);
  add("f32 [3,4] d1 idx [3,0]", Kind::kZeroSize, make_input({3, 4}, D::f32, kV, 15),
      index({3, 0}, 4, 16), 1);
  return cs;
}

std::vector<OpCase> index_select_cases() {
  std::vector<OpCase> cs;
  auto add = [&](std::string name, Kind k, Tensor x, Tensor idx, int64_t dim, bool g = false) {
    RefFn ref = [dim](const std::vector<Ref>& in) {
      const Ref& x = in[0];
      const size_t d =
          static_cast<size_t>(dim < 0 ? dim + static_cast<int64_t>(x.shape.size()) : dim);
      Dims shape = x.shape;
      shape[d] = in[1].numel();
      Ref o = make_ref(x.dtype, shape);
      for (int64_t i = 0; i < o.numel(); ++i) {
        std::vector<int64_t> idx = unravel(i, shape);
        idx[d] = static_cast<int64_t>(in[1].v[static_cast<size_t>(idx[d])]);
        o.v[static_cast<size_t>(i)] = x.at(idx);
      }
      return std::vector<Ref>{o};
    };
    cs.push_back(make_case(std::move(name), k, {x, idx}, Attrs().set("dim", dim), ref, g));
  };
  add("f32 [3,4] d0 [3]", Kind::kContiguous, make_input({3, 4}, D::f32, kV, 1), index({3}, 3, 2),
      0);
  add("f64 [3,4] d1 [5]", Kind::kContiguous, make_input({3, 4}, D::f64, kV, 3), index({5}, 4, 4), 1,
      true);
  add("f64 transposed [4,3] d-1 sliced idx", Kind::kStrided,
      make_input({4, 3}, D::f64, kV, 5, L::kTransposed), index({4}, 3, 6, D::i64, L::kSliced), -1,
      true);
  add("f64 [2,3,2] d1 i32 idx", Kind::kContiguous, make_input({2, 3, 2}, D::f64, kV, 7),
      index({4}, 3, 8, D::i32), 1, true);
  add("f64 [3,2] d0 0-d idx", Kind::kOther, make_input({3, 2}, D::f64, kV, 9),
      from_doubles({2}, {}, D::i64), 0, true);
  add("i64 [3,3] d1", Kind::kOther, make_input({3, 3}, D::i64, kV, 10), index({2}, 3, 11), 1);
  add("f64 offset x, offset idx", Kind::kOther, make_input({3, 4}, D::f64, kV, 18, L::kOffset),
      index({3}, 3, 19, D::i64, L::kOffset), 0, true);
  add("f32 expanded x d1", Kind::kStrided, make_input({3, 4}, D::f32, kV, 20, L::kExpanded),
      index({2}, 4, 21), 1);
  add("bool [4] d0", Kind::kOther, make_input({4}, D::b8, {}, 12), index({6}, 4, 13), 0);
  add("f32 [3,4] d1 empty idx", Kind::kZeroSize, make_input({3, 4}, D::f32, kV, 14),
      index({0}, 4, 15), 1);
  add("f32 [0,4] d1", Kind::kZeroSize, make_input({0, 4}, D::f32, kV, 16), index({2}, 4, 17), 1);
  return cs;
}

std::vector<OpCase> scatter_add_cases() {
  std::vector<OpCase> cs;
  auto add = [&](std::string name, Kind k, Tensor x, Tensor idx, Tensor src, int64_t dim,
                 bool g = false) {
    RefFn ref = [dim](const std::vector<Ref>& in) {
      Ref o = in[0];
      const Ref& ix = in[1];
      const Ref& src = in[2];
      const size_t d =
          static_cast<size_t>(dim < 0 ? dim + static_cast<int64_t>(o.shape.size()) : dim);
      for (int64_t i = 0; i < ix.numel(); ++i) {
        std::vector<int64_t> idx = unravel(i, ix.shape);
        double s = src.at(idx);
        idx[d] = static_cast<int64_t>(ix.v[static_cast<size_t>(i)]);
        o.at(idx) += s;
      }
      if (o.dtype == D::b8)
        for (double& v : o.v) v = v != 0;
      return std::vector<Ref>{o};
    };
    cs.push_back(make_case(std::move(name), k, {x, idx, src}, Attrs().set("dim", dim), ref, g));
  };
  add("f32 [3,4] d0", Kind::kContiguous, make_input({3, 4}, D::f32, kV, 1), index({2, 4}, 3, 2),
      make_input({2, 4}, D::f32, kV, 3), 0);
  add("f64 [3,4] d1 idx [3,6] (duplicates)", Kind::kContiguous, make_input({3, 4}, D::f64, kV, 4),
      index({3, 6}, 4, 5), make_input({3, 6}, D::f64, kV, 6), 1, true);
  add("f64 idx [2,2] < src [3,4] (partial)", Kind::kContiguous, make_input({3, 4}, D::f64, kV, 7),
      index({2, 2}, 3, 8), make_input({3, 4}, D::f64, kV, 9), 0, true);
  add("f64 strided x/idx/src", Kind::kStrided, make_input({4, 3}, D::f64, kV, 10, L::kTransposed),
      index({4, 2}, 3, 11, D::i64, L::kSliced), make_input({4, 2}, D::f64, kV, 12, L::kTransposed),
      1, true);
  add("f64 offset x/idx/src", Kind::kOther, make_input({3, 4}, D::f64, kV, 25, L::kOffset),
      index({2, 4}, 3, 26, D::i64, L::kOffset), make_input({2, 4}, D::f64, kV, 27, L::kOffset), 0,
      true);
  add("f32 expanded idx/src", Kind::kStrided, make_input({3, 4}, D::f32, kV, 28),
      index({3, 4}, 4, 29, D::i64, L::kExpanded), make_input({3, 4}, D::f32, kV, 30, L::kExpanded),
      1);
  add("i64 [2,3,2] d2 i32 idx", Kind::kOther, make_input({2, 3, 2}, D::i64, kV, 13),
      index({2, 3, 3}, 2, 14, D::i32), make_input({2, 3, 3}, D::i64, kV, 15), 2);
  add("f64 [2,3] d-1", Kind::kContiguous, make_input({2, 3}, D::f64, kV, 31), index({2, 4}, 3, 32),
      make_input({2, 4}, D::f64, kV, 33), -1, true);
  add("f16 [3] d0", Kind::kOther, make_input({3}, D::f16, kV, 16), index({5}, 3, 17),
      make_input({5}, D::f16, kV, 18), 0);
  add("f32 [3,4] idx [0,4]", Kind::kZeroSize, make_input({3, 4}, D::f32, kV, 19),
      index({0, 4}, 3, 20), make_input({0, 4}, D::f32, kV, 21), 0);
  add("f32 [0,4] d1", Kind::kZeroSize, make_input({0, 4}, D::f32, kV, 22), index({0, 2}, 4, 23),
      make_input({0, 2}, D::f32, kV, 24), 1);
  return cs;
}

}  // namespace

std::vector<OpCase> movement_cases(OpId op) {
  switch (op) {
    case OpId::reshape:
      return reshape_cases();
    case OpId::permute:
      return permute_cases();
    case OpId::expand:
      return expand_cases();
    case OpId::slice:
      return slice_cases();
    case OpId::copy:
      return copy_cases();
    case OpId::pad:
      return pad_cases();
    case OpId::cat:
      return cat_cases();
    case OpId::gather:
      return gather_cases();
    case OpId::index_select:
      return index_select_cases();
    case OpId::scatter_add:
      return scatter_add_cases();
    default:
      return {};
  }
}

}  // namespace kiln::conformance
