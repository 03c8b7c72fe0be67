// Row kernels holding the row in registers (print_row_kernel's `held`): on the
// device (the emulated one here) they equal the streaming kernel launched
// with the same block bit for bit (each thread adds the same elements in the
// same order), and the interpreter within a reordered sum's rounding (exactly
// where the kernel promises it); rows longer than the held capacity stream.
#include <bit>
#include <cmath>
#include <map>
#include <regex>
#include <sstream>

#include "codegen/cuda/golden.h"
#include "codegen/cuda/row_kernels.h"
#include "codegen/cuda/run_kernel.h"
#include "kernels/cuda/driver.h"
#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/gpu_printer_internal.h"
#include "kernels/cuda/module.h"
#include "kernels/cuda/nvrtc_lib.h"

namespace kiln::cuda {
namespace {

bool same_bits(const kir::testing::Buffer& a, const kir::testing::Buffer& b) {
  return a.bytes == b.bytes;
}

constexpr int kHeld = 4;

TEST(CudaHeldRows, EqualTheStreamingKernelAndTheInterpreter) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device: " << unavailable_reason();
  set_device(0);
  const auto kernels = testing::row_kernels();
  // The emulated device's prelude leaves the held path out unless asked.
  std::string source = "#define KILN_HELD_ROWS 1\n" + device_prelude();
  for (size_t i = 0; i < kernels.size(); ++i) {
    source += detail::print_row_variant(kernels[i].k, "s" + std::to_string(i), detail::kRowUnroll,
                                        0, false, detail::default_row_loops());
    source +=
        detail::print_row_variant(kernels[i].k, "h" + std::to_string(i), detail::kRowUnroll, kHeld);
  }
  const std::vector<char> image = compile_for_device(source, "held_rows.cu", 0);
  Module mod(image.data());
  std::mt19937 rng(17);
  int held_launches = 0;
  for (size_t i = 0; i < kernels.size(); ++i) {
    const kir::Kernel& k = kernels[i].k;
    // An empty row, rows shorter than a warp, odd lengths, a row filling
    // kHeld * 512 threads exactly and one element longer (streams).
    for (const std::vector<int64_t>& shape :
         {std::vector<int64_t>{5, 0}, {7, 13}, {6, 4}, {3, 53}, {4, 1000}, {2, 2048}, {2, 2049}}) {
      std::vector<int64_t> sizes = shape;
      if (k.rank == 3) sizes = {shape[0], 3, shape[1]};
      if (k.name == "layer_norm" && sizes.back() != 53) continue;  // its 1/N is baked in
      const int64_t inner = sizes.back(), rows = kir::work_items(k, sizes.data());
      auto ref = kir::testing::make_buffers(k, sizes, rng, testing::row_value);
      auto ptrs = kir::testing::pointers(ref);
      kir::interpret(k, 0, rows, ptrs.data(), sizes.data());
      // At most what both kernels can run (an H100 refused 512 threads of a
      // held kernel with 158 registers: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES).
      const int64_t cap = std::min(max_block_threads(mod.function("h" + std::to_string(i))),
                                   max_block_threads(mod.function("s" + std::to_string(i))));
      const auto threads = static_cast<unsigned>(row_threads(k, inner, kHeld, cap));
      if (inner <= kHeld * static_cast<int64_t>(threads)) ++held_launches;
      // One block per row, then two blocks taking several rows each.
      for (const unsigned blocks : {static_cast<unsigned>(rows), 2u}) {
        const std::string what =
            str(k.name, " sizes ", ::testing::PrintToString(sizes), " ", blocks, " x ", threads);
        const auto held =
            testing::run_rows(mod, "h" + std::to_string(i), k, ref, sizes, blocks, threads);
        const auto streamed =
            testing::run_rows(mod, "s" + std::to_string(i), k, ref, sizes, blocks, threads);
        for (size_t a = 0; a < k.args.size(); ++a) {
          if (!k.args[a].is_output) continue;
          EXPECT_TRUE(same_bits(held[a], streamed[a])) << what << " arg " << a;
        }
        testing::expect_like_interpreter(k, held, ref, kernels[i].exact, what);
      }
    }
  }
  EXPECT_GT(held_launches, 20);
}

// The launch fits the block to the held row: the fewest whole warps, one
// thread for index-order sums, the streaming rule past kHeld * 512.
TEST(CudaHeldRows, LaunchFitsTheBlockToTheRow) {
  const kir::Kernel k = testing::softmax_kernel(DType::f32);
  EXPECT_EQ(row_threads(k, 0, 16), 32);
  EXPECT_EQ(row_threads(k, 13, 16), 32);
  EXPECT_EQ(row_threads(k, 1024, 16), 64);
  EXPECT_EQ(row_threads(k, 1025, 16), 96);
  EXPECT_EQ(row_threads(k, 4096, 32), 128);
  EXPECT_EQ(row_threads(k, 16 * 512, 16), 512);
  EXPECT_EQ(row_threads(k, 16 * 512 + 1, 16), 256);  // streams
  EXPECT_EQ(row_threads(k, 1024), 64);
  kir::Kernel ordered = k;
  ordered.reassoc = false;
  EXPECT_EQ(row_threads(ordered, 1024, 16), 1);
  // A block capped by the kernel's registers: the row streams.
  EXPECT_EQ(row_threads(k, 16 * 512, 16, 384), 384);
  EXPECT_EQ(row_threads(k, 1024, 0, 32), 32);
}

// What has a held twin by default: row kernels summing in any order, not
// index-order sums (a thread per row) nor column-sum kernels (a block per
// part); and which rows the twin takes: more than half its slots filled.
TEST(CudaHeldRows, DefaultTwinsAndTheRowsTheyHold) {
  if (row_held() != kDefaultRowHeld) GTEST_SKIP() << "KILN_CUDA_ROW_HELD is set";
  const kir::Kernel k = testing::softmax_kernel(DType::f32);
  EXPECT_EQ(held_of(k), kDefaultRowHeld);
  EXPECT_EQ(print_kernel(k, "k").find("KILN_HELD_ROWS"), std::string::npos) << "streams";
  EXPECT_NE(print_held_twin(k, "k").find("if (KILN_HELD_ROWS && inner <= 32 * "),
            std::string::npos);
  kir::Kernel ordered = k;
  ordered.reassoc = false;
  EXPECT_EQ(held_of(ordered), 0);
  EXPECT_THROW(print_held_twin(ordered, "k"), Error);
  for (const testing::RowKernel& r : testing::row_kernels())
    EXPECT_EQ(held_of(r.k), r.k.reassoc ? kDefaultRowHeld : 0) << r.k.name;
  // Rows of 1024 fill a warp's 32 x 32 slots; 512, half of them: streamed.
  EXPECT_TRUE(holds_row(32, 1024));
  EXPECT_FALSE(holds_row(32, 512));
  EXPECT_FALSE(holds_row(32, 256));
  EXPECT_TRUE(holds_row(32, 513));
  EXPECT_TRUE(holds_row(32, 1025));  // 64 threads, 1025 of 2048 slots
  EXPECT_TRUE(holds_row(32, 4096));
  EXPECT_TRUE(holds_row(32, 32 * 512));
  EXPECT_FALSE(holds_row(32, 32 * 512 + 1));  // past the largest held block
  EXPECT_FALSE(holds_row(32, 4097, 128));     // the twin's registers allow 128 threads
  EXPECT_FALSE(holds_row(0, 1024));
  // The count a twin holds a row with: the smallest that holds it in one
  // warp (8, 16, 32 of a kernel holding 32), else 32 on more warps, else none.
  EXPECT_EQ(twin_held(32, 128), 0);
  EXPECT_EQ(twin_held(32, 129), 8);
  EXPECT_EQ(twin_held(32, 256), 8);
  EXPECT_EQ(twin_held(32, 257), 16);
  EXPECT_EQ(twin_held(32, 512), 16);
  EXPECT_EQ(twin_held(32, 513), 32);
  EXPECT_EQ(twin_held(32, 1024), 32);
  EXPECT_EQ(twin_held(32, 4096), 32);
  EXPECT_EQ(twin_held(32, 32 * 512 + 1), 0);
  EXPECT_EQ(twin_held(16, 100), 4);
  EXPECT_EQ(twin_held(0, 1024), 0);
  EXPECT_THROW(print_held_twin(k, "k", 64), Error);
}

// launch_kernel of KernelFns runs the held twin of twin_held's count on its
// fitted block where that holds the row (asking for it then) and the
// streaming kernel elsewhere: the bits of that launch, and the interpreter's
// values.
TEST(CudaHeldRows, KernelFnsLaunchTheTwinWhereItHolds) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device: " << unavailable_reason();
  if (row_held() != kDefaultRowHeld) GTEST_SKIP() << "KILN_CUDA_ROW_HELD is set";
  set_device(0);
  const kir::Kernel k = testing::softmax_kernel(DType::f32);
  // The emulated device's prelude leaves the held path out unless asked.
  std::string source = "#define KILN_HELD_ROWS 1\n" + device_prelude() + print_kernel(k, "k");
  // Twins of 8 and 32 (16: the C++ dialect's case; each held twin costs
  // PoCL tens of seconds to compile from a cold cache).
  for (int h : {8, 32}) source += print_held_twin(k, str("k_held", h), h);
  const std::vector<char> image = compile_for_device(source, "held_twin.cu", 0);
  Module mod(image.data());
  std::vector<int> asked;
  const KernelFns fns{mod.function("k"), [&](int h) {
                        asked.push_back(h);
                        return mod.function(str("k_held", h));
                      }};
  std::mt19937 rng(5);
  int twins = 0;
  // Fewer rows than warp rows take: a block per row (the emulated device's
  // compile of held 32 in 32 x 4 blocks crashed PoCL 3.1).
  for (const std::vector<int64_t>& sizes :
       {std::vector<int64_t>{3, 1024}, {3, 777}, {2, 4096}, {2, 9000}, {3, 200}, {3, 100}}) {
    auto ref = kir::testing::make_buffers(k, sizes, rng, testing::row_value);
    auto ptrs = kir::testing::pointers(ref);
    const int64_t rows = kir::work_items(k, sizes.data());
    kir::interpret(k, 0, rows, ptrs.data(), sizes.data());
    const std::string what = ::testing::PrintToString(sizes);
    const auto got = testing::run_on_gpu(mod, "k", k, ref, sizes,
                                         [&](CUfunction, const std::vector<CUdeviceptr>& p) {
                                           launch_kernel(fns, k, p, sizes.data());
                                         });
    const int h = twin_held(held_of(k), sizes.back());
    const bool held =
        h > 0 && holds_row(h, sizes.back(), max_block_threads(mod.function(str("k_held", h))));
    twins += held;
    const auto want =
        testing::run_on_gpu(mod, held ? str("k_held", h) : "k", k, ref, sizes,
                            [&](CUfunction fn, const std::vector<CUdeviceptr>& p) {
                              launch_kernel(fn, k, p, sizes.data(), nullptr, -1, held ? h : 0);
                            });
    for (size_t a = 0; a < k.args.size(); ++a) {
      if (!k.args[a].is_output) continue;
      EXPECT_TRUE(same_bits(got[a], want[a])) << what << " arg " << a;
    }
    testing::expect_like_interpreter(k, got, ref, false, what);
  }
  EXPECT_EQ(twins, 5);
  // Asked once per holding launch (the caller caches it), with the count for its rows.
  EXPECT_EQ(asked, (std::vector<int>{32, 32, 32, 32, 8}));
}

