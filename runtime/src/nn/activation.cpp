// Activations, Softmax/LogSoftmax and Dropout.
#include "kiln/nn/activation.h"

#include "kiln/functional.h"

namespace kiln::nn {
namespace {

// clone() of a layer whose constructor arguments are all in `args`.
template <typename M, typename... Args>
std::shared_ptr<Module> clone_with(const M& self, Args&&... args) {
  auto m = std::make_shared<M>(std::forward<Args>(args)...);
  m->train(self.is_training());
  return m;
}

}  // namespace

Tensor ReLU::forward(const Tensor& x) {
  return relu(x);
}
std::shared_ptr<Module> ReLU::clone() const {
  return clone_with(*this);
}

GELU::GELU(std::string approximate) : approximate_(std::move(approximate)) {
  KILN_CHECK(approximate_ == "none" || approximate_ == "tanh",
             "[GELU] approximate must be \"none\" or \"tanh\", got \"", approximate_, "\"");
}
Tensor GELU::forward(const Tensor& x) {
  return gelu(x, approximate_);
}
std::string GELU::extra_repr() const {
  return "approximate='" + approximate_ + "'";
}
std::shared_ptr<Module> GELU::clone() const {
  return clone_with(*this, approximate_);
}

Tensor SiLU::forward(const Tensor& x) {
  return silu(x);
}
std::shared_ptr<Module> SiLU::clone() const {
  return clone_with(*this);
}

Tensor Tanh::forward(const Tensor& x) {
  return tanh(x);
}
std::shared_ptr<Module> Tanh::clone() const {
  return clone_with(*this);
}

Tensor Sigmoid::forward(const Tensor& x) {
  return sigmoid(x);
}
std::shared_ptr<Module> Sigmoid::clone() const {
  return clone_with(*this);
}

Tensor Softmax::forward(const Tensor& x) {
  return softmax(x, dim_);
}
std::string Softmax::extra_repr() const {
  return str("dim=", dim_);
}
std::shared_ptr<Module> Softmax::clone() const {
  return clone_with(*this, dim_);
}

Tensor LogSoftmax::forward(const Tensor& x) {
  return log_softmax(x, dim_);
}
std::string LogSoftmax::extra_repr() const {
  return str("dim=", dim_);
}
std::shared_ptr<Module> LogSoftmax::clone() const {
  return clone_with(*this, dim_);
}

Dropout::Dropout(double p) : p_(p) {
  KILN_CHECK(p >= 0.0 && p <= 1.0,
             "[Dropout] dropout probability has to be between 0 and 1, but got ", p);
}
Tensor Dropout::forward(const Tensor& x) {
  return dropout(x, p_, is_training());
}
std::string Dropout::extra_repr() const {
  return "p=" + detail::py_float(p_) + ", inplace=False";
}
std::shared_ptr<Module> Dropout::clone() const {
  return clone_with(*this, p_);
}

}  // namespace kiln::nn
