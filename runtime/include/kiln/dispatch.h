// Dispatch: the single entry point every primitive call passes through.
// It runs the op's shape/dtype rule, hands the call to the active Recorder
// (tracing) or the eager kernel, and records the autograd node.
#pragma once

#include <functional>
#include <source_location>
#include <span>
#include <string>
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
  /// Called before `t`'s .grad field changes (backward, zero_grad, set_grad), so
  /// the tracer can note the tensor's state from before the change.
  virtual void on_grad_change(const Tensor& t);
  /// detach() of a real tensor while tracing: the tracer may return a stand-in
  /// for the tensor's current value (state read by reference); undefined = plain detach.
  virtual Tensor on_detach(const Tensor& t);
  /// A number the host computes at every call (learning rate, bias correction):
  /// returns a tensor standing for fn()'s value. The default bakes the value in.
  virtual Tensor host_scalar(const std::function<double()>& fn);
  /// A host-side condition the traced code depended on (a module's training
  /// flag, an optimizer's structural hyperparameters): check() returns "" while
  /// it holds, else what changed; a compiled function re-traces when it does not hold.
  virtual void add_guard(std::function<std::string()> check);
  /// Host code the traced code ran for its effect on host state (a scheduler's
  /// step): a compiled function runs fn at every call, in trace order with the
  /// host scalars, before its graph. The default runs fn now.
  virtual void host_action(const std::function<void()>& fn);
};

/// The recorder of the calling thread (null when not tracing).
Recorder* current_recorder();
/// Sets the calling thread's recorder; returns the previous one.
Recorder* set_recorder(Recorder* r);

/// Suspends tracing on the calling thread for its scope: ops run eagerly on
/// real tensors (lazily created state, host-side bookkeeping).
class UntracedGuard {
 public:
  UntracedGuard() : prev_(set_recorder(nullptr)) {}
  ~UntracedGuard() { set_recorder(prev_); }
  UntracedGuard(const UntracedGuard&) = delete;
  UntracedGuard& operator=(const UntracedGuard&) = delete;

 private:
  Recorder* prev_;
};

/// A host-computed number as a wrapped 0-d f64 tensor. Eagerly: fn() now. While
/// tracing: a graph input that a compiled function refreshes by calling fn at
/// every call, in trace order (so fn may also advance host state, like a step count).
Tensor host_scalar(const std::function<double()>& fn);

/// Runs fn (host-side state: a scheduler's epoch and learning rates) now; while
/// tracing, registers it to run at every call of the compiled function instead
/// (Recorder::host_action), so the state advances once per call as in eager.
void host_action(const std::function<void()>& fn);

/// Makes eager host_scalar() calls on this thread return `values` in order
/// instead of calling their functions, and host_action() calls skip theirs
/// (KILN_CHECK_COMPILED replays a compiled call's host numbers in the eager
/// reference run without advancing host state twice).
class HostScalarReplay {
 public:
  explicit HostScalarReplay(std::vector<double> values);
  ~HostScalarReplay();
  HostScalarReplay(const HostScalarReplay&) = delete;
  HostScalarReplay& operator=(const HostScalarReplay&) = delete;
  /// Values handed out so far.
  size_t consumed() const { return pos_; }

 private:
  friend Tensor host_scalar(const std::function<double()>& fn);
  friend void host_action(const std::function<void()>& fn);
  std::vector<double> values_;
  size_t pos_ = 0;
  HostScalarReplay* prev_;
};

/// While tracing, registers a guard (see Recorder::add_guard); otherwise does
/// nothing. check() returns "" while it holds, else what changed ("x changed (1 -> 2)").
void trace_guard(std::function<std::string()> check);
/// As above for a yes/no condition described by `what` (reported as "what no longer holds").
void trace_guard(std::function<bool()> check, std::string what);

/// Calls primitive `op` on `inputs` and returns its outputs.
std::vector<Tensor> dispatch(OpId op, std::span<const Tensor> inputs, const Attrs& attrs = {});
/// Single-output shorthand of dispatch().
Tensor dispatch1(OpId op, std::span<const Tensor> inputs, const Attrs& attrs = {});
inline Tensor dispatch1(OpId op, std::initializer_list<Tensor> inputs, const Attrs& attrs = {}) {
  return dispatch1(op, std::span<const Tensor>(inputs.begin(), inputs.size()), attrs);
}

}  // namespace kiln
