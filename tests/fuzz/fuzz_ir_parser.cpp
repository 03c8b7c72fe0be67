// libFuzzer target for the IR text parser (built by scripts/fuzz.sh).
// Any input may be rejected with kiln::Error; anything else escaping, a
// sanitizer report, or a broken round-trip property is a bug.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "kiln/ir/text.h"

namespace {

// A parsed graph must print to text that parses back to an equal graph, and
// that text must be a fixed point of parse + print.
void check_round_trip(const kiln::ir::Graph& g) {
  std::string text = kiln::ir::print(g);
  std::unique_ptr<kiln::ir::Graph> back = kiln::ir::parse(text);
  if (!kiln::ir::structurally_equal(*back, g)) std::abort();
  if (kiln::ir::print(*back) != text) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<kiln::ir::Graph> g;
  try {
    g = kiln::ir::parse(text);
  } catch (const kiln::Error&) {
    return 0;  // rejected cleanly
  }
  check_round_trip(*g);  // kiln::Error here is a bug: let it escape
  return 0;
}
