// Warp rows (module.h's row_block): many short rows run one warp per row, a
// block's warps (blockDim.y) taking consecutive rows. A row's results depend
// on blockDim.x alone, so on the device (the emulated one here) a warp row
// equals a 32-thread block bit for bit; a warp past the last row stores
// nothing; launch_kernel picks warp rows where row_block says so.
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "codegen/cuda/cuda_test_util.h"
#include "codegen/cuda/row_kernels.h"
#include "codegen/cuda/run_kernel.h"
#include "kernels/cuda/driver.h"
#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/gpu_printer_internal.h"
#include "kernels/cuda/module.h"
#include "kiln/compile.h"

namespace kiln::cuda {
namespace {

// Every output of `got` has the bits of `want`'s.
void expect_same_outputs(const kir::Kernel& k, const std::vector<kir::testing::Buffer>& got,
                         const std::vector<kir::testing::Buffer>& want, const std::string& what) {
  for (size_t a = 0; a < k.args.size(); ++a) {
    if (!k.args[a].is_output) continue;
    EXPECT_TRUE(got[a].bytes == want[a].bytes) << what << " arg " << a;
  }
}

// Each reassociating row kernel as warp rows (4 rows a block, on one block
// and on two, so warps stride over rows and some run past the last)
// equals the same kernel on one 32-thread block per row, and the interpreter
// (bit for bit where the kernel promises it, else within a reordered sum's
// rounding).
TEST(CudaWarpRows, EqualA32ThreadBlockPerRowAndTheInterpreter) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device: " << unavailable_reason();
  set_device(0);
  std::vector<testing::RowKernel> kernels;
  for (testing::RowKernel& r : testing::row_kernels())
    if (r.k.reassoc) kernels.push_back(std::move(r));
  kernels.push_back({testing::log_softmax_kernel(DType::f32), false});
  std::string source = device_prelude();
  for (size_t i = 0; i < kernels.size(); ++i)
    source += print_kernel(kernels[i].k, "w" + std::to_string(i));
  const std::vector<char> image = compile_for_device(source, "warp_rows.cu", 0);
  Module mod(image.data());
  std::mt19937 rng(41);
  int launches = 0;
  for (size_t i = 0; i < kernels.size(); ++i) {
    const kir::Kernel& k = kernels[i].k;
    const std::string name = "w" + std::to_string(i);
    // Empty rows, rows shorter than a warp, odd lengths, 32 elements per lane.
    for (const std::vector<int64_t>& shape :
         {std::vector<int64_t>{7, 0}, {9, 1}, {7, 13}, {5, 53}, {10, 130}, {3, 1024}}) {
      std::vector<int64_t> sizes = shape;
      if (k.rank == 3) sizes = {shape[0], 3, shape[1]};
      if (k.name == "layer_norm" && sizes.back() != 53) continue;  // its 1/N is baked in
      const int64_t rows = kir::work_items(k, sizes.data());
      auto ref = kir::testing::make_buffers(k, sizes, rng, testing::row_value);
      auto ptrs = kir::testing::pointers(ref);
      kir::interpret(k, 0, rows, ptrs.data(), sizes.data());
      const std::string what = str(k.name, " sizes ", ::testing::PrintToString(sizes));
      const auto block_rows =
          testing::run_rows(mod, name, k, ref, sizes, static_cast<unsigned>(rows), 32, 1);
      // 4 rows a block only: the emulated device compiles a kernel per block
      // shape (a cold cache took 54 s for three shapes).
      for (const unsigned per_block : {4u})
        for (const unsigned blocks : {1u, 2u}) {
          expect_same_outputs(k, testing::run_rows(mod, name, k, ref, sizes, blocks, 32, per_block),
                              block_rows, str(what, ", ", blocks, " blocks of 32 x ", per_block));
          ++launches;
        }
      testing::expect_like_interpreter(k, block_rows, ref, kernels[i].exact, what);
    }
  }
  EXPECT_GE(launches, 74);
}

// The rule: many rows of at most kWarpRowsMaxInner elements take warp rows;
// few rows, long rows, index-order sums, column sums, rows longer than a held
// warp and KILN_CUDA_WARP_ROWS=0 keep a block per row; "all" takes any size.
// Column sums take column warps where the row fits (their own rule).
TEST(CudaWarpRows, RowBlockTakesWarpsForManyShortRows) {
  const kir::Kernel k = testing::softmax_kernel(DType::f32);
  auto is = [](RowBlock b, int64_t x, int64_t y) { return b.x == x && b.y == y; };
  EXPECT_TRUE(is(row_block(k, 65536, 256, 0, 1024, WarpRows::kSizes), 32, kWarpRowsPerBlock));
  EXPECT_TRUE(
      is(row_block(k, kWarpRowsMinRows, kWarpRowsMaxInner, 0, 1024, WarpRows::kSizes), 32, 4));
  EXPECT_TRUE(is(row_block(k, 65536, 1, 0, 1024, WarpRows::kSizes), 32, 4));
  EXPECT_TRUE(is(row_block(k, 65536, 256, 0, 64, WarpRows::kSizes), 32, 2));  // capped by registers
  EXPECT_TRUE(is(row_block(k, kWarpRowsMinRows - 1, 256, 0, 1024, WarpRows::kSizes), 64, 1));
  EXPECT_TRUE(is(row_block(k, 65536, kWarpRowsMaxInner + 1, 0, 1024, WarpRows::kSizes), 64, 1));
  EXPECT_TRUE(is(row_block(k, 65536, 256, 0, 1024, WarpRows::kOff), 64, 1));
  EXPECT_TRUE(is(row_block(k, 65536, 64, 2, 1024, WarpRows::kSizes), 32, 4));   // held in one warp
  EXPECT_TRUE(is(row_block(k, 65536, 100, 2, 1024, WarpRows::kSizes), 64, 1));  // held in two
  kir::Kernel ordered = k;
  ordered.reassoc = false;
  EXPECT_TRUE(is(row_block(ordered, 65536, 256, 0, 1024, WarpRows::kSizes), 1, 1));
  // Column sums: column warps where the row fits the shared partials (one
  // sum: 1024 on 4 warps, 2048 on 2) and the block takes the warps, else a
  // block per part.
  kir::Kernel summed = k;
  summed.stores[0].accumulate = true;
  EXPECT_TRUE(is(row_block(summed, 65536, 256, 0, 1024, WarpRows::kSizes), 32, kColumnWarps));
  EXPECT_TRUE(is(row_block(summed, 65536, 256, 0, 1024, WarpRows::kOff), 32, kColumnWarps));
  EXPECT_TRUE(is(row_block(summed, 65536, 1025, 0, 1024, WarpRows::kSizes), 32, 2));
  EXPECT_TRUE(is(row_block(summed, 65536, 2049, 0, 1024, WarpRows::kSizes), 128, 1));
  EXPECT_TRUE(is(row_block(summed, 65536, 256, 0, 64, WarpRows::kSizes), 32, 2));
  EXPECT_TRUE(is(row_block(summed, 65536, 256, 0, 32, WarpRows::kSizes), 32, 1));
  kir::Kernel ordered_summed = summed;
  ordered_summed.reassoc = false;
  EXPECT_TRUE(is(row_block(ordered_summed, 65536, 256, 0, 1024, WarpRows::kSizes), 1, 1));
  // "all": every size, still not for index-order sums or column sums.
  EXPECT_TRUE(is(row_block(k, 3, 5000, 0, 1024, WarpRows::kAll), 32, 4));
  EXPECT_TRUE(is(row_block(k, 3, 100, 2, 1024, WarpRows::kAll), 32, 4));
  EXPECT_TRUE(is(row_block(ordered, 3, 100, 0, 1024, WarpRows::kAll), 1, 1));
  EXPECT_TRUE(is(row_block(summed, 3, 3000, 0, 1024, WarpRows::kAll), 128, 1));
}

// Through launch_kernel (eager ops and compiled plans): softmax, log_softmax
// and layer_norm over 2051 rows (the last block's fourth warp past the end)
// equal the CPU's, eagerly and compiled, and an eager softmax equals the
// kernel on one 32-thread block per row bit for bit.
// The row launch settings are read once per process: a bad value is a clear
// kiln::Error naming the variable and what it takes (each read in a child
// process of its own, the value set there first).
TEST(CudaWarpRows, BadLaunchSettingsAreClearErrors) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  struct Case {
    const char *name, *value, *message;
    int (*read)();
  };
  const Case cases[] = {
      {"KILN_CUDA_WARP_ROWS", "2", "KILN_CUDA_WARP_ROWS='2': expected one of 0, 1, all",
       [] { return static_cast<int>(warp_rows_mode()); }},
      {"KILN_CUDA_ROW_HELD", "65", "KILN_CUDA_ROW_HELD=65: expected 0 to 64",
       [] { return row_held(); }},
      {"KILN_CUDA_ROW_HELD", "8x", "KILN_CUDA_ROW_HELD", [] { return row_held(); }},
      {"KILN_CUDA_COLUMN_WARPS", "yes", "KILN_CUDA_COLUMN_WARPS='yes': expected one of 0, 1",
       [] { return static_cast<int>(column_warps()); }},
  };
  for (const Case& c : cases)
    EXPECT_EXIT(
        {
          setenv(c.name, c.value, 1);
          try {
            (void)c.read();
          } catch (const Error& e) {
            std::fprintf(stderr, "%s\n", e.what());
            std::_Exit(std::string(e.what()).find(c.message) != std::string::npos ? 7 : 8);
          }
          std::_Exit(9);
        },
        ::testing::ExitedWithCode(7), "")
        << c.name << "=" << c.value;
}

