// Placeholder: the factory family is being written; its ops have no rules yet.
#include "ops/registry.h"

namespace kiln::ops {
void register_factory(OpTable&) {}
}  // namespace kiln::ops
