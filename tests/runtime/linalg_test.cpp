// Verifies matmul (NumPy semantics, BLAS and integer paths) against a naive
// loop on many layouts, its gradients (first and second order) and its errors.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.h"
#include "test_util.h"

using namespace kiln;

namespace {

using V = std::vector<double>;

Tensor randn_t(const Dims& shape, uint64_t seed, DType dt = DType::f64) {
  manual_seed(seed);
  return cast(randn(shape, DType::f64), dt);
}

// Naive torch.matmul on row-major values.
V ref_matmul(const V& a, Dims as, const V& b, Dims bs, Dims* out_shape) {
  const bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(0, 1);
  if (b1) bs.push_back(1);
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  Dims ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  Dims batch = broadcast_shapes(ab, bb, "ref");
  const int64_t B = numel_of(batch);
  V y(static_cast<size_t>(B * M * N), 0.0);
  for (int64_t bi = 0; bi < B; ++bi) {
    // Offsets of the broadcast batch element in a and b.
    int64_t rem = bi, ao = 0, bo = 0, am = 1, bm = 1;
    for (size_t d = batch.size(); d-- > 0;) {
      int64_t k = rem % batch[d];
      rem /= batch[d];
      size_t da = d + ab.size() - batch.size(), db = d + bb.size() - batch.size();
      if (d + ab.size() >= batch.size()) {
        ao += (ab[da] == 1 ? 0 : k) * am;
        am *= ab[da];
      }
      if (d + bb.size() >= batch.size()) {
        bo += (bb[db] == 1 ? 0 : k) * bm;
        bm *= bb[db];
      }
    }
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k)
          s += a[static_cast<size_t>(ao * M * K + i * K + k)] *
               b[static_cast<size_t>(bo * K * N + k * N + j)];
        y[static_cast<size_t>((bi * M + i) * N + j)] = s;
      }
  }
  *out_shape = batch;
  if (!a1) out_shape->push_back(M);
  if (!b1) out_shape->push_back(N);
  return y;
}

void check_matmul(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
  Dims want_shape;
  V want =
      ref_matmul(a.to_vector<double>(), a.shape(), b.to_vector<double>(), b.shape(), &want_shape);
  Tensor y = matmul(a, b);
  ASSERT_EQ(y.shape(), want_shape) << what;
  EXPECT_EQ(y.dtype(), a.dtype()) << what;
  V got = y.to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << " at " << i;
}

// A [rows, cols] operand laid out in different ways.
Tensor layout(const Dims& shape, int kind, uint64_t seed, DType dt) {
  Dims s = shape;
  const size_t r = s.size();
  switch (kind) {
    case 1: {  // transposed view of the last two dims (BLAS reads it via its trans flag)
      std::swap(s[r - 1], s[r - 2]);
      return transpose(randn_t(s, seed, dt), -1, -2);
    }
    case 2: {  // every other column: needs a copy
      s.back() *= 2;
      return slice(randn_t(s, seed, dt), -1, 0, s.back(), 2);
    }
    case 3: {  // a row broadcast with stride 0
      s[r - 2] = 1;
      return expand(randn_t(s, seed, dt), shape);
    }
    default:
      return randn_t(shape, seed, dt);
  }
}

using kiln::testing::expect_error;

Tensor leaf(const Tensor& t) {
  return t.detach().clone().requires_grad_();
}

std::string check_grad(const Tensor& a, const Tensor& b) {
  return gradcheck(
      [](const std::vector<Tensor>& in) -> std::vector<Tensor> { return {matmul(in[0], in[1])}; },
      {leaf(a), leaf(b)});
}

}  // namespace

// 2-D products equal the naive loop for contiguous, transposed, sliced and expanded operands.
TEST(Linalg, Matmul2DLayouts) {
  const int64_t sizes[][3] = {{1, 1, 1}, {3, 4, 5}, {7, 1, 3}, {1, 9, 1}, {33, 17, 65}};
  uint64_t seed = 1;
  for (DType dt : {DType::f32, DType::f64}) {
    const double tol = dt == DType::f32 ? 1e-5 : 1e-12;
    for (const auto& s : sizes) {
      for (int la = 0; la < 4; ++la) {
        for (int lb = 0; lb < 4; ++lb) {
          Tensor a = layout({s[0], s[1]}, la, seed++, dt);
          Tensor b = layout({s[1], s[2]}, lb, seed++, dt);
          check_matmul(a, b, tol, str(dt, " ", s[0], "x", s[1], "x", s[2], " layouts ", la, lb));
        }
      }
    }
  }
}

