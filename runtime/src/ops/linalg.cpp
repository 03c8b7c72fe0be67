// Placeholder: the linalg family is being written; its ops have no rules yet.
#include "ops/registry.h"

namespace kiln::ops {
void register_linalg(OpTable&) {}
}  // namespace kiln::ops
