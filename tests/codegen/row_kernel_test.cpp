// Row kernels (reductions over the inner dim): values a phase loop computes and
// stores for later loops (exp(x - max) of softmax), f32 sums accumulated in
// float chunks, NaN-tracked max/min, on rows of length 1, 7, 1024 and 4097, with
// -inf, NaN and all-equal rows, in f32/f16/bf16, reassociated or not.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "codegen/compare.h"
#include "codegen/kernel_test_util.h"
#include "kernels/kernel_cache.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"

namespace kiln::kir {
namespace {

using testing::Buffer;
using testing::Builder;
using RowKernels = testing::NoDiskCache;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int64_t kRowLengths[] = {1, 7, 1024, 4097};

// Runs `k` compiled (launch over the pool) and interpreted on the same inputs.
struct Outputs {
  std::vector<Buffer> jit, ref;
};
Outputs run_both(const Kernel& k, const std::vector<int64_t>& sizes, uint32_t seed) {
  std::mt19937 rng(seed);
  Outputs r;
  r.jit = testing::make_buffers(k, sizes, rng, [](DType t, std::mt19937& g) {
    if (is_floating(t)) return std::uniform_real_distribution<double>(-4, 4)(g);
    return static_cast<double>(static_cast<int>(g() % 7) - 3);
  });
  r.ref = r.jit;
  auto pj = testing::pointers(r.jit), pr = testing::pointers(r.ref);
  get_kernel(k)->launch(pj.data(), sizes.data());
  interpret(k, 0, work_items(k, sizes.data()), pr.data(), sizes.data());
  return r;
}

// "" if every output element of the compiled run is within `tol` (relative and
// absolute) of the interpreter's, NaN where it is NaN.
std::string compare(const Kernel& k, const Outputs& r, double tol) {
  for (size_t a = 0; a < k.args.size(); ++a) {
    if (!k.args[a].is_output) continue;
    for (int64_t i = 0; i < r.jit[a].numel; ++i) {
      const double x = r.jit[a].get(i), y = r.ref[a].get(i);
      const bool ok = std::isnan(y) ? std::isnan(x) : std::fabs(x - y) <= tol * (1 + std::fabs(y));
      if (!ok) return str("arg", a, " element ", i, ": compiled ", x, ", interpreter ", y);
    }
  }
  return "";
}

// Phase 0 max, phase 1 sum of e = exp(x - max), phase 2 sum of e * x (reads e
// again, from the row it was stored to), then two outputs: `first` = x * 2 is
// stored before `prob` = e / sum, and e / sum * the phase-2 sum. Every output
// overwrites a row a saved value may live in, so a wrong order shows.
Kernel three_phase_kernel(DType t, bool reassoc) {
  Builder b(2, str("three_phase_", dtype_name(t), reassoc ? "_r" : ""));
  b.k.reassoc = reassoc;
  int xa = b.in(t, {true, true});
  int first = b.out(t, {true, true}), prob = b.out(t, {true, true}), wsum = b.out(t, {true, true});
  int x = b.load(xa);
  int mx = b.reduce(OpId::max, x, 0, t);
  int e = b.op(OpId::exp, t, b.op(OpId::sub, t, x, mx));
  int s = b.reduce(OpId::sum, e, 1, t);
  int ex = b.reduce(OpId::sum, b.op(OpId::mul, t, e, x), 2, t);
  b.store(first, b.op(OpId::mul, t, x, b.cnst(t, 2)));
  int p = b.op(OpId::div, t, e, s);
  b.store(prob, p);
  b.store(wsum, b.op(OpId::mul, t, p, ex));
  return b.k;
}

// A value stored by one loop and read back by later loops equals the recomputed
// value: compiled matches the interpreter for every row length and dtype.
TEST_F(RowKernels, SavedValuesMatchInterpreter) {
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (bool reassoc : {true, false}) {
      const Kernel k = three_phase_kernel(t, reassoc);
      const double tol = t == DType::f32 ? 1e-4 : (t == DType::f16 ? 4e-3 : 3e-2);
      for (int64_t n : kRowLengths) {
        const Outputs r = run_both(k, {3, n}, static_cast<uint32_t>(n));
        EXPECT_EQ(compare(k, r, tol), "") << k.name << ", rows of " << n;
      }
    }
}

// The saved value needs an output of its own dtype: with an f32 value and only
// an f16 output, the final loop recomputes it (and is still right).
TEST_F(RowKernels, MixedDtypeOutputRecomputes) {
  Builder b(2, "softmax_to_f16");
  const auto f = DType::f32;
  int x = b.load(b.in(f, {true, true}));
  int o = b.out(DType::f16, {true, true});
  int e = b.op(OpId::exp, f, b.op(OpId::sub, f, x, b.reduce(OpId::max, x, 0, f)));
  int s = b.reduce(OpId::sum, e, 1, f);
  b.store(o, b.op(OpId::cast, DType::f16, b.op(OpId::div, f, e, s)));
  for (int64_t n : kRowLengths) {
    const Outputs r = run_both(b.k, {2, n}, 7);
    EXPECT_EQ(compare(b.k, r, 1e-3), "") << "rows of " << n;
  }
}

// Reassociated f32 sums of long rows keep double-like accuracy (float partial
// sums per chunk, chunks added in double): 2^20 copies of 0.1f, whose float
// running sums would drift by ~1e-4 relative.
TEST_F(RowKernels, LongRowSumStaysAccurate) {
  Builder b(2, "long_sum");
  const auto f = DType::f32;
  b.store(b.out(f, {true, false}), b.reduce(OpId::sum, b.load(b.in(f, {true, true})), 0, f));
  const int64_t n = 1 << 20;
  std::vector<float> x(static_cast<size_t>(n), 0.1f);
  float out = 0;
  void* ptrs[2] = {x.data(), &out};
  const int64_t sizes[2] = {1, n};
  get_kernel(b.k)->launch(ptrs, sizes);
  const double want = static_cast<double>(n) * static_cast<double>(0.1f);
  EXPECT_NEAR(out, want, 1e-6 * want);
}

// One phase holding a chunked f32 sum with a max, a min and an integer sum,
// whose accumulators carry across the sum's chunks (rows of 4097 have three).
TEST_F(RowKernels, MixedReductionsInOnePhase) {
  Builder b(2, "mixed_phase");
  const auto f = DType::f32;
  int x = b.load(b.in(f, {true, true}));
  int i = b.load(b.in(DType::i32, {true, true}));
  b.store(b.out(f, {true, false}), b.reduce(OpId::max, x, 0, f));
  b.store(b.out(f, {true, false}), b.reduce(OpId::sum, x, 0, f));
  b.store(b.out(f, {true, false}), b.reduce(OpId::min, x, 0, f));
  b.store(b.out(DType::i64, {true, false}), b.reduce(OpId::sum, i, 0, DType::i64));
  for (int64_t n : kRowLengths) {
    const Outputs r = run_both(b.k, {4, n}, static_cast<uint32_t>(n + 1));
    for (int64_t row = 0; row < 4; ++row) {
      const std::string what = str("rows of ", n, ", row ", row);
      EXPECT_EQ(r.jit[2].get(row), r.ref[2].get(row)) << "max, " << what;
      EXPECT_EQ(r.jit[4].get(row), r.ref[4].get(row)) << "min, " << what;
      EXPECT_EQ(r.jit[5].get(row), r.ref[5].get(row)) << "int sum, " << what;
      // Float partial sums of n terms of size ~2 (eager sums in double).
      EXPECT_NEAR(r.jit[3].get(row), r.ref[3].get(row), 1e-6 * static_cast<double>(n) + 1e-5)
          << "f32 sum, " << what;
    }
  }
}

// Reassociated max/min: NaN anywhere in a row gives NaN; -inf and +inf rows,
// all-equal rows and signed zeros give eager's values (either zero for ±0).
TEST_F(RowKernels, MaxMinPropagateNaN) {
  for (DType t : {DType::f32, DType::f64, DType::bf16}) {
    Builder b(2, str("maxmin_", dtype_name(t)));
    int x = b.load(b.in(t, {true, true}));
    b.store(b.out(t, {true, false}), b.reduce(OpId::max, x, 0, t));
    b.store(b.out(t, {true, false}), b.reduce(OpId::min, x, 0, t));
    for (int64_t n : kRowLengths) {
      const int64_t rows = 6;
      std::vector<Buffer> buf(3);
      for (int a = 0; a < 3; ++a) {
        buf[a].dtype = t;
        buf[a].numel = a == 0 ? rows * n : rows;
        buf[a].bytes.assign(static_cast<size_t>(buf[a].numel) * dtype_size(t), 0);
      }
      std::mt19937 rng(3);
      std::uniform_real_distribution<double> u(-5, 5);
      for (int64_t i = 0; i < rows * n; ++i) buf[0].set(i, u(rng));
      const int64_t last = n - 1;
      buf[0].set(0 * n + last, NAN);  // row 0: NaN at the end
      buf[0].set(1 * n, NAN);         // row 1: NaN first
      for (int64_t j = 0; j < n; ++j) {
        buf[0].set(2 * n + j, -kInf);                 // row 2: all -inf
        buf[0].set(3 * n + j, j % 2 ? 0.0 : -0.0);    // row 3: signed zeros
        buf[0].set(4 * n + j, 1.5);                   // row 4: all equal
        if (j % 3 == 0) buf[0].set(5 * n + j, kInf);  // row 5: some +inf
      }
      auto p = testing::pointers(buf);
      const int64_t sizes[2] = {rows, n};
      get_kernel(b.k)->launch(p.data(), sizes);
      const std::string what = str(dtype_name(t), ", rows of ", n);
      EXPECT_TRUE(std::isnan(buf[1].get(0)) && std::isnan(buf[2].get(0))) << what;
      EXPECT_TRUE(std::isnan(buf[1].get(1)) && std::isnan(buf[2].get(1))) << what;
      EXPECT_EQ(buf[1].get(2), -kInf) << what;
      EXPECT_EQ(buf[2].get(2), -kInf) << what;
      EXPECT_EQ(buf[1].get(3), 0.0) << what;
      EXPECT_EQ(buf[2].get(3), 0.0) << what;
      EXPECT_EQ(buf[1].get(4), 1.5) << what;
      EXPECT_EQ(buf[2].get(4), 1.5) << what;
      EXPECT_EQ(buf[1].get(5), kInf) << what;
      double mn = kInf;
      for (int64_t j = 0; j < n; ++j) mn = std::min(mn, buf[0].get(5 * n + j));
      EXPECT_EQ(buf[2].get(5), mn) << what;
    }
  }
}

// Rows with -inf entries, all -inf, all equal, and a NaN, over `n` columns.
Tensor special_rows(int64_t n, DType t) {
  Tensor x = randn({5, n}) * 3.0;
  std::vector<float> v = x.to_vector<float>();
  for (int64_t j = 0; j < n; ++j) {
    if (j % 3 == 1) v[static_cast<size_t>(j)] = -kInf;  // row 0: some -inf
    v[static_cast<size_t>(n + j)] = -kInf;              // row 1: all -inf (NaN out)
    v[static_cast<size_t>(2 * n + j)] = 0.25f;          // row 2: all equal
  }
  v[static_cast<size_t>(3 * n + n / 2)] = NAN;  // row 3: one NaN
  return from_vector<float>(v).reshape({5, n}).to(t);
}

// Compiled softmax / log_softmax equal eager on every row length, with special
// rows, in f32/f16/bf16, with and without reassociation.
TEST(RowKernelsCompiled, SoftmaxAndLogSoftmaxMatchEager) {
  testing::ScopedEnv cache("KILN_CACHE_DIR", "off");
  manual_seed(4);
  for (bool log : {false, true})
    for (bool reassoc : {true, false}) {
      auto fn = [log](const Tensor& x) { return log ? log_softmax(x, -1) : softmax(x, -1); };
      auto f = compile(fn, {.warmup = 0, .reassociate = reassoc});
      for (DType t : {DType::f32, DType::f16, DType::bf16})
        for (int64_t n : kRowLengths) {
          NoGradGuard ng;
          const Tensor x = special_rows(n, t);
          const double tol = t == DType::f32 ? 2e-5 : (t == DType::f16 ? 2e-3 : 2e-2);
          EXPECT_EQ(kiln::testing::diff_values(fn(x), f(x), tol), "")
              << (log ? "log_softmax " : "softmax ") << t << " rows of " << n
              << (reassoc ? "" : " (sequential)");
        }
    }
}

// Compiled layer_norm forward and backward equal eager on every row length.
TEST(RowKernelsCompiled, LayerNormMatchesEager) {
  testing::ScopedEnv cache("KILN_CACHE_DIR", "off");
  manual_seed(5);
  for (bool reassoc : {true, false})
    for (int64_t n : kRowLengths) {
      Tensor w = randn({n}), bias = randn({n});
      auto fn = [&](const Tensor& x) { return layer_norm(x, {n}, w, bias, 1e-5); };
      auto f = compile(fn, {.warmup = 0, .reassociate = reassoc});
      Tensor x = randn({6, n}) * 2.0 + 1.0;
      Tensor xe = x.detach().requires_grad_(), xc = x.detach().requires_grad_();
      Tensor g = randn({6, n});
      Tensor ye = fn(xe), yc = f(xc);
      EXPECT_EQ(kiln::testing::diff_values(ye, yc, 1e-4), "") << "rows of " << n;
      sum(ye * g).backward();
      sum(yc * g).backward();
      EXPECT_EQ(kiln::testing::diff_values(xe.grad(), xc.grad(), 1e-4), "")
          << "grad, rows of " << n;
    }
}

}  // namespace
}  // namespace kiln::kir
