// libnccl.so.2 through dlopen (nccl_lib.h).
#include "nccl_lib.h"

#include <dlfcn.h>

#include "kiln/error.h"
#include "kiln/shared_library.h"

namespace kiln::dist::nccl {
namespace {

struct Loaded {
  Nccl n;
  std::string error;
};

const Loaded& loaded() {
  static const Loaded l = [] {
    Loaded r;
    void* h = open_shared_library({"libnccl.so.2", str(KILN_NCCL_LIBDIR, "/libnccl.so.2")},
                                  "NCCL (libnccl.so.2)", r.error);
    if (!h) return r;
#define KILN_NCCL_RESOLVE(name)                                     \
  r.n.name = reinterpret_cast<decltype(r.n.name)>(dlsym(h, #name)); \
  if (!r.n.name && r.error.empty()) r.error = "libnccl.so.2 lacks " #name;
    KILN_NCCL_FUNCS(KILN_NCCL_RESOLVE)
#undef KILN_NCCL_RESOLVE
    return r;
  }();
  return l;
}

}  // namespace

const Nccl& lib() {
  const Loaded& l = loaded();
  KILN_CHECK(l.error.empty(), "[nccl] ", l.error);
  return l.n;
}

bool available() {
  return loaded().error.empty();
}

void check(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return;
  KILN_CHECK(false, "[nccl] ", what, " failed: ", lib().ncclGetErrorString(r), " (",
             static_cast<int>(r), ")");
}

}  // namespace kiln::dist::nccl
