// The CUDA driver layer: what it answers without a GPU (here and in CI), and,
// where a GPU exists, every printed op kernel run on it against the kernel IR
// interpreter (exact, except float math within a few ulps).
#include <bit>
#include <cmath>
#include <limits>

#include "codegen/cuda/op_kernels.h"
#include "codegen/cuda/row_kernels.h"
#include "codegen/cuda/run_kernel.h"
#include "kernels/cuda/driver.h"
#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/module.h"
#include "kernels/math_expand.h"

namespace kiln::cuda {
namespace {

TEST(CudaDriver, AnswersWithoutThrowing) {
  if (!is_available()) {
    EXPECT_EQ(device_count(), 0);
    const std::string why = unavailable_reason();
    EXPECT_FALSE(why.empty());
    try {
      driver();
      FAIL() << "expected kiln::Error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("[cuda]"), std::string::npos) << e.what();
    }
    return;
  }
  EXPECT_GE(device_count(), 1);
  EXPECT_EQ(unavailable_reason(), "");
  const DeviceInfo info = device_info(0);
  EXPECT_FALSE(info.name.empty());
  EXPECT_GE(info.cc_major, 7);
  EXPECT_GT(info.multiprocessors, 0);
  EXPECT_GT(info.total_memory, int64_t{1} << 30);
  EXPECT_THROW(device_info(device_count()), Error);
  std::printf("[cuda] %s sm_%d%d, %d SMs, %.1f GiB, driver %d\n", info.name.c_str(), info.cc_major,
              info.cc_minor, info.multiprocessors,
              static_cast<double>(info.total_memory) / (1 << 30), driver().version);
}

TEST(CudaDriver, ErrorNamesComeFromKilnsTable) {
  EXPECT_EQ(error_name(CUDA_ERROR_STUB_LIBRARY), "CUDA_ERROR_STUB_LIBRARY");
  EXPECT_EQ(error_name(static_cast<CUresult>(12345)), "CUresult 12345");
  EXPECT_THROW(check(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc"), Error);
}

// Inputs: ordinary values plus the special ones of each dtype.
double pick(DType t, std::mt19937& rng) {
  const int r = static_cast<int>(rng() % 16);
  if (is_floating(t)) {
    const double inf = std::numeric_limits<double>::infinity();
    const double specials[] = {0.0, -0.0, inf, -inf, std::nan(""), 1.0, -1.0, 0.5};
    if (r < 4) return specials[rng() % 8];
    return std::uniform_real_distribution<double>(-6, 6)(rng);
  }
  if (t == DType::b8) return rng() % 2;
  if (t == DType::u8) return rng() % 256;
  const int64_t lim =
      t == DType::i32 ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int64_t>::max();
  if (r < 3) return static_cast<double>(r == 0 ? -1 : (r == 1 ? 0 : -lim - 1));
  return static_cast<double>(static_cast<int64_t>(rng() % 41) - 20);
}

// Distance in units in the last place between two floats of dtype t (0 when
// both are NaN; "far" when only one is).
int64_t ulps(DType t, double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : 1 << 30;
  auto ordered = [](int64_t bits, int64_t sign_bit) {
    return (bits & sign_bit) ? sign_bit - bits : bits;
  };
  if (t == DType::f64) {
    const int64_t s = std::numeric_limits<int64_t>::min();
    return std::abs(ordered(std::bit_cast<int64_t>(a), s) - ordered(std::bit_cast<int64_t>(b), s));
  }
  int64_t x = std::bit_cast<int32_t>(static_cast<float>(a));
  int64_t y = std::bit_cast<int32_t>(static_cast<float>(b));
  x = x < 0 ? int64_t{INT32_MIN} - x : x;
  y = y < 0 ? int64_t{INT32_MIN} - y : y;
  const int64_t d = std::abs(x - y);
  return t == DType::f16 ? d >> 13 : (t == DType::bf16 ? d >> 16 : d);
}

// A float -> integer cast of a value outside the target's range is undefined
// (kernel_ir.h): such elements are not compared.
bool defined_cast(DType from, DType to, double v) {
  if (!is_floating(from) || is_floating(to) || to == DType::b8) return true;
  if (!std::isfinite(v)) return false;
  const double lo = to == DType::u8 ? 0 : (to == DType::i32 ? -2147483648.0 : -9.2e18);
  const double hi = to == DType::u8 ? 255 : (to == DType::i32 ? 2147483647.0 : 9.2e18);
  return v > lo - 1 && v < hi + 1;
}

using testing::run_on_gpu;

TEST(CudaLaunch, EveryOpKernelMatchesTheInterpreter) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device: " << unavailable_reason();
  set_device(0);
  const auto kernels = testing::op_kernels();
  std::string source = device_prelude();
  for (size_t i = 0; i < kernels.size(); ++i)
    source += print_kernel(kernels[i].k, "k" + std::to_string(i));
  const std::vector<char> image = compile_for_device(source, "op_kernels.cu", 0);
  Module mod(image.data());
  std::mt19937 rng(7);
  const std::vector<int64_t> sizes = {37, 53};
  int64_t worst_math = 0;
  for (size_t i = 0; i < kernels.size(); ++i) {
    const auto& ok = kernels[i];
    const kir::Kernel& k = ok.k;
    auto ref = kir::testing::make_buffers(k, sizes, rng, pick);
    auto ptrs = kir::testing::pointers(ref);
    kir::interpret(k, 0, kir::work_items(k, sizes.data()), ptrs.data(), sizes.data());
    const size_t o = k.args.size() - 1;
    const kir::testing::Buffer got = run_on_gpu(mod, "k" + std::to_string(i), k, ref, sizes)[o];
    const kir::testing::Buffer& a = ref[0];
    int bad = 0;
    for (int64_t e = 0; e < got.numel && bad < 3; ++e) {
      const double want = ref[o].get(e), have = got.get(e);
      if (ok.op == OpId::cast && !defined_cast(ok.in, ok.out, a.get(e))) continue;
      bool same;
      if (is_floating(ok.out) && (testing::float_math(ok.op) || ok.op == OpId::pow)) {
        const int64_t d = ulps(ok.out, want, have);
        worst_math = std::max(worst_math, d);
        same = d <= 4;
      } else {
        same = std::memcmp(ref[o].bytes.data() + e * dtype_size(ok.out),
                           got.bytes.data() + e * dtype_size(ok.out), dtype_size(ok.out)) == 0 ||
               (std::isnan(want) && std::isnan(have));
      }
      if (!same) {
        ++bad;
        ADD_FAILURE() << k.name << " element " << e << ": GPU " << have << ", interpreter " << want
                      << " (a = " << a.get(e) << ")";
      }
    }
  }
  std::printf("[cuda] %zu op kernels checked; float math within %lld ulp\n", kernels.size(),
              static_cast<long long>(worst_math));
}

// The op kernels whose float math has a kernel-IR expansion (math_expand.h),
// printed expanded: the device computes the interpreter's bits exactly (the
// same polynomials with explicit fma, no contraction) on a GPU and on the
// emulated device alike.
TEST(CudaLaunch, MathExpansionsMatchTheInterpreterBitForBit) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device: " << unavailable_reason();
  set_device(0);
  std::vector<testing::OpKernel> kernels;
  for (testing::OpKernel& ok : testing::op_kernels())
    if (kir::has_math_expansion(ok.op, ok.in)) kernels.push_back(std::move(ok));
  ASSERT_GE(kernels.size(), 27u);  // 9 functions in f32, f16 and bf16
  std::string source = device_prelude();
  for (size_t i = 0; i < kernels.size(); ++i)
    source += print_kernel(kir::expand_math(kernels[i].k), "m" + std::to_string(i));
  const std::vector<char> image = compile_for_device(source, "math_kernels.cu", 0);
  Module mod(image.data());
  std::mt19937 rng(5);
  const std::vector<int64_t> sizes = {37, 53};
  for (size_t i = 0; i < kernels.size(); ++i) {
    const kir::Kernel& k = kernels[i].k;
    auto ref = kir::testing::make_buffers(k, sizes, rng, pick);
    auto ptrs = kir::testing::pointers(ref);
    kir::interpret(k, 0, kir::work_items(k, sizes.data()), ptrs.data(), sizes.data());
    const size_t o = k.args.size() - 1;
    const kir::testing::Buffer got =
        run_on_gpu(mod, "m" + std::to_string(i), kir::expand_math(k), ref, sizes)[o];
    const size_t es = dtype_size(kernels[i].out);
    int bad = 0;
    for (int64_t e = 0; e < got.numel && bad < 3; ++e) {
      const double want = ref[o].get(e), have = got.get(e);
      if (std::memcmp(ref[o].bytes.data() + e * es, got.bytes.data() + e * es, es) == 0 ||
          (std::isnan(want) && std::isnan(have)))
        continue;
      ++bad;
      ADD_FAILURE() << k.name << " element " << e << ": device " << have << ", interpreter " << want
                    << " (a = " << ref[0].get(e) << ")";
    }
  }
}

// Row kernels on several shapes (an empty row, a row shorter than a warp, rows
// longer than a block): exact where the kernel promises it (integers, max/min,
// reassoc = false), else within the rounding of a reordered sum.
TEST(CudaLaunch, RowKernelsMatchTheInterpreter) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device: " << unavailable_reason();
  set_device(0);
  const auto kernels = testing::row_kernels();
  std::string source = device_prelude();
  for (size_t i = 0; i < kernels.size(); ++i)
    source += print_kernel(kernels[i].k, "r" + std::to_string(i));
  const std::vector<char> image = compile_for_device(source, "row_kernels.cu", 0);
  Module mod(image.data());
  std::mt19937 rng(11);
  for (size_t i = 0; i < kernels.size(); ++i) {
    const kir::Kernel& k = kernels[i].k;
    for (const std::vector<int64_t>& shape :
         {std::vector<int64_t>{5, 0}, {7, 13}, {3, 53}, {4, 1000}, {2, 3000}, {2, 5000}}) {
      std::vector<int64_t> sizes = shape;
      if (k.rank == 3) sizes = {shape[0], 3, shape[1]};
      if (k.name == "layer_norm" && sizes.back() != 53) continue;  // its 1/N is baked in
      auto ref = kir::testing::make_buffers(k, sizes, rng, testing::row_value);
      auto ptrs = kir::testing::pointers(ref);
      kir::interpret(k, 0, kir::work_items(k, sizes.data()), ptrs.data(), sizes.data());
      const auto got = run_on_gpu(mod, "r" + std::to_string(i), k, ref, sizes);
      for (size_t a = 0; a < k.args.size(); ++a) {
        if (!k.args[a].is_output) continue;
        int bad = 0;
        for (int64_t e = 0; e < got[a].numel && bad < 3; ++e) {
          const double want = ref[a].get(e), have = got[a].get(e);
          bool same = (std::isnan(want) && std::isnan(have)) || want == have;
          if (!same && !kernels[i].exact) {
            const double tol = k.args[a].dtype == DType::f16
                                   ? 2e-3
                                   : (k.args[a].dtype == DType::bf16 ? 1e-2 : 2e-5);
            same = std::abs(want - have) <= tol * (1 + std::abs(want));
          }
          if (!same) {
            ++bad;
            ADD_FAILURE() << k.name << " sizes " << ::testing::PrintToString(sizes) << " arg " << a
                          << " element " << e << ": GPU " << have << ", interpreter " << want;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace kiln::cuda
