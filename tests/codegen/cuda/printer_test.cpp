// The GPU printer without a GPU: golden output for a broadcast kernel, a row
// kernel and column sums, and NVRTC compiling every printed kernel for sm_80
// and sm_90.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "codegen/cuda/golden.h"
#include "codegen/cuda/op_kernels.h"
#include "codegen/cuda/row_kernels.h"
#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/module.h"
#include "kernels/cuda/nvrtc_lib.h"
#include "kernels/math_expand.h"
#include "random_rule.h"

namespace kiln::cuda {
namespace {

using kiln::testing::expect_golden;
using kir::testing::Builder;

// out_f16 = where(a > b, exp(a) * b, a - 1) with b broadcast along the rows.
kir::Kernel golden_kernel() {
  Builder b(2, "golden");
  const int a = b.load(b.in(DType::f32, {true, true}));
  const int y = b.load(b.in(DType::f32, {false, true}));
  const int gt = b.op(OpId::gt, DType::b8, a, y);
  const int ex = b.op(OpId::mul, DType::f32, b.op(OpId::exp, DType::f32, a), y);
  const int dec = b.op(OpId::sub, DType::f32, a, b.cnst(DType::f32, 1.0));
  const int w = b.op(OpId::where, DType::f32, gt, ex, dec);
  b.store(b.out(DType::f16, {true, true}), b.op(OpId::cast, DType::f16, w));
  return b.k;
}

TEST(GpuPrinter, GoldenBroadcastKernel) {
  expect_golden("broadcast_where.cu", print_kernel(golden_kernel(), "kiln_golden"));
}

// A row kernel: softmax with its logsumexp row store (two phases, shuffles).
TEST(GpuPrinter, GoldenSoftmaxRowKernel) {
  expect_golden("softmax_rows.cu",
                print_kernel(testing::softmax_kernel(DType::f32), "kiln_softmax"));
}

// A bias gradient: out = relu'(x) * g stored, and its column sum.
kir::Kernel column_sum_kernel() {
  Builder b(2, "colsum");
  const int x = b.load(b.in(DType::f32, {true, true}));
  const int g = b.load(b.in(DType::f32, {true, true}));
  const int pos = b.op(OpId::gt, DType::b8, x, b.cnst(DType::f32, 0.0));
  const int y = b.op(OpId::where, DType::f32, pos, g, b.cnst(DType::f32, 0.0));
  b.store(b.out(DType::f32, {true, true}), y);
  b.k.stores.push_back({b.out(DType::f64, {false, true}), b.op(OpId::cast, DType::f64, y), true});
  return b.k;
}

// layer_norm's backward shape: a row kernel whose elementwise value is also
// summed per column (the weight gradient), rank 3 (two row dims).
kir::Kernel row_column_sum_kernel(DType t) {
  Builder b(3, str("row_colsum_", dtype_name(t)));
  const int x = b.load(b.in(t, {true, true, true}));
  const int m = b.reduce(OpId::sum, x, 0, t);
  const int d = b.op(OpId::sub, t, x, m);
  b.store(b.out(t, {true, true, true}), d);
  const int wide = t == DType::f64 ? d : b.op(OpId::cast, DType::f64, d);
  b.k.stores.push_back({b.out(DType::f64, {false, false, true}), wide, true});
  return b.k;
}

// Column sums: a pointwise kernel's, an eager sum's kernel and the combine.
TEST(GpuPrinter, GoldenColumnSumKernels) {
  EXPECT_EQ(held_of(row_column_sum_kernel(DType::f32)), 0);  // a block per part: no held twin
  expect_golden("column_sums.cu",
                print_kernel(column_sum_kernel(), "kiln_colsum") +
                    print_kernel(row_column_sum_kernel(DType::f32), "kiln_row_colsum") +
                    print_column_sum(DType::f16, DType::f32, "kiln_eager_colsum") +
                    print_column_combine(DType::f64, DType::f32, "kiln_colsum_combine"));
}

// The column-sum kernels of every kind and dtype: PTX for sm_80 and sm_90,
// machine code for sm_90 without spills.
TEST(Nvrtc, ColumnSumKernelsCompileWithoutSpills) {
  std::string source = cuda_prelude() + print_kernel(column_sum_kernel(), "c0");
  int n = 1;
  for (DType t : {DType::f32, DType::f64})
    source += print_kernel(row_column_sum_kernel(t), str("c", n++));
  for (DType x : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::i32,
                  DType::u8, DType::b8}) {
    const DType acc = x == DType::f32 || x == DType::f64    ? DType::f64
                      : x == DType::f16 || x == DType::bf16 ? DType::f32
                                                            : DType::i64;
    const DType out = acc == DType::i64 ? DType::i64 : x;
    source += print_column_sum(x, acc, str("c", n++));
    source += print_column_combine(acc, out, str("c", n++));
  }
  source += print_column_combine(DType::f64, DType::f32, str("c", n++));
  for (int arch : {80, 90})
    EXPECT_NE(nvrtc_compile(source, "column_sums.cu", arch, /*cubin=*/false)
                  .ptx.find(str(".target sm_", arch)),
              std::string::npos);
#ifndef KILN_TEST_SANITIZED
  const NvrtcOutput out =
      nvrtc_compile(source, "column_sums.cu", 90, /*cubin=*/true, {"--ptxas-options=-v"});
  EXPECT_EQ(spill_bytes(out.log), 0) << out.log;
#endif
}

// Row kernels: machine code for sm_90 without spills.
TEST(Nvrtc, RowKernelsCompileWithoutSpills) {
  std::string source = cuda_prelude();
  int n = 0;
  for (const auto& r : testing::row_kernels())
    source += print_kernel(r.k, "r" + std::to_string(n++));
  const NvrtcOutput out =
      nvrtc_compile(source, "row_kernels.cu", 90, /*cubin=*/true, {"--ptxas-options=-v"});
  EXPECT_GT(out.cubin.size(), 1000u);
  EXPECT_EQ(spill_bytes(out.log), 0) << out.log;
}

TEST(GpuPrinter, CoversEveryElementwiseOp) {
  const auto kernels = testing::op_kernels();
  std::set<OpId> ops;
  for (const auto& k : kernels) ops.insert(k.op);
  for (int id = 0; id < kNumOps; ++id) {
    const OpId op = static_cast<OpId>(id);
    if (op_info(op).has(kElementwise) && op != OpId::copy) {
      EXPECT_TRUE(ops.count(op)) << op_name(op);
    }
  }
  EXPECT_GT(kernels.size(), 150u);
}

// All op kernels in one program (as a compiled graph's kernels are): PTX
// for sm_80 and sm_90 (NVRTC's front end and code generator), and machine code
// for sm_90 with ptxas's report: no errors, no spills. ptxas takes ~26 s for
// the ~270 kernels on 2 cores, so the sm_80 cubin is left to the GPU run, and
// the sanitizer build (which adds nothing to NVRTC's own checks) stops at PTX.
TEST(Nvrtc, EveryPrintedOpKernelCompilesWithoutSpills) {
  ASSERT_TRUE(nvrtc_available()) << "NVRTC is part of the CUDA toolkit kiln was built with";
  EXPECT_GE(nvrtc_version(), 13000);
  std::string source = cuda_prelude();
  int n = 0;
  for (const auto& k : testing::op_kernels())
    source += print_kernel(k.k, "k" + std::to_string(n++));
  for (int arch : {80, 90})
    EXPECT_NE(nvrtc_compile(source, "op_kernels.cu", arch, /*cubin=*/false)
                  .ptx.find(str(".target sm_", arch)),
              std::string::npos);
#ifndef KILN_TEST_SANITIZED
  const NvrtcOutput out =
      nvrtc_compile(source, "op_kernels.cu", 90, /*cubin=*/true, {"--ptxas-options=-v"});
  EXPECT_GT(out.cubin.size(), 1000u);
  EXPECT_EQ(spill_bytes(out.log), 0) << out.log;
  EXPECT_NE(out.log.find("Used"), std::string::npos) << "no ptxas report:\n" << out.log;
#endif
}

// Kernels printed through their math expansions (kPrim: fma, rint, bit casts,
// shifts, the constant table): pointwise and row kernels compile for sm_90.
TEST(Nvrtc, MathExpansionsCompile) {
  std::string source = cuda_prelude();
  int n = 0;
  for (const auto& k : testing::op_kernels())
    if (kir::has_math_expansion(k.op, k.in))
      source += print_kernel(kir::expand_math(k.k), "m" + std::to_string(n++));
  for (const auto& r : testing::row_kernels())
    source += print_kernel(kir::expand_math(r.k), "r" + std::to_string(n++));
  EXPECT_NE(source.find("kiln_table0["), std::string::npos);  // sin/cos read the table
  EXPECT_NE(nvrtc_compile(source, "math_kernels.cu", 90, /*cubin=*/false).ptx.find(".target sm_90"),
            std::string::npos);
}

// The device Philox kernels, after the CPU's rule as text, compile for sm_80
// and sm_90 (they run on the emulated device in cuda_ops_test).
TEST(Nvrtc, RandomKernelsCompile) {
  std::string source = cuda_prelude() + rng::random_rule_source() + "\n";
  int n = 0;
  for (bool normal : {false, true})
    for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16})
      source += print_random(normal, dt, "r" + std::to_string(n++));
  for (int arch : {80, 90})
    EXPECT_NE(nvrtc_compile(source, "random_kernels.cu", arch, /*cubin=*/false)
                  .ptx.find(str(".target sm_", arch)),
              std::string::npos);
  EXPECT_THROW((void)print_random(false, DType::i32, "bad"), Error);
}

