// The registry of every KILN_* environment variable (documented in README.md).
#pragma once

#include <initializer_list>
#include <string>

namespace kiln::env {

/// One documented environment variable.
struct EnvVar {
  const char* name;
  const char* default_value;
  const char* meaning;
};

/// Every KILN_* variable kiln reads, in one list.
inline constexpr EnvVar kRegistry[] = {
    {"KILN_NUM_THREADS", "number of cores",
     "threads of the intra-op pool (OpenBLAS stays single-threaded)"},
    {"KILN_POOL_SPIN_US", "1000",
     "microseconds an idle pool worker polls for the next job, and a caller for the workers "
     "finishing its job, before sleeping (0: sleep at once; no polling when the pool has more "
     "threads than the machine has cores)"},
    {"KILN_CPU_LEVEL", "native",
     "x86-64 level of the eager SIMD math loops: v2 (SSE4.2), v3 (AVX2+FMA), v4 (AVX-512), or "
     "native, the best this CPU runs; a level above it is an error (results are the same bits "
     "at every level)"},
    {"KILN_EAGER", "0", "1 runs kiln::compile'd functions as the plain eager function"},
    {"KILN_CHECK_COMPILED", "0",
     "1 runs eager beside compiled on every call and reports the first differing output"},
    {"KILN_LOG", "",
     "comma list of log topics: recompiles (each re-trace and the guard that failed)"},
    {"KILN_DUMP", "",
     "directory: write traced and optimized graphs (.kir text and .dot), what rematerialization "
     "saves and recomputes (.remat.txt), and under kernels/ each compiled kernel's kernel IR, LLVM "
     "IR (plain and optimized) and assembly"},
    {"KILN_CACHE_DIR", "$XDG_CACHE_HOME/kiln or ~/.cache/kiln",
     "directory of the on-disk kernel cache (compiled kernels as object files); off disables it"},
    {"KILN_DEBUG", "0", "1 logs each rematerialization cut; 2 also prints the IR after every pass"},
    {"KILN_VERIFY", "0",
     "1 verifies the IR before and after every pass (always on in Debug builds)"},
    {"KILN_TIME_PASSES", "0", "1 prints the time each pass took"},
    {"KILN_DISABLE_PASSES", "", "comma list of pass names to skip"},
    {"KILN_RECOMPILE_LIMIT", "8", "recompiles of one function before a loud warning"},
    {"KILN_PLAN_LIMIT", "64",
     "plans one compiled function keeps; past it the least recently used is evicted"},
    {"KILN_STORE_TOKEN", "",
     "the job's store token (kilnrun generates one; every store client must present it)"},
    {"KILN_RESTART_COUNT", "0",
     "set by kilnrun in workers: how many times the group was restarted"},
    {"KILN_USE_AGENT_STORE", "0",
     "set to 1 by kilnrun: the launcher hosts the store at MASTER_ADDR:MASTER_PORT, so rank 0 "
     "connects to it instead of serving"},
    {"KILN_DIST_DEBUG", "0",
     "1 checks before every collective that all ranks issue the same op, dtype and size "
     "(reports the disagreeing ranks instead of hanging; a store round trip per collective)"},
    {"KILN_CUDA_SYNC", "0",
     "1 waits for every CUDA kernel and copy as it is launched, so an error names the kernel "
     "that caused it (slow: for debugging)"},
    {"KILN_CUDA_EMULATE", "",
     "pocl runs CUDA devices on the emulated device (OpenCL on the CPU through PoCL) instead of "
     "the NVIDIA driver; pocl-if-no-gpu does so only when the driver is unusable (the tests)"},
    {"KILN_CUDA_GRAPHS", "1",
     "0 keeps compiled CUDA plans on the plain launch path (by default a plan with static "
     "shapes captures its launches into a CUDA graph on its second run and replays it)"},
    {"KILN_CUDA_LIBM", "0",
     "1 prints the CUDA kernels' transcendentals (exp, log, tanh, erf, pow, ...) as calls of "
     "the device's libm instead of kiln's expansions (bit-equal to the CPU; the default)"},
    {"KILN_CUDA_WARP_ROWS", "1",
     "0 runs every CUDA row kernel (softmax, layer_norm, ...) one block per row; by default "
     "many short rows (at least 2048 of at most 1024 elements) run one warp per row; all: "
     "every row kernel that can (a test mode)"},
    {"KILN_CUDA_COLUMN_WARPS", "1",
     "0 runs CUDA row kernels with column sums (layer_norm's backward) one block per part of "
     "rows, the part's rows in series; by default rows fitting the shared partials run 4 warps "
     "a part (rows of up to 1024 elements for one sum), 2 warps for rows up to twice that, a "
     "row per warp at a time"},
    {"KILN_CUDA_POINTER_BATCHES", "1",
     "0 copies the operands of CUDA batched products that no single batch stride addresses "
     "(the attention's heads viewed out of [B, L, H, D]) contiguous first, and writes such an "
     "output through a temporary; by default cuBLASLt reads and writes them in place through "
     "arrays of the matrices' addresses"},
    {"KILN_CUDA_ROW_HELD", "32",
     "N per thread at most: CUDA row kernels (softmax, layer_norm, ...) run rows of more than "
     "N x 4 and at most N x 512 elements through a held twin that keeps the row in registers "
     "(N/4 per thread for rows of up to 8 N, N/2 up to 16 N, in one warp; N beyond, on a block "
     "fitted to the row) instead of streaming each phase over it; 0: every row streams"},
    {"KILN_PROFILE", "",
     "path: profile the whole run and write a Chrome trace there at exit (%r: the rank; a "
     "directory gets rank<N>.json, or trace.json outside a process group)"},
    {"KILN_SHM", "1",
     "0 makes Gloo process groups whose ranks share one host run their collectives over TCP "
     "instead of shared memory"},
};

/// Value of a registered variable, or its fallback when unset. Asking for an
/// unregistered name is a kiln bug (InternalError).
std::string get(const char* name, const std::string& fallback = "");
/// Integer value of a registered variable, or `fallback`; a non-integer value
/// is a kiln::Error naming the variable.
long get_int(const char* name, long fallback);
/// Switch value of a registered variable: unset or empty is `fallback`, "0" is
/// false and "1" true; anything else is a kiln::Error naming the variable.
bool get_flag(const char* name, bool fallback);
/// Value of a registered variable that must be one of `allowed` (unset or
/// empty: `fallback`); anything else is a kiln::Error listing the choices.
std::string get_choice(const char* name, std::initializer_list<const char*> allowed,
                       const char* fallback);

}  // namespace kiln::env
