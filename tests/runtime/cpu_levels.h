// Test helper: runs a check at every level of the eager SIMD loops
// (runtime/src/ops/cpu_level.h) that this CPU runs, lowest first, through the
// in-process test override, then restores the default. Levels the CPU lacks
// are skipped with a message: nothing expects this host's CPU (CI hosts may be
// AVX2-only).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "ops/cpu_level.h"

namespace kiln::testing {

/// fn(level name) at every level this CPU runs.
template <class F>
void at_every_cpu_level(F&& fn) {
  namespace vec = ops::vec;
  const std::vector<vec::CpuLevel> levels = vec::cpu_levels();
  for (vec::CpuLevel l : {vec::CpuLevel::kV2, vec::CpuLevel::kV3, vec::CpuLevel::kV4}) {
#if defined(__x86_64__) || defined(_M_X64)
    if (std::find(levels.begin(), levels.end(), l) == levels.end())
      std::printf("[ skipped  ] eager SIMD level %s: this CPU does not run it\n",
                  vec::cpu_level_name(l));
#endif
  }
  struct Reset {
    ~Reset() { vec::reset_cpu_level_for_testing(); }
  } reset;
  for (vec::CpuLevel l : levels) {
    vec::set_cpu_level_for_testing(l);
    SCOPED_TRACE(std::string("eager SIMD level ") + vec::cpu_level_name(l));
    fn(std::string(vec::cpu_level_name(l)));
  }
}

}  // namespace kiln::testing
