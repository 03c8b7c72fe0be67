// Learning-rate schedulers (torch.optim.lr_scheduler): they rewrite the "lr" (and
// for OneCycleLR "momentum"/"beta1") of an optimizer's groups at every step().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

class SequentialLR;
class ChainedScheduler;

/// Base of the schedulers. Like PyTorch, constructing one records each group's
/// "initial_lr" (if absent) as base_lrs and takes the initial step to epoch 0.
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  /// Advances last_epoch by one and writes the new learning rates into the groups.
  virtual void step();
  /// Jumps to `epoch` through the closed form when there is one (PyTorch's step(epoch)).
  virtual void step(int64_t epoch);
  /// The learning rates set by the last step, one per group.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  /// Steps taken since epoch 0 (-1 before the initial step).
  int64_t last_epoch() const { return last_epoch_; }
  /// The groups' "initial_lr" at construction.
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  Optimizer& optimizer() const { return *opt_; }
  /// "last_epoch", "step_count" (0-d i64), "base_lrs", "last_lr" (1-D f64).
  virtual StateDict state_dict() const;
  /// Restores state_dict(); kiln::Error if the number of groups differs.
  virtual void load_state_dict(const StateDict& sd);

 protected:
  LRScheduler(Optimizer& opt, std::string name);
  /// Records base_lrs and takes the initial step; derived constructors call it last
  /// (last_epoch = -1 starts fresh, else each group needs "initial_lr").
  void start(int64_t last_epoch);
  /// Chainable form: new lrs computed from the groups' current lr (PyTorch's get_lr).
  virtual std::vector<double> get_lr() = 0;
  /// Closed form at last_epoch_, for schedulers that have one.
  virtual std::optional<std::vector<double>> closed_form_lr() const { return std::nullopt; }
  /// The constructor's step: step_count restarts and is_initial_ is set meanwhile.
  void initial_step();
  /// Moves to the next epoch (or to `epoch` via the closed form) without counting a step;
  /// nothing changes if the new lrs cannot be computed.
  void update_lr(std::optional<int64_t> epoch);
  /// Undoes the epoch advance of the constructor's step (SequentialLR, recursively).
  virtual void undo_initial_step() { --last_epoch_; }
  /// Writes lrs into the groups and records them as last_lr.
  void apply(const std::vector<double>& lrs);
  /// The groups' current learning rates.
  std::vector<double> current_lrs() const;
  std::string tag() const { return "[" + name_ + "] "; }

  Optimizer* opt_;
  std::string name_;
  int64_t last_epoch_ = -1;
  int64_t step_count_ = 0;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  bool is_initial_ = false;  ///< true during the constructor's step (resuming keeps the lr)

  friend class SequentialLR;
  friend class ChainedScheduler;
};

/// lr = base_lr * gamma^(epoch / step_size).
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1, int64_t last_epoch = -1);

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  int64_t step_size_;
  double gamma_;
};

/// lr = base_lr * gamma^(number of milestones <= epoch); repeated milestones count twice.
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& opt, std::vector<int64_t> milestones, double gamma = 0.1,
              int64_t last_epoch = -1);

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  std::vector<int64_t> milestones_;  // sorted
  double gamma_;
};

/// lr = base_lr * gamma^epoch.
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& opt, double gamma, int64_t last_epoch = -1);

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  double gamma_;
};

/// lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2, stepped with
/// PyTorch's recursive form (so it chains); step(epoch) uses the closed form.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& opt, int64_t T_max, double eta_min = 0.0, int64_t last_epoch = -1);

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

/// lr = base_lr * (start + (end - start) * min(epoch, total_iters) / total_iters): warm-up.
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& opt, double start_factor = 1.0 / 3, double end_factor = 1.0,
           int64_t total_iters = 5, int64_t last_epoch = -1);

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  double start_factor_;
  double end_factor_;
  int64_t total_iters_;
};

/// lr = base_lr * lr_lambda(epoch).
class LambdaLR : public LRScheduler {
 public:
  LambdaLR(Optimizer& opt, std::function<double(int64_t)> lr_lambda, int64_t last_epoch = -1);

 protected:
  std::vector<double> get_lr() override;

 private:
  std::function<double(int64_t)> lr_lambda_;
};

/// How OneCycleLR interpolates within a phase.
enum class AnnealStrategy { kCos, kLinear };

/// OneCycleLR's options (PyTorch's defaults).
struct OneCycleOptions {
  double pct_start = 0.3;  ///< fraction of the steps spent increasing the lr
  AnnealStrategy anneal_strategy = AnnealStrategy::kCos;
  bool cycle_momentum = true;  ///< cycle "momentum" (SGD, RMSprop) or "beta1" (Adam)
  double base_momentum = 0.85;
  double max_momentum = 0.95;
  double div_factor = 25.0;       ///< initial_lr = max_lr / div_factor
  double final_div_factor = 1e4;  ///< min_lr = initial_lr / final_div_factor
  bool three_phase = false;       ///< fast.ai's schedule: up, down, then annihilate
  int64_t last_epoch = -1;
};

/// The 1cycle policy: lr from max_lr/div_factor up to max_lr and down to min_lr over
/// total_steps steps, momentum cycled inversely.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& opt, double max_lr, int64_t total_steps, OneCycleOptions o = {});
  /// One max_lr per group.
  OneCycleLR(Optimizer& opt, std::vector<double> max_lrs, int64_t total_steps,
             OneCycleOptions o = {});

 protected:
  std::vector<double> get_lr() override;

 private:
  struct Phase {
    double end_step;
    const char* start_lr;
    const char* end_lr;
    const char* start_momentum;
    const char* end_momentum;
  };
  double anneal(double start, double end, double pct) const;

  int64_t total_steps_;
  OneCycleOptions o_;
  std::vector<Phase> phases_;
  const char* momentum_key_ = "momentum";  // or "beta1"
};

/// Runs `schedulers` one after another, switching at `milestones` (the next one
/// restarts at its epoch 0), like torch.optim.lr_scheduler.SequentialLR.
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& opt, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones, int64_t last_epoch = -1);
  void step() override;
  void step(int64_t epoch) override;
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& sd) override;

 protected:
  std::vector<double> get_lr() override { return current_lrs(); }
  void undo_initial_step() override;

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

/// Steps every scheduler at each step(), so their chainable forms multiply.
class ChainedScheduler : public LRScheduler {
 public:
  ChainedScheduler(Optimizer& opt, std::vector<std::shared_ptr<LRScheduler>> schedulers);
  void step() override;
  void step(int64_t epoch) override;
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& sd) override;

 protected:
  std::vector<double> get_lr() override { return current_lrs(); }
  void undo_initial_step() override;

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
};

}  // namespace kiln::optim
