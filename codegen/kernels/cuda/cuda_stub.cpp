// kiln built without the CUDA toolkit's headers: CUDA is reported unavailable.
#include "kiln/cuda.h"

#include "kiln/error.h"

namespace kiln::cuda {

bool is_available() {
  return false;
}
int device_count() {
  return 0;
}
std::string unavailable_reason() {
  return "kiln was built without the CUDA toolkit (its headers were not found at configure time)";
}

void synchronize(int) {
  KILN_CHECK(false, "[cuda] ", unavailable_reason());
}

namespace {
bool g_tf32 = false;  // kept so the setting reads back; nothing runs on CUDA
}
void set_matmul_allow_tf32(bool allow) {
  g_tf32 = allow;
}
bool matmul_allow_tf32() {
  return g_tf32;
}

}  // namespace kiln::cuda
