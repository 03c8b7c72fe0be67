// OpenBLAS's kernels for CPUs it does not recognize (ops/blas_core.h).
#include "ops/blas_core.h"

#include <cblas.h>
#include <dlfcn.h>

#include <cstdlib>
#include <vector>

#include "kiln/thread_pool.h"

namespace kiln {
namespace ops {
namespace {

struct Chosen {
  std::string core;  // OpenBLAS's core name after the switch (if any)
  bool by_kiln = false;
};

// OpenBLAS reads OPENBLAS_CORETYPE in gotoblas_dynamic_init (its load-time
// constructor calls it); gotoblas_dynamic_quit forgets the choice. Both are
// exported by DYNAMIC_ARCH builds only, hence looked up. The environment is
// restored at once: the value is kiln's choice, not the user's.
Chosen switch_core() {
  Chosen c{openblas_get_corename(), false};
  const char* set = std::getenv("OPENBLAS_CORETYPE");
  const std::vector<vec::CpuLevel> levels = vec::cpu_levels();
  const std::string want =
      blas_core_override(c.core, set != nullptr && *set != '\0',
                         levels.empty() ? vec::CpuLevel::kNative : levels.back());
  auto* quit = reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit"));
  auto* init = reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init"));
  if (want.empty() || quit == nullptr || init == nullptr) return c;
  ::setenv("OPENBLAS_CORETYPE", want.c_str(), 1);
  quit();
  init();  // an unknown name would fall back to Prescott again, never fail
  ::unsetenv("OPENBLAS_CORETYPE");
  c.core = openblas_get_corename();
  c.by_kiln = c.core == want;
  return c;
}

const Chosen& chosen() {
  static const Chosen c = switch_core();
  return c;
}

// Once, when the library loads (after OpenBLAS's own constructor, before
// user code runs a GEMM): no check on the GEMM path. A no-op for an OpenBLAS
// without run-time kernel choice.
[[maybe_unused]] const bool g_at_load = (chosen(), true);

}  // namespace

std::string blas_core_override(const std::string& current, bool coretype_set, vec::CpuLevel best) {
  if (coretype_set || current != "Prescott") return "";
  if (best == vec::CpuLevel::kV4) return "SkylakeX";
  if (best == vec::CpuLevel::kV3) return "Haswell";
  return "";
}

}  // namespace ops

std::string blas_core() {
  const ops::Chosen& c = ops::chosen();
  return c.by_kiln ? c.core + " (chosen by kiln: OpenBLAS did not recognize this CPU)" : c.core;
}

}  // namespace kiln
