// NVRTC through dlopen (nvrtc_lib.h). Searched as libnvrtc.so.13 on the loader's
// path (pip's nvidia-cuda-nvrtc sets it up through LD_LIBRARY_PATH), then in
// the CUDA toolkit kiln was configured with.
#include "kernels/cuda/nvrtc_lib.h"

#include <dlfcn.h>
#include <nvrtc.h>

#include <cstdlib>
#include <regex>
#include <sstream>

#include "kiln/error.h"
#include "kiln/shared_library.h"

namespace kiln::cuda {
namespace {

// clang-format off
#define KILN_NVRTC_FUNCS(X) \
  X(nvrtcGetErrorString) \
  X(nvrtcVersion) \
  X(nvrtcGetNumSupportedArchs) \
  X(nvrtcGetSupportedArchs) \
  X(nvrtcCreateProgram) \
  X(nvrtcDestroyProgram) \
  X(nvrtcCompileProgram) \
  X(nvrtcGetPTXSize) \
  X(nvrtcGetPTX) \
  X(nvrtcGetCUBINSize) \
  X(nvrtcGetCUBIN) \
  X(nvrtcGetProgramLogSize) \
  X(nvrtcGetProgramLog)
// clang-format on

struct Nvrtc {
#define KILN_NVRTC_MEMBER(name) decltype(&::name) name = nullptr;
  KILN_NVRTC_FUNCS(KILN_NVRTC_MEMBER)
#undef KILN_NVRTC_MEMBER
  std::string error;
};

const Nvrtc& lib() {
  static const Nvrtc n = [] {
    Nvrtc r;
    void* h = open_shared_library({"libnvrtc.so.13", str(KILN_CUDA_LIBDIR, "/libnvrtc.so.13")},
                                  "NVRTC (libnvrtc.so.13, CUDA 13)", r.error);
    if (!h) return r;
#define KILN_NVRTC_RESOLVE(name)                                \
  r.name = reinterpret_cast<decltype(r.name)>(dlsym(h, #name)); \
  if (!r.name && r.error.empty()) r.error = "libnvrtc.so.13 lacks " #name;
    KILN_NVRTC_FUNCS(KILN_NVRTC_RESOLVE)
#undef KILN_NVRTC_RESOLVE
    return r;
  }();
  return n;
}

const Nvrtc& checked() {
  const Nvrtc& n = lib();
  KILN_CHECK(n.error.empty(), "[nvrtc] ", n.error);
  return n;
}

std::string numbered(const std::string& source) {
  std::istringstream in(source);
  std::ostringstream out;
  std::string line;
  for (int i = 1; std::getline(in, line); ++i) out << i << "\t" << line << "\n";
  return out.str();
}

}  // namespace

bool nvrtc_available() {
  return lib().error.empty();
}

int nvrtc_version() {
  int major = 0, minor = 0;
  checked().nvrtcVersion(&major, &minor);
  return major * 1000 + minor * 10;
}

std::vector<int> nvrtc_archs() {
  const Nvrtc& n = checked();
  int count = 0;
  n.nvrtcGetNumSupportedArchs(&count);
  std::vector<int> archs(static_cast<size_t>(count));
  if (count > 0) n.nvrtcGetSupportedArchs(archs.data());
  return archs;
}

NvrtcOutput nvrtc_compile(const std::string& source, const std::string& name, int arch, bool cubin,
                          const std::vector<std::string>& extra) {
  const Nvrtc& n = checked();
  nvrtcProgram prog = nullptr;
  nvrtcResult r = n.nvrtcCreateProgram(&prog, source.c_str(), name.c_str(), 0, nullptr, nullptr);
  KILN_CHECK(r == NVRTC_SUCCESS, "[nvrtc] creating program ", name, ": ", n.nvrtcGetErrorString(r));
  const std::vector<std::string> opts = nvrtc_options(arch, cubin, extra);
  std::vector<const char*> argv;
  for (const std::string& o : opts) argv.push_back(o.c_str());
  r = n.nvrtcCompileProgram(prog, static_cast<int>(argv.size()), argv.data());
  NvrtcOutput out;
  size_t size = 0;
  n.nvrtcGetProgramLogSize(prog, &size);
  out.log.assign(size, '\0');
  if (size > 0) n.nvrtcGetProgramLog(prog, out.log.data());
  while (!out.log.empty() && (out.log.back() == '\0' || out.log.back() == '\n')) out.log.pop_back();
  if (r != NVRTC_SUCCESS) {
    n.nvrtcDestroyProgram(&prog);
    KILN_CHECK(false, "[nvrtc] compiling ", name, " for ", cubin ? "sm_" : "compute_", arch,
               " failed (", n.nvrtcGetErrorString(r), "):\n", out.log, "\nsource:\n",
               numbered(source));
  }
  if (cubin) {
    n.nvrtcGetCUBINSize(prog, &size);
    out.cubin.resize(size);
    if (size > 0) n.nvrtcGetCUBIN(prog, out.cubin.data());
  } else {
    n.nvrtcGetPTXSize(prog, &size);
    out.ptx.assign(size, '\0');
    if (size > 0) n.nvrtcGetPTX(prog, out.ptx.data());
  }
  n.nvrtcDestroyProgram(&prog);
  return out;
}

std::vector<std::string> nvrtc_options(int arch, bool cubin,
                                       const std::vector<std::string>& extra) {
  std::vector<std::string> opts = {str("--gpu-architecture=", cubin ? "sm_" : "compute_", arch),
                                   "--fmad=false", "-default-device", "--std=c++17"};
  opts.insert(opts.end(), extra.begin(), extra.end());
  return opts;
}

long spill_bytes(const std::string& log) {
  static const std::regex re("([0-9]+) bytes spill stores");
  long worst = 0;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator();
       ++it)
    worst = std::max(worst, std::atol((*it)[1].str().c_str()));
  return worst;
}

}  // namespace kiln::cuda
