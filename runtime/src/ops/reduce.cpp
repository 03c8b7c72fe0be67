// Placeholder: the reduce family is being written; its ops have no rules yet.
#include "ops/registry.h"

namespace kiln::ops {
void register_reduce(OpTable&) {}
}  // namespace kiln::ops
