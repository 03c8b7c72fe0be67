// Linear-algebra layers: Identity, Linear, Flatten.
#pragma once

#include "kiln/nn/module.h"

namespace kiln::nn {

/// Returns its input unchanged (a placeholder, e.g. for a removed head).
class Identity : public Module {
 public:
  Identity() = default;
  Tensor forward(const Tensor& x) override { return x; }
  std::shared_ptr<Module> clone() const override;
};

/// y = x W^T + b, W [out_features, in_features]. Initialised like PyTorch:
/// W ~ kaiming_uniform_(a = sqrt(5)), i.e. U(-1/sqrt(in), 1/sqrt(in)), and b too.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  /// Re-draws weight and bias with the default initialisation.
  void reset_parameters();
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  Tensor weight;  ///< [out_features, in_features]
  Tensor bias;    ///< [out_features], undefined without bias

 private:
  int64_t in_, out_;
};

/// Flattens dims start_dim..end_dim into one (default: all but the batch dim).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : start_(start_dim), end_(end_dim) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;

 private:
  int64_t start_, end_;
};

}  // namespace kiln::nn
