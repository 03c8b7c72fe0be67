#include "kiln/random.h"

#include <vector>

#include "kiln/dispatch.h"
#include "kiln/error.h"
#include "kiln/functional.h"
#include "kiln/tensor.h"
#include "random_rule.h"

namespace kiln {

std::array<uint32_t, 4> philox4x32(uint64_t counter_lo, uint64_t counter_hi, uint64_t key) {
  std::array<uint32_t, 4> out{};
  rng::kiln_philox4x32(counter_lo, counter_hi, key, out.data());  // random_rule.h
  return out;
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