// 1-D operands: dot product, vector-matrix, matrix-vector and batched forms.
TEST(Linalg, MatmulVectors) {
  Tensor v = randn_t({4}, 1), w = randn_t({4}, 2);
  Tensor d = matmul(v, w);
  EXPECT_EQ(d.shape(), (Dims{}));
  check_matmul(v, w, 1e-12, "dot");
  check_matmul(v, randn_t({4, 3}, 3), 1e-12, "vec @ mat");
  check_matmul(randn_t({5, 4}, 4), w, 1e-12, "mat @ vec");
  check_matmul(v, randn_t({2, 3, 4, 6}, 5), 1e-12, "vec @ batched");
  check_matmul(randn_t({2, 3, 5, 4}, 6), w, 1e-12, "batched @ vec");
  check_matmul(slice(randn_t({8}, 7), 0, 0, 8, 2), transpose(randn_t({3, 4}, 8), 0, 1), 1e-12,
               "strided vec @ transposed mat");
  check_matmul(transpose(randn_t({3, 4}, 9), 0, 1), slice(randn_t({6}, 10), 0, 0, 6, 2), 1e-12,
               "transposed mat @ strided vec");
}

// Batch dims broadcast; the weight-like fold path and permuted batches agree with the loop.
TEST(Linalg, MatmulBatched) {
  check_matmul(randn_t({2, 1, 3, 4}, 1), randn_t({5, 4, 2}, 2), 1e-12, "broadcast batch");
  check_matmul(randn_t({6, 7, 8}, 3), randn_t({8, 9}, 4), 1e-12, "fold batch into rows");
  check_matmul(randn_t({6, 7, 8}, 5, DType::f32), transpose(randn_t({9, 8}, 6, DType::f32), 0, 1),
               1e-5, "fold with transposed weight");
  check_matmul(permute(randn_t({7, 3, 8}, 7), {1, 0, 2}), randn_t({8, 2}, 8), 1e-12,
               "permuted batch");
  check_matmul(randn_t({3, 4}, 9), randn_t({2, 2, 4, 5}, 10), 1e-12, "matrix @ batched");
  check_matmul(expand(randn_t({1, 3, 4}, 11), {5, 3, 4}), randn_t({5, 4, 2}, 12), 1e-12,
               "expanded batch");
  check_matmul(transpose(randn_t({4, 5, 3}, 13), 1, 2), transpose(randn_t({4, 2, 5}, 14), 1, 2),
               1e-12, "batched transposed");
  Tensor big_a = randn_t({4, 64, 128}, 15, DType::f32),
         big_b = randn_t({4, 128, 96}, 16, DType::f32);
  check_matmul(big_a, big_b, 1e-4, "larger batched");
}

