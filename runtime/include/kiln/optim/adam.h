// Adam (L2 weight decay) and AdamW (decoupled weight decay), with amsgrad and
// maximize (torch.optim.Adam / torch.optim.AdamW).
#pragma once

#include <utility>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

/// Adam hyperparameters (PyTorch's defaults). Group keys: lr, beta1, beta2, eps,
/// weight_decay, amsgrad, maximize.
struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;  ///< L2 penalty added to the gradient
  bool amsgrad = false;       ///< use the running maximum of exp_avg_sq
  bool maximize = false;
  /// Eager steps update each parameter in one pass, all parameters in one launch
  /// (PyTorch's fused=True; same results). false: one op at a time, as traced.
  bool fused = true;
};

/// AdamW hyperparameters: as Adam but weight decay is decoupled and defaults to 1e-2.
struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;  ///< param *= 1 - lr * weight_decay before the Adam update
  bool amsgrad = false;
  bool maximize = false;
  bool fused = true;  ///< as AdamOptions::fused
};

/// torch.optim.Adam. State per parameter: step, exp_avg, exp_avg_sq (+ max_exp_avg_sq).
class Adam : public Optimizer {
 public:
  explicit Adam(std::vector<Tensor> params, AdamOptions defaults = {});
  explicit Adam(std::vector<ParamGroup> groups, AdamOptions defaults = {});

  using Optimizer::step;
  void step() override;
  /// The hyperparameters of group g as a typed struct.
  AdamOptions options(size_t g) const;
  /// Whether eager steps run fused (the options' `fused`).
  bool fused() const { return fused_; }

 protected:
  /// For AdamW: same state and checks, different name and weight-decay rule.
  Adam(std::string name, Hyperparams defaults, bool decoupled, bool fused);
  void check_group(const ParamGroup& group) const override;
  std::optional<double> structural_form(const std::string& key, double value) const override;
  std::vector<std::string> nonnegative_state() const override {
    return {"exp_avg_sq", "max_exp_avg_sq"};
  }

 private:
  bool decoupled_ = false;
  bool fused_ = true;
};

/// torch.optim.AdamW: Adam with decoupled weight decay.
class AdamW : public Adam {
 public:
  explicit AdamW(std::vector<Tensor> params, AdamWOptions defaults = {});
  explicit AdamW(std::vector<ParamGroup> groups, AdamWOptions defaults = {});
  /// The hyperparameters of group g as a typed struct.
  AdamWOptions options(size_t g) const;
};

}  // namespace kiln::optim
