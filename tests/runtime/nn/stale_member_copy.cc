// Must NOT compile (ctest stale_parameter_copy_does_not_compile): a member copy
// of a handle-less registration would go stale when re-pointed (weight tying).
#include "kiln/nn/module.h"

struct Net : kiln::nn::Module {
  Net() {
    register_parameter("ok", ok, kiln::Tensor());  // the slot form compiles
    w = register_parameter("w", kiln::Tensor());   // error: nn::Registered is no Tensor
  }
  kiln::Tensor ok, w;
};
