// The eager SIMD loops' dispatcher on CPUs other than the build host's: this
// build's per-level objects (runtime/src/ops/simd/loops.cpp) with the
// dispatcher, compiled for baseline x86-64 (no -march), so the program itself
// runs on any x86-64 CPU: natively, and under qemu-x86_64 as an AVX2-only
// (Haswell) or SSE4.2-only (Nehalem) CPU (ctest eager_simd_levels_check.*,
// tests/runtime/CMakeLists.txt). Checks: the levels found, the level in use
// (argument 1, if given), that every loop runs at every level the CPU has
// with the same bits, and that each level it lacks is a kiln::Error. Before
// the level namespaces and the per-level objects' forced optimization, a v2
// loop could call a v4 copy of std::fma kept by the linker: SIGILL here.
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "ops/cpu_level.h"

using namespace kiln::ops::vec;

namespace {

// Runs every loop at `level` on x (both operands of the binary ones).
std::vector<float> run_all(CpuLevel level, const std::vector<float>& x) {
  set_cpu_level_for_testing(level);
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> out(static_cast<size_t>(n * kNumLoops));
  for (int op = 0; op < kNumLoops; ++op) {
    char* p[3] = {reinterpret_cast<char*>(out.data() + op * n),
                  const_cast<char*>(reinterpret_cast<const char*>(x.data())),
                  const_cast<char*>(reinterpret_cast<const char*>(x.data() + 1))};
    const int64_t s[3] = {4, 4, 4};
    f32_loop(static_cast<Loop>(op))(p, s, n - 1);
  }
  return out;
}

bool same(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) || (a != a && b != b);
}

}  // namespace

int main(int argc, char** argv) {
  int failures = 0;
  const std::vector<CpuLevel> levels = cpu_levels();
  std::printf("levels this CPU runs:");
  for (CpuLevel l : levels) std::printf(" %s", cpu_level_name(l));
  std::printf("\n");
  try {
    const char* in_use = cpu_level_name(cpu_level());
    std::printf("in use: %s\n", in_use);
    if (argc > 1 && std::string(argv[1]) != in_use) {
      std::printf("FAIL: expected level %s\n", argv[1]);
      ++failures;
    }
  } catch (const kiln::Error& e) {
    std::printf("kiln::Error: %s\n", e.what());  // a bad KILN_CPU_LEVEL (ctest checks the text)
  }
  std::vector<float> x;  // a stride through every f32 bit pattern
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 65537)
    x.push_back(std::bit_cast<float>(uint32_t(b)));
  std::vector<float> first;
  for (CpuLevel l : levels) {
    const std::vector<float> y = run_all(l, x);
    if (first.empty()) first = y;
    int bad = 0;
    for (size_t i = 0; i < y.size(); ++i) bad += !same(y[i], first[i]);
    std::printf("%s: %d loops ran, %d results differ from %s's\n", cpu_level_name(l), kNumLoops,
                bad, cpu_level_name(levels[0]));
    failures += bad != 0;
  }
  for (CpuLevel l : {CpuLevel::kV2, CpuLevel::kV3, CpuLevel::kV4}) {
    bool runs = false;
    for (CpuLevel r : levels) runs = runs || r == l;
    if (runs) continue;
    try {
      set_cpu_level_for_testing(l);
      std::printf("FAIL: level %s accepted on a CPU without it\n", cpu_level_name(l));
      ++failures;
    } catch (const kiln::Error& e) {
      std::printf("%s refused: %s\n", cpu_level_name(l), e.what());
    } catch (const kiln::InternalError& e) {
      std::printf("%s refused: %s\n", cpu_level_name(l), e.what());
    }
  }
  std::printf(failures ? "FAILED\n" : "PASSED\n");
  return failures ? 1 : 0;
}
