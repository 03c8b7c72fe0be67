// LayerNorm, BatchNorm1d/2d and functional::batch_norm.
#include "kiln/nn/norm.h"

#include "kiln/autograd.h"
#include "kiln/functional.h"
#include "kiln/nn/init.h"
#include "ops/fused_composites.h"

namespace kiln::nn {

namespace functional {

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
  KILN_CHECK(x.dim() >= 2,
             "[batch_norm] expected an input [N, C, ...] with at least 2 dims, got shape ",
             x.shape());
  KILN_CHECK(is_floating(x.dtype()), "[batch_norm] expected a floating input, got ", x.dtype());
  const int64_t C = x.size(1);
  auto check_c = [&](const Tensor& t, const char* what) {
    KILN_CHECK(!t.defined() || (t.dim() == 1 && t.size(0) == C), "[batch_norm] ", what, " shape ",
               t.defined() ? t.shape() : Dims{}, " does not match the ", C,
               " channels of input shape ", x.shape());
  };
  check_c(running_mean, "running_mean");
  check_c(running_var, "running_var");
  check_c(weight, "weight");
  check_c(bias, "bias");
  KILN_CHECK(running_mean.defined() == running_var.defined(),
             "[batch_norm] running_mean and running_var must both be given or both omitted");
  Dims red{0};
  Dims bshape(static_cast<size_t>(x.dim()), 1);
  bshape[1] = C;
  for (int64_t d = 2; d < x.dim(); ++d) red.push_back(d);
  auto per_channel = [&](const Tensor& t) { return reshape(cast(t, x.dtype()), bshape); };

  const int64_t n = C == 0 ? 0 : x.numel() / C;
  KILN_CHECK(!training || n > 1,
             "[batch_norm] expected more than 1 value per channel when training, got "
             "input shape ",
             x.shape());
  KILN_CHECK(training || running_mean.defined(),
             "[batch_norm] evaluation (training=false) needs running_mean and running_var");
  // The batch's mean and biased variance update the running statistics.
  auto update_running = [&](const Tensor& mu, const Tensor& v) {
    if (!training || !running_mean.defined()) return;
    NoGradGuard ng;
    const double unbias = static_cast<double>(n) / static_cast<double>(n - 1);
    Tensor rm = running_mean, rv = running_var;  // handles onto the caller's buffers
    rm.mul_(1.0 - momentum).add_(reshape(mu.detach(), {C}), momentum);
    rv.mul_(1.0 - momentum).add_(reshape(v.detach(), {C}), momentum * unbias);
  };
  // Eager CPU f32/f64: one pass forward, one backward (ops/fused_composites.h).
  if (auto f = ops::fused_batch_norm(x, running_mean, running_var, weight, bias, training, eps)) {
    update_running(f->mean, f->var);
    return f->y;
  }
  Tensor y;
  if (training) {
    Tensor mu = mean(x, red, true);
    Tensor centered = x - mu;
    Tensor v = mean(centered * centered, red, true);  // biased, for normalising
    y = centered * rsqrt(v + eps);
    update_running(mu, v);
  } else {
    y = (x - per_channel(running_mean)) * rsqrt(per_channel(running_var) + eps);
  }
  if (weight.defined()) y = y * per_channel(weight);
  if (bias.defined()) y = y + per_channel(bias);
  return y;
}

}  // namespace functional

LayerNorm::LayerNorm(Dims normalized_shape, double eps, bool elementwise_affine, bool with_bias)
    : shape_(std::move(normalized_shape)),
      eps_(eps),
      affine_(elementwise_affine),
      with_bias_(with_bias) {
  KILN_CHECK(!shape_.empty(), "[LayerNorm] normalized_shape must have at least one dim");
  for (int64_t s : shape_)
    KILN_CHECK(s > 0, "[LayerNorm] normalized_shape must be positive, got ", shape_);
  register_parameter("weight", weight, affine_ ? empty(shape_) : Tensor());
  register_parameter("bias", bias, affine_ && with_bias_ ? empty(shape_) : Tensor());
  reset_parameters();
}

void LayerNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor LayerNorm::forward(const Tensor& x) {
  const size_t nd = shape_.size();
  bool match = x.shape().size() >= nd;
  for (size_t i = 0; match && i < nd; ++i)
    match = x.shape()[x.shape().size() - nd + i] == shape_[i];
  KILN_CHECK(match, "[LayerNorm] input shape ", x.shape(), " does not end with normalized_shape ",
             shape_);
  return layer_norm(x, shape_, weight, bias, eps_);
}

