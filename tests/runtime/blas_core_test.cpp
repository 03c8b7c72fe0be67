// Tests of runtime/src/ops/blas_core.cpp: on a CPU model OpenBLAS does not
// know it falls back to SSE3 kernels ("Prescott"); kiln switches it to the
// kernels of the CPU's x86-64 level, never against an explicit
// OPENBLAS_CORETYPE.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "kiln/kiln.h"
#include "ops/blas_core.h"
#include "ops/cpu_level.h"

using namespace kiln;
using ops::blas_core_override;
using ops::vec::CpuLevel;

TEST(BlasCore, OnlyTheGenericFallbackIsReplaced) {
  EXPECT_EQ(blas_core_override("Prescott", false, CpuLevel::kV4), "SkylakeX");
  EXPECT_EQ(blas_core_override("Prescott", false, CpuLevel::kV3), "Haswell");
  EXPECT_EQ(blas_core_override("Prescott", false, CpuLevel::kV2), "");
  EXPECT_EQ(blas_core_override("Prescott", false, CpuLevel::kNative), "");
  // OpenBLAS's own choice for a CPU it knows stands, as does the user's.
  EXPECT_EQ(blas_core_override("Cooperlake", false, CpuLevel::kV4), "");
  EXPECT_EQ(blas_core_override("Haswell", false, CpuLevel::kV4), "");
  EXPECT_EQ(blas_core_override("Prescott", true, CpuLevel::kV4), "");
}

// The process's GEMMs: on a CPU that runs AVX2 they never run OpenBLAS's
// generic kernels (an Emerald Rapids host under OpenBLAS 0.3.21 did: sgemm at
// a quarter of its AVX-512 rate). Unless the user forced them.
TEST(BlasCore, GemmsRunTheCpusKernels) {
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  if (forced != nullptr && *forced != '\0') GTEST_SKIP() << "OPENBLAS_CORETYPE=" << forced;
  if (dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init") == nullptr)
    GTEST_SKIP() << "OpenBLAS built for one CPU (no run-time kernel choice)";
  const auto levels = ops::vec::cpu_levels();
  if (levels.empty() || levels.back() == CpuLevel::kV2 || levels.back() == CpuLevel::kNative)
    GTEST_SKIP() << "no AVX2 here";
  const std::string core = blas_core();
  EXPECT_NE(core.rfind("Prescott", 0), 0u) << core;
  // And they compute: a product against its sum by hand.
  const Tensor a = arange(0, 12, 1, DType::f32).reshape({3, 4});
  const Tensor b = ones({4, 2});
  const Tensor c = matmul(a, b);
  EXPECT_EQ(c.select(0, 2).select(0, 1).item<float>(), 8.0f + 9.0f + 10.0f + 11.0f);
}
