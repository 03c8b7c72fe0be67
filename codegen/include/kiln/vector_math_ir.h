// Vectorizable f32 math for generated kernels, as LLVM IR text (no LLVM
// headers needed): kernels append it to their module and call the functions.
#pragma once

#include <string>

namespace kiln::jit {

/// Definitions of `float @kiln_expf(float)`, `@kiln_logf`, `@kiln_tanhf`,
/// `@kiln_sigmoidf`, `@kiln_erff`, `@kiln_log1pf`, `@kiln_sinf`, `@kiln_cosf`
/// and `float @kiln_powf(float, float)` (internal, alwaysinline, branch-free)
/// plus the intrinsic declarations they use. Max error ≤ 4 ulp against libm
/// over the f32 normal range, IEEE/C99 inf/NaN/±0 behaviour
/// (tests/codegen/vector_math_test.cpp).
std::string vector_math_ir();

}  // namespace kiln::jit