TEST(CudaWarpRows, EagerAndCompiledRowsEqualTheCpu) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device: " << unavailable_reason();
  if (warp_rows_mode() == WarpRows::kOff) GTEST_SKIP() << "KILN_CUDA_WARP_ROWS=0";
  set_device(0);
  manual_seed(5);
  const int64_t rows = kWarpRowsMinRows + 3, inner = 40;
  const Tensor x = randn({rows, inner}), w = randn({inner}), b = randn({inner});
  const Tensor xc = x.cuda(), wc = w.cuda(), bc = b.cuda();
  auto f = [](const Tensor& t, const Tensor& w, const Tensor& b) {
    return std::vector<Tensor>{softmax(t, -1), log_softmax(t, -1),
                               layer_norm(t, {t.size(-1)}, w, b)};
  };
  const std::vector<Tensor> cpu = f(x, w, b), eager = f(xc, wc, bc);
  auto compiled = compile(f, {.warmup = 0});
  const std::vector<Tensor> traced = compiled(xc, wc, bc);
  for (size_t i = 0; i < cpu.size(); ++i) {
    kiln::testing::expect_close(eager[i], cpu[i], 1e-5, str("eager output ", i));
    kiln::testing::expect_close(traced[i], cpu[i], 1e-5, str("compiled output ", i));
  }
  // The same softmax kernel on one 32-thread block per row.
  const kir::Kernel k = testing::softmax_kernel(DType::f32);
  const std::string source = device_prelude() + print_kernel(k, "sm");
  const std::vector<char> image = compile_for_device(source, "warp_rows_softmax.cu", 0);
  Module mod(image.data());
  std::mt19937 rng(43);
  const std::vector<int64_t> sizes = {rows, inner};
  auto ref = kir::testing::make_buffers(k, sizes, rng, testing::row_value);
  const auto warps = testing::run_on_gpu(mod, "sm", k, ref, sizes);  // launch_kernel's block
  expect_same_outputs(k, warps, testing::run_rows(mod, "sm", k, ref, sizes, 64, 32, 1),
                      "launch_kernel");
}

}  // namespace
}  // namespace kiln::cuda
