// Gradient destinations: a buffer that backward writes a leaf's gradient into
// instead of a fresh tensor. DistributedDataParallel gives every parameter its
// slice of a communication bucket, so the gradient is computed where it is
// all-reduced (PyTorch's gradient_as_bucket_view, without the copy).
//
// While the leaf's .grad is undefined (a first backward, or after
// zero_grad(set_to_none=true)), backward makes the destination its .grad: a
// matmul or convolution whose output is exactly the gradient (a Linear's
// weight, a convolution's weight) writes straight into the destination (on
// the CPU or a CUDA device); any other gradient is copied into it once. A defined .grad
// accumulates in place as always. Not under create_graph (the gradient then
// has a history) and not while tracing; a compiled plan honours destinations
// itself (a gradient it computes with no .grad to go to is computed into the
// destination, or copied there, and becomes .grad).
#pragma once

#include <cstdint>

#include "kiln/tensor.h"

namespace kiln::autograd {

/// Makes `dst` the buffer for leaf's gradient (see above). kiln::Error unless
/// leaf is a leaf that requires grad and dst is contiguous with its shape,
/// dtype and device. Replaces an earlier destination.
void set_grad_destination(const Tensor& leaf, const Tensor& dst);
/// Removes leaf's destination (nothing happens without one).
void clear_grad_destination(const Tensor& leaf);
/// leaf's destination, or an undefined tensor.
Tensor grad_destination(const Tensor& leaf);

/// How gradients reached their destinations since the process started (all
/// threads): computed there by their kernel, or copied there.
struct GradDestinationStats {
  int64_t computed_in_place = 0;
  int64_t copied = 0;
};
/// The counters above.
GradDestinationStats grad_destination_stats();

}  // namespace kiln::autograd