// The kernel writes into a strided output view, as the executor asks when it
// places a product straight into a later cat's or reshape's buffer: unit
// column stride (ldc), unit row stride (written transposed), permuted batch
// dims, and layouts BLAS cannot write (through a temporary); the rest of the
// buffer stays untouched.
TEST(Linalg, MatmulKernelWritesStridedOutputs) {
  // out.permute(perm) is a buffer wider by 3 in its last dim, written from column 1 on.
  struct Case {
    Dims a, b, perm;
    DType dt;
  };
  const Case cases[] = {
      {{5, 7}, {7, 3}, {0, 1}, DType::f32},                    // ldc = 6
      {{5, 7}, {7, 3}, {1, 0}, DType::f32},                    // transposed, ldc = 8
      {{4, 5, 7}, {4, 7, 3}, {1, 0, 2}, DType::f64},           // batch dim moved inside
      {{2, 3, 5, 7}, {2, 3, 7, 4}, {0, 3, 1, 2}, DType::f32},  // items transposed
      {{6, 5, 7}, {7, 3}, {0, 1, 2}, DType::f32},              // batch folded into rows
      {{5, 7}, {7, 3}, {0, 1}, DType::i64},                    // integers: a temporary
      {{5, 7}, {7, 3}, {0, 1}, DType::f16},                    // f16: through f32
  };
  const OpInfo& mm = op_info(OpId::matmul);
  uint64_t seed = 40;
  for (const Case& c : cases) {
    const std::string what = str(c.dt, " ", c.a, " @ ", c.b, " perm ", c.perm);
    Tensor a = cast(randn_t(c.a, seed++), c.dt), b = cast(randn_t(c.b, seed++), c.dt);
    Tensor want = matmul(a, b);
    Dims bs(c.perm.size()), inv(c.perm.size());
    for (size_t i = 0; i < c.perm.size(); ++i) {
      bs[i] = want.size(c.perm[i]);
      inv[static_cast<size_t>(c.perm[i])] = static_cast<int64_t>(i);
    }
    bs.back() += 3;
    Tensor buf = full(bs, 7, c.dt);
    Tensor y = buf.narrow(-1, 1, bs.back() - 3).permute(inv);
    ASSERT_EQ(y.shape(), want.shape()) << what;
    ASSERT_FALSE(y.is_contiguous()) << what;
    std::array<Tensor, 1> out{y};
    std::array<Tensor, 2> in{a, b};
    mm.kernel(in, Attrs(), out);
    const double tol = c.dt == DType::f16 ? 1e-2 : 1e-5;
    V got = y.contiguous().to_vector<double>(), ref = want.to_vector<double>();
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], ref[i], tol * (1 + std::abs(ref[i]))) << what << " at " << i;
    for (int64_t k : {int64_t{0}, bs.back() - 2, bs.back() - 1})
      for (double v : buf.narrow(-1, k, 1).contiguous().to_vector<double>())
        EXPECT_EQ(v, 7) << what << " column " << k;
  }
}

// Products above 2^22 multiply-adds are split over the pool by rows or by
// columns of C (OpenBLAS itself runs single-threaded), and many batch items
// run whole on each core. On 2 threads and on 1, every split agrees with a
// naive product (the bits may differ: BLAS's edge tiles fall elsewhere).
TEST(Linalg, LargeMatmulsSplitOverThePool) {
  struct Case {
    Dims a, b;
    int ka, kb;  // layout() kinds: 0 contiguous, 1 transposed view
    DType dt;
  };
  const Case cases[] = {
      {{300, 200}, {200, 100}, 0, 0, DType::f32},        // rows; 300 is no multiple of 16
      {{300, 200}, {200, 100}, 1, 1, DType::f64},        // rows, both transposed
      {{40, 300}, {300, 500}, 0, 1, DType::f32},         // columns (C wider than tall)
      {{3, 200, 150}, {3, 150, 160}, 1, 0, DType::f32},  // few large items, each split
      {{20, 64, 64}, {20, 64, 64}, 0, 1, DType::f64},    // many items, whole per core
      {{5, 60, 300}, {300, 300}, 0, 0, DType::f32},      // batch folded into rows, split
  };
  const int threads = num_threads();
  uint64_t seed = 90;
  for (const Case& c : cases) {
    const std::string what = str(c.dt, " ", c.a, " @ ", c.b, " kinds ", c.ka, c.kb);
    Tensor a = layout(c.a, c.ka, seed++, c.dt), b = layout(c.b, c.kb, seed++, c.dt);
    for (int t : {2, 1}) {
      set_num_threads(t);
      check_matmul(a, b, c.dt == DType::f32 ? 1e-4 : 1e-10, str(what, " on ", t, " threads"));
    }
    set_num_threads(threads);
  }
  // An output BLAS writes transposed (unit row stride), split by rows of C.
  Tensor a = randn_t({300, 200}, 7, DType::f32), b = randn_t({200, 100}, 8, DType::f32);
  Tensor buf = zeros({100, 300}, DType::f32);
  std::array<Tensor, 1> out{buf.permute({1, 0})};
  std::array<Tensor, 2> in{a, b};
  op_info(OpId::matmul).kernel(in, Attrs(), out);
  const V got = buf.permute({1, 0}).contiguous().to_vector<double>();
  const V want = matmul(a, b).to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << "transposed output at " << i;
}

