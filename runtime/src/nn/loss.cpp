// Loss modules.
#include "kiln/nn/loss.h"

namespace kiln::nn {
namespace {

template <typename M, typename Opt>
std::shared_ptr<Module> clone_loss(const M& self, const Opt& opt) {
  auto m = std::make_shared<M>(opt);
  m->train(self.is_training());
  return m;
}

}  // namespace

Tensor MSELoss::forward(const Tensor& input, const Tensor& target) {
  return mse_loss(input, target, reduction_);
}
std::shared_ptr<Module> MSELoss::clone() const {
  return clone_loss(*this, reduction_);
}

Tensor BCELoss::forward(const Tensor& input, const Tensor& target) {
  return binary_cross_entropy(input, target, reduction_);
}
std::shared_ptr<Module> BCELoss::clone() const {
  return clone_loss(*this, reduction_);
}

Tensor BCEWithLogitsLoss::forward(const Tensor& input, const Tensor& target) {
  return binary_cross_entropy_with_logits(input, target, reduction_);
}
std::shared_ptr<Module> BCEWithLogitsLoss::clone() const {
  return clone_loss(*this, reduction_);
}

Tensor CrossEntropyLoss::forward(const Tensor& input, const Tensor& target) {
  return cross_entropy(input, target, opts_);
}
std::shared_ptr<Module> CrossEntropyLoss::clone() const {
  return clone_loss(*this, opts_);
}

Tensor NLLLoss::forward(const Tensor& input, const Tensor& target) {
  return nll_loss(input, target, opts_);
}
std::shared_ptr<Module> NLLLoss::clone() const {
  return clone_loss(*this, opts_);
}

}  // namespace kiln::nn
