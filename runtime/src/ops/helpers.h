// Internal helpers shared by the op families: type promotion over operands,
// dim handling, attribute shorthands.
#pragma once

#include <span>
#include <vector>

#include "kiln/dispatch.h"
#include "kiln/functional.h"
#include "kiln/op_table.h"
#include "ops/loops.h"

namespace kiln::ops {

/// PyTorch's result_type: dimensioned tensors outrank 0-d tensors, which
/// outrank wrapped scalars; a lower group only wins with a higher category
/// (and a wrapped float then gives the default float, not f64).
DType result_type(std::span<const Tensor> ts);

/// Broadcast shape of all operands; `op` names the caller in errors.
Dims broadcast_all(std::span<const Tensor> ts, const char* op);

/// Sorted, deduplicated, wrapped dims; empty `dims` means all dims.
Dims normalize_dims(const Dims& dims, int64_t rank, const char* op);

/// Shape after reducing `dims` (normalized) with or without keepdim.
Dims reduced_shape(const Dims& shape, const Dims& dims, bool keepdim);

/// A `full` node's value: "ivalue" when present (an integer kept exact past
/// 2^53), else "value".
inline Scalar full_scalar(const Attrs& at) {
  return at.has("ivalue") ? Scalar(at.i("ivalue")) : Scalar(at.f("value"));
}

/// Tensor of zeros shaped like meta.
inline Tensor zeros_meta(const TensorMeta& m) {
  return zeros(m.shape, m.dtype);
}

/// Shape printed for messages.
inline std::string shape_str(const Tensor& t) {
  return str(t.shape());
}

}  // namespace kiln::ops
