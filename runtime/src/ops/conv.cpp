// Placeholder: the conv family is being written; its ops have no rules yet.
#include "ops/registry.h"

namespace kiln::ops {
void register_conv(OpTable&) {}
}  // namespace kiln::ops
