// kiln::nn::Module: the base of every layer and model (torch.nn.Module). A module
// owns named parameters, buffers and submodules; modules are held by
// std::shared_ptr so that parents and user code share them.
#pragma once

#include <cstdlib>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/state_dict.h"
#include "kiln/tensor.h"

namespace kiln::nn {

/// (dotted name, tensor) pairs in registration order.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module;
/// (dotted name, module) pairs in registration order.
using NamedModules = std::vector<std::pair<std::string, std::shared_ptr<Module>>>;

/// Keys that load_state_dict(strict=false) skipped.
struct LoadStateDictResult {
  std::vector<std::string> missing_keys;     ///< in the module, not in the state dict
  std::vector<std::string> unexpected_keys;  ///< in the state dict, not in the module
};

template <typename>
inline constexpr bool kAlwaysFalse = false;

/// What register_parameter(name, t) and register_buffer(name, t) return: a
/// receipt, not a tensor. Keeping a copy of the registered handle in a member
/// (libtorch's `w = register_parameter("w", t)`) does not compile, because the
/// copy would not follow the module: re-pointing it later (weight tying) would
/// leave the registered tensor stale, untrained and saved. Register members
/// with the slot form, register_parameter("w", w, t), which the module reads.
struct Registered {
  template <typename T>
  operator T() const {  // NOLINT(google-explicit-constructor): a readable error, never a value
    static_assert(kAlwaysFalse<T>,
                  "register_parameter(name, t) / register_buffer(name, t) return no handle: a "
                  "member copy would go stale when re-pointed (weight tying). Use the slot form "
                  "register_parameter(\"w\", w, t), which makes the member the parameter, or "
                  "read the tensor back with named_parameters()");
    std::abort();
  }
};

/// Base class of layers and models. Subclasses register their tensors and
/// children in the constructor and override forward().
class Module : public std::enable_shared_from_this<Module> {
 public:
  /// `name` is what printing shows; empty = the demangled class name.
  explicit Module(std::string name = {});
  virtual ~Module();
  // Parameters are shared handles: a copy would alias them silently.
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// The type name shown when printing ("Linear", "Net").
  virtual std::string name() const;

  // ---- registration (call from constructors; names must be unique, without '.') ----
  /// Registers the member `slot` (set to t) as parameter `name`: a leaf
  /// (non-leaves are detached) whose requires_grad is set to `requires_grad`.
  /// The module reads the member, so assigning to it re-points the parameter,
  /// as in PyTorch (weight tying: `head->weight = wte->weight`). An undefined
  /// tensor is allowed (an absent bias) and skipped everywhere. Returns `slot`.
  Tensor& register_parameter(const std::string& name, Tensor& slot, Tensor t,
                             bool requires_grad = true);
  /// Registers a parameter the module holds itself (parameter lists); no
  /// handle comes back (see Registered), so no copy can go stale.
  Registered register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  /// Replaces the value of the registered parameter `name` (and of its member,
  /// for the slot form) by `t`, a leaf such as another module's parameter (its
  /// requires_grad is kept) or undefined; kiln::Error for an unknown name or a
  /// tensor computed by ops (PyTorch refuses non-Parameters too). Returns t.
  Tensor replace_parameter(const std::string& name, const Tensor& t);
  /// Registers the member `slot` (set to t) as buffer `name` (state that is
  /// not trained: running stats, masks); assigning to the member re-points the
  /// buffer. Non-persistent buffers stay out of state_dict(). Returns `slot`.
  Tensor& register_buffer(const std::string& name, Tensor& slot, Tensor t, bool persistent = true);
  /// Registers a buffer the module holds itself; no handle comes back.
  Registered register_buffer(const std::string& name, Tensor t, bool persistent = true);
  /// Registers a child module; returns it with its own type.
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    static_assert(std::is_base_of_v<Module, M>, "register_module needs a kiln::nn::Module");
    add_child(name, m);
    return m;
  }
  /// Replaces the already registered child `name` (e.g. to swap a head).
  template <typename M>
  std::shared_ptr<M> replace_module(const std::string& name, std::shared_ptr<M> m) {
    static_assert(std::is_base_of_v<Module, M>, "replace_module needs a kiln::nn::Module");
    set_child(name, m);
    return m;
  }

  // ---- traversal (dotted names, registration order, shared tensors listed once,
  // under their first name, like PyTorch; a parameter member assigned a tensor
  // computed by ops is a kiln::Error naming it) ----
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  /// Direct children.
  NamedModules named_children() const;
  std::vector<std::shared_ptr<Module>> children() const;
  /// This module (name "") and all its descendants, depth first.
  NamedModules named_modules();
  std::vector<std::shared_ptr<Module>> modules();

