// Strided layouts through view nodes, as the runtime's view kernels make them
// (runtime/src/ops/movement.cpp): for the planners that must know whether an
// unfused view step copies (codegen's matmul placement, the remat pass's
// memory model), one rule with the runtime's.
#pragma once

#include <optional>

#include "kiln/ir/graph.h"

namespace kiln::ir {

/// The strides (in elements) of view node n's output (permute, expand, slice,
/// reshape) of shape `out_shape`, its input having shape `in_shape` and
/// strides `in_strides`, with n's attributes `attrs` (evaluated: a dynamic
/// slice's bounds); nullopt where the runtime's reshape copies instead
/// (kiln::view_strides cannot view the layout). kiln::Error for another op.
std::optional<Dims> view_output_strides(const Node& n, const Attrs& attrs, const Dims& in_shape,
                                        const Dims& in_strides, const Dims& out_shape);

}  // namespace kiln::ir
