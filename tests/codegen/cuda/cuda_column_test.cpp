// Column sums on the device (sums over leading dims): eager sums and compiled
// graphs' column-sum kernels against the CPU, at every float dtype, odd sizes,
// several parts, zero-size dims; and equal bits whatever the launch shape.
// Runs on a GPU or the emulated device.
#include <bit>
#include <cmath>
#include <cstring>

#include "codegen/cuda/cuda_test_util.h"
#include "kernels/cuda/device_ops.h"
#include "kernels/cuda/driver.h"
#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/module.h"
#include "kiln/compile.h"
#include "kiln/cuda.h"
#include "kiln/nn/nn.h"

namespace kiln {
namespace {

using testing::bits_of;

class CudaColumns : public testing::CudaTest<11> {};

// gpu within `rtol` of cpu, relative to the sum of magnitudes (a sum's
// rounding scale), with equal dtype and shape.
void expect_sums_close(const Tensor& gpu, const Tensor& cpu, const Tensor& abs_sum, double rtol,
                       const std::string& what) {
  ASSERT_EQ(gpu.device(), Device::cuda()) << what;
  ASSERT_EQ(gpu.dtype(), cpu.dtype()) << what;
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  const auto a = gpu.to_vector<double>(), b = cpu.to_vector<double>();
  const auto s = abs_sum.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_LE(std::abs(a[i] - b[i]), rtol * (s[i] + 1e-30))
        << what << " element " << i << ": GPU " << a[i] << ", CPU " << b[i];
}

TEST_F(CudaColumns, EagerSumsOverLeadingDimsMatchTheCpu) {
  struct Case {
    Dims shape, dims;
  };
  // One part, several parts (4099 rows), two leading dims, a kept dim of
  // size 1 before the reduced one, keepdim through the same kernel.
  const std::vector<Case> cases = {{{37, 5}, {0}},        {{4099, 33}, {0}}, {{3, 7, 11}, {0, 1}},
                                   {{3, 7, 11}, {0}},     {{1, 6, 4}, {1}},  {{2000, 9}, {0}},
                                   {{5, 3, 2, 7}, {0, 1}}};
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    const double rtol = dt == DType::f16 ? 2e-3 : dt == DType::bf16 ? 1e-2 : 1e-6;
    for (const Case& c : cases) {
      const Tensor x = randn(c.shape).to(dt);
      const std::string what = str(dtype_name(dt), " ", c.shape, " over ", c.dims);
      const Tensor want = sum(x, c.dims);
      const Tensor got = sum(x.cuda(), c.dims);
      expect_sums_close(got, want, sum(abs(x.to(DType::f64)), c.dims), rtol, what);
      EXPECT_EQ(bits_of(got), bits_of(sum(x.cuda(), c.dims))) << what << ": run to run";
      EXPECT_EQ(sum(x.cuda(), c.dims, true).shape(), sum(x, c.dims, true).shape()) << what;
    }
  }
  // f32 sums add in double on both sides: equal to the CPU's bits here.
  const Tensor x = randn({4099, 33});
  EXPECT_EQ(bits_of(sum(x.cuda(), {0})), bits_of(sum(x, {0})));
}

TEST_F(CudaColumns, IntegerAndBoolColumnSumsAreExact) {
  const Tensor xi = (randn({301, 17}) * 1000).to(DType::i32);
  const Tensor want = sum(xi, {0});
  const Tensor got = sum(xi.cuda(), {0});
  ASSERT_EQ(got.dtype(), DType::i64);
  EXPECT_EQ(got.cpu().to_vector<int64_t>(), want.to_vector<int64_t>());
  const Tensor xb = randn({123, 9}) > 0.3;
  EXPECT_EQ(sum(xb.cuda(), {0}).cpu().to_vector<int64_t>(), sum(xb, {0}).to_vector<int64_t>());
  const Tensor big = full({40, 3}, 4.0e18, DType::i64);  // wraps in 64 bits as on the CPU
  EXPECT_EQ(sum(big.cuda(), {0}).cpu().to_vector<int64_t>(), sum(big, {0}).to_vector<int64_t>());
}

TEST_F(CudaColumns, ZeroSizeDimsGiveZerosOrNothing) {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32}) {
    const Tensor none = sum(zeros({0, 6}, dt).cuda(), {0});
    EXPECT_EQ(none.shape(), Dims({6}));
    EXPECT_EQ(none.cpu().to_vector<double>(), std::vector<double>(6, 0.0)) << dtype_name(dt);
    EXPECT_EQ(sum(zeros({4, 0}, dt).cuda(), {0}).numel(), 0);
    EXPECT_EQ(sum(zeros({3, 0, 2}, dt).cuda(), {0, 1}).cpu().to_vector<double>(),
              std::vector<double>(2, 0.0));
  }
}

