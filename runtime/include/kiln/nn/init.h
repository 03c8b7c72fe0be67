// kiln::nn::init: in-place parameter initialisation (torch.nn.init). Every
// function writes under NoGradGuard, draws from kiln's Philox generator (so
// manual_seed makes it reproducible) and returns its argument.
#pragma once

#include <utility>

#include "kiln/tensor.h"

namespace kiln::nn::init {

/// Which fan kaiming_* preserves: the forward (FanIn) or backward (FanOut) variance.
enum class FanMode { kFanIn, kFanOut };

/// Nonlinearities known to calculate_gain.
enum class Nonlinearity { kLinear, kConv2d, kSigmoid, kTanh, kReLU, kLeakyReLU, kSELU };

/// PyTorch's recommended gain: 1 (linear, conv, sigmoid), 5/3 (tanh), sqrt(2)
/// (relu), sqrt(2 / (1 + a^2)) (leaky_relu with slope `param`), 3/4 (selu).
double calculate_gain(Nonlinearity nonlinearity, double param = 0.01);
/// (fan_in, fan_out) of a weight [out, in, k...]: in * prod(k), out * prod(k).
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t);

/// Fills with U(a, b).
Tensor uniform_(Tensor t, double a = 0.0, double b = 1.0);
/// Fills with N(mean, std^2).
Tensor normal_(Tensor t, double mean = 0.0, double std = 1.0);
/// Fills with `value`.
Tensor constant_(Tensor t, double value);
Tensor zeros_(Tensor t);
Tensor ones_(Tensor t);
/// Identity on a 2-D tensor (ones on the diagonal).
Tensor eye_(Tensor t);
/// U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)) (Glorot).
Tensor xavier_uniform_(Tensor t, double gain = 1.0);
/// N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(Tensor t, double gain = 1.0);
/// U(-b, b) with b = gain * sqrt(3 / fan), gain = calculate_gain(nonlinearity, a) (He).
Tensor kaiming_uniform_(Tensor t, double a = 0.0, FanMode mode = FanMode::kFanIn,
                        Nonlinearity nonlinearity = Nonlinearity::kLeakyReLU);
/// N(0, std^2) with std = gain / sqrt(fan).
Tensor kaiming_normal_(Tensor t, double a = 0.0, FanMode mode = FanMode::kFanIn,
                       Nonlinearity nonlinearity = Nonlinearity::kLeakyReLU);

}  // namespace kiln::nn::init
