// nn::init: PyTorch's initialisers, written as in-place copies of kiln's random
// factories so they follow manual_seed.
#include "kiln/nn/init.h"

#include <cmath>

#include "kiln/autograd.h"
#include "kiln/functional.h"

namespace kiln::nn::init {
namespace {

void check_floating(const Tensor& t, const char* op) {
  KILN_CHECK(t.defined(), "[init.", op, "] the tensor is undefined");
  KILN_CHECK(is_floating(t.dtype()), "[init.", op, "] expected a floating tensor, got dtype ",
             t.dtype());
}

// Draws in f64 for f64 tensors, else in f32 (f16/bf16 round once, on the copy).
DType draw_dtype(const Tensor& t) {
  return t.dtype() == DType::f64 ? DType::f64 : DType::f32;
}

int64_t fan(const Tensor& t, FanMode mode) {
  auto [in, out] = calculate_fan_in_and_fan_out(t);
  return mode == FanMode::kFanIn ? in : out;
}

}  // namespace

double calculate_gain(Nonlinearity nonlinearity, double param) {
  switch (nonlinearity) {
    case Nonlinearity::kLinear:
    case Nonlinearity::kConv2d:
    case Nonlinearity::kSigmoid:
      return 1.0;
    case Nonlinearity::kTanh:
      return 5.0 / 3.0;
    case Nonlinearity::kReLU:
      return std::sqrt(2.0);
    case Nonlinearity::kLeakyReLU:
      return std::sqrt(2.0 / (1.0 + param * param));
    case Nonlinearity::kSELU:
      return 3.0 / 4.0;
  }
  return 1.0;
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  KILN_CHECK(t.defined() && t.dim() >= 2,
             "[init] fan in and fan out can not be computed for a "
             "tensor with fewer than 2 dimensions, got shape ",
             t.defined() ? t.shape() : Dims{});
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

Tensor uniform_(Tensor t, double a, double b) {
  check_floating(t, "uniform_");
  KILN_CHECK(a <= b, "[init.uniform_] expects a <= b, got a=", a, ", b=", b);
  NoGradGuard ng;
  t.copy_(rand(t.shape(), draw_dtype(t)) * (b - a) + a);
  return t;
}

Tensor normal_(Tensor t, double mean, double std) {
  check_floating(t, "normal_");
  KILN_CHECK(std >= 0.0, "[init.normal_] expects std >= 0, got ", std);
  NoGradGuard ng;
  t.copy_(randn(t.shape(), draw_dtype(t)) * std + mean);
  return t;
}

Tensor constant_(Tensor t, double value) {
  KILN_CHECK(t.defined(), "[init.constant_] the tensor is undefined");
  NoGradGuard ng;
  t.fill_(value);
  return t;
}

Tensor zeros_(Tensor t) {
  return constant_(t, 0.0);
}
Tensor ones_(Tensor t) {
  return constant_(t, 1.0);
}

Tensor eye_(Tensor t) {
  KILN_CHECK(t.defined() && t.dim() == 2, "[init.eye_] only 2-D tensors are supported, got shape ",
             t.defined() ? t.shape() : Dims{});
  NoGradGuard ng;
  t.copy_(eye(t.size(0), t.size(1), t.dtype()));
  return t;
}

Tensor xavier_uniform_(Tensor t, double gain) {
  check_floating(t, "xavier_uniform_");
  auto [in, out] = calculate_fan_in_and_fan_out(t);
  double bound = gain * std::sqrt(6.0 / static_cast<double>(in + out));
  return uniform_(t, -bound, bound);
}

Tensor xavier_normal_(Tensor t, double gain) {
  check_floating(t, "xavier_normal_");
  auto [in, out] = calculate_fan_in_and_fan_out(t);
  return normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(in + out)));
}

Tensor kaiming_uniform_(Tensor t, double a, FanMode mode, Nonlinearity nonlinearity) {
  check_floating(t, "kaiming_uniform_");
  int64_t f = fan(t, mode);
  KILN_CHECK(f > 0, "[init.kaiming_uniform_] initializing a zero-element tensor of shape ",
             t.shape());
  double bound = calculate_gain(nonlinearity, a) * std::sqrt(3.0 / static_cast<double>(f));
  return uniform_(t, -bound, bound);
}

Tensor kaiming_normal_(Tensor t, double a, FanMode mode, Nonlinearity nonlinearity) {
  check_floating(t, "kaiming_normal_");
  int64_t f = fan(t, mode);
  KILN_CHECK(f > 0, "[init.kaiming_normal_] initializing a zero-element tensor of shape ",
             t.shape());
  return normal_(t, 0.0, calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(f)));
}

}  // namespace kiln::nn::init
