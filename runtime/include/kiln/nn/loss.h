// Losses as modules: forward(input, target) calls the functional loss.
#pragma once

#include "kiln/functional.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

/// Base of the losses: a two-argument forward and call operator.
class Loss : public Module {
 public:
  virtual Tensor forward(const Tensor& input, const Tensor& target) = 0;
  /// Losses need a target: the one-argument form raises an error.
  Tensor forward(const Tensor& x) override { return Module::forward(x); }
  /// forward_args({input, target}) = forward(input, target).
  Tensor forward_args(const std::vector<Tensor>& args) override {
    KILN_CHECK(args.size() == 2, "[", name(), "] takes (input, target), got ", args.size(),
               " tensors");
    return forward(args[0], args[1]);
  }
  using Module::operator();
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
};

/// mean/sum/none of (input - target)^2.
class MSELoss : public Loss {
 public:
  explicit MSELoss(Reduction reduction = Reduction::kMean) : reduction_(reduction) {}
  using Loss::forward;
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::shared_ptr<Module> clone() const override;

 private:
  Reduction reduction_;
};

/// Binary cross-entropy of probabilities in [0, 1].
class BCELoss : public Loss {
 public:
  explicit BCELoss(Reduction reduction = Reduction::kMean) : reduction_(reduction) {}
  using Loss::forward;
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::shared_ptr<Module> clone() const override;

 private:
  Reduction reduction_;
};

/// Binary cross-entropy of logits (sigmoid folded in, numerically stable).
class BCEWithLogitsLoss : public Loss {
 public:
  explicit BCEWithLogitsLoss(Reduction reduction = Reduction::kMean) : reduction_(reduction) {}
  using Loss::forward;
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::shared_ptr<Module> clone() const override;

 private:
  Reduction reduction_;
};

/// Cross-entropy of logits [N, C] (or [N, C, d...]) against class indices.
class CrossEntropyLoss : public Loss {
 public:
  explicit CrossEntropyLoss(CrossEntropyOptions options = {}) : opts_(options) {}
  using Loss::forward;
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::shared_ptr<Module> clone() const override;

 private:
  CrossEntropyOptions opts_;
};

/// Negative log-likelihood of log-probabilities [N, C] against class indices.
class NLLLoss : public Loss {
 public:
  explicit NLLLoss(CrossEntropyOptions options = {}) : opts_(options) {}
  using Loss::forward;
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::shared_ptr<Module> clone() const override;

 private:
  CrossEntropyOptions opts_;
};

}  // namespace kiln::nn
