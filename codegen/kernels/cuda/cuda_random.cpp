// Random draws on CUDA tensors (rand_uniform/rand_normal, so rand, randn,
// rand_like, dropout and bernoulli): one printed kernel per op and dtype over
// kiln's Philox rule, whose code is the CPU's own (runtime/src/random_rule.h)
// printed as text, so a CUDA draw holds the CPU's numbers (normal draws within
// the libms' ulps). Each thread computes whole Philox blocks of 4 words, as the
// CPU kernel caches them.
#include "kernels/cuda/device_ops.h"
#include "kernels/cuda/driver.h"
#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/module.h"
#include "kernels/cuda/stream.h"
#include "kiln/attrs.h"
#include "kiln/error.h"
#include "kiln/tensor.h"
#include "random_rule.h"

namespace kiln::cuda {
namespace {

// Philox words per element (the rule in runtime/src/ops/factory.cpp).
int words_per_element(bool normal, DType dt) {
  return (dt == DType::f64 ? 2 : 1) * (normal ? 2 : 1);
}

}  // namespace

std::string print_random(bool normal, DType dt, const std::string& symbol) {
  KILN_CHECK(is_floating(dt), "[rand] random kernels draw floating dtypes, got ", dt);
  const int per = 4 / words_per_element(normal, dt);  // elements per Philox block
  const char* type = dt == DType::f32 ? "float" : dt == DType::f64 ? "double" : "unsigned short";
  std::string value;
  if (dt == DType::f64)
    value = normal ? "kiln_rand_normal_f64(w[0], w[1], w[2], w[3])"
                   : "kiln_rand_unit_f64(w[2 * e], w[2 * e + 1])";
  else if (normal)
    value = "kiln_rand_normal_f32(w[2 * e], w[2 * e + 1])";
  else
    value = str("kiln_rand_unit_", dtype_name(dt), "(w[e])");
  if (dt == DType::f16) value = "kiln_f32_to_f16(" + value + ")";
  if (dt == DType::bf16) value = "kiln_f32_to_bf16(" + value + ")";
  return str("KILN_KERNEL void ", symbol, "(KILN_GLOBAL ", type,
             "* out, kiln_i64 n, kiln_u64 seed, kiln_u64 offset) {\n"
             "  const kiln_i64 blocks = (n + ",
             per, " - 1) / ", per, ";\n",
             "  const kiln_i64 stride = (kiln_i64)gridDim.x * blockDim.x;\n"
             "  for (kiln_i64 b = (kiln_i64)blockIdx.x * blockDim.x + threadIdx.x; b < blocks;\n"
             "       b += stride) {\n"
             "    unsigned w[4];\n"
             "    kiln_philox4x32(offset / 4 + (kiln_u64)b, 0, seed, w);\n"
             "    for (int e = 0; e < ",
             per, "; ++e) {\n", "      const kiln_i64 i = b * ", per, " + e;\n",
             "      if (i < n) out[i] = ", value, ";\n",
             "    }\n"
             "  }\n"
             "}\n");
}

void device_random(bool normal, const Attrs& attrs, const Tensor& out) {
  const char* op = normal ? "rand_normal" : "rand_uniform";
  KILN_CHECK(out.is_contiguous() && is_floating(out.dtype()), "[", op,
             "] draws into a contiguous floating tensor, got ", out.dtype(), out.shape());
  const auto offset = static_cast<uint64_t>(attrs.i("offset"));
  // Generator::advance keeps offsets whole Philox blocks; an element's words then never straddle
  // two.
  KILN_CHECK(offset % 4 == 0, "[", op, "] offset ", offset,
             " is not a multiple of 4 (the generator's offsets are)");
  if (out.numel() == 0) return;
  const int device = out.device().index;
  const std::string sym =
      str("kiln_draw_", normal ? "normal_" : "uniform_", dtype_name(out.dtype()));
  const CUfunction fn = cached_kernel(device, sym, sym, [&] {
    return str(rng::random_rule_source(), "\n", print_random(normal, out.dtype(), sym));
  });
  CUdeviceptr p = reinterpret_cast<CUdeviceptr>(out.data_ptr());
  long long n = out.numel();
  unsigned long long seed = static_cast<uint64_t>(attrs.i("seed")), off = offset;
  void* params[] = {&p, &n, &seed, &off};
  const long long per = 4 / words_per_element(normal, out.dtype());
  const long long blocks = std::min<long long>(((n + per - 1) / per + 255) / 256, 1 << 16);
  check(driver().cuLaunchKernel(fn, static_cast<unsigned>(blocks), 1, 1, 256, 1, 1, 0,
                                current_cu_stream(device), params, nullptr),
        "cuLaunchKernel (random)");
  after_launch(sym);
}

}  // namespace kiln::cuda
