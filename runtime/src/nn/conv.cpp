// Conv2d, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d.
#include "kiln/nn/conv.h"

#include <cmath>

#include "kiln/nn/init.h"

namespace kiln::nn {
namespace {

std::string tuple2(const Size2& s) {
  return detail::py_tuple(s.dims());
}
// Pooling layers print an int when both sides agree, as for PyTorch's int arguments.
std::string int_or_tuple(const Size2& s) {
  return s.h == s.w ? std::to_string(s.h) : tuple2(s);
}

}  // namespace

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Conv2dOptions options)
    : in_(in_channels), out_(out_channels), kernel_(kernel_size), opts_(options) {
  const int64_t g = opts_.groups;
  KILN_CHECK(g > 0, "[Conv2d] groups must be a positive integer, got ", g);
  KILN_CHECK(in_channels > 0 && out_channels > 0,
             "[Conv2d] in_channels and out_channels must be positive, got ", in_channels, " and ",
             out_channels);
  KILN_CHECK(in_channels % g == 0, "[Conv2d] in_channels (", in_channels,
             ") must be divisible by groups (", g, ")");
  KILN_CHECK(out_channels % g == 0, "[Conv2d] out_channels (", out_channels,
             ") must be divisible by groups (", g, ")");
  KILN_CHECK(kernel_.h > 0 && kernel_.w > 0, "[Conv2d] kernel_size must be positive, got ",
             tuple2(kernel_));
  KILN_CHECK(opts_.stride.h > 0 && opts_.stride.w > 0, "[Conv2d] stride must be positive, got ",
             tuple2(opts_.stride));
  KILN_CHECK(opts_.padding.h >= 0 && opts_.padding.w >= 0,
             "[Conv2d] padding must be non-negative, got ", tuple2(opts_.padding));
  KILN_CHECK(opts_.dilation.h > 0 && opts_.dilation.w > 0,
             "[Conv2d] dilation must be positive, got ", tuple2(opts_.dilation));
  register_parameter("weight", weight,
                     empty({out_channels, in_channels / g, kernel_.h, kernel_.w}));
  register_parameter("bias", bias, opts_.bias ? empty({out_channels}) : Tensor());
  reset_parameters();
}

void Conv2d::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    auto [fan_in, fan_out] = init::calculate_fan_in_and_fan_out(weight);
    double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  KILN_CHECK(x.dim() == 3 || x.dim() == 4,
             "[Conv2d] expected a 3-D (unbatched) or 4-D (batched) input [N, C, H, W], got shape ",
             x.shape());
  KILN_CHECK(x.size(-3) == in_, "[Conv2d] input shape ", x.shape(), " has ", x.size(-3),
             " channels, expected in_channels = ", in_, " (weight shape ", weight.shape(), ")");
  kiln::Conv2dFuncOptions o;
  o.stride = opts_.stride.dims();
  o.padding = opts_.padding.dims();
  o.dilation = opts_.dilation.dims();
  o.groups = opts_.groups;
  return conv2d(x, weight, bias, o);
}

std::string Conv2d::extra_repr() const {
  // PyTorch lists padding, dilation and groups only when they differ from the default.
  std::string s =
      str(in_, ", ", out_, ", kernel_size=", tuple2(kernel_), ", stride=", tuple2(opts_.stride));
  if (opts_.padding.h != 0 || opts_.padding.w != 0) s += ", padding=" + tuple2(opts_.padding);
  if (opts_.dilation.h != 1 || opts_.dilation.w != 1) s += ", dilation=" + tuple2(opts_.dilation);
  if (opts_.groups != 1) s += str(", groups=", opts_.groups);
  if (!bias.defined()) s += ", bias=False";
  return s;
}

std::shared_ptr<Module> Conv2d::clone() const {
  auto m = std::make_shared<Conv2d>(in_, out_, kernel_, opts_);
  m->copy_state_from(*this);
  return m;
}

MaxPool2d::MaxPool2d(Size2 kernel_size, MaxPool2dOptions options)
    : kernel_(kernel_size), opts_(options) {
  if (!opts_.stride) opts_.stride = kernel_;
}

