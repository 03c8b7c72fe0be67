// Internal: NCCL opened at run time (libnccl.so.2 is 218 MB and needs a GPU to
// be useful: never linked). The NCCL process group (issue 20) calls NCCL
// through this function table; nccl_emulated.h is its second implementation,
// for the emulated CUDA device.
#pragma once

#include <nccl.h>

#include <string>

namespace kiln::dist::nccl {

// clang-format off
#define KILN_NCCL_FUNCS(X) \
  X(ncclGetVersion) \
  X(ncclGetUniqueId) \
  X(ncclCommInitRank) \
  X(ncclCommDestroy) \
  X(ncclCommAbort) \
  X(ncclCommGetAsyncError) \
  X(ncclGetErrorString) \
  X(ncclGetLastError) \
  X(ncclAllReduce) \
  X(ncclBroadcast) \
  X(ncclReduce) \
  X(ncclReduceScatter) \
  X(ncclAllGather) \
  X(ncclSend) \
  X(ncclRecv) \
  X(ncclGroupStart) \
  X(ncclGroupEnd)
// clang-format on

/// The resolved NCCL entry points, named as in nccl.h.
struct Nccl {
#define KILN_NCCL_MEMBER(name) decltype(&::name) name = nullptr;
  KILN_NCCL_FUNCS(KILN_NCCL_MEMBER)
#undef KILN_NCCL_MEMBER
};

/// The loaded library (libnccl.so.2 on the loader's path, then the CUDA
/// toolkit's). Throws kiln::Error naming what was tried when it cannot load.
const Nccl& lib();
/// True when libnccl.so.2 loads. Never throws.
bool available();
/// Throws kiln::Error "[nccl] <what> failed: <NCCL's message>" unless r is success.
void check(ncclResult_t r, const char* what);

}  // namespace kiln::dist::nccl
