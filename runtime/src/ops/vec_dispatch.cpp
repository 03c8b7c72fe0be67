// Run-time choice of the eager SIMD loops' level (ops/cpu_level.h).
#include "ops/cpu_level.h"

#include "ops/simd/rows.h"

#include <atomic>
#include <string>

#include "kiln/env.h"
#include "kiln/error.h"

namespace kiln::ops::vec {
namespace {

constexpr const char* kEnvVar = "KILN_CPU_LEVEL";

#if defined(__x86_64__) || defined(_M_X64)
constexpr CpuLevel kLevels[] = {CpuLevel::kV2, CpuLevel::kV3, CpuLevel::kV4};

// Whether the CPU runs code built with -march=x86-64-v<n>. libgcc (and
// compiler-rt) count AVX and AVX-512 as present only when the OS saves their
// register state (XGETBV), so an AVX-512 CPU under an OS without it gets v3.
bool cpu_runs(CpuLevel level) {
  __builtin_cpu_init();
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
  switch (level) {
    case CpuLevel::kV2:
      return __builtin_cpu_supports("x86-64-v2");
    case CpuLevel::kV3:
      return __builtin_cpu_supports("x86-64-v3");
    case CpuLevel::kV4:
      return __builtin_cpu_supports("x86-64-v4");
    case CpuLevel::kNative:
      return false;
  }
  return false;
#else
  // The levels' features that older compilers can ask about (not f16c, movbe
  // or lzcnt: every CPU with AVX2, FMA and BMI2 has them).
  const bool v2 = __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("ssse3") &&
                  __builtin_cpu_supports("popcnt");
  const bool v3 = v2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
  const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512vl");
  return level == CpuLevel::kV2 ? v2 : level == CpuLevel::kV3 ? v3 : level == CpuLevel::kV4 && v4;
#endif
}

const RunFn* table(CpuLevel level) {
  KILN_ASSERT(level != CpuLevel::kNative, "no native level on x86-64");
  return level == CpuLevel::kV4 ? v4::loops() : level == CpuLevel::kV3 ? v3::loops() : v2::loops();
}
const Rows& rows_table(CpuLevel level) {
  KILN_ASSERT(level != CpuLevel::kNative, "no native level on x86-64");
  return level == CpuLevel::kV4 ? v4::rows() : level == CpuLevel::kV3 ? v3::rows() : v2::rows();
}
#else
constexpr CpuLevel kLevels[] = {CpuLevel::kNative};
bool cpu_runs(CpuLevel level) {
  return level == CpuLevel::kNative;
}
const RunFn* table(CpuLevel) {
  return native::loops();
}
const Rows& rows_table(CpuLevel) {
  return native::rows();
}
#endif

std::string level_list() {
  std::string s;
  for (CpuLevel l : kLevels)
    if (l != CpuLevel::kNative) s += std::string(cpu_level_name(l)) + "|";
  return s + "native";
}

// The best of `runnable`, or a kiln::Error if it is empty.
CpuLevel best_of(const std::vector<CpuLevel>& runnable) {
  KILN_CHECK(!runnable.empty(),
             "[eager math] this CPU lacks x86-64-v2 (SSE4.2, POPCNT), the lowest level kiln's "
             "eager SIMD loops are built for");
  return runnable.back();
}

// `level` if it is in `runnable`, else a kiln::Error naming `source`.
CpuLevel checked(CpuLevel level, const std::vector<CpuLevel>& runnable, const char* source) {
  const CpuLevel best = best_of(runnable);
  bool ok = false;
  for (CpuLevel l : runnable) ok = ok || l == level;
  KILN_CHECK(ok, "[eager math] ", source, "=", cpu_level_name(level), ": this CPU runs up to ",
             cpu_level_name(best), " (values: ", level_list(), ")");
  return level;
}

// KILN_CPU_LEVEL's level, or the CPU's best.
CpuLevel default_level() {
  // Read once (a bad value throws on every use).
  static const CpuLevel level = parse_cpu_level(env::get(kEnvVar, "native"), cpu_levels());
  return level;
}

// The test override: a CpuLevel, or -1.
std::atomic<int> g_override{-1};

}  // namespace

const char* cpu_level_name(CpuLevel level) {
  switch (level) {
    case CpuLevel::kV2:
      return "v2";
    case CpuLevel::kV3:
      return "v3";
    case CpuLevel::kV4:
      return "v4";
    case CpuLevel::kNative:
      return "native";
  }
  return "?";
}

std::vector<CpuLevel> cpu_levels() {
  std::vector<CpuLevel> out;
  for (CpuLevel l : kLevels)
    if (cpu_runs(l)) out.push_back(l);
  return out;
}

CpuLevel cpu_level() {
  const int o = g_override.load(std::memory_order_relaxed);
  return o >= 0 ? static_cast<CpuLevel>(o) : default_level();
}

RunFn f32_loop(Loop op) {
  const int o = g_override.load(std::memory_order_relaxed);
  if (o >= 0) return table(static_cast<CpuLevel>(o))[static_cast<int>(op)];
  static const RunFn* const chosen = table(default_level());  // chosen once
  return chosen[static_cast<int>(op)];
}

const Rows& row_kernels() {
  return rows_table(cpu_level());
}

CpuLevel parse_cpu_level(const std::string& value, const std::vector<CpuLevel>& runnable) {
  if (value.empty() || value == "native") return best_of(runnable);
  for (CpuLevel l : kLevels)
    if (value == cpu_level_name(l)) return checked(l, runnable, kEnvVar);
  KILN_CHECK(false, "[eager math] ", kEnvVar, "=", value, ": not a level (values: ", level_list(),
             "; this CPU runs up to ", cpu_level_name(best_of(runnable)), ")");
  return best_of(runnable);
}

void set_cpu_level_for_testing(CpuLevel level) {
  g_override.store(static_cast<int>(checked(level, cpu_levels(), "the test level")),
                   std::memory_order_relaxed);
}

void reset_cpu_level_for_testing() {
  g_override.store(-1, std::memory_order_relaxed);
}

}  // namespace kiln::ops::vec
