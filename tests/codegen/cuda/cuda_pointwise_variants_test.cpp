// Printed pointwise kernels' loops (gpu_printer_internal.h: PointwiseOptions):
// every variant (elements per thread, float4 loads and stores, 32-bit indices
// for dense kernels) equals the interpreter bit for bit on the device (the
// emulated one in CI) for counts with and without a remainder, pointers
// aligned or not to 16 bytes, small and full grids, in place. And the loads
// of an unrolled loop are issued before the first division's branch
// (KILN_ISSUE): NVVM sank them below it, one load in flight per thread.
#include <bit>
#include <random>
#include <regex>

#include "codegen/cuda/row_kernels.h"
#include "codegen/kernel_test_util.h"
#include "kernels/cuda/driver.h"
#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/gpu_printer_internal.h"
#include "kernels/cuda/module.h"
#include "kernels/cuda/nvrtc_lib.h"
#include "kernels/math_expand.h"

namespace kiln::cuda {
namespace {

// gelu(x) = 0.5 x (1 + tanh(0.7978845608 (x + 0.044715 x^3))), the tanh form
// (its tanh expands with a division).
kir::Kernel gelu_kernel() {
  kir::testing::Builder b(1, "gelu");
  const DType f = DType::f32;
  const int x = b.load(b.in(f, {true}));
  auto c = [&](double v) { return b.cnst(f, v); };
  const int x3 = b.op(OpId::mul, f, x, b.op(OpId::mul, f, x, x));
  const int inner = b.op(OpId::add, f, x, b.op(OpId::mul, f, x3, c(0.044715)));
  const int t = b.op(OpId::tanh, f, b.op(OpId::mul, f, inner, c(0.7978845608)));
  const int y = b.op(OpId::mul, f, b.op(OpId::mul, f, x, c(0.5)), b.op(OpId::add, f, t, c(1.0)));
  b.store(b.out(DType::f32, {true}), y);
  return b.k;
}

// x / y + x: two inputs, an exact division.
kir::Kernel div_kernel() {
  kir::testing::Builder b(1, "div");
  const DType f = DType::f32;
  const int x = b.load(b.in(f, {true})), y = b.load(b.in(f, {true}));
  b.store(b.out(f, {true}), b.op(OpId::add, f, b.op(OpId::div, f, x, y), x));
  return b.k;
}

std::vector<detail::PointwiseOptions> cases() {
  std::vector<detail::PointwiseOptions> out;
  for (int per : {1, 4, 8})
    for (bool vec : {false, true})
      for (bool narrow : {false, true}) {
        detail::PointwiseOptions o;
        o.per_thread = per;
        o.vector = vec;
        o.narrow_dense = narrow;
        o.fast_division = per == 4;
        out.push_back(o);
      }
  return out;
}

std::string describe(const detail::PointwiseOptions& o) {
  return str(o.per_thread, " per thread", o.vector ? ", float4" : "",
             o.narrow_dense ? ", 32-bit" : "", o.fast_division ? ", fast division" : "");
}

// Runs symbol `name` over n elements of `in` (one buffer per input) with every
// pointer `offset` floats past a 256-byte aligned base; the output aliases
// input 0 when `in_place`. Returns the output.
std::vector<float> run(const Module& mod, const std::string& name,
                       const std::vector<std::vector<float>>& in, int64_t n, int offset,
                       bool in_place, unsigned blocks, unsigned threads) {
  std::vector<DeviceBuffer> bufs;
  std::vector<CUdeviceptr> ptrs;
  const size_t bytes = static_cast<size_t>(n + 4) * 4;
  for (const std::vector<float>& v : in) {
    bufs.emplace_back(bytes);
    ptrs.push_back(bufs.back().get() + 4 * static_cast<CUdeviceptr>(offset));
    if (n > 0) check(driver().cuMemcpyHtoD(ptrs.back(), v.data(), v.size() * 4), "cuMemcpyHtoD");
  }
  if (in_place) {
    ptrs.push_back(ptrs[0]);
  } else {
    bufs.emplace_back(bytes);
    ptrs.push_back(bufs.back().get() + 4 * static_cast<CUdeviceptr>(offset));
  }
  std::vector<void*> params;
  for (CUdeviceptr& p : ptrs) params.push_back(&p);
  long long count = n, s0 = n;
  params.push_back(&count);
  params.push_back(&s0);
  check(driver().cuLaunchKernel(mod.function(name), blocks, 1, 1, threads, 1, 1, 0, nullptr,
                                params.data(), nullptr),
        "cuLaunchKernel");
  check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
  std::vector<float> got(static_cast<size_t>(n));
  if (n > 0) check(driver().cuMemcpyDtoH(got.data(), ptrs.back(), got.size() * 4), "cuMemcpyDtoH");
  return got;
}

TEST(CudaPointwiseVariants, EqualTheInterpreterOnEveryPath) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device: " << unavailable_reason();
  set_device(0);
  const kir::Kernel kernels[2] = {gelu_kernel(), div_kernel()};
  const std::vector<detail::PointwiseOptions> cs = cases();
  std::string source = device_prelude();
  for (size_t k = 0; k < 2; ++k)
    for (size_t c = 0; c < cs.size(); ++c)
      source += detail::print_pointwise_variant(kernels[k], str("k", k, "_", c), cs[c]);
  const std::vector<char> image = compile_for_device(source, "pointwise_variants.cu", 0);
  Module mod(image.data());
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  int vector_runs = 0;
  for (size_t k = 0; k < 2; ++k) {
    const size_t inputs = kernels[k].args.size() - 1;
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{4}, int64_t{37}, int64_t{1027},
                      int64_t{4101}}) {
      std::vector<std::vector<float>> in(inputs, std::vector<float>(static_cast<size_t>(n)));
      for (auto& v : in)
        for (float& x : v) x = normal(rng);
      std::vector<float> want(static_cast<size_t>(n));
      std::vector<void*> hp;
      for (auto& v : in) hp.push_back(v.data());
      hp.push_back(want.data());
      const int64_t sizes[1] = {n};
      kir::interpret(kernels[k], 0, n, hp.data(), sizes);
      for (size_t c = 0; c < cs.size(); ++c)
        for (int offset : {0, 1, 2})
          for (bool in_place : {false, true})
            for (unsigned blocks : {1u, 7u}) {  // grid-stride steps, then a grid of its own
              const std::string what =
                  str(kernels[k].name, " n=", n, ", ", describe(cs[c]), ", offset ", offset,
                      in_place ? ", in place" : "", ", ", blocks, " blocks");
              const std::vector<float> got =
                  run(mod, str("k", k, "_", c), in, n, offset, in_place, blocks, 32);
              ASSERT_EQ(got.size(), want.size()) << what;
              // Bits (not ==: -0 and 0 differ); no memcmp of n = 0's null pointers.
              ASSERT_TRUE(want.empty() ||
                          std::memcmp(got.data(), want.data(), want.size() * 4) == 0)
                  << what;
              vector_runs += cs[c].vector && offset == 0 && n >= 4;
            }
    }
  }
  EXPECT_GT(vector_runs, 0);
}

