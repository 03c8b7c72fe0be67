// Internal: which compiled copy of the eager SIMD loops runs (ops/simd/loops.h).
// On x86-64 the loops are built for three levels and the best one the CPU
// (and its OS: AVX-512 state) supports is picked at first use; the
// environment variable KILN_CPU_LEVEL caps it (as PyTorch's
// ATEN_CPU_CAPABILITY does). Other architectures have one level, the build's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/simd/loops.h"

namespace kiln::ops::vec {

/// A compiled level of the loops: x86-64-v2 (SSE4.2, 4 f32 lanes), -v3
/// (AVX2 + FMA, 8), -v4 (AVX-512, 16); kNative: the build's own target (the
/// only level off x86-64).
enum class CpuLevel : uint8_t { kV2, kV3, kV4, kNative };

/// "v2", "v3", "v4", "native": KILN_CPU_LEVEL's spelling.
const char* cpu_level_name(CpuLevel level);
/// The levels this CPU runs, lowest first (on x86-64: v2 up to its best; a
/// CPU below x86-64-v2 runs none, and the loops throw kiln::Error).
std::vector<CpuLevel> cpu_levels();
/// The level the loops run at: the test override, else KILN_CPU_LEVEL (read
/// once; a level above the CPU's best is a kiln::Error naming the variable,
/// its value and that best), else the CPU's best.
CpuLevel cpu_level();
/// The level KILN_CPU_LEVEL=`value` selects on a CPU that runs `runnable`
/// (cpu_levels()): "native" its best; a level it lacks or an unknown value is
/// a kiln::Error naming the variable, the value and the CPU's best level.
CpuLevel parse_cpu_level(const std::string& value, const std::vector<CpuLevel>& runnable);
/// The loop `op` at cpu_level().
RunFn f32_loop(Loop op);
struct Rows;
/// The fused row kernels (ops/simd/rows.h) at cpu_level().
const Rows& row_kernels();

/// Tests: runs the loops at `level` from now on, in every thread (a level
/// this CPU cannot run is a kiln::Error, as for KILN_CPU_LEVEL).
void set_cpu_level_for_testing(CpuLevel level);
/// Tests: back to KILN_CPU_LEVEL or the CPU's best.
void reset_cpu_level_for_testing();

}  // namespace kiln::ops::vec
