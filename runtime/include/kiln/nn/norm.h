// Normalisation layers: LayerNorm, BatchNorm1d, BatchNorm2d, and the
// functional batch_norm they share.
#pragma once

#include <initializer_list>
#include <optional>

#include "kiln/nn/module.h"

namespace kiln::nn {

namespace functional {
/// Batch normalisation over every dim but 1 (channels). With `training`, uses
/// the batch mean and biased variance and, when running stats are given,
/// updates them in place (no grad): r = (1 - momentum) r + momentum * batch
/// stat, with the unbiased variance. Without `training`, uses the running stats.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = {}, const Tensor& bias = {}, bool training = false,
                  double momentum = 0.1, double eps = 1e-5);
}  // namespace functional

/// Normalises over the trailing `normalized_shape` dims (biased variance), then
/// applies weight (init 1) and bias (init 0) when elementwise_affine.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(Dims normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     bool bias = true);
  /// Normalises over the last dim of size `normalized_shape`.
  explicit LayerNorm(int64_t normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     bool bias = true)
      : LayerNorm(Dims{normalized_shape}, eps, elementwise_affine, bias) {}
  /// LayerNorm({2, 3}): an exact match, so braces never pick LayerNorm(int64_t, double).
  LayerNorm(std::initializer_list<int64_t> normalized_shape, double eps = 1e-5,
            bool elementwise_affine = true, bool bias = true)
      : LayerNorm(Dims(normalized_shape), eps, elementwise_affine, bias) {}
  Tensor forward(const Tensor& x) override;
  void reset_parameters();
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone() const override;

  Tensor weight;  ///< normalized_shape, undefined without elementwise_affine
  Tensor bias;    ///< normalized_shape, undefined without elementwise_affine or bias

 private:
  Dims shape_;
  double eps_;
  bool affine_, with_bias_;
};

/// BatchNorm hyper-parameters. momentum = nullopt uses a cumulative average
/// (factor 1 / num_batches_tracked), as PyTorch's momentum=None.
struct BatchNormOptions {
  double eps = 1e-5;
  std::optional<double> momentum = 0.1;
  bool affine = true;
  bool track_running_stats = true;
};

/// Shared implementation of BatchNorm1d/2d; `input_dims` lists the accepted ranks.
class BatchNormBase : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  /// Resets running_mean to 0, running_var to 1, num_batches_tracked to 0.
  void reset_running_stats();
  void reset_parameters();
  std::string extra_repr() const override;

  int64_t num_features() const { return num_features_; }
  const BatchNormOptions& options() const { return opts_; }
  Tensor weight;               ///< [C] init 1 (affine only)
  Tensor bias;                 ///< [C] init 0 (affine only)
  Tensor running_mean;         ///< [C] buffer (track_running_stats only)
  Tensor running_var;          ///< [C] buffer
  Tensor num_batches_tracked;  ///< i64 scalar buffer

 protected:
  /// `layer` names the class in errors raised by this constructor.
  BatchNormBase(const char* layer, int64_t num_features, BatchNormOptions options, Dims input_dims,
                const char* expected);

 private:
  int64_t num_features_;
  BatchNormOptions opts_;
  Dims input_dims_;
  const char* expected_;
};

/// BatchNorm over [N, C] or [N, C, L] (statistics per channel C).
class BatchNorm1d : public BatchNormBase {
 public:
  explicit BatchNorm1d(int64_t num_features, BatchNormOptions options = {});
  std::shared_ptr<Module> clone() const override;
};

/// BatchNorm over [N, C, H, W] (statistics per channel C).
class BatchNorm2d : public BatchNormBase {
 public:
  explicit BatchNorm2d(int64_t num_features, BatchNormOptions options = {});
  std::shared_ptr<Module> clone() const override;
};

}  // namespace kiln::nn
