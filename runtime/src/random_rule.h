// Internal: kiln's random-number rule, written once for the CPU and the GPU.
// KILN_RANDOM_RULE(FN) expands to the functions below, FN qualifying each:
// the CPU kernels compile it as C++ (namespace kiln::rng) and the CUDA backend
// prints the same text into its kernels (random_rule_source(), after the GPU
// prelude, whose KILN_FN qualifies them), so a tensor drawn on a device holds
// the CPU's numbers. The body is C that C++, CUDA C and OpenCL C all accept:
// types unsigned (32-bit) and kiln_u64, block comments only (it is a macro).
//
// The scheme (runtime/src/ops/factory.cpp has the whole rule): word j of seed
// s is kiln_philox4x32(j / 4, 0, s)[j % 4]; element i of a draw at offset o
// (a multiple of 4) reads W words from o + i * W (W = 1, 2 or 4, so never
// across a Philox block) and maps them with the kiln_rand_* functions.
// Uniform draws are exact (integer shifts and a power-of-two scale); normal
// draws call the platform's sqrt/log/cos, so the CPU's and a GPU's can differ
// by the ulps of their libm.
#pragma once

#include <cmath>
#include <cstdint>

// clang-format off
#define KILN_RANDOM_RULE(FN)                                                            \
  /* Philox4x32-10 of the 128-bit counter (lo, hi) under the 64-bit key. */             \
  FN void kiln_philox4x32(kiln_u64 lo, kiln_u64 hi, kiln_u64 key, unsigned* out) {      \
    unsigned c0 = (unsigned)lo, c1 = (unsigned)(lo >> 32);                              \
    unsigned c2 = (unsigned)hi, c3 = (unsigned)(hi >> 32);                              \
    unsigned k0 = (unsigned)key, k1 = (unsigned)(key >> 32);                            \
    for (int r = 0; r < 10; ++r) {                                                      \
      const kiln_u64 p0 = (kiln_u64)0xD2511F53u * c0;                                   \
      const kiln_u64 p1 = (kiln_u64)0xCD9E8D57u * c2;                                   \
      const unsigned n0 = (unsigned)(p1 >> 32) ^ c1 ^ k0;                               \
      const unsigned n2 = (unsigned)(p0 >> 32) ^ c3 ^ k1;                               \
      c1 = (unsigned)p1;                                                                \
      c3 = (unsigned)p0;                                                                \
      c0 = n0;                                                                          \
      c2 = n2;                                                                          \
      k0 += 0x9E3779B9u;                                                                \
      k1 += 0xBB67AE85u;                                                                \
    }                                                                                   \
    out[0] = c0;                                                                        \
    out[1] = c1;                                                                        \
    out[2] = c2;                                                                        \
    out[3] = c3;                                                                        \
  }                                                                                     \
  /* Uniform in [0, 1) with the bits the dtype holds exactly: 24 for f32, */            \
  /* 11 for f16, 8 for bf16 (then exact in the dtype, so stays < 1), 53 for f64. */     \
  FN float kiln_rand_unit_f32(unsigned w) { return (float)(w >> 8) * (1.0f / 16777216.0f); } \
  FN float kiln_rand_unit_f16(unsigned w) { return (float)(w >> 21) * (1.0f / 2048.0f); } \
  FN float kiln_rand_unit_bf16(unsigned w) { return (float)(w >> 24) * (1.0f / 256.0f); } \
  FN double kiln_rand_unit_f64(unsigned w0, unsigned w1) {                              \
    return (double)(((((kiln_u64)w0) << 32) | w1) >> 11) * (1.0 / 9007199254740992.0);  \
  }                                                                                     \
  /* Box-Muller; 1 - u1 lies in (0, 1], so the log is finite. f16/bf16 round this. */   \
  FN float kiln_rand_normal_f32(unsigned w0, unsigned w1) {                             \
    const float u1 = kiln_rand_unit_f32(w0), u2 = kiln_rand_unit_f32(w1);               \
    return sqrtf(-2.0f * logf(1.0f - u1)) * cosf(6.28318530717958647692f * u2);         \
  }                                                                                     \
  FN double kiln_rand_normal_f64(unsigned w0, unsigned w1, unsigned w2, unsigned w3) {  \
    const double u1 = kiln_rand_unit_f64(w0, w1), u2 = kiln_rand_unit_f64(w2, w3);      \
    return sqrt(-2.0 * log(1.0 - u1)) * cos(6.28318530717958647692 * u2);               \
  }
// clang-format on

namespace kiln::rng {

using kiln_u64 = uint64_t;
using ::cosf;
using ::logf;
using ::sqrtf;
using std::cos;
using std::log;
using std::sqrt;
KILN_RANDOM_RULE(inline)

#define KILN_RANDOM_RULE_STR_(...) #__VA_ARGS__
#define KILN_RANDOM_RULE_STR(...) KILN_RANDOM_RULE_STR_(__VA_ARGS__)
/// The rule as GPU source text: its functions qualified KILN_FN (the GPU
/// prelude defines it; nothing on the host may).
inline const char* random_rule_source() {
  return KILN_RANDOM_RULE_STR(KILN_RANDOM_RULE(KILN_FN));
}

}  // namespace kiln::rng
