// Kernel IR: canonical text, verifier errors, and compiled kernels against the
// reference interpreter and the eager ops (pointwise chains with broadcasts,
// multi-phase reductions, partial ranges, several sizes per compiled kernel).
#include "kernels/kernel_ir.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "codegen/kernel_test_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/llvm/llvm_jit.h"
#include "kiln/error.h"

namespace kiln::kir {
namespace {

using testing::Buffer;
using testing::Builder;
using KernelIr = testing::NoDiskCache;

double uniform(DType t, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-3, 3);
  if (t == DType::b8) return rng() % 2;
  if (t == DType::u8) return rng() % 256;
  if (!is_floating(t)) return static_cast<double>(static_cast<int>(rng() % 41) - 20);
  return u(rng);
}

// Runs `k` (compiled) and the interpreter on the same inputs; returns both outputs.
struct Outputs {
  std::vector<Buffer> jit, ref;
};
Outputs run_both(const Kernel& k, const std::vector<int64_t>& sizes, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  Outputs r;
  r.jit = testing::make_buffers(k, sizes, rng, uniform);
  r.ref = r.jit;
  auto lk = get_kernel(k);
  auto pj = testing::pointers(r.jit), pr = testing::pointers(r.ref);
  lk->launch(pj.data(), sizes.data());
  interpret(k, 0, work_items(k, sizes.data()), pr.data(), sizes.data());
  return r;
}

// Max relative difference between outputs (NaN must match NaN).
double max_diff(const Kernel& k, const Outputs& r) {
  double m = 0;
  for (size_t a = 0; a < k.args.size(); ++a) {
    if (!k.args[a].is_output) continue;
    for (int64_t i = 0; i < r.jit[a].numel; ++i) {
      const double x = r.jit[a].get(i), y = r.ref[a].get(i);
      if (std::isnan(x) || std::isnan(y)) {
        if (std::isnan(x) != std::isnan(y)) return INFINITY;
        continue;
      }
      if (x == y) continue;
      m = std::max(m, std::fabs(x - y) / std::max(1e-30, std::fabs(y)));
    }
  }
  return m;
}

// The canonical text lists args, expressions, reductions and stores in order,
// with exact constants; equal kernels print equal text.
TEST_F(KernelIr, CanonicalText) {
  Builder b(2, "tiny");
  int x = b.load(b.in(DType::f32, {true, true}));
  int m = b.reduce(OpId::max, x, 0, DType::f32);
  int y = b.op(OpId::sub, DType::f32, x, m);
  b.store(b.out(DType::f32, {true, true}), b.op(OpId::mul, DType::f32, y, b.cnst(DType::f32, 0.1)));
  b.store(b.out(DType::f32, {true, false}), m);
  EXPECT_EQ(to_string(b.k),
            "kernel tiny rank 2 reassoc 1\n"
            "  arg0 in f32 dd\n"
            "  arg1 out f32 dd\n"
            "  arg2 out f32 db\n"
            "  %0 = load f32 arg0\n"
            "  %1 = reduced f32 r0\n"
            "  %2 = sub f32 %0, %1\n"
            "  %3 = const f32 0.10000000000000001\n"
            "  %4 = mul f32 %2, %3\n"
            "  r0 = max f32 %0 phase 0\n"
            "  store arg1 %4\n"
            "  store arg2 %1\n");
  EXPECT_NO_THROW(verify(b.k));
  EXPECT_EQ(b.k.num_phases(), 1);
  const int64_t sizes[] = {3, 5};
  EXPECT_EQ(work_items(b.k, sizes), 3);
  Kernel other = b.k;
  EXPECT_EQ(to_string(other), to_string(b.k));
  other.exprs[3].value = 0.2;
  EXPECT_NE(to_string(other), to_string(b.k));
}

// Broken kernels are kiln::Errors naming the kernel and the bad entry.
TEST_F(KernelIr, VerifierNamesTheProblem) {
  auto expect = [](const Kernel& k, const std::string& what) {
    try {
      verify(k);
      ADD_FAILURE() << "expected an error containing: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("[kir] kernel 'bad'"), std::string::npos) << e.what();
    }
  };
  const auto f = DType::f32;
  {
    Builder b(2, "bad");
    int x = b.load(b.in(f, {true, true}));
    b.store(b.out(DType::i64, {true, true}), b.op(OpId::add, f, x, x));
    expect(b.k, "a f32 value into a i64 arg");
  }
  {
    Builder b(1, "bad");
    int x = b.load(b.in(f, {true}));
    b.store(b.out(f, {true}), b.op(OpId::add, f, x, 7));
    expect(b.k, "must refer to an earlier expression");
  }
  {
    Builder b(1, "bad");
    int x = b.load(b.in(DType::i32, {true}));
    b.store(b.out(DType::i32, {true}), b.op(OpId::exp, DType::i32, x));
    expect(b.k, "exp needs a floating operand");
  }
  {
    Builder b(1, "bad");
    int x = b.load(b.in(f, {true}));
    b.store(b.out(f, {true}), b.op(OpId::matmul, f, x, x));
    expect(b.k, "matmul is not an elementwise op");
  }
  {
    Builder b(2, "bad");
    int x = b.load(b.in(f, {true, true}));
    b.store(b.out(f, {true, false}), x);
    expect(b.k, "pointwise kernels cannot store to arg1");
  }
  {
    Builder b(2, "bad");
    int x = b.load(b.in(f, {true, true}));
    int s = b.reduce(OpId::sum, x, 0, f);
    b.store(b.out(f, {true, false}), b.op(OpId::add, f, s, x));
    expect(b.k, "varies along the inner dim");
  }
  {
    Builder b(2, "bad");
    int x = b.load(b.in(f, {true, true}));
    int s = b.reduce(OpId::sum, x, 0, f);
    int t = b.reduce(OpId::max, b.op(OpId::sub, f, x, s), 0, f);
    b.store(b.out(f, {true, false}), t);
    expect(b.k, "reads a reduction of phase 0");
  }
  {
    Builder b(1, "bad");
    b.out(f, {true});
    expect(b.k, "output arg0 is stored 0 times");
  }
  {
    Builder b(2, "bad");
    int x = b.load(b.in(f, {true}));
    b.store(b.out(f, {true, true}), x);
    expect(b.k, "arg0 has 1 dims, the kernel 2");
  }
  {
    Builder b(1, "bad");
    b.store(b.out(DType::u8, {true}), b.cnst(DType::u8, 300));
    expect(b.k, "u8 constant 300");
  }
  {
    Builder b(1, "bad");
    int x = b.load(b.in(f, {true}));
    b.store(b.out(f, {true}), b.op(OpId::where, f, x, x, x));
    expect(b.k, "where needs (bool, T, T)");
  }
}

// out = exp(x * row + col - scalar) over [R, C], row: [R, 1], col: [1, C], scalar: [1, 1].
Kernel broadcast_chain() {
  Builder b(2, "chain");
  const auto f = DType::f32;
  int x = b.load(b.in(f, {true, true}));
  int row = b.load(b.in(f, {true, false}));
  int col = b.load(b.in(f, {false, true}));
  int sc = b.load(b.in(f, {false, false}));
  int o = b.out(f, {true, true});
  int t = b.op(OpId::mul, f, x, row);
  t = b.op(OpId::add, f, t, col);
  t = b.op(OpId::sub, f, t, sc);
  t = b.op(OpId::exp, f, t);
  b.store(o, t);
  return b.k;
}

// A broadcast chain matches the interpreter and the eager ops (exp within an
// ulp), at several sizes.
TEST_F(KernelIr, PointwiseBroadcastChain) {
  Kernel k = broadcast_chain();
  for (std::vector<int64_t> sizes : {std::vector<int64_t>{3, 5}, {17, 33}, {1, 1000}, {256, 257}}) {
    Outputs r = run_both(k, sizes);
    EXPECT_EQ(max_diff(k, r), 0.0) << sizes[0] << "x" << sizes[1];
    Tensor x = testing::to_tensor(r.ref[0], {sizes[0], sizes[1]});
    Tensor row = testing::to_tensor(r.ref[1], {sizes[0], 1});
    Tensor col = testing::to_tensor(r.ref[2], {1, sizes[1]});
    Tensor sc = testing::to_tensor(r.ref[3], {1, 1});
    Tensor want = exp(x * row + col - sc);
    Tensor got = testing::to_tensor(r.ref[4], {sizes[0], sizes[1]});
    // Eager calls libm's exp; kernels its expansion (math_expand.h), within 1 ulp.
    EXPECT_TRUE(allclose(got, want, 2.4e-7, 0)) << "interpreter differs from eager";
  }
}

// softmax over the last dim: phase 0 max, phase 1 sum of exp(x - max), then exp(x - max) / sum.
Kernel softmax_kernel() {
  Builder b(2, "softmax");
  const auto f = DType::f32;
  int xa = b.in(f, {true, true}), oa = b.out(f, {true, true});
  int x = b.load(xa);
  int mx = b.reduce(OpId::max, x, 0, f);
  int sh = b.op(OpId::sub, f, x, mx);
  int e = b.op(OpId::exp, f, sh);
  int s = b.reduce(OpId::sum, e, 1, f);
  b.store(oa, b.op(OpId::div, f, e, s));
  return b.k;
}

TEST_F(KernelIr, SoftmaxMatchesEager) {
  Kernel k = softmax_kernel();
  for (std::vector<int64_t> sizes : {std::vector<int64_t>{4, 7}, {33, 100}, {5, 1}}) {
    Outputs r = run_both(k, sizes);
    EXPECT_LE(max_diff(k, r), 1e-6);
    Tensor x = testing::to_tensor(r.ref[0], {sizes[0], sizes[1]});
    Tensor got = testing::to_tensor(r.jit[1], {sizes[0], sizes[1]});
    Tensor want = softmax(x, -1);
    EXPECT_TRUE(allclose(got, want, 1e-5, 1e-6));
  }
}

// layer_norm over the last dim (no affine): phase 0 sum(x), phase 1 sum((x - mean)^2);
// the mean and rstd are row outputs, as a fused forward would save them.
Kernel layer_norm_kernel() {
  Builder b(2, "layer_norm");
  const auto f = DType::f32;
  int xa = b.in(f, {true, true}), na = b.in(f, {false, false});
  int oa = b.out(f, {true, true}), ma = b.out(f, {true, false}), ra = b.out(f, {true, false});
  int x = b.load(xa), n = b.load(na);
  int mean = b.op(OpId::div, f, b.reduce(OpId::sum, x, 0, f), n);
  int c = b.op(OpId::sub, f, x, mean);
  int var = b.op(OpId::div, f, b.reduce(OpId::sum, b.op(OpId::mul, f, c, c), 1, f), n);
  int rstd = b.op(OpId::rsqrt, f, b.op(OpId::add, f, var, b.cnst(f, 1e-5)));
  b.store(oa, b.op(OpId::mul, f, c, rstd));
  b.store(ma, mean);
  b.store(ra, rstd);
  return b.k;
}

TEST_F(KernelIr, LayerNormMatchesEager) {
  Kernel k = layer_norm_kernel();
  for (std::vector<int64_t> sizes : {std::vector<int64_t>{6, 64}, {3, 1000}, {1, 3}}) {
    std::mt19937 rng(3);
    auto bufs = testing::make_buffers(k, sizes, rng, uniform);
    bufs[1].set(0, static_cast<double>(sizes[1]));
    auto p = testing::pointers(bufs);
    get_kernel(k)->launch(p.data(), sizes.data());
    Tensor x = testing::to_tensor(bufs[0], {sizes[0], sizes[1]});
    Tensor want = layer_norm(x, {sizes[1]}, Tensor(), Tensor(), 1e-5);
    EXPECT_TRUE(allclose(testing::to_tensor(bufs[2], {sizes[0], sizes[1]}), want, 1e-4, 1e-5));
    EXPECT_TRUE(
        allclose(testing::to_tensor(bufs[3], {sizes[0], 1}), mean(x, {1}, true), 1e-5, 1e-6));
  }
}

// A kernel runs correctly on any split of its work items into (begin, end)
// chunks, including chunks that start and end inside rows.
TEST_F(KernelIr, ArbitraryRangeSplits) {
  for (const Kernel& k : {broadcast_chain(), softmax_kernel(), layer_norm_kernel()}) {
    const std::vector<int64_t> sizes{7, 13};
    std::mt19937 rng(5);
    auto whole = testing::make_buffers(k, sizes, rng, uniform);
    auto split = whole;
    auto lk = get_kernel(k);
    auto pw = testing::pointers(whole), ps = testing::pointers(split);
    const int64_t n = work_items(k, sizes.data());
    (*lk)(0, n, pw.data(), sizes.data());
    for (int64_t b = 0; b < n;) {
      const int64_t e = std::min<int64_t>(n, b + 1 + static_cast<int64_t>(rng() % 17));
      (*lk)(b, e, ps.data(), sizes.data());
      b = e;
    }
    (*lk)(3, 3, ps.data(), sizes.data());  // empty range: nothing happens
    for (size_t a = 0; a < k.args.size(); ++a)
      EXPECT_EQ(whole[a].bytes, split[a].bytes) << k.name << " arg" << a;
  }
}

// Column sums: accumulating stores add every element of the launched range
// into its column's f64 partial, compiled as in the interpreter, from pointwise
// kernels and from the final loop of a row kernel; ranges split anywhere add
// up to the whole (layer_norm's weight-gradient product, dy * xhat).
TEST_F(KernelIr, ColumnSumsAccumulateIntoTheirColumns) {
  const auto f = DType::f32, d = DType::f64;
  Builder pw(2, "colsum");
  int xa = pw.in(f, {true, true}), ya = pw.out(f, {true, true}), ca = pw.out(d, {false, true});
  int e = pw.op(OpId::exp, f, pw.load(xa));
  pw.store(ya, e);
  pw.k.stores.push_back(Store{ca, pw.op(OpId::cast, d, e), true});
  Kernel ln = layer_norm_kernel();  // plus the column sums of its output
  const int cast = static_cast<int>(ln.exprs.size());
  ln.exprs.push_back(Expr::make_op(OpId::cast, d, ln.stores.front().expr));
  ln.args.push_back(Arg{d, true, {false, true}});
  ln.stores.push_back(Store{static_cast<int>(ln.args.size()) - 1, cast, true});
  EXPECT_NE(to_string(pw.k).find("accumulate arg2 %"), std::string::npos) << to_string(pw.k);
  for (const Kernel& k : {pw.k, ln}) {
    for (std::vector<int64_t> sizes : {std::vector<int64_t>{7, 13}, {33, 100}, {1, 5}}) {
      const std::string what = str(k.name, " ", sizes[0], "x", sizes[1]);
      std::mt19937 rng(3);
      auto whole = testing::make_buffers(k, sizes, rng, uniform);
      if (k.name == "layer_norm") whole[1].set(0, static_cast<double>(sizes[1]));  // its row size
      auto split = whole, ref = whole;
      auto lk = get_kernel(k);
      auto pw_ = testing::pointers(whole), ps = testing::pointers(split),
           pr = testing::pointers(ref);
      const int64_t n = work_items(k, sizes.data());
      (*lk)(0, n, pw_.data(), sizes.data());
      interpret(k, 0, n, pr.data(), sizes.data());
      for (int64_t b = 0; b < n;) {
        const int64_t e2 = std::min<int64_t>(n, b + 1 + static_cast<int64_t>(rng() % 5));
        (*lk)(b, e2, ps.data(), sizes.data());
        b = e2;
      }
      const size_t c = k.args.size() - 1;
      // The stored value, summed over rows in double: the column sums.
      const size_t stored = static_cast<size_t>(k.stores.front().arg);
      for (int64_t j = 0; j < sizes[1]; ++j) {
        double want = 0;
        for (int64_t r = 0; r < sizes[0]; ++r) want += ref[stored].get(r * sizes[1] + j);
        EXPECT_NEAR(ref[c].get(j), want, 1e-12 * (1 + std::fabs(want))) << what << " col " << j;
        EXPECT_NEAR(whole[c].get(j), want, 1e-5 * (1 + std::fabs(want))) << what << " col " << j;
        EXPECT_NEAR(split[c].get(j), want, 1e-5 * (1 + std::fabs(want))) << what << " col " << j;
      }
    }
  }
  // Column-sum arguments must be f64 and broadcast along the rows.
  Kernel bad = pw.k;
  bad.args[2].dense = {true, true};
  EXPECT_THROW(verify(bad), Error);
  bad = pw.k;
  bad.args[2].dtype = DType::f32;
  EXPECT_THROW(verify(bad), Error);
}

// One compiled kernel serves every size (sizes are run-time arguments), and
// the cache returns the same code for each.
TEST_F(KernelIr, OneKernelManySizes) {
  Kernel k = broadcast_chain();
  auto first = get_kernel(k);
  for (std::vector<int64_t> sizes : {std::vector<int64_t>{1, 1}, {2, 9}, {64, 3}, {5, 4099}}) {
    KernelSource src;
    auto lk = get_kernel(k, &src);
    EXPECT_EQ(lk.get(), first.get());
    EXPECT_EQ(src, KernelSource::kMemory);
    Outputs r = run_both(k, sizes, static_cast<uint32_t>(sizes[1]));
    EXPECT_LE(max_diff(k, r), 4.0 / (1 << 23)) << sizes[0] << "x" << sizes[1];
  }
}

// Rank 1 and rank 3 kernels, a zero-size dim, and a reduction over an empty inner dim.
TEST_F(KernelIr, RanksAndEmptyDims) {
  {
    Builder b(3, "rank3");
    const auto f = DType::f32;
    int x = b.load(b.in(f, {true, false, true})), y = b.load(b.in(f, {false, true, true}));
    int o = b.out(f, {true, true, true});
    b.store(o, b.op(OpId::maximum, f, x, y));
    for (std::vector<int64_t> sizes : {std::vector<int64_t>{2, 3, 5}, {4, 1, 33}, {3, 0, 2}}) {
      Outputs r = run_both(b.k, sizes);
      EXPECT_EQ(max_diff(b.k, r), 0);
    }
  }
  {
    Builder b(1, "rank1_sum");
    const auto f = DType::f32;
    int s = b.reduce(OpId::sum, b.load(b.in(f, {true})), 0, f);
    b.store(b.out(f, {false}), s);
    for (int64_t n : {0, 1, 100}) {
      std::vector<int64_t> sizes{n};
      Outputs r = run_both(b.k, sizes);
      EXPECT_LE(max_diff(b.k, r), 1e-6);
      if (n == 0) {
        EXPECT_EQ(r.jit[1].get(0), 0.0);
      }
    }
  }
}

// ---- random kernels ----

// A random kernel over f32 with exact ops only (no transcendental, sums in
// sequential order), so compiled and interpreted results must agree bit for bit.
Kernel random_kernel(std::mt19937& rng, bool reductions) {
  const int rank = 1 + static_cast<int>(rng() % 3);
  Builder b(rank, "random");
  b.k.reassoc = false;
  const auto f = DType::f32;
  std::vector<int> pool;
  const int nin = 2 + static_cast<int>(rng() % 2);
  for (int i = 0; i < nin; ++i) {
    std::vector<bool> dense;
    for (int d = 0; d < rank; ++d) dense.push_back(rng() % 4 != 0);
    pool.push_back(b.load(b.in(f, dense)));
  }
  pool.push_back(b.cnst(f, 0.5 + static_cast<double>(rng() % 5)));
  auto pick = [&] { return pool[rng() % pool.size()]; };
  auto grow = [&](int steps) {
    for (int s = 0; s < steps; ++s) {
      static const OpId un[] = {OpId::neg, OpId::abs, OpId::relu, OpId::sqrt, OpId::sign};
      static const OpId bin[] = {OpId::add, OpId::sub,     OpId::mul,
                                 OpId::div, OpId::maximum, OpId::minimum};
      switch (rng() % 4) {
        case 0:
          pool.push_back(b.op(un[rng() % 5], f, pick()));
          break;
        case 3: {
          int c = b.op(rng() % 2 ? OpId::gt : OpId::le, DType::b8, pick(), pick());
          pool.push_back(b.op(OpId::where, f, c, pick(), pick()));
          break;
        }
        default:
          pool.push_back(b.op(bin[rng() % 6], f, pick(), pick()));
      }
    }
  };
  grow(3 + static_cast<int>(rng() % 6));
  if (reductions) {
    pool.push_back(b.reduce(rng() % 2 ? OpId::sum : OpId::max, pool.back(), 0, f));
    const int row_value = pool.back();
    grow(2 + static_cast<int>(rng() % 4));
    const int phase = 1;  // may read r0
    pool.push_back(b.reduce(rng() % 2 ? OpId::sum : OpId::min, pool.back(), phase, f));
    std::vector<bool> row_dense(static_cast<size_t>(rank), true);
    row_dense.back() = false;
    b.store(b.out(f, row_dense), b.op(OpId::mul, f, row_value, pool.back()));
    grow(2);
  }
  std::vector<bool> all(static_cast<size_t>(rank), true);
  b.store(b.out(f, all), pool.back());
  b.store(b.out(f, all), pool[pool.size() - 2]);
  return b.k;
}

// The same random kernel written with eager tensor ops (reductions with keepdim).
std::vector<Tensor> eager_eval(const Kernel& k, const std::vector<Tensor>& args,
                               const Dims& shape) {
  std::vector<Tensor> v(k.exprs.size()), red(k.reductions.size());
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    const Expr& e = k.exprs[i];
    if (e.kind == ExprKind::kLoad) v[i] = args[static_cast<size_t>(e.arg)];
    if (e.kind == ExprKind::kConst) v[i] = full({}, e.value, e.dtype);
    if (e.kind == ExprKind::kReduced) {
      const Reduction& r = k.reductions[static_cast<size_t>(e.arg)];
      const Tensor x = v[static_cast<size_t>(r.expr)].expand(shape);  // reduces over the whole dim
      v[i] = r.op == OpId::sum ? sum(x, {-1}, true)
                               : (r.op == OpId::max ? amax(x, {-1}, true) : amin(x, {-1}, true));
    }
    if (e.kind == ExprKind::kOp) {
      std::vector<Tensor> in;
      if (e.a >= 0) in.push_back(v[static_cast<size_t>(e.a)]);
      if (e.b >= 0) in.push_back(v[static_cast<size_t>(e.b)]);
      if (e.c >= 0) in.push_back(v[static_cast<size_t>(e.c)]);
      v[i] = dispatch1(e.op, std::span<const Tensor>(in));
    }
  }
  std::vector<Tensor> out;
  for (const Store& s : k.stores) out.push_back(v[static_cast<size_t>(s.expr)]);
  return out;
}

