// Counter-based Philox4x32-10 random numbers. A draw is a pure function of
// (seed, offset, element index), so eager and compiled runs agree.
#pragma once

#include <array>
#include <cstdint>

namespace kiln {

/// Philox4x32-10: four 32-bit outputs for a 128-bit counter and 64-bit key.
std::array<uint32_t, 4> philox4x32(uint64_t counter_lo, uint64_t counter_hi, uint64_t key);

/// Uniform float in [0, 1) from 32 random bits (24-bit mantissa).
inline float uint_to_unit_float(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }
/// Uniform double in [0, 1) from 64 random bits (53-bit mantissa).
inline double uint_to_unit_double(uint64_t x) {
  return static_cast<double>(x >> 11) * (1.0 / 9007199254740992.0);
}

/// The default generator: a seed and an offset that each draw advances.
struct Generator {
  uint64_t seed = 67280421310721ull;
  uint64_t offset = 0;
  /// Reserves `n` counters and returns the first.
  uint64_t advance(uint64_t n) {
    uint64_t o = offset;
    offset += (n + 3) / 4 * 4;
    return o;
  }
};

/// The process-wide default generator (seeded by manual_seed).
Generator& default_generator();

}  // namespace kiln