// On a GPU, tanh's division printed without div.rn's slow path (the default)
// gives div.rn's bits for every input whose quotient tanh selects: every f32
// x with 0.625 < |x| <= 10 (2|x| is clamped to 20 above), both signs, with
// every 4099th equal to the interpreter. The emulated device divides plainly.
TEST(CudaPointwiseVariants, FastDivisionEqualsDivRnOnEveryTanhInput) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device: " << unavailable_reason();
  if (driver().emulated) GTEST_SKIP() << "a real GPU's division (the emulated one is plain)";
  set_device(0);
  kir::testing::Builder b(1, "tanh");
  b.store(b.out(DType::f32, {true}),
          b.op(OpId::tanh, DType::f32, b.load(b.in(DType::f32, {true}))));
  detail::PointwiseOptions fast, plain;
  fast.fast_division = true;
  const std::string source = device_prelude() +
                             detail::print_pointwise_variant(b.k, "kfast", fast) +
                             detail::print_pointwise_variant(b.k, "kplain", plain);
  const std::vector<char> image = compile_for_device(source, "fast_division.cu", 0);
  Module mod(image.data());
  const uint32_t lo = std::bit_cast<uint32_t>(0.625f) + 1, hi = std::bit_cast<uint32_t>(10.0f);
  const int64_t half = hi - lo + 1, n = 2 * half;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < half; ++i) {
    x[static_cast<size_t>(i)] = std::bit_cast<float>(lo + static_cast<uint32_t>(i));
    x[static_cast<size_t>(half + i)] = -x[static_cast<size_t>(i)];
  }
  DeviceBuffer in(static_cast<size_t>(n) * 4), out(static_cast<size_t>(n) * 4);
  in.upload(x.data(), x.size() * 4);
  const std::vector<CUdeviceptr> ptrs = {in.get(), out.get()};
  std::vector<float> got[2];
  for (int v = 0; v < 2; ++v) {
    launch_kernel(mod.function(v == 0 ? "kfast" : "kplain"), b.k, ptrs, &n);
    got[v].resize(x.size());
    out.download(got[v].data(), got[v].size() * 4);
  }
  int64_t differ = 0;
  for (size_t i = 0; i < x.size(); ++i)
    differ += std::bit_cast<uint32_t>(got[0][i]) != std::bit_cast<uint32_t>(got[1][i]);
  EXPECT_EQ(differ, 0) << "of " << n;
  for (size_t i = 0; i < x.size(); i += 4099) {
    float want = 0;
    void* hp[2] = {&x[i], &want};
    const int64_t one = 1;
    kir::interpret(b.k, 0, 1, hp, &one);
    ASSERT_EQ(std::bit_cast<uint32_t>(got[0][i]), std::bit_cast<uint32_t>(want)) << x[i];
  }
}

