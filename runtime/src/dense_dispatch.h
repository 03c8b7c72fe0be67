// Internal: dispatch's fast path for dense elementwise calls. An elementwise
// op registers, per input dtype, the loop it runs over contiguous operands of
// that dtype and the dtype of its result. A call whose inputs are contiguous
// CPU tensors of one shape and that dtype, or one such tensor and a wrapped
// number (a Scalar operand) that does not change the result type, with no
// attributes, not tracing, not profiling, then runs that loop on a fresh
// output directly: no shape or type-promotion rule, device check, metadata or
// output vector. Autograd is recorded as on the general path.
#pragma once

#include <cstdint>

#include "kiln/op_table.h"

namespace kiln::detail {

/// One run of n elements: pointers p (the output first, then the inputs) at
/// byte strides s (the ops' existing dense loops have this signature).
using DenseRunFn = void (*)(char* const* p, const int64_t* s, int64_t n);

/// Registers `op`'s loop for inputs of dtype `in`, giving a result of dtype
/// `out`. Only for calls where the general path computes exactly this loop on
/// such inputs (same result, same errors: none). Called while the op table is built.
void register_dense_run(OpId op, DType in, DType out, DenseRunFn fn);

/// dispatch1(op, {a}) and dispatch1(op, {a, b}) for the elementwise ops'
/// functions: the fast path without copying the handles into an inputs array.
Tensor dispatch_elementwise(OpId op, const Tensor& a);
Tensor dispatch_elementwise(OpId op, const Tensor& a, const Tensor& b);

/// Enables or disables the fast path for the whole process (tests compare it
/// with the general path); returns the previous setting.
bool set_dense_fast_path(bool enabled);

}  // namespace kiln::detail