std::string LayerNorm::extra_repr() const {
  return detail::py_tuple(shape_) + ", eps=" + detail::py_float(eps_) +
         ", elementwise_affine=" + detail::py_bool(affine_);
}

std::shared_ptr<Module> LayerNorm::clone() const {
  auto m = std::make_shared<LayerNorm>(shape_, eps_, affine_, with_bias_);
  m->copy_state_from(*this);
  return m;
}

BatchNormBase::BatchNormBase(const char* layer, int64_t num_features, BatchNormOptions options,
                             Dims input_dims, const char* expected)
    : Module(layer),
      num_features_(num_features),
      opts_(options),
      input_dims_(std::move(input_dims)),
      expected_(expected) {
  KILN_CHECK(num_features > 0, "[", layer, "] num_features must be positive, got ", num_features);
  KILN_CHECK(!opts_.momentum || (*opts_.momentum >= 0.0 && *opts_.momentum <= 1.0), "[", layer,
             "] momentum must be in [0, 1], got ", opts_.momentum.value_or(0.0));
  const int64_t C = num_features;
  register_parameter("weight", weight, opts_.affine ? empty({C}) : Tensor());
  register_parameter("bias", bias, opts_.affine ? empty({C}) : Tensor());
  const bool track = opts_.track_running_stats;
  register_buffer("running_mean", running_mean, track ? zeros({C}) : Tensor());
  register_buffer("running_var", running_var, track ? ones({C}) : Tensor());
  register_buffer("num_batches_tracked", num_batches_tracked,
                  track ? zeros({}, DType::i64) : Tensor());
  reset_parameters();
}

void BatchNormBase::reset_running_stats() {
  if (!opts_.track_running_stats) return;
  init::zeros_(running_mean);
  init::ones_(running_var);
  init::zeros_(num_batches_tracked);
}

void BatchNormBase::reset_parameters() {
  reset_running_stats();
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor BatchNormBase::forward(const Tensor& x) {
  bool rank_ok = false;
  for (int64_t d : input_dims_) rank_ok = rank_ok || x.dim() == d;
  KILN_CHECK(rank_ok, "[", name(), "] expected ", expected_, " input, got shape ", x.shape());
  KILN_CHECK(x.size(1) == num_features_, "[", name(), "] input shape ", x.shape(), " has ",
             x.size(1), " channels (dim 1), expected num_features = ", num_features_);
  double factor = opts_.momentum.value_or(0.0);
  if (is_training() && opts_.track_running_stats) {
    NoGradGuard ng;
    num_batches_tracked.add_(1);
    if (!opts_.momentum)  // cumulative moving average
      factor = 1.0 / static_cast<double>(num_batches_tracked.item<int64_t>());
  }
  // Batch statistics while training, or always when no running stats are kept.
  const bool use_batch = is_training() || !opts_.track_running_stats;
  const bool update = is_training() && opts_.track_running_stats;
  return functional::batch_norm(x, update || !use_batch ? running_mean : Tensor(),
                                update || !use_batch ? running_var : Tensor(), weight, bias,
                                use_batch, factor, opts_.eps);
}

std::string BatchNormBase::extra_repr() const {
  return str(num_features_, ", eps=", detail::py_float(opts_.eps), ", momentum=",
             opts_.momentum ? detail::py_float(*opts_.momentum) : std::string("None"),
             ", affine=", detail::py_bool(opts_.affine),
             ", track_running_stats=", detail::py_bool(opts_.track_running_stats));
}

BatchNorm1d::BatchNorm1d(int64_t num_features, BatchNormOptions options)
    : BatchNormBase("BatchNorm1d", num_features, options, {2, 3}, "a 2-D [N, C] or 3-D [N, C, L]") {
}

std::shared_ptr<Module> BatchNorm1d::clone() const {
  auto m = std::make_shared<BatchNorm1d>(num_features(), options());
  m->copy_state_from(*this);
  return m;
}

BatchNorm2d::BatchNorm2d(int64_t num_features, BatchNormOptions options)
    : BatchNormBase("BatchNorm2d", num_features, options, {4}, "a 4-D [N, C, H, W]") {}

std::shared_ptr<Module> BatchNorm2d::clone() const {
  auto m = std::make_shared<BatchNorm2d>(num_features(), options());
  m->copy_state_from(*this);
  return m;
}

}  // namespace kiln::nn