TEST(GpuPrinter, GoldenScanAndSortKernels) {
  expect_golden("cumsum_f16.cu", print_scan(false, DType::f16, "kiln_cumsum_f16"));
  expect_golden("cumprod_i32.cu", print_scan(true, DType::i32, "kiln_cumprod_i32"));
  expect_golden("argsort_f32.cu", print_argsort(DType::f32, "kiln_argsort_f32"));
}

// The scans and argsort of every dtype: PTX for sm_80 and sm_90, machine code
// for sm_90 without spills.
TEST(Nvrtc, ScanAndSortKernelsCompileWithoutSpills) {
  std::string source = cuda_prelude();
  int n = 0;
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::i32,
                  DType::u8, DType::b8}) {
    for (bool product : {false, true}) source += print_scan(product, t, str("s", n++));
    source += print_argsort(t, str("s", n++));
  }
  for (int arch : {80, 90})
    EXPECT_NE(nvrtc_compile(source, "order_kernels.cu", arch, /*cubin=*/false)
                  .ptx.find(str(".target sm_", arch)),
              std::string::npos);
#ifndef KILN_TEST_SANITIZED
  const NvrtcOutput out =
      nvrtc_compile(source, "order_kernels.cu", 90, /*cubin=*/true, {"--ptxas-options=-v"});
  EXPECT_EQ(spill_bytes(out.log), 0) << out.log;