// The printed kernel's partials are the same bits on any grid and block size.
TEST_F(CudaColumns, ColumnSumsDoNotDependOnTheLaunchShape) {
  const int64_t rows = 3001, cols = 77;
  const int64_t parts = cuda::column_parts(rows, cols);
  ASSERT_GT(parts, 1);
  const Tensor x = randn({rows, cols}).cuda();
  const std::string sym = "kiln_colsum_shape_test";
  const CUfunction fn =
      cuda::cached_kernel(0, cuda::print_column_sum(DType::f32, DType::f64, sym), sym);
  std::vector<std::vector<uint64_t>> results;
  for (auto [grid, block] : {std::pair{1u, 32u}, {3u, 64u}, {1000u, 256u}, {7u, 128u}}) {
    const Tensor partial = zeros({parts, cols}, DType::f64).cuda();
    auto pp = reinterpret_cast<CUdeviceptr>(partial.data_ptr());
    auto xp = reinterpret_cast<CUdeviceptr>(x.data_ptr());
    long long r = rows, c = cols, p = parts;
    void* params[] = {&pp, &xp, &r, &c, &p};
    cuda::check(
        cuda::driver().cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, nullptr, params, nullptr),
        "cuLaunchKernel");
    results.push_back(bits_of(partial));
  }
  for (size_t i = 1; i < results.size(); ++i) EXPECT_EQ(results[i], results[0]) << "launch " << i;
}

// The combine adds each column's parts in 32 slices, each in part order, then
// the slices in order (gpu_printer.h): those bits on every launch shape
// (before, one thread per column added all 1000 parts in a chain).
TEST_F(CudaColumns, CombineAddsSlicesInOrderOnEveryLaunchShape) {
  const int64_t slices = cuda::column_combine_slices();
  for (auto [parts, cols] : {std::pair<int64_t, int64_t>{1000, 77}, {5, 40}, {33, 1}, {0, 3}}) {
    // Magnitudes from 1e-8 to 1e8: the order of the additions shows in the bits.
    const Tensor partial = (randn({std::max<int64_t>(parts, 1), cols}, DType::f64) *
                            exp(randn({std::max<int64_t>(parts, 1), cols}, DType::f64) * 6));
    const std::vector<double> h = partial.to_vector<double>();
    std::vector<double> want(static_cast<size_t>(cols));
    for (int64_t j = 0; j < cols; ++j) {
      double t = 0;
      for (int64_t q = 0; q < slices; ++q) {
        double s = 0;
        for (int64_t p = parts * q / slices; p < parts * (q + 1) / slices; ++p)
          s += h[static_cast<size_t>(p * cols + j)];
        t = q == 0 ? s : t + s;
      }
      want[static_cast<size_t>(j)] = t;
    }
    const std::string sym = "kiln_colsum_combine_order_test";
    const CUfunction fn =
        cuda::cached_kernel(0, cuda::print_column_combine(DType::f64, DType::f64, sym), sym);
    const Tensor dp = partial.cuda();
    for (auto [grid, width] : {std::pair{1u, 1u}, {3u, 8u}, {1000u, 32u}, {2u, 3u}}) {
      const Tensor out = full({cols}, -1.0, DType::f64).cuda();
      auto op = reinterpret_cast<CUdeviceptr>(out.data_ptr());
      auto pp = reinterpret_cast<CUdeviceptr>(dp.data_ptr());
      long long c = cols, p = parts;
      void* params[] = {&op, &pp, &c, &p};
      cuda::check(
          cuda::driver().cuLaunchKernel(fn, grid, 1, 1, width * static_cast<unsigned>(slices), 1, 1,
                                        0, nullptr, params, nullptr),
          "cuLaunchKernel");
      EXPECT_EQ(bits_of(out), bits_of(from_vector(want, {cols})))
          << parts << " parts, " << cols << " columns, grid " << grid << ", width " << width;
    }
  }
}

