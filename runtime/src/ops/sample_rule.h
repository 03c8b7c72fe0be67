// Internal: the log of multinomial's draws without replacement, written once
// for the CPU and the GPU (as runtime/src/random_rule.h): KILN_RACE_LOG(FN)
// expands to kiln_race_log, FN qualifying it; the CPU kernel (ops/sort.cpp)
// compiles it as C++ (namespace kiln::ops) and the CUDA backend prints the same
// text into its race-key kernel (race_log_source()), so a draw on a device
// selects the CPU's categories: a platform log1p could differ by an ulp and
// flip a near tie. The body is C that C++, CUDA C and OpenCL C all accept
// (frexp and fma are exact everywhere; every product goes to an fma, a
// division or another product, so a compiler contracting a * b + c into an
// fma changes nothing); block comments only (it is a macro).
#pragma once

#include <cmath>

// clang-format off
#define KILN_RACE_LOG(FN)                                                               \
  /* log(x) for a normal x > 0 (the keys' 1 - u lies in [2^-53, 1]): x = 2^e m */      \
  /* with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s), s = (m - 1) / (m + 1), */     \
  /* |s| <= 0.172, the series to s^17 (relative error ~1e-16). */                       \
  FN double kiln_race_log(double x) {                                                   \
    int e = 0;                                                                          \
    double m = frexp(x, &e);                                                            \
    if (m < 0.70710678118654752440) {                                                   \
      m = m + m;                                                                        \
      e = e - 1;                                                                        \
    }                                                                                   \
    const double s = (m - 1.0) / (m + 1.0), s2 = s * s;                                 \
    double p = 1.0 / 17.0;                                                              \
    p = fma(p, s2, 1.0 / 15.0);                                                         \
    p = fma(p, s2, 1.0 / 13.0);                                                         \
    p = fma(p, s2, 1.0 / 11.0);                                                         \
    p = fma(p, s2, 1.0 / 9.0);                                                          \
    p = fma(p, s2, 1.0 / 7.0);                                                          \
    p = fma(p, s2, 1.0 / 5.0);                                                          \
    p = fma(p, s2, 1.0 / 3.0);                                                          \
    p = fma(p, s2, 1.0);                                                                \
    const double lm = (s + s) * p, ed = (double)e;                                      \
    /* e ln2 with ln2 in a high part (the double nearest) and the low rest. */          \
    return fma(ed, 0.6931471805599453, fma(ed, 2.3190468138462996e-17, lm));            \
  }
// clang-format on

namespace kiln::ops {

using std::fma;
using std::frexp;
KILN_RACE_LOG(inline)

#define KILN_RACE_LOG_STR_(...) #__VA_ARGS__
#define KILN_RACE_LOG_STR(...) KILN_RACE_LOG_STR_(__VA_ARGS__)
/// kiln_race_log as GPU source text, qualified KILN_FN (the GPU prelude's).
inline const char* race_log_source() {
  return KILN_RACE_LOG_STR(KILN_RACE_LOG(KILN_FN));
}

}  // namespace kiln::ops