// f16/bf16 compute through f32; integers use exact integer arithmetic.
TEST(Linalg, MatmulDtypes) {
  for (DType dt : {DType::f16, DType::bf16})
    check_matmul(layout({5, 6}, 1, 1, dt), layout({6, 3}, 0, 2, dt), 2e-2, str(dt));
  for (DType dt : {DType::i64, DType::i32, DType::u8}) {
    Tensor a = cast(reshape(arange(0, 12, 1, DType::i64), {3, 4}), dt);
    Tensor b = cast(reshape(arange(0, 8, 1, DType::i64), {4, 2}), dt);
    check_matmul(a, b, 0, str(dt));
    check_matmul(transpose(b, 0, 1), transpose(a, 0, 1), 0, str(dt, " transposed"));
    check_matmul(cast(arange(0, 4, 1, DType::i64), dt), b, 0, str(dt, " vector"));
  }
  // 2 * (3e9)^2 = 1.8e19 overflows i64 and wraps around, as in PyTorch.
  Tensor big = full({2, 2}, int64_t{3000000000}, DType::i64);
  EXPECT_EQ(matmul(big, big).to_vector<int64_t>()[0], int64_t{-446744073709551616});
}

// Empty operands: K = 0 gives zeros, M/N/batch = 0 give empty results.
TEST(Linalg, MatmulZeroSize) {
  for (DType dt : {DType::f32, DType::f64, DType::i64}) {
    Tensor y = matmul(zeros({3, 0}, dt), zeros({0, 4}, dt));
    EXPECT_EQ(y.shape(), (Dims{3, 4}));
    EXPECT_EQ(y.to_vector<double>(), V(12, 0.0));
    EXPECT_EQ(matmul(zeros({0, 5}, dt), zeros({5, 4}, dt)).shape(), (Dims{0, 4}));
    EXPECT_EQ(matmul(zeros({2, 5}, dt), zeros({5, 0}, dt)).shape(), (Dims{2, 0}));
    EXPECT_EQ(matmul(zeros({0, 2, 5}, dt), zeros({5, 3}, dt)).shape(), (Dims{0, 2, 3}));
    EXPECT_EQ(matmul(zeros({0}, dt), zeros({0}, dt)).item<double>(), 0.0);
  }
  Tensor a = leaf(zeros({3, 0}, DType::f64)), b = leaf(zeros({0, 2}, DType::f64));
  matmul(a, b).sum().backward();
  EXPECT_EQ(a.grad().shape(), (Dims{3, 0}));
  EXPECT_EQ(b.grad().shape(), (Dims{0, 2}));
}

// Gradients pass gradcheck for every 1-D / 2-D / batched / broadcast combination.
TEST(Linalg, MatmulGradcheck) {
  EXPECT_EQ(check_grad(randn_t({3, 4}, 1), randn_t({4, 2}, 2)), "");
  EXPECT_EQ(check_grad(randn_t({4}, 3), randn_t({4}, 4)), "");
  EXPECT_EQ(check_grad(randn_t({4}, 5), randn_t({4, 3}, 6)), "");
  EXPECT_EQ(check_grad(randn_t({3, 4}, 7), randn_t({4}, 8)), "");
  EXPECT_EQ(check_grad(randn_t({4}, 9), randn_t({2, 4, 3}, 10)), "");
  EXPECT_EQ(check_grad(randn_t({2, 3, 4}, 11), randn_t({4}, 12)), "");
  EXPECT_EQ(check_grad(randn_t({2, 1, 3, 4}, 13), randn_t({3, 4, 2}, 14)), "");
  EXPECT_EQ(check_grad(randn_t({2, 3, 4}, 15), randn_t({4, 5}, 16)), "");
  EXPECT_EQ(check_grad(randn_t({3, 4}, 17), randn_t({2, 4, 5}, 18)), "");
  // Transposed views as inputs to the rule.
  Tensor at = leaf(randn_t({4, 3}, 19)), bt = leaf(randn_t({2, 4}, 20));
  EXPECT_EQ(gradcheck(
                [](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                  return {matmul(transpose(in[0], 0, 1), transpose(in[1], 0, 1))};
                },
                {at, bt}),
            "");
}