// The held softmax's text (two slots: readable), and held kernels compile for
// sm_90 without spills at the probe's widths (and the quad / hoisted forms at
// the default unroll).
TEST(GpuPrinter, GoldenHeldSoftmaxRowKernel) {
  kiln::testing::expect_golden(
      "softmax_rows_held2.cu",
      detail::print_row_variant(testing::softmax_kernel(DType::f32), "kiln_softmax", 4, 2));
}

TEST(Nvrtc, HeldAndQuadRowKernelsCompileWithoutSpills) {
  std::string source = cuda_prelude();
  int n = 0;
  for (const auto& r : testing::row_kernels()) {
    for (int held : {8, 16, 32})
      source += detail::print_row_variant(r.k, "r" + std::to_string(n++), 4, held);
    // The streaming loops' other forms (RowLoops: quads, hoisted row values).
    for (const detail::RowLoops loops :
         {detail::RowLoops{true, false}, {false, true}, {true, true}})
      source += detail::print_row_variant(r.k, "r" + std::to_string(n++), detail::kRowUnroll, 0,
                                          false, loops);
  }
  const NvrtcOutput out =
      nvrtc_compile(source, "held_rows.cu", 90, /*cubin=*/true, {"--ptxas-options=-v"});
  EXPECT_GT(out.cubin.size(), 1000u);
#ifndef KILN_TEST_SANITIZED
  EXPECT_EQ(spill_bytes(out.log), 0) << out.log;
#endif
}

