// Internal: the eager SIMD loops (f32 runs of one transcendental, over the
// shared expansions of math/expansions.h) as compiled once per CPU level, and
// the level tables that ops/vec_dispatch.cpp picks from at run time. Included
// by the per-level source (ops/simd/loops.cpp) and the dispatcher only; op
// code goes through ops/vec_math.h.
#pragma once

#include <cstdint>

namespace kiln::ops::vec {

/// The loops each level provides, in table order.
enum class Loop : uint8_t {
  kExp,
  kLog,
  kLog1p,
  kTanh,
  kSigmoid,
  kErf,
  kSin,
  kCos,
  kPow,           // binary: x ^ y
  kGeluErf,       // x (1 + erf(x / sqrt 2)) / 2, fused GELU's erf form
  kGeluErfGrad,   // binary: its gradient (x, upstream gradient)
  kGeluTanh,      // x sigmoid(k2 (x + c x^3)), fused GELU's tanh form
  kGeluTanhGrad,  // binary: its gradient (x, upstream gradient)
  kSilu,          // x sigmoid(x), fused SiLU
  kSiluGrad,      // binary: its gradient (x, upstream gradient)
};
inline constexpr int kNumLoops = 15;

/// A run of n f32 elements: out = p[0], inputs p[1] (and p[2] for binary
/// loops) at byte strides s[0..2]; an input stride of 0 broadcasts one element.
using RunFn = void (*)(char* const* p, const int64_t* s, int64_t n);

// Each level's table, indexed by Loop. Level namespaces: one copy of the
// loops per instruction set, none sharing a symbol with another.
#if defined(__x86_64__) || defined(_M_X64)
namespace v2 {
const RunFn* loops();  // x86-64-v2: SSE4.2, 4 f32 lanes
}
namespace v3 {
const RunFn* loops();  // x86-64-v3: AVX2 + FMA, 8 lanes
}
namespace v4 {
const RunFn* loops();  // x86-64-v4: AVX-512, 16 lanes
}
#else
namespace native {
const RunFn* loops();  // the build's own target
}
#endif

}  // namespace kiln::ops::vec
