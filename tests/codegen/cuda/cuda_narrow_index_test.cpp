// Printed pointwise kernels index in 32 bits when the element count fits and
// in 64 bits otherwise (gpu_printer.h: narrow_index_limit). Both loops against
// the CPU: broadcasts in every dim (coordinates), unrolled and remainder
// elements, eagerly and in compiled graphs; the 64-bit loop forced for small
// tensors through set_narrow_index_limit, and the limit's edge. Runs on a GPU
// or the emulated device.
#include "codegen/cuda/cuda_test_util.h"
#include "codegen/cuda/row_kernels.h"
#include "kernels/cuda/gpu_printer.h"
#include "kiln/compile.h"

namespace kiln::testing {
namespace {

constexpr int64_t kDefaultLimit = 2147483647;

class CudaNarrowIndex : public CudaTest<41> {
 protected:
  void TearDown() override { cuda::set_narrow_index_limit(kDefaultLimit); }
};

// Broadcasts along each dim of a rank-4 result, a cast and a transcendental.
Tensor body(const Tensor& a, const Tensor& b, const Tensor& c) {
  return (exp(a * 0.25) + b).to(DType::f64) * c - a.to(DType::f64);
}

void expect_both_loops(const Dims& sa, const Dims& sb, const Dims& sc, const std::string& what) {
  const Tensor a = randn(sa), b = randn(sb), c = randn(sc, DType::f64);
  const Tensor want = body(a, b, c);
  auto compiled = compile(body, {.warmup = 0});
  for (int64_t limit : {kDefaultLimit, int64_t{-1}}) {
    cuda::set_narrow_index_limit(limit);
    const std::string w = str(what, limit < 0 ? " (64-bit loop)" : " (32-bit loop)");
    expect_bits(body(a.cuda(), b.cuda(), c.cuda()), want, "eager " + w);
    expect_bits(compiled(a.cuda(), b.cuda(), c.cuda()), compiled(a, b, c), "compiled " + w);
  }
}

TEST_F(CudaNarrowIndex, BothLoopsMatchTheCpu) {
  expect_both_loops({3, 1, 5, 7}, {1, 4, 5, 1}, {3, 4, 1, 7}, "broadcast");
  expect_both_loops({1031}, {1}, {1031}, "flat with a remainder");
  expect_both_loops({2, 3}, {2, 3}, {3}, "small");
}

// A launch picks the loop by its element count against the printed limit.
TEST_F(CudaNarrowIndex, TheCountPicksTheLoop) {
  const Tensor a = randn({3, 4, 5}), b = randn({5});
  cuda::set_narrow_index_limit(59);  // 60 elements: the 64-bit loop; 59 or fewer: 32-bit
  expect_bits(a.cuda() * b.cuda(), a * b, "60 elements over a limit of 59");
  expect_bits(a.cuda().narrow(0, 0, 2) * b.cuda(), a.narrow(0, 0, 2) * b, "40 elements");
  cuda::set_narrow_index_limit(60);
  expect_bits(a.cuda() * b.cuda(), a * b, "60 elements at a limit of 60");
  EXPECT_EQ(cuda::narrow_index_limit(), 60);
}

// Indexing kernels (gather, index_select, scatter_add by sorted runs) work out
// coordinates in 32 bits when the count fits and in 64 otherwise: both loops
// give the CPU's bits, a bad index is reported from either.
TEST_F(CudaNarrowIndex, IndexingKernelsHaveBothLoops) {
  const Tensor x = randn({50, 3, 33});
  const Tensor idx = (rand({50, 3, 7}) * 32.99).to(DType::i64);
  const Tensor rows = (rand({300}) * 49.99).to(DType::i64);  // >= 64 entries: sorted runs
  const Tensor src = randn({300, 3, 33});
  for (int64_t limit : {kDefaultLimit, int64_t{-1}}) {
    cuda::set_narrow_index_limit(limit);
    const std::string w = limit < 0 ? " (64-bit loop)" : " (32-bit loop)";
    expect_bits(gather(x.cuda(), 2, idx.cuda()), gather(x, 2, idx), "gather" + w);
    expect_bits(index_select(x.cuda(), 0, rows.cuda()), index_select(x, 0, rows),
                "index_select" + w);
    const Tensor along = rows.reshape({300, 1, 1}).expand({300, 3, 33});  // varies along dim 0 only
    expect_bits(scatter_add(zeros({50, 3, 33}).cuda(), 0, along.cuda(), src.cuda()),
                scatter_add(zeros({50, 3, 33}), 0, along, src), "scatter_add (sorted runs)" + w);
    const Tensor bad = full({300}, 50, DType::i64);
    EXPECT_THROW(
        {
          index_select(x.cuda(), 0, bad.cuda());
          cuda::synchronize();
        },
        Error)
        << w;
  }
}

// Only kernels with broadcast arguments (coordinates: divisions) carry the
// 32-bit loop; all-dense ones are printed with the 64-bit loop alone.
TEST(GpuPrinterNarrowIndex, OnlyKernelsWithCoordinatesHaveTwoLoops) {
  auto kernel = [](bool broadcast) {
    kir::testing::Builder b(2, "add");
    const int x = b.load(b.in(DType::f32, {true, true}));
    const int y = b.load(b.in(DType::f32, {!broadcast, true}));
    b.store(b.out(DType::f32, {true, true}), b.op(OpId::add, DType::f32, x, y));
    return cuda::print_kernel(b.k, "k");
  };
  EXPECT_NE(kernel(true).find("if (n <= 2147483647) {"), std::string::npos);
  EXPECT_NE(kernel(true).find("unsigned r_0 = i;"), std::string::npos);
  EXPECT_EQ(kernel(false).find("unsigned"), std::string::npos) << kernel(false);
}

}  // namespace
}  // namespace kiln::testing