// Registers per thread of each kernel in a ptxas -v log.
std::map<std::string, int> registers_of(const std::string& log) {
  static const std::regex entry("Compiling entry function '([A-Za-z0-9_]+)'");
  static const std::regex used("Used ([0-9]+) registers");
  std::map<std::string, int> out;
  std::string name;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, entry)) name = m[1];
    if (std::regex_search(line, m, used) && !name.empty()) out[name] = std::stoi(m[1]);
  }
  return out;
}

// Held quads (held 8 / 16 / 32, RowLoops::quads) compile for sm_80 and sm_90
// without spills, and fit their launch: rows of 1024 and 4096 on the block
// launch_kernel fits to them (row_threads) within a block's 64K registers, so
// the launch holds the row instead of falling back to streaming.
TEST(Nvrtc, HeldQuadRowKernelsFitTheirLaunchWithoutSpills) {
  std::vector<kir::Kernel> kernels;  // those printing held quads (f32 rows)
  for (const auto& r : testing::row_kernels()) kernels.push_back(r.k);
  kernels.push_back(testing::log_softmax_kernel(DType::f32));
  kernels.push_back(testing::layer_norm_kernel(1024));
  std::erase_if(kernels, [](const kir::Kernel& k) {
    return detail::print_row_variant(k, "k", detail::kRowUnroll, 4, false, {true, false})
               .find("qh_0") == std::string::npos;
  });
  EXPECT_EQ(kernels.size(), 6u);
  std::string source = cuda_prelude();
  std::vector<std::pair<std::string, int>> held;  // symbol, held, of kernels[i / 3]
  for (const kir::Kernel& k : kernels)
    for (int h : {8, 16, 32}) {
      held.emplace_back("q" + std::to_string(held.size()), h);
      source += detail::print_row_variant(k, held.back().first, detail::kRowUnroll, h, false,
                                          {true, false});
    }
  for (int arch : {80, 90}) {
    const NvrtcOutput out =
        nvrtc_compile(source, "held_quads.cu", arch, /*cubin=*/true, {"--ptxas-options=-v"});
#ifndef KILN_TEST_SANITIZED
    EXPECT_EQ(spill_bytes(out.log), 0) << "sm_" << arch << ":\n" << out.log;
#endif
    const std::map<std::string, int> regs = registers_of(out.log);
    ASSERT_EQ(regs.size(), held.size()) << out.log;
    for (size_t i = 0; i < held.size(); ++i)
      for (int64_t inner : {1024, 4096}) {
        const kir::Kernel& k = kernels[i / 3];
        const int64_t threads = row_threads(k, inner, held[i].second);
        if (inner > held[i].second * threads) continue;  // streams
        EXPECT_LE(regs.at(held[i].first) * threads, 65536)
            << k.name << " held " << held[i].second << " sm_" << arch << " rows of " << inner;
      }
  }
}

}  // namespace
}  // namespace kiln::cuda