  // ---- mode and state ----
  /// Sets training mode on this module and all descendants.
  virtual void train(bool on = true);
  void eval() { train(false); }
  /// Training flag. Read while tracing, it becomes a guard of the compiled function.
  bool is_training() const;
  /// Converts floating parameters, buffers and their .grad to `dtype`. The
  /// conversion swaps the data behind each existing TensorImpl (like PyTorch's
  /// `param.data = param.data.to(dtype)`), so handles kept by subclasses and
  /// optimizers stay valid; views taken earlier keep the old data.
  Module& to(DType dtype);
  /// Moves parameters, buffers and their .grad to `device` the same way (data
  /// swapped behind each TensorImpl), like PyTorch's `model.to(device)`: move
  /// the model before making its optimizer, whose state follows the parameters.
  Module& to(Device device);
  /// Clears gradients: undefined (set_to_none) or zero-filled in place.
  void zero_grad(bool set_to_none = true);
  /// Calls fn on every descendant, then on this module (like PyTorch's apply).
  Module& apply(const std::function<void(Module&)>& fn);

  /// Parameters then persistent buffers of each module, children after their
  /// parent, with dotted names; detached tensors sharing the module's storage.
  /// A shared (tied) tensor appears under each of its names, like PyTorch's;
  /// load_state_dict writes each name into the one storage.
  StateDict state_dict() const;
  /// Copies values from `sd` in place (no grad). Raises kiln::Error listing
  /// missing and unexpected keys (strict) and shape mismatches (always); nothing
  /// is copied when it raises. With strict=false the skipped keys are returned.
  LoadStateDictResult load_state_dict(const StateDict& sd, bool strict = true);

  // ---- forward and printing ----
  /// The computation; the default raises an error naming the module.
  virtual Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }
  /// forward over several tensors (PyTorch's module(x, mask, ...)), so code that
  /// holds a Module pointer (a ModuleList, TransformerEncoder) can pass masks.
  /// The default takes one tensor, plus undefined ones (absent masks), and calls
  /// forward(x); modules taking more (attention, losses) override it.
  virtual Tensor forward_args(const std::vector<Tensor>& args);
  /// module(x, mask, ...): forward_args({x, mask, ...}).
  template <typename... More>
  requires(std::is_convertible_v<const More&, Tensor>&&...) Tensor operator()(const Tensor& x,
                                                                              const Tensor& y,
                                                                              const More&... more) {
    return forward_args({x, y, Tensor(more)...});
  }
  /// A deep copy (same type, options, values, requires_grad and mode). Built-in
  /// layers implement it; the default raises an error.
  virtual std::shared_ptr<Module> clone() const;
  /// Text inside the parentheses when printing ("in_features=3, ...").
  virtual std::string extra_repr() const { return {}; }
  /// The tree printed by operator<<, as PyTorch's repr.
  std::string repr() const;

 protected:
  /// Copies values, requires_grad and training flags of `src` (same structure)
  /// into this module; helper for clone() implementations.
  void copy_state_from(const Module& src);
  /// Shares tensors between this module's parameters and buffers wherever
  /// `src` (same structure) shares them, so clones keep tied weights as
  /// PyTorch's deepcopy does; a different structure is left as it is.
  void copy_ties_from(const Module& src);

 private:
  struct Entry {
    std::string name;
    Tensor tensor;           // the value, unless slot is set
    Tensor* slot = nullptr;  // the subclass member that holds the value
    bool persistent = true;
    const Tensor& value() const { return slot ? *slot : tensor; }
    Tensor& value() { return slot ? *slot : tensor; }
  };
  void check_new_name(const std::string& name, const char* what) const;
  Entry& add_parameter(const std::string& name, Tensor t, bool requires_grad);
  Entry& add_buffer(const std::string& name, Tensor t, bool persistent);
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  void set_child(const std::string& name, std::shared_ptr<Module> m);
  void collect(const std::string& prefix, bool recurse, bool buffers, NamedTensors& out,
               std::vector<const TensorImpl*>& seen) const;
  void collect_state(const std::string& prefix, StateDict& out) const;
  void collect_entries(std::vector<const Entry*>& out) const;
  void collect_modules(const std::string& prefix, NamedModules& out,
                       std::vector<const Module*>& seen);

  std::string name_;
  bool training_ = true;
  std::vector<Entry> params_;
  std::vector<Entry> buffers_;
  NamedModules children_;
};

/// Prints the module tree like PyTorch's repr.
std::ostream& operator<<(std::ostream& os, const Module& m);

/// Clones `m` and casts the result to its type M.
template <typename M>
std::shared_ptr<M> clone_as(const M& m) {
  return std::static_pointer_cast<M>(m.clone());
}

namespace detail {
/// Python-style formatting used by extra_repr: True/False, (a, b), (a,).
std::string py_bool(bool b);
std::string py_tuple(const Dims& d);
/// Formats a double like Python's repr for typical hyper-parameters (1e-05, 0.1).
std::string py_float(double v);
}  // namespace detail

/// The dotted path of parameter or buffer `t` from the outermost live module
/// holding it ("stem.0.weight"), or "" when no module holds it (diagnostics:
/// KILN_CHECK_COMPILED names captured tensors with it).
std::string tensor_path(const Tensor& t);

}  // namespace kiln::nn
