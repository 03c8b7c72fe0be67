// libFuzzer target for the safetensors parser (built by scripts/fuzz.sh).
// Any input may be rejected with kiln::Error; anything else escaping, a
// sanitizer report, or a broken round-trip property is a bug.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "kiln/serialize.h"

namespace {

// Parsed data must write back and re-parse to identical tensors, and the
// kiln-written bytes must be a fixed point of parse + serialize.
void check_round_trip(const kiln::StateDict& sd, const kiln::SafetensorsMetadata& md) {
  std::string again = kiln::serialize_safetensors(sd, md);
  kiln::SafetensorsMetadata md2;
  kiln::StateDict sd2 = kiln::parse_safetensors(again, "fuzz round trip", &md2);
  if (md2 != md || sd2.size() != sd.size()) std::abort();
  for (const auto& [name, t] : sd) {
    const kiln::Tensor* u = sd2.find(name);
    if (!u || u->dtype() != t.dtype() || !(u->shape() == t.shape())) std::abort();
    size_t n = static_cast<size_t>(t.numel()) * t.element_size();
    if (n && std::memcmp(u->data_ptr(), t.data_ptr(), n) != 0) std::abort();
  }
  if (kiln::serialize_safetensors(sd2, md2) != again) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  kiln::SafetensorsMetadata md;
  kiln::StateDict sd;
  try {
    sd = kiln::parse_safetensors(bytes, "fuzz input", &md);
  } catch (const kiln::Error&) {
    return 0;  // rejected cleanly
  }
  check_round_trip(sd, md);  // kiln::Error here is a bug: let it escape
  return 0;
}