// The gradient of a transposed operand (x @ w.t(), as in Linear) is computed in
// the operand's own layout: the weight's .grad is contiguous, with the values
// of a^T g, for 2-D and batched inputs, and passes gradcheck.
TEST(Linalg, TransposedOperandGradientKeepsItsLayout) {
  for (const Dims& xs : {Dims{5, 4}, Dims{2, 5, 4}}) {
    Tensor x = leaf(randn_t(xs, 21)), w = leaf(randn_t({3, 4}, 22));
    Tensor g = randn_t(xs.size() == 2 ? Dims{5, 3} : Dims{2, 5, 3}, 23);
    (matmul(x, transpose(w, 0, 1)) * g).sum().backward();
    EXPECT_TRUE(w.grad().is_contiguous());
    Tensor x2 = reshape(x.detach(), {-1, 4}), g2 = reshape(g, {-1, 3});
    EXPECT_TRUE(allclose(w.grad(), matmul(transpose(g2, 0, 1), x2), 1e-5, 1e-6));
    EXPECT_TRUE(allclose(x.grad(), matmul(g, w.detach()), 1e-5, 1e-6));
  }
  Tensor a = leaf(randn_t({4, 3}, 24)), b = leaf(randn_t({2, 4}, 25));
  transpose(a, 0, 1).matmul(b.t()).sum().backward();
  EXPECT_TRUE(a.grad().is_contiguous());
  EXPECT_TRUE(b.grad().is_contiguous());
  EXPECT_EQ(gradcheck(
                [](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                  return {matmul(in[0], transpose(in[1], 0, 1))};
                },
                {leaf(randn_t({2, 3, 4}, 26)), leaf(randn_t({5, 4}, 27))}),
            "");
}

// Second derivatives: the gradient of the gradient (create_graph) checks out.
TEST(Linalg, MatmulDoubleBackward) {
  Tensor a = leaf(randn_t({3, 4}, 1)), b = leaf(randn_t({4, 2}, 2));
  Tensor w = randn_t({3, 2}, 3);
  EXPECT_EQ(gradcheck(
                [w](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                  GradModeGuard on(true);
                  Tensor y = matmul(in[0] * in[0], in[1]);
                  return grad({y}, {in[0], in[1]}, {w}, {.create_graph = true});
                },
                {a, b}),
            "");
  Tensor v = leaf(randn_t({4}, 4)), m = leaf(randn_t({2, 4, 3}, 5));
  Tensor w2 = randn_t({2, 3}, 6);
  EXPECT_EQ(gradcheck(
                [w2](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                  GradModeGuard on(true);
                  Tensor y = matmul(in[0], in[1] * in[1]);
                  return grad({y}, {in[0], in[1]}, {w2}, {.create_graph = true});
                },
                {v, m}),
            "");
}

// Bad operands raise kiln::Error naming matmul and both shapes.
TEST(Linalg, MatmulErrors) {
  expect_error(
      [] {
        matmul(zeros({2, 3}), zeros({4, 5}));
      },
      {"[matmul] shapes [2, 3] and [4, 5] cannot be multiplied"});
  expect_error([] { matmul(zeros({3}), zeros({4})); }, {"[matmul]", "[3]", "[4]"});
  expect_error(
      [] {
        matmul(zeros({2, 3}), zeros({2, 3}, DType::f64));
      },
      {"[matmul] expected both operands to have the same dtype, got f32 and f64"});
  expect_error([] { matmul(scalar_tensor(1.0, DType::f32), zeros({2})); }, {"[matmul]", "[2]"});
  expect_error(
      [] {
        matmul(zeros({2, 2, 3}), zeros({3, 3, 4}));
      },
      {"[matmul]", "[2, 2, 3]", "[3, 3, 4]", "broadcast"});
  expect_error(
      [] {
        matmul(zeros({2, 2}, DType::b8), zeros({2, 2}, DType::b8));
      },
      {"[matmul]", "bool", "[2, 2]"});
}
