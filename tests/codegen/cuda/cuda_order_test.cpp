// Scans and orderings on CUDA tensors against the CPU, bit for bit: cumsum and
// cumprod (every dtype, every dim, strided inputs, the reverse form through
// cumsum's gradient), argsort/sort/topk (ties keep their order, NaN above every
// number), eagerly and inside compiled graphs. Runs on a GPU or the emulated device.
#include <cmath>
#include <limits>

#include "codegen/cuda/cuda_test_util.h"
#include "kiln/compile.h"
#include "kiln/cuda.h"

namespace kiln {
namespace {

using testing::expect_equal;

class CudaOrder : public testing::CudaTest<13> {};

// Values with ties, a NaN and an infinity, of dtype dt.
Tensor awkward(const Dims& shape, DType dt) {
  Tensor x = (randn(shape) * 3).to(DType::i32).to(DType::f64) * 0.5;
  if (is_floating(dt) && x.numel() > 3) {
    NoGradGuard ng;
    Tensor flat = x.reshape({-1});
    flat.select(0, 1).fill_(std::numeric_limits<double>::quiet_NaN());
    flat.select(0, 2).fill_(std::numeric_limits<double>::infinity());
  }
  return x.to(dt);
}

TEST_F(CudaOrder, CumsumAndCumprodMatchTheCpuBitForBit) {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64,
                   DType::b8, DType::u8}) {
    const Tensor x = dt == DType::b8 ? gt(randn({3, 5, 7}), 0.0) : (randn({3, 5, 7}) * 1.1).to(dt);
    const Tensor xc = x.cuda();
    for (int64_t d : {0, 1, 2, -1}) {
      expect_equal(cumsum(xc, d), cumsum(x, d), str("cumsum ", dt, " dim ", d));
      expect_equal(cumprod(xc, d), cumprod(x, d), str("cumprod ", dt, " dim ", d));
    }
    // Strided (a transposed view) and 0-d.
    expect_equal(cumsum(xc.transpose(0, 2), 1), cumsum(x.transpose(0, 2), 1), str("strided ", dt));
    expect_equal(cumprod(xc.select(0, 0).select(0, 0).select(0, 0), 0),
                 cumprod(x.select(0, 0).select(0, 0).select(0, 0), 0), str("0-d ", dt));
  }
  // Wrapping integers, as the CPU's.
  const Tensor big = full({4}, int64_t{1} << 40, DType::i64);
  expect_equal(cumprod(big.cuda(), 0), cumprod(big, 0), "wrapping i64");
}

TEST_F(CudaOrder, ScanGradientsMatchTheCpu) {
  const Tensor x0 = randn({4, 6}, DType::f64);
  for (bool prod : {false, true}) {
    Tensor a = x0.clone().requires_grad_(), b = x0.cuda().requires_grad_();
    auto f = [&](const Tensor& x) { return prod ? cumprod(x, 1) : cumsum(x, 1); };
    (f(a) * x0).sum().backward();
    (f(b) * x0.cuda()).sum().backward();
    expect_equal(b.grad(), a.grad(), prod ? "cumprod grad" : "cumsum grad (reverse scan)");
  }
}

TEST_F(CudaOrder, ArgsortSortAndTopkMatchTheCpu) {
  for (DType dt :
       {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::i32, DType::b8}) {
    const Tensor x = awkward({3, 6, 5}, dt), xc = x.cuda();
    for (int64_t d : {0, 1, 2})
      for (bool desc : {false, true}) {
        const std::string what = str(dt, " dim ", d, desc ? " descending" : "");
        expect_equal(argsort(xc, d, desc), argsort(x, d, desc), "argsort " + what);
        auto [v, i] = sort(xc, d, desc);
        auto [cv, ci] = sort(x, d, desc);
        expect_equal(v, cv, "sort values " + what);
        expect_equal(i, ci, "sort indices " + what);
        for (int64_t k : {int64_t{0}, int64_t{1}, x.size(d)}) {
          auto [tv, ti] = topk(xc, k, d, desc);
          auto [ctv, cti] = topk(x, k, d, desc);
          expect_equal(ti, cti, str("topk k=", k, " ", what));
          expect_equal(tv, ctv, str("topk values k=", k, " ", what));
        }
      }
  }
  const Tensor s = full({}, 2.0);
  expect_equal(argsort(s.cuda()), argsort(s), "0-d");
}

// In a compiled graph (scans and orderings run as unfused nodes on the device),
// with the gradient through sort's values.
TEST_F(CudaOrder, CompiledScansAndTopkRunOnTheDevice) {
  auto f = [](const Tensor& x) {
    auto [v, i] = topk(x * 2, 3, -1);
    return cumsum(v, -1) + cumprod(x, 0).sum() + i.to(DType::f32);
  };
  const Tensor x = randn({5, 8});
  auto cf = compile(f, {.warmup = 0});
  for (int call = 0; call < 2; ++call) expect_equal(cf(x.cuda()), f(x), str("call ", call));
  Tensor a = x.clone().requires_grad_(), b = x.cuda().requires_grad_();
  std::get<0>(sort(a, -1)).pow(2).sum().backward();
  std::get<0>(sort(b, -1)).pow(2).sum().backward();
  expect_equal(b.grad(), a.grad(), "sort values' gradient");
}

}  // namespace
}  // namespace kiln