Tensor MaxPool2d::forward(const Tensor& x) {
  Pool2dOptions o;
  o.kernel_size = kernel_.dims();
  o.stride = opts_.stride->dims();
  o.padding = opts_.padding.dims();
  o.dilation = opts_.dilation.dims();
  return max_pool2d(x, o);
}

std::string MaxPool2d::extra_repr() const {
  return str("kernel_size=", int_or_tuple(kernel_), ", stride=", int_or_tuple(*opts_.stride),
             ", padding=", int_or_tuple(opts_.padding), ", dilation=", int_or_tuple(opts_.dilation),
             ", ceil_mode=False");
}

std::shared_ptr<Module> MaxPool2d::clone() const {
  auto m = std::make_shared<MaxPool2d>(kernel_, opts_);
  m->copy_state_from(*this);
  return m;
}

AvgPool2d::AvgPool2d(Size2 kernel_size, AvgPool2dOptions options)
    : kernel_(kernel_size), opts_(options) {
  if (!opts_.stride) opts_.stride = kernel_;
}

Tensor AvgPool2d::forward(const Tensor& x) {
  Pool2dOptions o;
  o.kernel_size = kernel_.dims();
  o.stride = opts_.stride->dims();
  o.padding = opts_.padding.dims();
  o.count_include_pad = opts_.count_include_pad;
  return avg_pool2d(x, o);
}

std::string AvgPool2d::extra_repr() const {
  return str("kernel_size=", int_or_tuple(kernel_), ", stride=", int_or_tuple(*opts_.stride),
             ", padding=", int_or_tuple(opts_.padding));
}

std::shared_ptr<Module> AvgPool2d::clone() const {
  auto m = std::make_shared<AvgPool2d>(kernel_, opts_);
  m->copy_state_from(*this);
  return m;
}

namespace {
// Averages `dim` of x (size in) into `out` cells; each cell's rows are
// [floor(i * in / out), ceil((i + 1) * in / out)).
Tensor adaptive_mean(const Tensor& x, int64_t dim, int64_t out) {
  const int64_t in = x.size(dim);
  if (in == out) return x;
  if (in % out == 0) {  // equal cells: one reshape and one mean
    Dims shape = x.shape();
    const auto d = static_cast<size_t>(wrap_dim(dim, x.dim(), "adaptive_avg_pool2d"));
    shape[d] = out;
    shape.insert(d + 1, in / out);
    return mean(reshape(x, shape), Dims{static_cast<int64_t>(d) + 1});
  }
  std::vector<Tensor> cells;
  for (int64_t i = 0; i < out; ++i) {
    const int64_t start = i * in / out, end = ((i + 1) * in + out - 1) / out;
    cells.push_back(mean(slice(x, dim, start, end), Dims{dim}, true));
  }
  return cat(cells, dim);
}
}  // namespace

Tensor functional::adaptive_avg_pool2d(const Tensor& x, Size2 output_size) {
  KILN_CHECK(x.dim() == 3 || x.dim() == 4,
             "[adaptive_avg_pool2d] expects [N, C, H, W] or [C, H, W], got shape ", x.shape());
  KILN_CHECK(output_size.h > 0 && output_size.w > 0,
             "[adaptive_avg_pool2d] output_size must be positive, got ",
             detail::py_tuple(output_size.dims()));
  KILN_CHECK(x.size(-2) > 0 && x.size(-1) > 0,
             "[adaptive_avg_pool2d] the input's spatial dims must be non-empty, got shape ",
             x.shape());
  KILN_CHECK(is_floating(x.dtype()), "[adaptive_avg_pool2d] expects a floating tensor, got dtype ",
             x.dtype());
  return adaptive_mean(adaptive_mean(x, -2, output_size.h), -1, output_size.w);
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Size2 output_size) : output_size_(output_size) {}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) {
  return functional::adaptive_avg_pool2d(x, output_size_);
}

std::string AdaptiveAvgPool2d::extra_repr() const {
  return str("output_size=", int_or_tuple(output_size_));
}

std::shared_ptr<Module> AdaptiveAvgPool2d::clone() const {
  auto m = std::make_shared<AdaptiveAvgPool2d>(output_size_);
  m->copy_state_from(*this);
  return m;
}

}  // namespace kiln::nn
