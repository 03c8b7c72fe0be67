// RMSprop with momentum, centering, weight decay and maximize (torch.optim.RMSprop).
#pragma once

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

/// RMSprop hyperparameters (PyTorch's defaults). Group keys: the field names.
struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;  ///< smoothing constant of the squared-gradient average
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0;
  bool centered = false;  ///< normalize by an estimate of the gradient's variance
  bool maximize = false;
  /// Eager steps update each parameter in one pass, all parameters in one launch
  /// (PyTorch's fused=True; same results). false: one op at a time, as traced.
  bool fused = true;
};

/// torch.optim.RMSprop. State per parameter: step, square_avg (+ momentum_buffer, grad_avg).
class RMSprop : public Optimizer {
 public:
  explicit RMSprop(std::vector<Tensor> params, RMSpropOptions defaults = {});
  explicit RMSprop(std::vector<ParamGroup> groups, RMSpropOptions defaults = {});

  using Optimizer::step;
  void step() override;
  /// The hyperparameters of group g as a typed struct.
  RMSpropOptions options(size_t g) const;

 protected:
  void check_group(const ParamGroup& group) const override;
  std::optional<double> structural_form(const std::string& key, double value) const override;
  std::vector<std::string> nonnegative_state() const override { return {"square_avg"}; }

 private:
  bool fused_ = true;
};

}  // namespace kiln::optim
