// multinomial on CUDA tensors against the CPU: the same seed draws the same
// categories (with and without replacement, every floating dtype, 1-D and
// 2-D, strided, zero weights, ties, an explicit generator, compiled graphs),
// the race keys bit for bit, bad weights raise the CPU's errors; the printed
// kernels' golden text and NVRTC compiles. Runs on a GPU or the emulated device.
#include <cmath>
#include <limits>

#include "codegen/cuda/cuda_test_util.h"
#include "codegen/cuda/golden.h"
#include "kernels/cuda/device_ops.h"
#include "kernels/cuda/driver.h"
#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/module.h"
#include "kernels/cuda/nvrtc_lib.h"
#include "kernels/cuda/stream.h"
#include "kiln/compile.h"
#include "ops/sample_rule.h"

namespace kiln::testing {
namespace {

class CudaSample : public CudaTest<21> {};

// Weights with zeros (leading, inner, trailing), ties and a wide range, of dtype dt.
Tensor weights(const Dims& shape, DType dt) {
  Tensor w = exp(randn(shape, DType::f64) * 2);
  {
    NoGradGuard ng;
    Tensor flat = w.view({-1, shape.back()});
    flat.select(1, 0).fill_(0.0);
    flat.select(1, shape.back() - 1).fill_(0.0);
    if (shape.back() > 5) {
      flat.select(1, 3).fill_(1.5);
      flat.select(1, 4).fill_(1.5);
    }
  }
  return w.to(dt);
}

// Draws `n` from p on the CPU and on the device from the same generator state.
void expect_same_draw(const Tensor& p, int64_t n, bool repl, const std::string& what) {
  manual_seed(77);
  const Tensor cpu = multinomial(p, n, repl);
  manual_seed(77);
  const Tensor gpu = multinomial(p.cuda(), n, repl);
  expect_equal(gpu, cpu, what);
}

TEST_F(CudaSample, DrawsEqualTheCpuWithReplacement) {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    const Tensor w = weights({5, 9}, dt);
    expect_same_draw(w, 64, true, str("2-D ", dt));
    expect_same_draw(w.select(0, 2), 33, true, str("1-D ", dt));
    expect_same_draw(w.transpose(0, 1).contiguous().transpose(0, 1), 7, true, str("strided ", dt));
  }
  // One category, and one nonzero weight among many (u * total rounding up).
  expect_same_draw(ones({1}), 5, true, "one category");
  expect_same_draw(from_vector<double>({0, 0, 3e-300, 0}), 9, true, "one nonzero");
}

TEST_F(CudaSample, DrawsEqualTheCpuWithoutReplacement) {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    const Tensor w = weights({4, 12}, dt);
    for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{10}})
      expect_same_draw(w, n, false, str("2-D ", dt, " n=", n));
    expect_same_draw(w.select(0, 1), 3, false, str("1-D ", dt));
  }
  expect_same_draw(ones({3, 40}), 40, false, "equal weights, all drawn");
}

// With an explicit generator the uniforms are drawn on the device too.
TEST_F(CudaSample, AnExplicitGeneratorDrawsAsOnTheCpu) {
  const Tensor w = weights({3, 10}, DType::f32);
  for (bool repl : {true, false}) {
    Generator a{.seed = 5}, b{.seed = 5};
    const Tensor cpu = multinomial(w, 4, repl, &a);
    const Tensor gpu = multinomial(w.cuda(), 4, repl, &b);
    expect_equal(gpu, cpu, repl ? "with replacement" : "without");
    EXPECT_EQ(a.offset, b.offset);
  }
}

// The keys without replacement: the printed log (ops/sample_rule.h) gives the
// CPU's bits for uniforms across [0, 1) and weights across the range.
TEST_F(CudaSample, RaceKeysAreTheCpusBits) {
  std::vector<double> u = {0,   0x1p-53,       0x1p-30, 1e-9,        0.25,
                           0.5, 0.5 + 0x1p-53, 0.75,    1 - 0x1p-53, 1 - 0x1p-20};
  const Tensor r = rand({990}, DType::f64);
  for (double v : r.to_vector<double>()) u.push_back(v);
  std::vector<double> p;
  for (size_t i = 0; i < u.size(); ++i)
    p.push_back(i % 7 == 0 ? 0.0
                           : std::ldexp(1.0 + 0.37 * static_cast<double>(i % 11), i % 60 - 30));
  const Tensor uc = from_vector<double>(u).cuda(), pc = from_vector<double>(p).cuda();
  Tensor key = make_tensor({static_cast<int64_t>(u.size())}, DType::f64, Device::cuda());
  const std::string sym = "kiln_race_keys_f64_test";
  const CUfunction fn = cuda::cached_kernel(
      0, str(ops::race_log_source(), "\n", cuda::print_race_keys(DType::f64, sym)), sym);
  auto addr = [](const Tensor& t) { return reinterpret_cast<CUdeviceptr>(t.data_ptr()); };
  CUdeviceptr pk = addr(key), pu = addr(uc), pp = addr(pc);
  long long n = static_cast<long long>(u.size());
  void* params[] = {&pk, &pu, &pp, &n};
  cuda::check(cuda::driver().cuLaunchKernel(fn, 4, 1, 1, 256, 1, 1, 0, cuda::current_cu_stream(0),
                                            params, nullptr),
              "race keys");
  const std::vector<double> got = key.to_vector<double>();
  for (size_t i = 0; i < u.size(); ++i) {
    const double want =
        p[i] > 0 ? ops::kiln_race_log(1.0 - u[i]) / p[i] : -std::numeric_limits<double>::infinity();
    ASSERT_EQ(std::bit_cast<uint64_t>(got[i]), std::bit_cast<uint64_t>(want))
        << "u = " << u[i] << ", p = " << p[i] << ": GPU " << got[i] << ", CPU " << want;
    if (p[i] > 0) {  // and the log is libm's within a few ulp (1 - u is exact for drawn u)
      const double exact = std::log(1.0 - u[i]) / p[i];
      ASSERT_LE(std::abs(want - exact), 1e-15 * std::abs(exact)) << u[i] << " " << p[i];
    }
  }
}

