// Internal: NVRTC (CUDA C -> PTX / cubin), opened at run time like the driver.
// It needs no driver or GPU, so CI compiles every generated kernel with it.
#pragma once

#include <string>
#include <vector>

namespace kiln::cuda {

/// What one NVRTC compilation produced.
struct NvrtcOutput {
  std::string ptx;          ///< PTX (compute_XX targets)
  std::vector<char> cubin;  ///< machine code (sm_XX targets)
  std::string log;          ///< NVRTC's log, with ptxas's -v lines when asked
};

/// True when libnvrtc can be loaded. Never throws.
bool nvrtc_available();
/// NVRTC's version as major * 1000 + minor * 10 (13000 for 13.0); throws
/// kiln::Error naming what was tried when NVRTC cannot be loaded.
int nvrtc_version();
/// The sm_XX numbers NVRTC can compile for (75, 80, ..., 90, ...).
std::vector<int> nvrtc_archs();

/// Compiles `source` (one program, any number of kernels) for `arch` (90 =
/// sm_90). `cubin` true: machine code for that arch (a full check, ptxas
/// included); false: PTX for compute_<arch>, which newer devices JIT. Options
/// always include --fmad=false (no implicit contraction: explicit fma only) and
/// -default-device; `extra` adds more (e.g. "--ptxas-options=-v"). A compile
/// error is a kiln::Error with NVRTC's log and the numbered source.
NvrtcOutput nvrtc_compile(const std::string& source, const std::string& name, int arch, bool cubin,
                          const std::vector<std::string>& extra = {});
/// The options nvrtc_compile passes for (arch, cubin, extra): what a cache of
/// its output must key on besides the source and NVRTC's version.
std::vector<std::string> nvrtc_options(int arch, bool cubin,
                                       const std::vector<std::string>& extra = {});

/// From a ptxas -v log: the largest "N bytes spill stores" of any kernel (0 when
/// nothing spilled).
long spill_bytes(const std::string& log);

}  // namespace kiln::cuda
