// Identity, Linear, Flatten.
#include "kiln/nn/linear.h"

#include <cmath>

#include "kiln/functional.h"
#include "kiln/nn/init.h"

namespace kiln::nn {

std::shared_ptr<Module> Identity::clone() const {
  return std::make_shared<Identity>();
}

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias)
    : in_(in_features), out_(out_features) {
  KILN_CHECK(in_features >= 0 && out_features >= 0,
             "[Linear] in_features and out_features must be non-negative, got ", in_features,
             " and ", out_features);
  register_parameter("weight", weight, empty({out_features, in_features}));
  register_parameter("bias", bias, with_bias ? empty({out_features}) : Tensor());
  reset_parameters();
}

void Linear::reset_parameters() {
  // kaiming_uniform_(a=sqrt(5)) gives U(-1/sqrt(fan_in), 1/sqrt(fan_in)); an empty
  // layer has nothing to draw (PyTorch skips it too).
  if (in_ == 0 || out_ == 0) return;
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  double bound = 1.0 / std::sqrt(static_cast<double>(in_));
  if (bias.defined()) init::uniform_(bias, -bound, bound);
}

Tensor Linear::forward(const Tensor& x) {
  KILN_CHECK(x.dim() >= 1 && x.size(-1) == in_, "[Linear] input shape ", x.shape(),
             " does not end with in_features = ", in_, " (weight shape ", weight.shape(), ")");
  return linear(x, weight, bias);
}

std::string Linear::extra_repr() const {
  return str("in_features=", in_, ", out_features=", out_,
             ", bias=", detail::py_bool(bias.defined()));
}

std::shared_ptr<Module> Linear::clone() const {
  auto m = std::make_shared<Linear>(in_, out_, bias.defined());
  m->copy_state_from(*this);
  return m;
}

Tensor Flatten::forward(const Tensor& x) {
  // A 0-d input flattens to [1] in PyTorch; kiln's flatten handles rank >= 1.
  if (x.dim() == 0) return reshape(x, {1});
  return flatten(x, start_, end_);
}

std::string Flatten::extra_repr() const {
  return str("start_dim=", start_, ", end_dim=", end_);
}

std::shared_ptr<Module> Flatten::clone() const {
  auto m = std::make_shared<Flatten>(start_, end_);
  m->copy_state_from(*this);
  return m;
}

}  // namespace kiln::nn
