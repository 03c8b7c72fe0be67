// Activation layers (elementwise, no parameters) and Softmax/LogSoftmax.
#pragma once

#include <string>

#include "kiln/nn/module.h"

namespace kiln::nn {

/// max(x, 0).
class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Module> clone() const override;
};

/// GELU; approximate = "none" (exact, erf) or "tanh".
class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;

 private:
  std::string approximate_;
};

/// x * sigmoid(x) (a.k.a. swish).
class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Module> clone() const override;
};

/// tanh(x).
class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Module> clone() const override;
};

/// 1 / (1 + exp(-x)).
class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Module> clone() const override;
};

/// softmax along `dim`.
class Softmax : public Module {
 public:
  explicit Softmax(int64_t dim) : dim_(dim) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;

 private:
  int64_t dim_;
};

/// log_softmax along `dim`.
class LogSoftmax : public Module {
 public:
  explicit LogSoftmax(int64_t dim) : dim_(dim) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;

 private:
  int64_t dim_;
};

/// Zeroes elements with probability p and scales the rest by 1/(1-p) while
/// training; the identity in eval mode. Masks come from the Philox generator.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;
  double p() const { return p_; }

 private:
  double p_;
};

}  // namespace kiln::nn
