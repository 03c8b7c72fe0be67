// Dispatch: the single entry point every primitive call passes through.
// It runs the op's shape/dtype rule, hands the call to the active Recorder
// (tracing) or the eager kernel, and records the autograd node.
#pragma once

#include <source_location>
#include <span>
#include <vector>

#include "kiln/op_table.h"

namespace kiln {

/// Implemented by the tracer (ir/): receives every primitive call while set.
class Recorder {
 public:
  virtual ~Recorder() = default;
  /// Records one call and returns its (symbolic) outputs, shaped as `out`.
  virtual std::vector<Tensor> record(OpId op, std::span<const Tensor> inputs, const Attrs& attrs,
                                     const std::vector<TensorMeta>& out) = 0;
  /// Called when user code reads values of a symbolic tensor (item, printing,
  /// data_ptr). It must throw kiln::Error (or a fallback signal).
  virtual void on_value_read(const char* what, const std::source_location& where) = 0;
  /// Called when an in-place op gives `target` the value `value` (optimizer
  /// steps, .grad accumulation); the tracer turns it into a graph output.
  virtual void on_inplace(const Tensor& target, const Tensor& value) = 0;
};

/// The recorder of the calling thread (null when not tracing).
Recorder* current_recorder();
/// Sets the calling thread's recorder; returns the previous one.
Recorder* set_recorder(Recorder* r);

/// Calls primitive `op` on `inputs` and returns its outputs.
std::vector<Tensor> dispatch(OpId op, std::span<const Tensor> inputs, const Attrs& attrs = {});
/// Single-output shorthand of dispatch().
Tensor dispatch1(OpId op, std::span<const Tensor> inputs, const Attrs& attrs = {});
inline Tensor dispatch1(OpId op, std::initializer_list<Tensor> inputs, const Attrs& attrs = {}) {
  return dispatch1(op, std::span<const Tensor>(inputs.begin(), inputs.size()), attrs);
}

}  // namespace kiln