// A compiled graph's column sums (bias gradients) are fused into their
// producer's kernel on the device too: values as on the CPU, f32 and f64.
TEST_F(CudaColumns, CompiledColumnSumsMatchTheCpu) {
  auto f = [](const Tensor& x, const Tensor& y) {
    const Tensor h = relu(x * y + 0.25);
    return std::make_pair(h.sum({0}), (h * x).sum({0}) + tanh(x).sum({0}));
  };
  for (DType dt : {DType::f32, DType::f64})
    for (const Dims& shape : {Dims{37, 13}, Dims{2053, 41}, Dims{3, 5, 7}}) {
      const Tensor x = randn(shape).to(dt), y = randn({shape.back()}).to(dt);
      auto cf = compile(f, {.warmup = 0, .plan_cache = false});  // fused now, not as cached
      const int64_t fused0 = cuda::graph_program_stats().column_sum_launches;
      auto [a, b] = cf(x.cuda(), y.cuda());
      EXPECT_GT(cuda::graph_program_stats().column_sum_launches, fused0) << "not fused";
      auto [wa, wb] = f(x, y);
      const std::string what = str(dtype_name(dt), " ", shape);
      const Tensor scale = abs(x.to(DType::f64)).sum({0}) * (1 + abs(y.to(DType::f64)).max());
      expect_sums_close(a, wa, scale, 1e-6, what + " h.sum");
      expect_sums_close(b, wb, scale * 4, 1e-6, what + " (h*x).sum + tanh(x).sum");
      auto [a2, b2] = cf(x.cuda(), y.cuda());
      EXPECT_EQ(bits_of(a2), bits_of(a)) << what << ": run to run";
      EXPECT_EQ(bits_of(b2), bits_of(b)) << what << ": run to run";
    }
}

// Column sums in a row kernel (layer_norm's weight and bias gradients) and a
// zero-row batch, in a compiled training step.
TEST_F(CudaColumns, CompiledLayerNormGradientsMatchTheCpu) {
  auto run = [](Device dev, int64_t rows) {
    manual_seed(2);
    auto ln = std::make_shared<nn::LayerNorm>(int64_t{29});
    {
      NoGradGuard ng;
      ln->weight.copy_(randn({29}));
      ln->bias.copy_(randn({29}));
    }
    ln->to(dev);
    const Tensor x = randn({rows, 29}).to(dev), g = randn({rows, 29}).to(dev);
    auto step = compile(
        [&] {
          Tensor loss = (ln->forward(x) * g).sum();
          loss.backward();
          return loss;
        },
        {.plan_cache = false});
    for (int i = 0; i < 2; ++i) {
      ln->zero_grad();
      step();
    }
    return std::make_pair(ln->weight.grad().cpu(), ln->bias.grad().cpu());
  };
  for (int64_t rows : {int64_t{301}, int64_t{0}}) {
    auto [wc, bc] = run(Device::cpu(), rows);
    const int64_t fused0 = cuda::graph_program_stats().column_sum_launches;
    auto [wg, bg] = run(Device::cuda(), rows);
    if (rows > 0) {
      EXPECT_GT(cuda::graph_program_stats().column_sum_launches, fused0) << "not fused";
    }
    const auto a = wg.to_vector<double>(), b = wc.to_vector<double>();
    const auto c = bg.to_vector<double>(), d = bc.to_vector<double>();
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_NEAR(a[i], b[i], 1e-4 * (1 + std::abs(b[i])))
          << "weight grad " << i << " rows " << rows;
      EXPECT_NEAR(c[i], d[i], 1e-4 * (1 + std::abs(d[i]))) << "bias grad " << i << " rows " << rows;
    }
  }
}

}  // namespace
}  // namespace kiln
