// The GPU kernels' transcendentals are kiln's kernel-IR expansions
// (kernels/math_expand.h) by default: over dense f32 sweeps (every binade of
// both signs, a fine grid around zero, special values) the device computes
// the same bits as the CPU's LLVM kernels and the kernel IR interpreter.
// On a GPU when present, else on the emulated device.
#include <cmath>
#include <cstring>
#include <limits>

#include "codegen/kernel_test_util.h"
#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/module.h"
#include "kernels/kernel_cache.h"
#include "kernels/kernel_ir.h"

namespace kiln::cuda {
namespace {

// n f32 values: bit patterns stepped evenly through every binade of both
// signs (subnormals to infinity), a fine grid over [-20, 20], and the
// special values.
std::vector<float> sweep(size_t n) {
  std::vector<float> v;
  const uint32_t steps = static_cast<uint32_t>(n / 4);
  for (uint32_t sign : {0u, 0x80000000u})
    for (uint32_t i = 0; i < steps; ++i) {
      const uint32_t bits = sign | static_cast<uint32_t>(uint64_t{0x7f800000} * i / steps);
      float f;
      std::memcpy(&f, &bits, 4);
      v.push_back(f);
    }
  const float inf = std::numeric_limits<float>::infinity();
  for (float f : {0.f, -0.f, inf, -inf, std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min()})
    v.push_back(f);
  while (v.size() < n) v.push_back(-20.f + 40.f * static_cast<float>(v.size() % (n / 2)) / (n / 2));
  return v;
}

// out = op(a) over [n], or out = op(a, b) over [rows, cols] (a per row, b per column).
kir::Kernel math_kernel(OpId op, bool binary) {
  kir::testing::Builder b(binary ? 2 : 1, std::string(op_name(op)) + "_sweep");
  const int a =
      b.load(b.in(DType::f32, binary ? std::vector<bool>{true, false} : std::vector<bool>{true}));
  int e;
  if (binary) {
    const int y = b.load(b.in(DType::f32, {false, true}));
    e = b.op(op, DType::f32, a, y);
  } else {
    e = b.op(op, DType::f32, a);
  }
  b.store(b.out(DType::f32, binary ? std::vector<bool>{true, true} : std::vector<bool>{true}), e);
  return b.k;
}

bool same_bits(float x, float y) {
  return std::memcmp(&x, &y, 4) == 0 || (std::isnan(x) && std::isnan(y));
}

TEST(CudaMath, TranscendentalsEqualTheCpuBitForBitOnDenseSweeps) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device: " << unavailable_reason();
  ASSERT_FALSE(device_math_uses_libm()) << "KILN_CUDA_LIBM=1 is set";
  set_device(0);
  struct Case {
    OpId op;
    bool binary;
  };
  const std::vector<Case> cases = {
      {OpId::exp, false},  {OpId::log, false},     {OpId::log1p, false},
      {OpId::tanh, false}, {OpId::sigmoid, false}, {OpId::erf, false},
      {OpId::sin, false},  {OpId::cos, false},     {OpId::pow, true}};
  std::string source = device_prelude();
  for (size_t i = 0; i < cases.size(); ++i)
    source += print_kernel(math_kernel(cases[i].op, cases[i].binary), "m" + std::to_string(i));
  const std::vector<char> image = compile_for_device(source, "math_sweep.cu", 0);
  Module mod(image.data());
  const std::vector<float> xs = sweep(size_t{1} << 17);
  const std::vector<float> ys = sweep(512);  // pow: 512 exponents per base row
  for (size_t i = 0; i < cases.size(); ++i) {
    const kir::Kernel k = math_kernel(cases[i].op, cases[i].binary);
    const std::vector<float> a =
        cases[i].binary ? std::vector<float>(xs.begin(), xs.begin() + 1024) : xs;
    const std::vector<int64_t> sizes =
        cases[i].binary ? std::vector<int64_t>{1024, 512} : std::vector<int64_t>{int64_t(a.size())};
    const size_t n = cases[i].binary ? a.size() * ys.size() : a.size();
    std::vector<float> interp(n), llvm(n), device(n);
    // The interpreter and the CPU's compiled kernel.
    for (std::vector<float>* out : {&interp, &llvm}) {
      std::vector<void*> ptrs = {const_cast<float*>(a.data())};
      if (cases[i].binary) ptrs.push_back(const_cast<float*>(ys.data()));
      ptrs.push_back(out->data());
      if (out == &interp)
        kir::interpret(k, 0, kir::work_items(k, sizes.data()), ptrs.data(), sizes.data());
      else
        kir::get_kernel(k)->launch(ptrs.data(), sizes.data());
    }
    // The device, from the default printing.
    DeviceBuffer da(a.size() * 4), dy(ys.size() * 4), dout(n * 4);
    da.upload(a.data(), a.size() * 4);
    std::vector<CUdeviceptr> ptrs = {da.get()};
    if (cases[i].binary) {
      dy.upload(ys.data(), ys.size() * 4);
      ptrs.push_back(dy.get());
    }
    ptrs.push_back(dout.get());
    launch_kernel(mod.function("m" + std::to_string(i)), k, ptrs, sizes.data());
    check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
    dout.download(device.data(), n * 4);
    int bad = 0;
    for (size_t e = 0; e < n && bad < 3; ++e) {
      if (same_bits(device[e], interp[e]) && same_bits(llvm[e], interp[e])) continue;
      ++bad;
      ADD_FAILURE() << op_name(cases[i].op) << "(" << a[cases[i].binary ? e / ys.size() : e]
                    << (cases[i].binary ? ", " + std::to_string(ys[e % ys.size()]) : "")
                    << "): device " << device[e] << ", LLVM " << llvm[e] << ", interpreter "
                    << interp[e];
    }
  }
}

}  // namespace
}  // namespace kiln::cuda
