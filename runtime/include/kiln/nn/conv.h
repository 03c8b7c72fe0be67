// Convolution and pooling layers: Conv2d, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d.
#pragma once

#include "kiln/functional.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

/// A (height, width) pair that also converts from one int: `3` means (3, 3).
struct Size2 {
  int64_t h = 0, w = 0;
  Size2(int64_t v) : h(v), w(v) {}  // NOLINT: implicit, like PyTorch's int-or-tuple
  Size2(int64_t hh, int64_t ww) : h(hh), w(ww) {}
  Dims dims() const { return {h, w}; }
};

/// Conv2d hyper-parameters besides channels and kernel (PyTorch's names).
struct Conv2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

/// 2-D convolution of [N, C_in, H, W] (or unbatched [C_in, H, W]). Weight
/// [C_out, C_in / groups, kH, kW] ~ kaiming_uniform_(a = sqrt(5)); bias
/// U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = C_in / groups * kH * kW.
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Conv2dOptions options = {});
  Tensor forward(const Tensor& x) override;
  void reset_parameters();
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;

  const Conv2dOptions& options() const { return opts_; }
  Tensor weight;  ///< [out_channels, in_channels / groups, kH, kW]
  Tensor bias;    ///< [out_channels], undefined when options.bias is false

 private:
  int64_t in_, out_;
  Size2 kernel_;
  Conv2dOptions opts_;
};

/// MaxPool2d hyper-parameters; stride defaults to the kernel size.
struct MaxPool2dOptions {
  std::optional<Size2> stride;
  Size2 padding = 0;
  Size2 dilation = 1;
};

/// Max over kH x kW windows of [N, C, H, W] (or [C, H, W]).
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Size2 kernel_size, MaxPool2dOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;

 private:
  Size2 kernel_;
  MaxPool2dOptions opts_;
};

/// AvgPool2d hyper-parameters; stride defaults to the kernel size.
struct AvgPool2dOptions {
  std::optional<Size2> stride;
  Size2 padding = 0;
  bool count_include_pad = true;
};

/// Mean over kH x kW windows of [N, C, H, W] (or [C, H, W]).
class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Size2 kernel_size, AvgPool2dOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;

 private:
  Size2 kernel_;
  AvgPool2dOptions opts_;
};

namespace functional {
/// Average pooling of [N, C, H, W] (or [C, H, W]) to output_size cells
/// (F.adaptive_avg_pool2d): cell i along H covers rows floor(i * H / oh) to
/// ceil((i + 1) * H / oh), likewise along W. output_size 1 is the global
/// average pooling of ResNet heads. Differentiable and traceable.
Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size);
}  // namespace functional

/// adaptive_avg_pool2d as a layer (torch.nn.AdaptiveAvgPool2d).
class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;

 private:
  Size2 output_size_;
};

}  // namespace kiln::nn
