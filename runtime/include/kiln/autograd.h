// Define-by-run autograd: the tape (Nodes linked by Edges), the engine, grad
// mode, hooks, kiln::grad and kiln::checkpoint.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/op_table.h"
#include "kiln/tensor.h"

namespace kiln {

class Node;

/// Points at input slot `input_nr` of a backward node.
struct Edge {
  std::shared_ptr<Node> node;
  uint32_t input_nr = 0;
  bool valid() const { return node != nullptr; }
};

namespace autograd {
struct CheckpointFrame;  // a kiln::checkpoint region (runtime/src/checkpoint.cpp)
}

/// A tensor kept for backward: its data without its autograd edge (no cycle
/// through outputs), plus the version it had when saved. Saved inside a
/// kiln::checkpoint region, it keeps no data: its region recomputes it on first use.
class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t, bool is_output);
  /// Returns the tensor, reattached to its grad_fn; errors if it was modified
  /// in place since it was saved or already released.
  Tensor unpack(const std::shared_ptr<Node>& owner, const char* op) const;
  bool defined() const { return data_.defined() || frame_ != nullptr; }
  void reset() {
    data_ = Tensor();
    frame_.reset();
    released_ = true;
  }

 private:
  Tensor data_;
  std::shared_ptr<autograd::CheckpointFrame> frame_;  ///< set: recomputed by its region
  uint32_t slot_ = 0;                                 ///< the save's number in its region
  std::weak_ptr<Node> grad_fn_;
  uint32_t output_nr_ = 0;
  uint32_t version_ = 0;
  bool is_output_ = false;
  bool was_leaf_requiring_grad_ = false;
  bool released_ = false;
  std::shared_ptr<TensorImpl> leaf_;  // for saved leaves: reattach to the same leaf
};

/// A backward function: maps gradients of a forward call's outputs to
/// gradients of its inputs. Subclasses: op nodes, AccumulateGrad, custom functions.
class Node : public std::enable_shared_from_this<Node> {
 public:
  virtual ~Node() = default;
  /// Gradients w.r.t. the forward outputs (undefined = zero) -> per next edge.
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grads) = 0;
  /// Name for errors and printing ("MulBackward").
  virtual std::string name() const = 0;
  /// Frees saved tensors (after backward without retain_graph).
  virtual void release() {}
  /// True once release() ran: a backward through this node raises.
  virtual bool released() const { return false; }

  std::vector<Edge> next_edges;  ///< one per forward input
  uint64_t sequence_nr = 0;      ///< creation order; later nodes run first
  uint32_t num_outputs = 1;      ///< forward outputs (= gradient inputs)
  /// Hooks on the gradient of forward output i (tensor hooks of non-leaves).
  std::vector<std::pair<uint32_t, std::function<Tensor(const Tensor&)>>> pre_hooks;
  /// Non-leaf outputs that retain_grad(): output index -> tensor impl (weak).
  std::vector<std::pair<uint32_t, std::weak_ptr<TensorImpl>>> retained;
};

/// Autograd state of a tensor.
struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;
  uint32_t output_nr = 0;
  std::weak_ptr<Node> grad_accumulator;
  std::vector<std::function<Tensor(const Tensor&)>> leaf_hooks;
  std::vector<std::function<void(const Tensor&)>> post_accumulate_hooks;
  /// Hooks that also run while tracing (on the symbolic .grad): what they record
  /// becomes part of the graph, so compiled runs do not call them again.
  std::vector<std::function<void(const Tensor&)>> traceable_post_accumulate_hooks;
};

/// True when operations record the tape (thread-local; default true).
bool grad_mode_enabled();
void set_grad_mode(bool enabled);

/// Disables gradient recording in a scope (like torch.no_grad()).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_mode_enabled()) { set_grad_mode(false); }
  ~NoGradGuard() { set_grad_mode(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

/// Enables (or sets) gradient recording in a scope.
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : prev_(grad_mode_enabled()) { set_grad_mode(enabled); }
  ~GradModeGuard() { set_grad_mode(prev_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool prev_;
};

/// c10::InferenceMode (torch.inference_mode()): no tape is recorded in its scope;
/// enabled = false leaves grad mode as it is. kiln has no separate inference
/// tensors: results are ordinary tensors that do not require grad.
class InferenceMode {
 public:
  explicit InferenceMode(bool enabled = true) : prev_(grad_mode_enabled()) {
    if (enabled) set_grad_mode(false);
  }
  ~InferenceMode() { set_grad_mode(prev_); }
  InferenceMode(const InferenceMode&) = delete;
  InferenceMode& operator=(const InferenceMode&) = delete;

 private:
  bool prev_;
};

/// Runs backward from `outputs` with `grad_outputs` (undefined = ones for scalars),
/// accumulating into the .grad of leaves.
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs = {},
              bool retain_graph = false, bool create_graph = false);

namespace autograd {
/// True on a thread that is running a backward pass (inside hooks and nodes).
bool in_backward();
/// Runs `cb` once the current backward pass has finished accumulating every
/// gradient (like PyTorch's queue_callback; DDP waits for its buckets there).
/// Callbacks run in order and may queue more; kiln::Error outside backward.
void queue_callback(std::function<void()> cb);
}  // namespace autograd

/// True if a backward from `outputs` would reach a node whose saved tensors an
/// earlier backward freed (it would raise GraphReleasedError).
bool graph_released(const std::vector<Tensor>& outputs);

/// Backward through a graph whose saved tensors an earlier backward freed
/// (no retain_graph): "trying to backward through the graph a second time".
class GraphReleasedError : public Error {
 public:
  using Error::Error;
};

/// Options of kiln::grad.
struct GradOptions {
  bool retain_graph = false;
  bool create_graph = false;
  bool allow_unused = false;  ///< else an input the outputs do not depend on is an error
};

/// Gradients of `outputs` w.r.t. `inputs` (like torch.autograd.grad); .grad is untouched.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, GradOptions opts = {});

/// A user-defined backward: `backward(grad_outputs) -> grad_inputs`.
using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

/// Connects `outputs` (computed without grad from `inputs`) to the tape through a
/// custom backward; returns the outputs as differentiable tensors. Used by
/// checkpoint and by compiled regions.
std::vector<Tensor> attach_function(const std::string& name, const std::vector<Tensor>& inputs,
                                    const std::vector<Tensor>& outputs, BackwardFn backward);

/// Activation checkpointing (PyTorch's non-reentrant form): runs fn with grad
/// mode as is, but every tensor autograd saves inside it is dropped and
/// recomputed by re-running fn (same random numbers) when backward first needs
/// one. Same gradients as calling fn directly, for inputs and for parameters
/// fn captures; nests; works with kiln::grad and create_graph.
std::vector<Tensor> checkpoint(
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
    const std::vector<Tensor>& inputs);

namespace autograd {
/// Nonzero while a kiln::checkpoint region recomputes on this thread: an id
/// unique to that recomputation. The tracer marks the nodes it records then
/// ("recompute" attribute), so passes never merge them with the forward's.
uint64_t recompute_region();
}  // namespace autograd

/// Options of gradcheck.
struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
};

/// Compares analytic gradients of sum(fn(inputs) * random weights) with central
/// finite differences. Inputs should be f64; returns "" on success or a report.
std::string gradcheck(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                      const std::vector<Tensor>& inputs, GradcheckOptions opts = {});

}  // namespace kiln
