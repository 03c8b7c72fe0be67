// Opening optional shared libraries at run time (the CUDA driver, NVRTC,
// cuBLASLt, NCCL, OpenCL): kiln's backends load them with dlopen on first use
// and never link them, so a kiln binary starts where they are absent.
#pragma once

#include <initializer_list>
#include <string>

namespace kiln {

/// The first of `paths` that dlopen (RTLD_NOW | RTLD_LOCAL) opens, or null with
/// `why` set to "<what> could not be loaded:" and each path's dlerror.
void* open_shared_library(std::initializer_list<std::string> paths, const std::string& what,
                          std::string& why);

}  // namespace kiln
