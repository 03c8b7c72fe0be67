// Counter-based Philox4x32-10 random numbers. A draw is a pure function of
// (seed, offset, element index), so eager and compiled runs agree.
#pragma once

#include <array>
#include <cstdint>

namespace kiln {

class Tensor;

/// Philox4x32-10: four 32-bit outputs for a 128-bit counter and 64-bit key.
std::array<uint32_t, 4> philox4x32(uint64_t counter_lo, uint64_t counter_hi, uint64_t key);

/// Uniform float in [0, 1) from 32 random bits (24-bit mantissa).
inline float uint_to_unit_float(uint32_t x) {
  return static_cast<float>(x >> 8) * (1.0f / 16777216.0f);
}
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
  /// The state as a CPU u8 tensor of 16 bytes, seed then offset, little-endian
  /// (torch.Generator.get_state): store it in a checkpoint's StateDict.
  /// Eager only: inside kiln::compile it is a kiln::Error (a traced call would
  /// bake in the state of the trace).
  Tensor get_state() const;
  /// Restores a state from get_state(). kiln::Error unless `state` is a CPU u8
  /// tensor of shape [16] whose offset is a multiple of 4 (as advance leaves
  /// it); eager only, like get_state.
  void set_state(const Tensor& state);
};

/// The process-wide default generator (seeded by manual_seed).
Generator& default_generator();

/// torch.get_rng_state(): default_generator().get_state().
Tensor get_rng_state();
/// torch.set_rng_state(state): default_generator().set_state(state).
void set_rng_state(const Tensor& state);

/// torch.random.fork_rng() as a scope: saves the default generator's state and
/// restores it on exit (exceptions included), so draws made inside do not shift
/// the draws made after it.
class RngStateGuard {
 public:
  /// kiln::Error inside kiln::compile (eager only, like get_state).
  RngStateGuard();
  ~RngStateGuard() { default_generator() = saved_; }
  RngStateGuard(const RngStateGuard&) = delete;
  RngStateGuard& operator=(const RngStateGuard&) = delete;

 private:
  Generator saved_;
};

}  // namespace kiln
