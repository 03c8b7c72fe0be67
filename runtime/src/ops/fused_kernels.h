// Internal: single-pass CPU kernels of the composites that eager mode runs
// fused (softmax, log_softmax, layer_norm, GELU, SiLU and their backwards),
// on contiguous f32/f64 buffers. Rows are the trailing `n` elements; the work
// is split over the thread pool. Instantiated for float and double.
#pragma once

#include <cstdint>

namespace kiln::ops::fused {

/// y = softmax (or log_softmax when `log`) of each of `rows` rows of n elements.
/// `safe` (softmax only): a row that is all -inf gives zeros, not NaN, as
/// scaled_dot_product_attention's safe softmax (its max shifts by 0 instead of
/// -inf, its zero sum divides by 1).
template <typename T>
void softmax_fwd(const T* x, T* y, int64_t rows, int64_t n, bool log, bool safe = false);
/// gx from the output y and its gradient g (softmax or log_softmax).
template <typename T>
void softmax_bwd(const T* y, const T* g, T* gx, int64_t rows, int64_t n, bool log);

/// y = (x - mean) * rstd * w + b per row (w, b may be null); writes each row's
/// mean and rstd = 1 / sqrt(biased variance + eps) for the backward.
template <typename T>
void layer_norm_fwd(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, int64_t rows,
                    int64_t n, T eps);
/// Gradients of layer_norm: gx always; gw, gb when non-null (w may be null).
template <typename T>
void layer_norm_bwd(const T* x, const T* g, const T* w, const T* mean, const T* rstd, T* gx, T* gw,
                    T* gb, int64_t rows, int64_t n);

/// Batch norm over x [N, C, S] (S: the spatial elements per channel, all
/// contiguous). With `batch_stats`, writes each channel's mean and biased
/// variance to mean/var and normalizes with them; otherwise reads them (the
/// running statistics). Writes rstd = 1 / sqrt(var + eps) for the backward,
/// and y = (x - mean) * rstd * w + b (w, b may be null).
template <typename T>
void batch_norm_fwd(const T* x, const T* w, const T* b, T* y, T* mean, T* var, T* rstd, int64_t N,
                    int64_t C, int64_t S, T eps, bool batch_stats);
/// Gradients of batch_norm: gx, gw, gb when non-null (w may be null). With
/// `batch_stats` gx includes the statistics' terms (training); otherwise it
/// is g * w * rstd (fixed running statistics).
template <typename T>
void batch_norm_bwd(const T* x, const T* g, const T* w, const T* mean, const T* rstd, T* gx, T* gw,
                    T* gb, int64_t N, int64_t C, int64_t S, bool batch_stats);

/// ReLU's gradient from its output: gx = y > 0 ? g : 0 over n elements.
template <typename T>
void relu_bwd(const T* y, const T* g, T* gx, int64_t n);

/// The pointwise composites.
enum class Pointwise { kGeluTanh, kGeluErf, kSilu };
/// y = f(x) over n elements.
template <typename T>
void pointwise_fwd(Pointwise f, const T* x, T* y, int64_t n);
/// gx = g * f'(x) over n elements.
template <typename T>
void pointwise_bwd(Pointwise f, const T* x, const T* g, T* gx, int64_t n);

}  // namespace kiln::ops::fused
