// Placeholder: the movement family is being written; its ops have no rules yet.
#include "ops/registry.h"

namespace kiln::ops {
void register_movement(OpTable&) {}
}  // namespace kiln::ops
