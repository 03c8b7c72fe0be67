// Stochastic gradient descent with momentum, dampening, Nesterov, weight decay
// and maximize (torch.optim.SGD).
#pragma once

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

/// SGD hyperparameters (PyTorch's defaults). Group keys: the field names.
struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;  ///< L2 penalty added to the gradient
  bool nesterov = false;      ///< needs momentum > 0 and dampening == 0
  bool maximize = false;      ///< ascend instead of descend
  /// Eager steps update each parameter in one pass, all parameters in one launch
  /// (PyTorch's fused=True; same results). false: one op at a time, as traced.
  bool fused = true;
};

/// torch.optim.SGD. State per parameter: "momentum_buffer" (when momentum != 0).
class SGD : public Optimizer {
 public:
  /// One group over `params`.
  explicit SGD(std::vector<Tensor> params, SGDOptions defaults = {});
  /// Several groups, each overriding some of `defaults`.
  explicit SGD(std::vector<ParamGroup> groups, SGDOptions defaults = {});

  using Optimizer::step;
  void step() override;
  /// The hyperparameters of group g as a typed struct.
  SGDOptions options(size_t g) const;

 protected:
  void check_group(const ParamGroup& group) const override;
  std::optional<double> structural_form(const std::string& key, double value) const override;

 private:
  bool fused_ = true;
};

}  // namespace kiln::optim
