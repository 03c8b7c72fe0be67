// Kernels with row reductions for the GPU printer's tests: softmax (with a
// row store of its logsumexp), layer norm, integer and bool sums, max/min with
// NaN, an index-order (reassoc = false) sum, and a rank-3 broadcast case.
#pragma once

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "codegen/kernel_test_util.h"

namespace kiln::cuda::testing {

struct RowKernel {
  kir::Kernel k;
  bool exact;  ///< results must equal the interpreter's bit for bit
};

inline kir::Kernel softmax_kernel(DType t) {
  kir::testing::Builder b(2, std::string("softmax_") + dtype_name(t));
  const int x = b.load(b.in(t, {true, true}));
  const int m = b.reduce(OpId::max, x, 0, t);
  const int e = b.op(OpId::exp, t, b.op(OpId::sub, t, x, m));
  const int s = b.reduce(OpId::sum, e, 1, t);
  b.store(b.out(t, {true, true}), b.op(OpId::div, t, e, s));
  b.store(b.out(t, {true, false}), b.op(OpId::add, t, b.op(OpId::log, t, s), m));
  return b.k;
}

/// log_softmax: (x - max) - log(sum exp(x - max)); x - max is used by the
/// sum's phase and by the store.
inline kir::Kernel log_softmax_kernel(DType t) {
  kir::testing::Builder b(2, std::string("log_softmax_") + dtype_name(t));
  const int x = b.load(b.in(t, {true, true}));
  const int d = b.op(OpId::sub, t, x, b.reduce(OpId::max, x, 0, t));
  const int s = b.reduce(OpId::sum, b.op(OpId::exp, t, d), 1, t);
  b.store(b.out(t, {true, true}), b.op(OpId::sub, t, d, b.op(OpId::log, t, s)));
  return b.k;
}

inline kir::Kernel layer_norm_kernel(int64_t inner) {
  const DType f = DType::f32;
  kir::testing::Builder b(2, "layer_norm");
  const int x = b.load(b.in(f, {true, true}));
  const int w = b.load(b.in(f, {false, true}));
  const int inv_n = b.cnst(f, 1.0 / static_cast<double>(inner));
  const int mean = b.op(OpId::mul, f, b.reduce(OpId::sum, x, 0, f), inv_n);
  const int d = b.op(OpId::sub, f, x, mean);
  const int var = b.op(OpId::mul, f, b.reduce(OpId::sum, b.op(OpId::mul, f, d, d), 1, f), inv_n);
  const int rstd = b.op(OpId::rsqrt, f, b.op(OpId::add, f, var, b.cnst(f, 1e-5)));
  b.store(b.out(f, {true, true}), b.op(OpId::mul, f, b.op(OpId::mul, f, d, rstd), w));
  b.store(b.out(f, {true, false}), rstd);
  return b.k;
}

/// An input value for the row kernels: in [-3, 3] with a NaN now and then,
/// small integers, bools mostly false.
inline double row_value(DType t, std::mt19937& g) {
  if (t == DType::b8) return static_cast<double>(g() % 7 == 0);
  if (!is_floating(t))
    return static_cast<double>(static_cast<int>(g() % 200) - (t == DType::u8 ? 0 : 100));
  if (g() % 97 == 0) return std::nan("");
  return std::uniform_real_distribution<double>(-3, 3)(g);
}

inline std::vector<RowKernel> row_kernels() {
  std::vector<RowKernel> out;
  out.push_back({softmax_kernel(DType::f32), false});
  out.push_back({softmax_kernel(DType::f16), false});
  out.push_back({softmax_kernel(DType::f64), false});
  out.push_back({layer_norm_kernel(53), false});
  {  // integer sums in i64 (wrapping), a bool sum, max/min of every kind
    kir::testing::Builder b(2, "int_sums");
    const int x = b.load(b.in(DType::i32, {true, true}));
    b.store(b.out(DType::i64, {true, false}),
            b.reduce(OpId::sum, b.op(OpId::cast, DType::i64, x), 0, DType::i64));
    b.store(b.out(DType::i32, {true, false}), b.reduce(OpId::max, x, 0, DType::i32));
    const int u = b.load(b.in(DType::u8, {true, true}));
    b.store(b.out(DType::u8, {true, false}), b.reduce(OpId::min, u, 0, DType::u8));
    const int f = b.load(b.in(DType::f32, {true, true}));
    b.store(b.out(DType::f32, {true, false}), b.reduce(OpId::max, f, 0, DType::f32));
    b.store(b.out(DType::f32, {true, false}), b.reduce(OpId::min, f, 0, DType::f32));
    const int c = b.load(b.in(DType::b8, {true, true}));
    b.store(b.out(DType::b8, {true, false}), b.reduce(OpId::max, c, 0, DType::b8));
    out.push_back({b.k, true});
  }
  {  // index order: the GPU must equal the interpreter exactly
    kir::testing::Builder b(2, "ordered_sum");
    b.k.reassoc = false;
    const int x = b.load(b.in(DType::f32, {true, true}));
    const int s = b.reduce(OpId::sum, b.op(OpId::mul, DType::f32, x, x), 0, DType::f32);
    b.store(b.out(DType::f32, {true, false}), s);
    b.store(b.out(DType::f32, {true, true}), b.op(OpId::div, DType::f32, x, s));
    out.push_back({b.k, true});
  }
  {  // rank 3, an input broadcast along the middle dim, a row store needing no reduction
    kir::testing::Builder b(3, "rank3");
    const int x = b.load(b.in(DType::f32, {true, true, true}));
    const int y = b.load(b.in(DType::f32, {true, false, true}));
    const int r = b.load(b.in(DType::f32, {true, true, false}));
    const int s = b.reduce(OpId::sum, b.op(OpId::mul, DType::f32, x, y), 0, DType::f32);
    b.store(b.out(DType::f32, {true, true, false}), b.op(OpId::add, DType::f32, s, r));
    b.store(b.out(DType::f32, {true, true, false}), b.op(OpId::neg, DType::f32, r));
    out.push_back({b.k, false});
  }
  return out;
}

/// Each output element of a row kernel's run `got` against the interpreter's
/// `ref`: equal (NaN as NaN) or, unless `exact`, within a reordered sum's
/// rounding (2e-5; f16 2e-3); the first 3 misses per argument fail, naming `what`.
inline void expect_like_interpreter(const kir::Kernel& k,
                                    const std::vector<kir::testing::Buffer>& got,
                                    const std::vector<kir::testing::Buffer>& ref, bool exact,
                                    const std::string& what) {
  for (size_t a = 0; a < k.args.size(); ++a) {
    if (!k.args[a].is_output) continue;
    int bad = 0;
    for (int64_t e = 0; e < ref[a].numel && bad < 3; ++e) {
      const double want = ref[a].get(e), have = got[a].get(e);
      bool same = (std::isnan(want) && std::isnan(have)) || want == have;
      if (!same && !exact) {
        const double tol = k.args[a].dtype == DType::f16 ? 2e-3 : 2e-5;
        same = std::abs(want - have) <= tol * (1 + std::abs(want));
      }
      if (same) continue;
      ++bad;
      ADD_FAILURE() << what << " arg " << a << " element " << e << ": GPU " << have
                    << ", interpreter " << want;
    }
  }
}

}  // namespace kiln::cuda::testing
