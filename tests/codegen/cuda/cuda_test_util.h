// Shared by the CUDA tests (tests/codegen/cuda): a fixture that skips where no
// CUDA device is usable, and the comparisons of a device result with the same
// computation on the CPU (exact, within a tolerance, or bit for bit).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/error_of.h"
#include "kiln/cuda.h"
#include "kiln/kiln.h"

namespace kiln::testing {

/// A test on a CUDA device (a GPU, or the emulated one in CI): skipped where
/// none is usable, and the generator seeded with `Seed` before each test.
/// Use: `class CudaOps : public testing::CudaTest<9> {};`.
template <uint64_t Seed>
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
    manual_seed(Seed);
  }
};

namespace detail {

// `gpu` is on a CUDA device with `cpu`'s dtype and shape; then both as doubles
// (every dtype's values are exact in f64).
inline ::testing::AssertionResult cuda_values(const Tensor& gpu, const Tensor& cpu,
                                              std::vector<double>& a, std::vector<double>& b) {
  if (!gpu.device().is_cuda())
    return ::testing::AssertionFailure() << "the result is on " << gpu.device() << ", not on CUDA";
  if (gpu.dtype() != cpu.dtype() || gpu.shape() != cpu.shape())
    return ::testing::AssertionFailure()
           << "GPU " << gpu.dtype() << gpu.shape() << ", CPU " << cpu.dtype() << cpu.shape();
  a = gpu.to_vector<double>();  // to_vector reads device tensors (and ones that require grad)
  b = cpu.to_vector<double>();
  return ::testing::AssertionSuccess();
}

}  // namespace detail

/// `gpu` (on a CUDA device) has `cpu`'s dtype, shape and values; NaN where the
/// CPU has NaN, and signed zeros compare equal.
inline void expect_equal(const Tensor& gpu, const Tensor& cpu, const std::string& what = "") {
  std::vector<double> a, b;
  ASSERT_TRUE(detail::cuda_values(gpu, cpu, a, b)) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    ASSERT_EQ(a[i], b[i]) << what << " element " << i;
  }
}

/// As expect_equal, with |gpu - cpu| <= tol * (1 + |cpu|) per element (float
/// math in another order or with other rounding).
inline void expect_close(const Tensor& gpu, const Tensor& cpu, double tol,
                         const std::string& what = "") {
  std::vector<double> a, b;
  ASSERT_TRUE(detail::cuda_values(gpu, cpu, a, b)) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    if ((std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i]) continue;
    ASSERT_LE(std::abs(a[i] - b[i]), tol * (1 + std::abs(b[i])))
        << what << " element " << i << ": GPU " << a[i] << ", CPU " << b[i];
  }
}

/// The element bit patterns of `t` (on any device), in row-major order.
inline std::vector<uint64_t> bits_of(const Tensor& t) {
  const Tensor c = t.cpu().contiguous();
  std::vector<uint64_t> out(static_cast<size_t>(c.numel()));
  const size_t es = c.element_size();
  for (size_t i = 0; i < out.size(); ++i)
    std::memcpy(&out[i], static_cast<const char*>(c.data_ptr()) + i * es, es);
  return out;
}

/// `gpu` (on a CUDA device) has `cpu`'s dtype, shape and bits: the sign of a
/// zero and a NaN's payload included.
inline void expect_bits(const Tensor& gpu, const Tensor& cpu, const std::string& what = "") {
  std::vector<double> a, b;
  ASSERT_TRUE(detail::cuda_values(gpu, cpu, a, b)) << what;
  const std::vector<uint64_t> x = bits_of(gpu), y = bits_of(cpu);
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(x[i], y[i]) << what << " element " << i << ": GPU " << a[i] << ", CPU " << b[i];
}

}  // namespace kiln::testing