// Bad weights on the device raise the CPU's error, naming the first bad row.
TEST_F(CudaSample, BadWeightsRaiseTheCpusErrors) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Case {
    std::vector<double> w;
    Dims shape;
    int64_t n;
    bool repl;
  };
  const Case cases[] = {
      {{0.5, -0.1, 1}, {3}, 1, true},
      {{1, 1, 0, 0, 1, 0}, {3, 2}, 1, true},
      {{1, nan, 1, 1}, {2, 2}, 1, false},
      {{1, 1, 1, 0, 1, 0}, {3, 2}, 2, false},
      {{1, 1, 1, 1e308, 1e308, 1}, {2, 3}, 1, true},
  };
  for (const Case& c : cases) {
    const Tensor w = from_vector<double>(c.w, c.shape);
    std::string cpu_error, gpu_error;
    try {
      (void)multinomial(w, c.n, c.repl);
    } catch (const Error& e) {
      cpu_error = e.what();
    }
    try {
      (void)multinomial(w.cuda(), c.n, c.repl);
    } catch (const Error& e) {
      gpu_error = e.what();
    }
    EXPECT_NE(cpu_error, "") << c.shape;
    EXPECT_EQ(gpu_error.substr(0, gpu_error.find('\n')), cpu_error.substr(0, cpu_error.find('\n')))
        << c.shape;
  }
}

// In a compiled graph: the traced uniforms are made on the device and the
// draw runs there (no host copy of the probabilities).
TEST_F(CudaSample, CompiledDrawsEqualTheCpu) {
  auto f = [](const Tensor& x) {
    const Tensor p = softmax(x * 2, -1);
    return multinomial(p, 6, true) + multinomial(p, 3, false).sum(-1, true);
  };
  const Tensor x = randn({4, 11});
  auto cpu = compile(f, {.warmup = 0});
  auto gpu = compile(f, {.warmup = 0});
  for (int call = 0; call < 2; ++call) {
    manual_seed(100 + call);
    const Tensor want = cpu(x);
    manual_seed(100 + call);
    expect_equal(gpu(x.cuda()), want, str("call ", call));
  }
}

TEST(GpuPrinterSample, GoldenMultinomialKernels) {
  expect_golden("multinomial_rows_repl_f16.cu",
                cuda::print_multinomial_rows(DType::f16, true, "kiln_multinomial_rows_repl_f16"));
  expect_golden("multinomial_rows_f32.cu",
                cuda::print_multinomial_rows(DType::f32, false, "kiln_multinomial_rows_f32"));
  expect_golden("multinomial_draw.cu", cuda::print_multinomial_draw("kiln_multinomial_draw"));
  expect_golden("race_keys_bf16.cu", cuda::print_race_keys(DType::bf16, "kiln_race_keys_bf16"));
}

// Every dtype's multinomial kernels: PTX for sm_80 and sm_90, machine code for
// sm_90 without spills.
TEST(NvrtcSample, MultinomialKernelsCompileWithoutSpills) {
  std::string source =
      cuda::cuda_prelude() + ops::race_log_source() + "\n" + cuda::print_multinomial_draw("d");
  int n = 0;
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (bool repl : {false, true}) source += cuda::print_multinomial_rows(t, repl, str("r", n++));
    source += cuda::print_race_keys(t, str("k", n++));
  }
  for (int arch : {80, 90})
    EXPECT_NE(cuda::nvrtc_compile(source, "sample_kernels.cu", arch, /*cubin=*/false)
                  .ptx.find(str(".target sm_", arch)),
              std::string::npos);
#ifndef KILN_TEST_SANITIZED
  const cuda::NvrtcOutput out = cuda::nvrtc_compile(source, "sample_kernels.cu", 90,
                                                    /*cubin=*/true, {"--ptxas-options=-v"});
  EXPECT_EQ(cuda::spill_bytes(out.log), 0) << out.log;
#endif
}

}  // namespace
}  // namespace kiln::testing