// Random pointwise and reduction kernels: compiled == interpreter exactly, on
// random (begin, end) splits; the interpreter matches the same math in eager ops.
TEST_F(KernelIr, RandomKernelsMatchInterpreterAndEager) {
  std::mt19937 rng(2024);
  for (int trial = 0; trial < 40; ++trial) {
    const bool reductions = trial % 2 == 1;
    Kernel k = random_kernel(rng, reductions);
    std::vector<int64_t> sizes;
    for (int d = 0; d < k.rank; ++d)
      sizes.push_back(d + 1 == k.rank ? 1 + rng() % 40 : 1 + rng() % 6);
    auto jit = testing::make_buffers(k, sizes, rng, uniform);
    auto ref = jit;
    auto pj = testing::pointers(jit), pr = testing::pointers(ref);
    auto lk = get_kernel(k);
    const int64_t n = work_items(k, sizes.data());
    for (int64_t b = 0; b < n;) {
      const int64_t e = std::min<int64_t>(n, b + 1 + static_cast<int64_t>(rng() % 50));
      (*lk)(b, e, pj.data(), sizes.data());
      b = e;
    }
    interpret(k, 0, n, pr.data(), sizes.data());
    std::vector<Tensor> args;
    for (size_t a = 0; a < k.args.size(); ++a)
      args.push_back(testing::to_tensor(ref[a], testing::arg_shape(k, a, sizes)));
    const std::vector<Tensor> want = eager_eval(k, args, Dims(sizes.begin(), sizes.end()));
    for (size_t s = 0; s < k.stores.size(); ++s) {
      const auto a = static_cast<size_t>(k.stores[s].arg);
      EXPECT_EQ(jit[a].bytes, ref[a].bytes) << "trial " << trial << " store " << s << "\n"
                                            << to_string(k);
      Tensor got = args[a];
      Tensor w = want[s].expand(got.shape());
      EXPECT_TRUE(allclose(got, w, 1e-5, 1e-5, true))
          << "trial " << trial << " store " << s << " vs eager\n"
          << to_string(k);
    }
  }
}

}  // namespace
}  // namespace kiln::kir
