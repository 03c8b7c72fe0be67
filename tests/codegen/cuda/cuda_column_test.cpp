// Column sums on the device (sums over leading dims): eager sums and compiled
// graphs' column-sum kernels against the CPU, at every float dtype, odd sizes,
// several parts, zero-size dims; and equal bits whatever the launch shape.
// Runs on a GPU or the emulated device.
#include <bit>
#include <cmath>
#include <cstring>

#include "codegen/cuda/cuda_test_util.h"
#include "codegen/kernel_test_util.h"
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
  const std::vector<Case> cases = {
      {{37, 5}, {0}},   {{4099, 33}, {0}}, {{3, 7, 11}, {0, 1}},   {{3, 7, 11}, {0}},
      {{1, 6, 4}, {1}}, {{2000, 9}, {0}},  {{5, 3, 2, 7}, {0, 1}}, {{40, 2, 4100}, {0}}};
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

// An eager column sum's parts: about 2^18 (part, column) threads, at least 8
// rows a part (the transformer's QKV bias gradient [8192 | 1536]: 171 parts
// of 48 rows; the position embedding's [32 | 131072]: 2 of 16); the combine
// runs one slice per part up to 32.
TEST_F(CudaColumns, EagerColumnSumPartsFillTheDeviceOnce) {
  EXPECT_EQ(cuda::column_sum_parts(8192, 1536), 171);
  EXPECT_EQ(cuda::column_sum_parts(32, 131072), 2);
  EXPECT_EQ(cuda::column_sum_parts(40, 8200), 5);    // 32 wanted, 40 / 8 rows
  EXPECT_EQ(cuda::column_sum_parts(9000, 3), 1024);  // the cap
  EXPECT_EQ(cuda::column_sum_parts(7, 1 << 20), 1);
  EXPECT_EQ(cuda::column_sum_parts(0, 5), 0);
  EXPECT_EQ(cuda::column_combine_slices(int64_t{0}), 1);
  EXPECT_EQ(cuda::column_combine_slices(int64_t{5}), 5);
  EXPECT_EQ(cuda::column_combine_slices(int64_t{171}), cuda::column_combine_slices());
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

// A row kernel with two column sums (layer_norm's backward in miniature: y
// = x - sum(x) per row, and the column sums of y and of y * x) launched in
// both forms: a block per part (64 x 1 threads) and column warps (32 x
// kColumnWarps, and 32 x 2), on fewer blocks than parts and on a part count
// that leaves warps past a part's last row. Each part's partials are the sums
// of the launch's own y over the part's rows (the forms add them in another
// order: within rounding), and launch_kernel picks column warps exactly
// where the row fits the shared partials.
TEST_F(CudaColumns, RowKernelColumnSumsInBothFormsAreThePartsSums) {
  kir::testing::Builder b(2, "row_two_colsums");
  const int x = b.load(b.in(DType::f32, {true, true}));
  const int y = b.op(OpId::sub, DType::f32, x, b.reduce(OpId::sum, x, 0, DType::f32));
  b.store(b.out(DType::f32, {true, true}), y);
  for (int v : {y, b.op(OpId::mul, DType::f32, y, x)})
    b.k.stores.push_back({b.out(DType::f64, {false, true}), b.op(OpId::cast, DType::f64, v), true});
  const kir::Kernel k = b.k;
  ASSERT_EQ(cuda::column_warps_cap(k), 512);
  EXPECT_EQ(cuda::row_block(k, 4096, 512, 0, 1024).y, cuda::kColumnWarps);
  EXPECT_EQ(cuda::row_block(k, 4096, 513, 0, 1024).y, 2);  // half the warps, twice the row
  EXPECT_EQ(cuda::row_block(k, 4096, 1025, 0, 1024).y, 1);
  EXPECT_EQ(cuda::row_block(k, 4096, 512, 0, 64).y, 2);  // a block too small for 4 warps
  const std::string sym = "kiln_row_two_colsums_test";
  const CUfunction fn = cuda::cached_kernel(0, cuda::print_kernel(k, sym), sym);
  for (auto [rows, inner] :
       {std::pair<int64_t, int64_t>{301, 29}, {4099, 77}, {45, 512}, {37, 900}}) {
    const int64_t parts = cuda::column_parts(rows, inner);
    const Tensor xs = randn({rows, inner}).cuda();
    for (auto [grid, threads, warps] : {std::tuple{7u, 64u, 1u},
                                        {1000u, 32u, static_cast<unsigned>(cuda::kColumnWarps)},
                                        {3u, 32u, 2u}}) {
      if (warps > 1 && inner > 512 * cuda::kColumnWarps / static_cast<int64_t>(warps))
        continue;  // the warps' shared rows hold 512 x 4 / warps columns
      const std::string what = str(rows, " x ", inner, ", ", parts, " parts, block ", threads,
                                   " x ", warps, ", grid ", grid);
      Tensor ys = full({rows, inner}, 7.0).cuda();
      std::vector<Tensor> partial = {full({parts, inner}, 7.0, DType::f64).cuda(),
                                     full({parts, inner}, 7.0, DType::f64).cuda()};
      std::vector<CUdeviceptr> ptrs;
      for (const Tensor* t :
           std::initializer_list<const Tensor*>{&xs, &ys, &partial[0], &partial[1]})
        ptrs.push_back(reinterpret_cast<CUdeviceptr>(t->data_ptr()));
      long long n = rows, s0 = rows, s1 = inner, np = parts;
      void* params[] = {&ptrs[0], &ptrs[1], &ptrs[2], &ptrs[3], &n, &s0, &s1, &np};
      cuda::check(cuda::driver().cuLaunchKernel(fn, grid, 1, 1, threads, warps, 1, 0, nullptr,
                                                params, nullptr),
                  "cuLaunchKernel");
      const auto xv = xs.cpu().to_vector<float>(), yv = ys.cpu().to_vector<float>();
      for (int64_t r = 0; r < rows; ++r) {  // y = x - the row's sum (within rounding)
        double sum = 0;
        for (int64_t j = 0; j < inner; ++j) sum += xv[static_cast<size_t>(r * inner + j)];
        for (int64_t j = 0; j < inner; ++j) {
          const auto i = static_cast<size_t>(r * inner + j);
          ASSERT_NEAR(yv[i], xv[i] - sum, 1e-4 * (1 + std::abs(sum))) << what << ", row " << r;
        }
      }
      for (int s = 0; s < 2; ++s) {
        const auto got = partial[static_cast<size_t>(s)].cpu().to_vector<double>();
        for (int64_t p = 0; p < parts; ++p)
          for (int64_t j = 0; j < inner; ++j) {
            double want = 0, scale = 0;
            for (int64_t r = rows * p / parts; r < rows * (p + 1) / parts; ++r) {
              const auto i = static_cast<size_t>(r * inner + j);
              const double v =
                  s == 0 ? yv[i] : static_cast<double>(static_cast<float>(yv[i] * xv[i]));
              want += v;
              scale += std::abs(v);
            }
            ASSERT_NEAR(got[static_cast<size_t>(p * inner + j)], want, 1e-12 * (scale + 1e-30))
                << what << ", sum " << s << ", part " << p << ", column " << j;
          }
      }
    }
  }
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
