// kiln::optim::Optimizer: parameter groups with named hyperparameters,
// per-parameter state, zero_grad and a flattened state_dict (torch.optim.Optimizer).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/state_dict.h"
#include "kiln/tensor.h"

namespace kiln::optim {

/// Named hyperparameters of a group ("lr", "momentum", "beta1", ...); bools are 0/1.
using Hyperparams = std::vector<std::pair<std::string, double>>;

/// Parameters sharing hyperparameters. `options` overrides the optimizer's defaults
/// (like PyTorch's {"params": [...], "lr": 0.1}); e.g. ParamGroup{{w}, {{"lr", 0.1}}}.
struct ParamGroup {
  std::vector<Tensor> params;
  Hyperparams options;

  /// True if the group has hyperparameter `name`.
  bool has(const std::string& name) const;
  /// Value of hyperparameter `name`; kiln::Error when absent.
  double get(const std::string& name) const;
  /// Adds or replaces hyperparameter `name` (schedulers write "lr", "initial_lr" ...).
  void set(const std::string& name, double value);
  double lr() const { return get("lr"); }
  void set_lr(double lr) { set("lr", lr); }
};

/// Base of all optimizers. Subclasses implement step() with tensor ops under NoGradGuard.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// Updates every parameter whose grad is defined (others are skipped).
  virtual void step() = 0;
  /// Re-evaluates the loss with `closure` (grad mode on), then steps; returns the loss.
  Tensor step(const std::function<Tensor()>& closure);
  /// Clears gradients: undefined (set_to_none) or zeroed in place.
  void zero_grad(bool set_to_none = true);
  /// Adds a group; missing hyperparameters take the defaults. Checks them like the constructor.
  void add_param_group(ParamGroup group);

  /// The groups; schedulers read and write their hyperparameters (lr, momentum, beta1).
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  /// The constructor's hyperparameters, in the order state_dict() lists them.
  const Hyperparams& defaults() const { return defaults_; }
  /// "SGD", "Adam", ... (the tag of this optimizer's error messages).
  const std::string& name() const { return name_; }
  /// Per-parameter state of p (momentum_buffer, exp_avg, step ...); empty before its first step.
  const StateDict& state(const Tensor& p) const;

  /// Snapshot (copies): "state.<i>.<key>" per parameter i (global index over the groups),
  /// "param_groups.<g>.<hyper>" as 0-d f64 and "param_groups.<g>.params" as i64 indices.
  StateDict state_dict() const;
  /// Restores a state_dict() of an optimizer of the same kind over same-shaped parameters;
  /// kiln::Error naming what differs. Nothing changes when it throws.
  void load_state_dict(const StateDict& sd);

 protected:
  /// `defaults` lists every hyperparameter the optimizer understands.
  Optimizer(std::string name, Hyperparams defaults);
  /// Adds the constructor's groups (derived constructors call it; check_group is virtual).
  void init_groups(std::vector<ParamGroup> groups);
  /// Throws kiln::Error for invalid hyperparameters of a group (all keys present).
  virtual void check_group(const ParamGroup& group) const = 0;
  /// State keys that hold averages of squares: load_state_dict refuses negative or NaN values.
  virtual std::vector<std::string> nonnegative_state() const { return {}; }
  /// Mutable state of p, created empty on first use.
  StateDict& mutable_state(const Tensor& p) { return state_[p.impl()]; }
  /// While tracing, guards the compiled step on the structure group gi's
  /// hyperparameters give it (structural_form); their numbers are per-call
  /// values read through hyper(), so a scheduler changing them (OneCycleLR's
  /// momentum/betas) does not re-trace. Call in step().
  void guard_hyperparams(size_t gi) const;
  /// What of hyperparameter `key` the step's tensor program depends on: the
  /// value itself (flags such as amsgrad), whether a term exists (value != 0),
  /// or nothing (nullopt: a number read through hyper() at every call). The
  /// default guards every key but lr.
  virtual std::optional<double> structural_form(const std::string& key, double value) const;
  /// Hyperparameter `key` of group gi, mapped by f, as a 0-d host number:
  /// the value now, or, while tracing, re-read at every compiled call.
  Tensor hyper(size_t gi, const std::string& key, double (*f)(double) = nullptr) const;
  /// Group gi's parameters that have a gradient, in classes of equal step
  /// count (in order of first appearance): a class shares one host number
  /// per call (bias corrections) and one host computation advances all its
  /// counts (advance_steps), instead of one per parameter. While tracing,
  /// guards that each class's counts stay equal (else the step re-traces).
  std::vector<std::vector<Tensor>> step_classes(size_t gi);
  /// Adds 1 to the step count of each of `params` (created at 0); returns the
  /// first one's new count.
  double advance_steps(const std::vector<Tensor>& params);
  /// "[<name>] " prefix of error messages.
  std::string tag() const { return "[" + name_ + "] "; }

 private:
  std::string name_;
  Hyperparams defaults_;
  std::vector<ParamGroup> groups_;
  std::unordered_map<const TensorImpl*, StateDict> state_;
};

/// Increments the 0-d f64 "step" entry of `state` (created at 0) and returns the new count.
double increment_step(StateDict& state);
/// The step count of a parameter's state (0 before the first step).
double current_step(const StateDict& state);
/// The state tensor `key`, created as zeros shaped like p on first use.
Tensor state_buffer(StateDict& state, const std::string& key, const Tensor& p);

}  // namespace kiln::optim