#endif
}

// NVRTC's output is cached on disk (KILN_CACHE_DIR): the same program again
// is read back; another target is another entry; a damaged entry is compiled
// again and replaced.
TEST(Nvrtc, ProgramsAreCachedOnDisk) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / str("kiln_nvrtc_cache_", ::getpid());
  fs::remove_all(dir);
  const char* old = std::getenv("KILN_CACHE_DIR");
  const std::string saved = old ? old : "";
  ::setenv("KILN_CACHE_DIR", dir.c_str(), 1);
  const std::string src = cuda_prelude() + print_kernel(testing::op_kernels()[0].k, "cached0");
  const NvrtcCacheStats s0 = nvrtc_cache_stats();
  const std::vector<char> a = nvrtc_compile_cached(src, "cached.cu", 90, /*cubin=*/true);
  EXPECT_EQ(nvrtc_cache_stats().compiled, s0.compiled + 1);
  EXPECT_EQ(nvrtc_compile_cached(src, "cached.cu", 90, true), a);
  EXPECT_EQ(nvrtc_cache_stats().disk_hits, s0.disk_hits + 1);
  const std::vector<char> ptx = nvrtc_compile_cached(src, "cached.cu", 80, /*cubin=*/false);
  EXPECT_EQ(nvrtc_cache_stats().compiled, s0.compiled + 2);
  EXPECT_NE(std::string(ptx.data()).find(".target sm_80"), std::string::npos);
  for (const auto& f : fs::directory_iterator(dir))
    if (f.path().filename().string().rfind("nvrtc_", 0) == 0)
      std::ofstream(f.path(), std::ios::app) << "damage";
  EXPECT_EQ(nvrtc_compile_cached(src, "cached.cu", 90, true), a);
  EXPECT_EQ(nvrtc_cache_stats().rebuilt, s0.rebuilt + 1);
  EXPECT_EQ(nvrtc_compile_cached(src, "cached.cu", 90, true), a);  // the replaced entry
  EXPECT_EQ(nvrtc_cache_stats().disk_hits, s0.disk_hits + 2);
  if (old)
    ::setenv("KILN_CACHE_DIR", saved.c_str(), 1);
  else
    ::unsetenv("KILN_CACHE_DIR");
  fs::remove_all(dir);
}

TEST(Nvrtc, CompileErrorsNameTheProgramAndShowTheLog) {
  try {
    nvrtc_compile("extern \"C\" __global__ void f() { undefined_thing(); }", "bad.cu", 90, true);
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("bad.cu"), std::string::npos) << m;
    EXPECT_NE(m.find("undefined_thing"), std::string::npos) << m;
  }
}

TEST(Nvrtc, SpillBytesReadsThePtxasReport) {
  EXPECT_EQ(spill_bytes("ptxas info    : Used 10 registers\n0 bytes stack frame, 0 bytes spill "
                        "stores, 0 bytes spill loads"),
            0);
  EXPECT_EQ(spill_bytes("8 bytes spill stores\n24 bytes spill stores"), 24);
}

}  // namespace
}  // namespace kiln::cuda
