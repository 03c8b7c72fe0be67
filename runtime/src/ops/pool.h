// Internal: the conv family is split in two files; conv.cpp's register_conv
// also registers the pooling ops defined in pool.cpp.
#pragma once

#include "ops/registry.h"

namespace kiln::ops {

/// Fills the rules of max_pool2d, avg_pool2d and avg_pool2d_grad.
void register_pool_ops(OpTable& t);

/// A 2-element geometry attribute ("stride", ...); one value means both dims,
/// a missing attribute gives `dflt`. Errors name `op`.
Dims pair_attr(const Attrs& at, const char* name, int64_t dflt, const char* op);

}  // namespace kiln::ops
