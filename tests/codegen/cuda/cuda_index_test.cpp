// Indexing on CUDA tensors (gather, index_select, scatter_add, and what is
// built on them: embedding, cross_entropy) against the CPU, gradients
// included, and the out-of-range index as a clear error. Runs on a GPU or on
// the emulated device.
#include <cmath>

#include "codegen/cuda/cuda_test_util.h"
#include "kiln/cuda.h"

namespace kiln {
namespace {

using testing::expect_close;
using testing::expect_equal;

class CudaIndex : public testing::CudaTest<7> {};

TEST_F(CudaIndex, IndexSelectAndGatherMatchTheCpu) {
  const Tensor x = randn({5, 7});
  const Tensor i64 = from_vector<int64_t>({4, 0, 4, 2}, {4});
  for (int64_t dim : {0, 1, -1}) {
    expect_equal(index_select(x.cuda(), dim, i64.cuda()), index_select(x, dim, i64),
                 str("index_select dim ", dim));
    expect_equal(index_select(x.t().cuda(), dim, i64.cuda()), index_select(x.t(), dim, i64),
                 "transposed");
  }
  const Tensor i32 = i64.to(DType::i32);
  expect_equal(index_select(x.cuda(), 0, i32.cuda()), index_select(x, 0, i32), "i32 index");
  const Tensor scalar = from_vector<int64_t>({3}, {});
  expect_equal(index_select(x.cuda(), 1, scalar.cuda()), index_select(x, 1, scalar), "0-d");
  for (DType t : {DType::f16, DType::i32, DType::b8}) {
    const Tensor xt = (x * 4).to(t);
    expect_equal(index_select(xt.cuda(), 1, i64.cuda()), index_select(xt, 1, i64), dtype_name(t));
  }
  const Tensor g = from_vector<int64_t>({0, 6, 1, 3, 3, 2, 5, 0, 4, 1, 1, 6}, {4, 3});
  expect_equal(gather(x.slice(0, 0, 4, 1).cuda(), 1, g.cuda()), gather(x.slice(0, 0, 4, 1), 1, g),
               "gather dim 1");
  const Tensor g0 = from_vector<int64_t>({4, 0, 1, 2, 3, 4, 0}, {1, 7});
  expect_equal(gather(x.cuda(), 0, g0.cuda()), gather(x, 0, g0), "gather dim 0");
}

TEST_F(CudaIndex, ScatterAddMatchesTheCpuBitForBit) {
  const Tensor base = randn({5, 4});
  const Tensor idx = from_vector<int64_t>({0, 4, 0, 1, 0, 4, 2, 1, 0, 0, 3, 1}, {3, 4});
  const Tensor src = randn({3, 4});
  expect_equal(scatter_add(base.cuda(), 0, idx.cuda(), src.cuda()), scatter_add(base, 0, idx, src),
               "dim 0, repeated targets");
  const Tensor idx1 = from_vector<int64_t>({3, 3, 0, 1, 2, 2}, {2, 3});
  expect_equal(scatter_add(base.cuda(), 1, idx1.cuda(), src.slice(0, 0, 2, 1).cuda()),
               scatter_add(base, 1, idx1, src.slice(0, 0, 2, 1)), "dim 1");
  const Tensor bf = base.to(DType::bf16);
  expect_equal(scatter_add(bf.cuda(), 0, idx.cuda(), src.to(DType::bf16).cuda()),
               scatter_add(bf, 0, idx, src.to(DType::bf16)), "bf16");
}

TEST_F(CudaIndex, OutOfRangeIndicesAreClearErrors) {
  const Tensor x = randn({5, 3}).cuda();
  try {
    (void)index_select(x, 0, from_vector<int64_t>({1, 7}, {2}).cuda());
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("[index_select] index 7 is out of bounds for dimension 0 with size 5"),
              std::string::npos)
        << m;
  }
  EXPECT_THROW((void)gather(x, 1, from_vector<int64_t>({-1}, {1, 1}).cuda()), Error);
  EXPECT_THROW(
      (void)scatter_add(x, 0, from_vector<int64_t>({5}, {1, 1}).cuda(), ones({1, 1}).cuda()),
      Error);
  // The device stays usable after the refusal.
  expect_equal(x * 2, x.cpu() * 2, "after");
}

TEST_F(CudaIndex, EmbeddingAndCrossEntropyTrainLikeOnTheCpu) {
  const Tensor w0 = randn({10, 6}), tokens = from_vector<int64_t>({3, 1, 3, 9, 0, 3}, {2, 3});
  const Tensor target = from_vector<int64_t>({2, 5, 0, 1, 4, 2}, {6});
  auto loss_of = [&](const Tensor& w, const Tensor& tok, const Tensor& tgt) {
    return cross_entropy(embedding(tok, w).reshape({6, 6}), tgt);
  };
  Tensor wc = w0.clone().requires_grad_();
  const Tensor lc = loss_of(wc, tokens, target);
  lc.backward();
  Tensor wg = w0.cuda().requires_grad_();
  const Tensor lg = loss_of(wg, tokens.cuda(), target.cuda());
  lg.backward();
  expect_close(lg, lc, 1e-6, "loss");
  expect_close(wg.grad(), wc.grad(), 1e-6, "embedding grad (scatter_add of repeated tokens)");
}

}  // namespace
}  // namespace kiln
