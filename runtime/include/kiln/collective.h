// Collectives as ops of the op table, so a traced training step can hold its
// gradient all-reduces as IR nodes: collective_start launches an asynchronous
// all-reduce of a list of tensors and returns a handle; collective_wait(handle,
// tensors...) returns the reduced tensors. Eagerly they call the installed
// CollectiveBackend (kiln_distributed installs one over its process groups);
// group 0 is the built-in single-process group (results = inputs), which keeps
// the ops usable — and testable — without any distributed library.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

/// What the collective ops call. Implementations must be thread-safe.
class CollectiveBackend {
 public:
  virtual ~CollectiveBackend() = default;
  /// Starts reducing `inputs` (CPU: read before returning; device: in the
  /// current stream's order) over `group` with `reduce_op` (dist::ReduceOp's value); returns a key.
  virtual int64_t start(int64_t group, int64_t reduce_op, std::span<const Tensor> inputs) = 0;
  /// Waits for the collective `key` and writes its results into `outputs` (device: the current
  /// stream waits).
  virtual void wait(int64_t key, std::span<Tensor> outputs) = 0;
};

/// Installs the backend for groups >= 1 (null uninstalls). Not thread-safe with
/// running collectives; kiln_distributed calls it when it is loaded.
void set_collective_backend(CollectiveBackend* backend);

/// Starts an all-reduce of `tensors` over `group` (0 = this process alone).
/// Traceable: while tracing it records a collective_start node.
Tensor collective_start(const std::vector<Tensor>& tensors, int64_t group, int64_t reduce_op);
/// Waits for `handle` (from collective_start over `group` with tensors of the
/// same shapes and dtypes) and returns the reduced tensors. Traceable.
std::vector<Tensor> collective_wait(const Tensor& handle, const std::vector<Tensor>& tensors,
                                    int64_t group);

}  // namespace kiln