// print_kernel's dense f32 kernels take float4 steps and tanh's division
// without div.rn's slow path (default_pointwise).
TEST(GpuPrinterPointwise, DefaultIsFloatFourWithFastDivision) {
  const std::string src = print_kernel(gelu_kernel(), "k");
  EXPECT_NE(src.find("((KILN_GLOBAL const float4*)p0)"), std::string::npos) << src;
  EXPECT_NE(src.find("kiln_fdiv_fast("), std::string::npos) << src;
}

// Only kernels of dense f32 arguments get float4 loops, behind an alignment test.
TEST(GpuPrinterPointwise, FloatFourOnlyForDenseF32) {
  detail::PointwiseOptions o;
  o.vector = true;
  EXPECT_NE(detail::print_pointwise_variant(gelu_kernel(), "k", o).find("float4"),
            std::string::npos);
  EXPECT_NE(detail::print_pointwise_variant(gelu_kernel(), "k", o).find("& 15) == 0"),
            std::string::npos);
  kir::testing::Builder b(1, "cast");
  b.store(b.out(DType::f64, {true}),
          b.op(OpId::cast, DType::f64, b.load(b.in(DType::f32, {true}))));
  EXPECT_EQ(detail::print_pointwise_variant(b.k, "k", o).find("float4"), std::string::npos);
  kir::testing::Builder c(2, "bcast");
  c.store(c.out(DType::f32, {true, true}),
          c.op(OpId::add, DType::f32, c.load(c.in(DType::f32, {true, true})),
               c.load(c.in(DType::f32, {false, true}))));
  EXPECT_EQ(detail::print_pointwise_variant(c.k, "k", o).find("float4"), std::string::npos);
}

std::string kernel_ptx(const std::string& ptx, const std::string& name);
int count(const std::string& text, const std::string& what);

