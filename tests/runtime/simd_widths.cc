// Compiled, not run, by the ctest entries eager_simd_math_builds.*
// (tests/runtime/CMakeLists.txt): the eager SIMD math (ops/vec_math.h over
// math/expansions.h) at each x86-64 level's width, at -O0 (the sanitizer build)
// and -O3, whatever the host: a width-specific compile failure (GCC 12 stopped
// with an internal compiler error on i32x16 -> f64x16 at -O0 with AVX-512)
// shows on every host, not only on the CPUs that have that width.
#include "ops/vec_math.h"

namespace kiln::ops::vec {

#define KILN_WIDTH_UNARY(E) \
  template void unary_run<E, float>(char* const*, const int64_t*, int64_t);
KILN_WIDTH_UNARY(Exp)
KILN_WIDTH_UNARY(Log)
KILN_WIDTH_UNARY(Log1p)
KILN_WIDTH_UNARY(Tanh)
KILN_WIDTH_UNARY(Sigmoid)
KILN_WIDTH_UNARY(Erf)
KILN_WIDTH_UNARY(Sin)
KILN_WIDTH_UNARY(Cos)
#undef KILN_WIDTH_UNARY
template void binary_run<Pow, float>(char* const*, const int64_t*, int64_t);

}  // namespace kiln::ops::vec
