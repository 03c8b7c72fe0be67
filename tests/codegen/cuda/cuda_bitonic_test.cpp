// argsort/sort/topk on CUDA as a bitonic sort (gpu_printer_order.cpp) against
// the CPU: lines that fit one block's tile, lines just over it and lines of
// several tiles merged through global memory, with ties (kept in input order),
// NaN and infinities, ascending and descending, every k; a line of 100k
// elements (the O(len^2) kernel took minutes there). The global step's golden
// text and NVRTC compiles. Runs on a GPU or the emulated device.
#include <limits>

#include "codegen/cuda/cuda_test_util.h"
#include "codegen/cuda/golden.h"
#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/nvrtc_lib.h"

namespace kiln::testing {
namespace {

class CudaBitonic : public CudaTest<31> {};

// Values of dtype dt with many ties (a few distinct values), a NaN and
// infinities of both signs in every line.
Tensor awkward(const Dims& shape, DType dt) {
  Tensor x = (randn(shape) * 3).to(DType::i32).to(DType::f64) * 0.5;
  if (is_floating(dt)) {
    NoGradGuard ng;
    Tensor lines = x.view({-1, shape.back()});
    lines.select(1, 1 % shape.back()).fill_(std::numeric_limits<double>::quiet_NaN());
    lines.select(1, shape.back() / 2).fill_(std::numeric_limits<double>::infinity());
    lines.select(1, shape.back() - 1).fill_(-std::numeric_limits<double>::infinity());
  }
  return x.to(dt);
}

void expect_orders(const Tensor& x, int64_t dim, const std::string& what) {
  const Tensor xc = x.cuda();
  for (bool desc : {false, true}) {
    const std::string w = str(what, desc ? " descending" : "");
    expect_equal(argsort(xc, dim, desc), argsort(x, dim, desc), "argsort " + w);
    const int64_t len = x.size(dim);
    for (int64_t k : {int64_t{0}, int64_t{1}, std::min<int64_t>(len, 100), len}) {
      auto [v, i] = topk(xc, k, dim, desc);
      auto [cv, ci] = topk(x, k, dim, desc);
      expect_equal(i, ci, str("topk k=", k, " ", w));
      expect_equal(v, cv, str("topk values k=", k, " ", w));
    }
  }
}

TEST_F(CudaBitonic, LinesOfOneTileMatchTheCpu) {
  for (int64_t len : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{37}, int64_t{cuda::kSortTile}})
    for (DType dt : {DType::f32, DType::f64, DType::f16, DType::i64, DType::b8})
      expect_orders(awkward({3, len}, dt), 1, str(dt, " len ", len));
}

TEST_F(CudaBitonic, LinesOfSeveralTilesMatchTheCpu) {
  for (int64_t len : {int64_t{cuda::kSortTile + 1}, int64_t{3 * cuda::kSortTile + 5}})
    for (DType dt : {DType::f32, DType::bf16, DType::i32, DType::u8})
      expect_orders(awkward({2, len}, dt), 1, str(dt, " len ", len));
  // Along a leading dim (strided lines), and a line with every value equal.
  expect_orders(awkward({cuda::kSortTile * 2 + 3, 3}, DType::f64), 0, "dim 0");
  expect_orders(zeros({1, 5000}), 1, "all equal");
}

TEST_F(CudaBitonic, ALongLineSortsAsOnTheCpu) {
  const Tensor x = awkward({100003}, DType::f32);
  auto [v, i] = sort(x.cuda(), 0, true);
  auto [cv, ci] = sort(x, 0, true);
  expect_equal(i, ci, "indices");
  expect_equal(v, cv, "values");
}

TEST(GpuPrinterBitonic, GoldenArgsortStep) {
  expect_golden("argsort_step_f64.cu",
                cuda::print_argsort_step(DType::f64, "kiln_argsort_f64_step"));
}

// The global steps of every dtype: PTX for sm_80 and sm_90, machine code for
// sm_90 without spills (the block kernels are in printer_test's check).
TEST(NvrtcBitonic, StepKernelsCompileWithoutSpills) {
  std::string source = cuda::cuda_prelude();
  int n = 0;
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::i32,
                  DType::u8, DType::b8})
    source += cuda::print_argsort_step(t, str("st", n++));
  for (int arch : {80, 90})
    EXPECT_NE(cuda::nvrtc_compile(source, "sort_steps.cu", arch, /*cubin=*/false)
                  .ptx.find(str(".target sm_", arch)),
              std::string::npos);
#ifndef KILN_TEST_SANITIZED
  const cuda::NvrtcOutput out =
      cuda::nvrtc_compile(source, "sort_steps.cu", 90, /*cubin=*/true, {"--ptxas-options=-v"});
  EXPECT_EQ(cuda::spill_bytes(out.log), 0) << out.log;
#endif
}

}  // namespace
}  // namespace kiln::testing