// Exactly tanh's 2 / (e + 1) is marked a normal-range division (f32, and in
// f16/bf16's float expansion); printed with fast_division it is the
// prelude's kiln_fdiv_fast, and GELU's sm_90 PTX has no div.rn left.
TEST(GpuPrinterPointwise, FastDivisionIsTanhsOnly) {
  for (int o = 0; o < kNumOps; ++o)
    for (DType t : {DType::f32, DType::f16, DType::bf16}) {
      const auto op = static_cast<OpId>(o);
      if (!kir::has_math_expansion(op, t)) continue;
      const std::vector<kir::Expr>& f = kir::math_expansion(op, t);
      const std::vector<char>& nd = kir::normal_divisions(op, t);
      ASSERT_EQ(nd.size(), f.size()) << op_name(op);
      int marked = 0;
      for (size_t i = 0; i < f.size(); ++i)
        if (nd[i]) {
          ++marked;
          EXPECT_TRUE(f[i].kind == kir::ExprKind::kOp && f[i].op == OpId::div) << op_name(op);
        }
      EXPECT_EQ(marked, op == OpId::tanh ? 1 : 0) << op_name(op) << " " << dtype_name(t);
    }
  detail::PointwiseOptions o;
  o.fast_division = true;
  const std::string src = detail::print_pointwise_variant(gelu_kernel(), "kgelu", o);
  EXPECT_EQ(count(src, "kiln_fdiv_fast("), 5) << src;  // 4 unrolled lanes and the remainder
  if (!nvrtc_available()) return;
  const std::string ptx = nvrtc_compile(cuda_prelude() + src, "fast.cu", 90, false).ptx;
  EXPECT_EQ(count(kernel_ptx(ptx, "kgelu"), "div.rn.f32"), 0);
  EXPECT_GE(count(kernel_ptx(ptx, "kgelu"), "rcp.approx.ftz.f32"), 5);
}

// The PTX text of kernel `name` in `ptx`.
std::string kernel_ptx(const std::string& ptx, const std::string& name) {
  const size_t at = ptx.find(".entry " + name + "(");
  EXPECT_NE(at, std::string::npos) << name;
  if (at == std::string::npos) return "";
  const size_t end = ptx.find(".entry ", at + 1);
  return ptx.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// sm_90 PTX: the unrolled loads of GELU (4 per step, scalar, tanh's division
// as div.rn) come before its first division (ptxas expands div.rn.f32 with a
// branch and hoists no load across it), and so do the 16 loads of softmax's
// normalizing loop before its first division. Without KILN_ISSUE, NVVM put
// each load next to its use: one before the first division.
TEST(Nvrtc, UnrolledLoadsComeBeforeTheFirstDivision) {
  if (!nvrtc_available()) GTEST_SKIP() << "no NVRTC";
  const std::string source =
      cuda_prelude() + detail::print_pointwise_variant(gelu_kernel(), "kgelu", {}) +
      // The streaming loops (KILN_CUDA_ROW_HELD holds the row).
      detail::print_row_variant(testing::softmax_kernel(DType::f32), "ksoftmax", detail::kRowUnroll,
                                0, false, detail::default_row_loops());
  const std::string ptx = nvrtc_compile(source, "issue.cu", 90, /*cubin=*/false).ptx;
  const std::string gelu = kernel_ptx(ptx, "kgelu");
  const size_t div = gelu.find("div.rn.f32");
  ASSERT_NE(div, std::string::npos) << gelu;
  EXPECT_GE(count(gelu.substr(0, div), "ld.global"), 4) << gelu;
  // softmax: from the last barrier before its first division (the store loop).
  const std::string sm = kernel_ptx(ptx, "ksoftmax");
  const size_t sdiv = sm.find("div.rn.f32");
  ASSERT_NE(sdiv, std::string::npos) << sm;
  const size_t bar = sm.rfind("bar.sync", sdiv);
  ASSERT_NE(bar, std::string::npos) << sm;
  EXPECT_GE(count(sm.substr(bar, sdiv - bar), "ld.global"), detail::kRowUnroll) << sm;
}

}  // namespace
}  // namespace kiln::cuda
