// Internal: which OpenBLAS kernels kiln's GEMMs run on. A DYNAMIC_ARCH
// OpenBLAS picks its kernels by CPU model at load; a model it does not know
// (Debian 12's 0.3.21 on an Emerald Rapids Xeon) gets its generic x86-64
// kernels ("Prescott", SSE3: 4x slower sgemm there than its AVX-512 ones).
#pragma once

#include <string>

#include "ops/cpu_level.h"

namespace kiln::ops {

/// The OpenBLAS core to switch to: when OpenBLAS fell back to "Prescott" (a
/// CPU model it does not know) and the user set no OPENBLAS_CORETYPE, the
/// kernels of the best x86-64 level the CPU runs (v4: "SkylakeX", v3:
/// "Haswell"); otherwise "" (OpenBLAS's own choice stands).
std::string blas_core_override(const std::string& current, bool coretype_set, vec::CpuLevel best);

}  // namespace kiln::ops
