#include "kiln/random.h"

#include <vector>

#include "kiln/dispatch.h"
#include "kiln/error.h"
#include "kiln/functional.h"
#include "kiln/tensor.h"

namespace kiln {

std::array<uint32_t, 4> philox4x32(uint64_t counter_lo, uint64_t counter_hi, uint64_t key) {
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += kW0;
    k1 += kW1;
  }
  return {c0, c1, c2, c3};
}

namespace {
// A traced function replays its draws from the generator's state at each call;
// reading or setting the state inside it would be baked into the trace.
void check_eager(const char* op) {
  KILN_CHECK(current_recorder() == nullptr, "[", op,
             "] is not traceable: the random state read or set inside kiln::compile would be "
             "fixed at trace time (call it outside the compiled function)");
}
}  // namespace

Tensor Generator::get_state() const {
  check_eager("Generator::get_state");
  std::vector<uint8_t> bytes(16);
  for (int i = 0; i < 8; ++i) {
    bytes[static_cast<size_t>(i)] = static_cast<uint8_t>(seed >> (8 * i));
    bytes[static_cast<size_t>(8 + i)] = static_cast<uint8_t>(offset >> (8 * i));
  }
  return from_vector<uint8_t>(bytes, {16});
}

void Generator::set_state(const Tensor& state) {
  check_eager("Generator::set_state");
  KILN_CHECK(state.defined(), "[Generator::set_state] the state is an undefined tensor");
  KILN_CHECK(state.dtype() == DType::u8 && state.shape() == Dims{16} && state.device().is_cpu(),
             "[Generator::set_state] expected the CPU u8 tensor of shape [16] that get_state "
             "returns, got ",
             state.dtype(), state.shape(), " on ", state.device());
  std::vector<uint8_t> bytes = state.to_vector<uint8_t>();
  uint64_t s = 0, o = 0;
  for (int i = 0; i < 8; ++i) {
    s |= static_cast<uint64_t>(bytes[static_cast<size_t>(i)]) << (8 * i);
    o |= static_cast<uint64_t>(bytes[static_cast<size_t>(8 + i)]) << (8 * i);
  }
  // Draws reserve whole Philox blocks of 4 counters; another offset is not a state.
  KILN_CHECK(o % 4 == 0, "[Generator::set_state] offset ", o,
             " is not a multiple of 4: not a state get_state returns");
  seed = s;
  offset = o;
}

RngStateGuard::RngStateGuard() : saved_(default_generator()) {
  check_eager("RngStateGuard");
}

Tensor get_rng_state() {
  return default_generator().get_state();
}

void set_rng_state(const Tensor& state) {
  default_generator().set_state(state);
}

Generator& default_generator() {
  static Generator g;
  return g;
}

}  // namespace kiln
