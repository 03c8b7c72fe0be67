// Element-wise reduce functions of both transports (handed to Gloo, whose
// built-in ones are not vectorized in Debian's build, and run by the
// shared-memory channel): out[i] = op(a[i], b[i]), where `out` may be the same
// buffer as `a` or `b`. f16/bf16 are combined in f32 and rounded back.
#pragma once

#include <cstddef>

#include "kiln/distributed/process_group.h"

namespace kiln::dist::detail {

/// Gloo's reduce-function shape: (out, a, b, element count).
using ReduceFn = void (*)(void*, const void*, const void*, size_t);

/// The function for (dtype, op); avg uses sum (the caller divides afterwards).
/// kiln::Error for bool.
ReduceFn reduce_fn(DType dt, ReduceOp op);
/// (out, a, b, n, divisor): out = (a + b) / divisor, rounded to the dtype after
/// the sum and after the division, as a sum followed by divide_in_place would.
using SumDivFn = void (*)(void*, const void*, const void*, size_t, int);
/// The fused last step of an average (floating dtypes; kiln::Error otherwise).
SumDivFn sum_div_fn(DType dt);
/// Divides n elements at p by `divisor` in place (floating dtypes; for avg).
void divide_in_place(void* p, DType dt, size_t n, int divisor);

}  // namespace kiln::dist::detail
