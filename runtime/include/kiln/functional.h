// The user-facing op API: one function per primitive (through dispatch) and
// the composites written with them (they get autograd and tracing for free).
#pragma once

#include <concepts>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

struct Generator;

// ---------------- factories ----------------
Tensor empty(const Dims& shape, DType dtype = DType::f32);
Tensor zeros(const Dims& shape, DType dtype = DType::f32);
Tensor ones(const Dims& shape, DType dtype = DType::f32);
Tensor full(const Dims& shape, const Scalar& value, DType dtype = DType::f32);
/// The same factories made on `device` (filled there: no host buffer copied),
/// as PyTorch's `torch.zeros(shape, device=...)`.
Tensor zeros(const Dims& shape, DType dtype, Device device);
Tensor ones(const Dims& shape, DType dtype, Device device);
Tensor full(const Dims& shape, const Scalar& value, DType dtype, Device device);
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, const Scalar& value);
/// Values start, start+step, ... < end (finite bounds, nonzero step). The dtype
/// is i64 unless a bound is floating.
Tensor arange(const Scalar& end);
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step = 1);
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, DType dtype);
/// `steps` evenly spaced values from start to end inclusive (finite ends).
Tensor linspace(double start, double end, int64_t steps, DType dtype = DType::f32);
/// n x m identity (m = n by default).
Tensor eye(int64_t n, int64_t m = -1, DType dtype = DType::f32);
/// Copies values into a new tensor of the given shape (default: 1-D).
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Dims& shape = {});
/// Wraps external memory without copying; `deleter` (optional) runs when the
/// last view dies. The caller keeps the memory alive otherwise.
Tensor from_blob(void* data, const Dims& shape, DType dtype,
                 std::function<void(void*)> deleter = {});

// ---------------- random (counter-based Philox) ----------------
/// Seeds the default generator and resets its offset.
void manual_seed(uint64_t seed);
/// Uniform in [0, 1).
Tensor rand(const Dims& shape, DType dtype = DType::f32);
/// Standard normal.
Tensor randn(const Dims& shape, DType dtype = DType::f32);
/// rand/randn drawn on `device` (a CUDA device draws with its own Philox
/// kernel: rand gives the CPU's numbers bit for bit, randn within libm ulps).
Tensor rand(const Dims& shape, DType dtype, Device device);
Tensor randn(const Dims& shape, DType dtype, Device device);
/// Integers uniform in [low, high).
Tensor randint(int64_t low, int64_t high, const Dims& shape, DType dtype = DType::i64);
/// 1 with probability p (elementwise), else 0; same dtype as p. Every p must
/// be in [0, 1] (checked eagerly; a traced call cannot read values).
Tensor bernoulli(const Tensor& p);
Tensor rand_like(const Tensor& t);
Tensor randn_like(const Tensor& t);
/// num_samples i64 category indices per row of probs ([C] -> [num_samples], or
/// [N, C] -> [N, num_samples]), each row a finite, non-negative weighting, not
/// necessarily normalized (torch.multinomial). With replacement: inverse CDF of
/// one uniform per sample; without: the num_samples largest u^(1/p) over one
/// uniform per category (needs num_samples <= the row's nonzero weights). The
/// f64 uniforms are Philox draws (same numbers eager and compiled) from
/// `generator` (default: the default generator; another one is eager only).
/// Bad weights raise kiln::Error from the kernel, in compiled calls too.
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false,
                   Generator* generator = nullptr);

// ---------------- unary elementwise ----------------
#define KILN_UNARY_DECL(name) Tensor name(const Tensor& x);
KILN_UNARY_DECL(neg)
KILN_UNARY_DECL(abs)
KILN_UNARY_DECL(exp)
KILN_UNARY_DECL(log)
KILN_UNARY_DECL(log1p)
KILN_UNARY_DECL(sqrt)
KILN_UNARY_DECL(rsqrt)
KILN_UNARY_DECL(tanh)
KILN_UNARY_DECL(sigmoid)
KILN_UNARY_DECL(relu)
KILN_UNARY_DECL(sin)
KILN_UNARY_DECL(cos)
KILN_UNARY_DECL(erf)
KILN_UNARY_DECL(sign)
KILN_UNARY_DECL(logical_not)
#undef KILN_UNARY_DECL

// ---------------- binary elementwise ----------------
#define KILN_BINARY_DECL(name)                   \
  Tensor name(const Tensor& a, const Tensor& b); \
  Tensor name(const Tensor& a, const Scalar& b); \
  Tensor name(const Scalar& a, const Tensor& b);
KILN_BINARY_DECL(add)
KILN_BINARY_DECL(sub)
KILN_BINARY_DECL(mul)
KILN_BINARY_DECL(div)
KILN_BINARY_DECL(pow)
KILN_BINARY_DECL(maximum)
KILN_BINARY_DECL(minimum)
KILN_BINARY_DECL(eq)
KILN_BINARY_DECL(ne)
KILN_BINARY_DECL(lt)
KILN_BINARY_DECL(le)
KILN_BINARY_DECL(gt)
KILN_BINARY_DECL(ge)
KILN_BINARY_DECL(logical_and)
KILN_BINARY_DECL(logical_or)
#undef KILN_BINARY_DECL

/// cond ? a : b elementwise (broadcast, promoted).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Scalar& b);
Tensor where(const Tensor& cond, const Scalar& a, const Tensor& b);
Tensor where(const Tensor& cond, const Scalar& a, const Scalar& b);
/// Converts to another dtype (a no-op returning x when equal).
Tensor cast(const Tensor& x, DType dtype);

Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, const Scalar& b);
Tensor operator-(const Tensor& a, const Scalar& b);
Tensor operator*(const Tensor& a, const Scalar& b);
Tensor operator/(const Tensor& a, const Scalar& b);
Tensor operator+(const Scalar& a, const Tensor& b);
Tensor operator-(const Scalar& a, const Tensor& b);
Tensor operator*(const Scalar& a, const Tensor& b);
Tensor operator/(const Scalar& a, const Tensor& b);

// ---------------- reductions ----------------
/// Sum over `dims` (all dims when empty). Integer and bool inputs sum to i64.
Tensor sum(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
/// Maximum / minimum values over `dims` (all when empty).
Tensor amax(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
/// Index (i64) of the first maximum along `dim`; over the flattened tensor if dim is nullopt.
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor mean(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
/// Variance with Bessel's correction `correction` (1 = unbiased, as torch.var).
Tensor var(const Tensor& x, const Dims& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, const Dims& dims = {}, int64_t correction = 1, bool keepdim = false);
/// PyTorch's `unbiased` spelling: var(x, dims, unbiased ? 1 : 0, keepdim). Only
/// a bool selects it (`var(x, {1}, false)`); an integer is a correction.
template <std::same_as<bool> B>
Tensor var(const Tensor& x, const Dims& dims, B unbiased, bool keepdim = false) {
  return var(x, dims, int64_t{unbiased ? 1 : 0}, keepdim);
}
template <std::same_as<bool> B>
Tensor var(const Tensor& x, B unbiased) {
  return var(x, Dims{}, int64_t{unbiased ? 1 : 0}, false);
}
template <std::same_as<bool> B>
Tensor std(const Tensor& x, const Dims& dims, B unbiased, bool keepdim = false) {
  return std(x, dims, int64_t{unbiased ? 1 : 0}, keepdim);
}
template <std::same_as<bool> B>
Tensor std(const Tensor& x, B unbiased) {
  return std(x, Dims{}, int64_t{unbiased ? 1 : 0}, false);
}
Tensor logsumexp(const Tensor& x, const Dims& dims, bool keepdim = false);
/// One-dim spellings (sum(x, 1), amax(x, -1, true), var(x, 0)); braced lists
/// such as sum(x, {0, 1}) still take the Dims overloads.
template <std::integral I>
requires(!std::same_as<I, bool>) Tensor sum(const Tensor& x, I dim, bool keepdim = false) {
  return sum(x, Dims{static_cast<int64_t>(dim)}, keepdim);
}
template <std::integral I>
requires(!std::same_as<I, bool>) Tensor mean(const Tensor& x, I dim, bool keepdim = false) {
  return mean(x, Dims{static_cast<int64_t>(dim)}, keepdim);
}
template <std::integral I>
requires(!std::same_as<I, bool>) Tensor amax(const Tensor& x, I dim, bool keepdim = false) {
  return amax(x, Dims{static_cast<int64_t>(dim)}, keepdim);
}
template <std::integral I>
requires(!std::same_as<I, bool>) Tensor amin(const Tensor& x, I dim, bool keepdim = false) {
  return amin(x, Dims{static_cast<int64_t>(dim)}, keepdim);
}
template <std::integral I>
requires(!std::same_as<I, bool>) Tensor logsumexp(const Tensor& x, I dim, bool keepdim = false) {
  return logsumexp(x, Dims{static_cast<int64_t>(dim)}, keepdim);
}
template <std::integral I>
requires(!std::same_as<I, bool>) Tensor
    var(const Tensor& x, I dim, int64_t correction = 1, bool keepdim = false) {
  return var(x, Dims{static_cast<int64_t>(dim)}, correction, keepdim);
}
template <std::integral I>
requires(!std::same_as<I, bool>) Tensor
    std(const Tensor& x, I dim, int64_t correction = 1, bool keepdim = false) {
  return std(x, Dims{static_cast<int64_t>(dim)}, correction, keepdim);
}
/// (values, i64 indices) of the maxima / minima along dim, as torch.max(x, dim):
/// the first extreme's index (NaN counts as the extreme); the gradient goes to it.
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
/// torch.linalg.vector_norm: (sum |x|^ord)^(1/ord) over `dims` (all when empty)
/// of a floating x; ord = inf / -inf: the largest / smallest |x|; ord = 0: the
/// number of nonzeros. The gradient at a zero norm is 0, as in PyTorch.
Tensor vector_norm(const Tensor& x, double ord = 2.0, const Dims& dims = {}, bool keepdim = false);
/// torch.norm with a p-norm: vector_norm(x, p, dims, keepdim).
Tensor norm(const Tensor& x, double p = 2.0, const Dims& dims = {}, bool keepdim = false);

// ---------------- scans and ordering ----------------
/// Running sum along dim (integer and bool inputs sum in i64, as torch.cumsum).
Tensor cumsum(const Tensor& x, int64_t dim);
/// Running product along dim (integers in i64). Its gradient is exact where x
/// has zeros, as PyTorch's.
Tensor cumprod(const Tensor& x, int64_t dim);
/// (values, i64 indices) of x sorted along dim; NaN sorts as the largest value.
/// Equal values always keep their input order, so stable = false gives the
/// same (stable) order as stable = true (PyTorch then promises no order).
std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false,
                                bool stable = false);
/// The indices of sort(x, dim, descending, stable).
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
/// The k largest (largest = false: smallest) entries along dim and their i64
/// indices, in sorted order; of equal values the lower index comes first.
/// `sorted` is accepted for PyTorch's spelling (results are always sorted).
std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                                bool sorted = true);

// ---------------- linear algebra, convolution, pooling ----------------
/// Matrix product with NumPy semantics: 1-D operands, batched and broadcast batch dims.
Tensor matmul(const Tensor& a, const Tensor& b);
/// Batched matrix product of [B, n, m] and [B, m, p] (no broadcasting, as torch.bmm).
Tensor bmm(const Tensor& a, const Tensor& b);
/// beta * input + alpha * bmm(batch1, batch2); input broadcasts to [B, n, p]
/// and is ignored when beta = 0 (its NaNs too), as torch.baddbmm.
Tensor baddbmm(const Tensor& input, const Tensor& batch1, const Tensor& batch2,
               const Scalar& beta = 1, const Scalar& alpha = 1);
/// Outer product of two 1-D tensors: [n] x [m] -> [n, m].
Tensor outer(const Tensor& a, const Tensor& b);
/// Einstein summation (torch.einsum) for a subset: labels are letters, each at
/// most once per operand (no traces/diagonals) and once in the output; no
/// "..."; without "->" the output is the labels seen once, sorted. Operands
/// are contracted left to right with permutes, sums and batched matmuls
/// ("ij,jk->ik", "bij,bjk->bik", "bhld,bhsd->bhls", "i,j->ij", "ij->ji",
/// "ij->i", "ij,ij->"). Anything else raises kiln::Error.
Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands);

/// Geometry of the functional conv2d (PyTorch's argument names; libtorch's name:
/// nn::Conv2dOptions configures the nn::Conv2d module).
struct Conv2dFuncOptions {
  Dims stride = {1, 1};
  Dims padding = {0, 0};
  Dims dilation = {1, 1};
  int64_t groups = 1;
};
/// x [N, C, H, W] * weight [O, C/groups, kH, kW] (+ bias [O]) -> [N, O, H', W'].
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
              const Conv2dFuncOptions& opts = {});

/// Geometry of 2-D pooling; an empty stride means stride = kernel_size.
struct Pool2dOptions {
  Dims kernel_size = {2, 2};
  Dims stride = {};
  Dims padding = {0, 0};
  Dims dilation = {1, 1};         ///< max_pool2d only
  bool count_include_pad = true;  ///< avg_pool2d only
};
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& opts = {});
/// max_pool2d plus the i64 index of each maximum in its (flattened H*W) input plane.
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const Pool2dOptions& opts = {});
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& opts = {});

// ---------------- movement ----------------
Tensor reshape(const Tensor& x, const Dims& shape);
Tensor permute(const Tensor& x, const Dims& dims);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor expand(const Tensor& x, const Dims& shape);
/// x[start:end:step] along dim, Python's bounds (negative from the end, clamped).
Tensor slice(const Tensor& x, int64_t dim, int64_t start = 0,
             int64_t end = std::numeric_limits<int64_t>::max(), int64_t step = 1);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor squeeze(const Tensor& x);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
/// A contiguous copy (always a new buffer; contiguous() returns x when already so).
Tensor copy(const Tensor& x);
/// Constant padding. `pads` holds (before, after) pairs starting from the LAST
/// dim, like torch.nn.functional.pad; negative values crop.
Tensor pad(const Tensor& x, const Dims& pads, double value = 0.0);
Tensor cat(const std::vector<Tensor>& xs, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& xs, int64_t dim = 0);
/// out[i][j] = x[index[i][j]][j] for dim 0 (torch.gather). Indices (i64/i32)
/// must lie in [0, x.size(dim)): negative ones are errors, as in PyTorch.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
/// The entries of x at the 0-d/1-D `index` along dim; indices in [0, size).
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
/// A copy of x with src added at `index` along dim (torch.scatter_add);
/// indices in [0, x.size(dim)).
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);
/// x repeated `repeats[i]` times along dim i (torch.Tensor.repeat); extra
/// leading repeats add dims.
Tensor repeat(const Tensor& x, const Dims& repeats);
/// torch.tile: repeat, with `reps` padded by leading 1s when shorter than x's rank.
Tensor tile(const Tensor& x, const Dims& reps);
/// Rolls elements by shifts[i] along dims[i] (wrapping around); with no dims,
/// rolls the flattened tensor by shifts[0] and restores the shape.
Tensor roll(const Tensor& x, const Dims& shifts, const Dims& dims = {});
/// Reverses the order along each of `dims`.
Tensor flip(const Tensor& x, const Dims& dims);
/// Views of x along dim, each split_size long (the last may be shorter).
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
/// Views of x along dim with the given lengths (they must sum to x.size(dim)).
/// A one-element braced list `{n}` picks the split_size overload: use
/// split_with_sizes for it.
std::vector<Tensor> split(const Tensor& x, const Dims& split_sizes, int64_t dim = 0);
std::vector<Tensor> split_with_sizes(const Tensor& x, const Dims& split_sizes, int64_t dim = 0);
/// At most `chunks` views of x along dim, each ceil(size / chunks) long.
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
/// The slices x.select(dim, i) for every i.
std::vector<Tensor> unbind(const Tensor& x, int64_t dim = 0);
/// i64 [n, x.dim()] indices of x's nonzero elements in row-major order. The
/// result's shape depends on values: eager only (a traced call raises kiln::Error).
Tensor nonzero(const Tensor& x);
/// x's elements where the bool `mask` (broadcast together) is true, as a 1-D
/// tensor in row-major order (PyTorch's x[mask]); differentiable in x. Eager
/// only, as nonzero.
Tensor masked_select(const Tensor& x, const Tensor& mask);
/// i64 [..., num_classes] one-hot rows of integer `index` (F.one_hot); each
/// index must lie in [0, num_classes) (checked by the kernel, compiled too);
/// num_classes < 0 uses max(index) + 1 (reads values: eager only).
Tensor one_hot(const Tensor& index, int64_t num_classes = -1);

// ---------------- composites ----------------
Tensor square(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor clamp(const Tensor& x, const Scalar& lo, const Scalar& hi);
Tensor clamp_min(const Tensor& x, const Scalar& lo);
Tensor clamp_max(const Tensor& x, const Scalar& hi);
/// clamp with tensor bounds (broadcast, promoted; an undefined bound is no bound).
Tensor clamp(const Tensor& x, const Tensor& lo, const Tensor& hi);
Tensor clamp_min(const Tensor& x, const Tensor& lo);
Tensor clamp_max(const Tensor& x, const Tensor& hi);
/// Aliases of clamp (torch.clip).
Tensor clip(const Tensor& x, const Scalar& lo, const Scalar& hi);
Tensor clip(const Tensor& x, const Tensor& lo, const Tensor& hi);
/// Bool tensors: NaN / +-inf / finite elements (integers are always finite).
Tensor isnan(const Tensor& x);
Tensor isinf(const Tensor& x);
Tensor isfinite(const Tensor& x);
/// Replaces NaN by `nan`, +inf by `posinf` and -inf by `neginf` (defaults: 0,
/// the dtype's largest and lowest finite values), as torch.nan_to_num.
Tensor nan_to_num(const Tensor& x, std::optional<double> nan = 0.0,
                  std::optional<double> posinf = std::nullopt,
                  std::optional<double> neginf = std::nullopt);
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value);
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
/// GELU; approximate = "none" (erf form) or "tanh".
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
Tensor silu(const Tensor& x);
/// Normalizes over the trailing dims `normalized_shape`, then applies weight/bias if defined.
Tensor layer_norm(const Tensor& x, const Dims& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);
/// Eager CPU calls of softmax, log_softmax, layer_norm, batch_norm, gelu and silu
/// (f32/f64), and ReLU's gradient, run as one fused kernel each, forward and backward
/// (default on); off, they run as their primitive ops, as traced. Process-wide.
void set_eager_fusion(bool enabled);
bool eager_fusion_enabled();
/// x @ weight^T + bias (weight is [out, in], as torch.nn.functional.linear).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
/// Zeroes elements with probability p and scales the rest by 1/(1-p) when training.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true);
/// Rows of `weight` [num_embeddings, dim] picked by the integer `input` (any
/// shape), each in [0, num_embeddings): negative indices are errors. Argument
/// order of torch.nn.functional.embedding(input, weight).
Tensor embedding(const Tensor& input, const Tensor& weight);
/// x / max(||x||_p along dim, eps) (torch.nn.functional.normalize).
Tensor normalize(const Tensor& x, double p = 2.0, int64_t dim = 1, double eps = 1e-12);
/// Cosine similarity of a and b (broadcast) along dim, each norm clamped at
/// eps (torch.nn.functional.cosine_similarity).
Tensor cosine_similarity(const Tensor& a, const Tensor& b, int64_t dim = 1, double eps = 1e-8);

/// How losses combine per-element values.
enum class Reduction { kNone, kMean, kSum };

/// Options of cross_entropy / nll_loss.
struct CrossEntropyOptions {
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  Reduction reduction = Reduction::kMean;
};
/// logits [N, C] (or [N, C, d...]) and class indices [N] (or [N, d...]) in
/// [0, C), or equal to ignore_index (skipped); any other value, negative ones
/// included, is an error. Class-probability targets have the logits' shape.
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     const CrossEntropyOptions& opts = {});
/// Negative log-likelihood of log-probabilities [N, C] at class indices [N]
/// (in [0, C) or ignore_index, as cross_entropy).
Tensor nll_loss(const Tensor& log_probs, const Tensor& target,
                const CrossEntropyOptions& opts = {});
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction r = Reduction::kMean);
/// BCE of probabilities in [0, 1]; log terms are clamped at -100 like PyTorch.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target,
                            Reduction r = Reduction::kMean);
/// Numerically stable BCE on logits.
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        Reduction r = Reduction::kMean);
/// softmax(q k^T * scale + mask) v over the last two dims. `attn_mask` is
/// boolean (true = keep) or additive float; `is_causal` masks the future.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask = {}, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt);

/// Bool tensor (a and b broadcast) of torch.isclose: true where a == b (equal
/// infinities included), or both are finite and |a - b| <= atol + rtol * |b|,
/// or, with equal_nan, both are NaN. Compared in f64; rtol, atol >= 0.
Tensor isclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8,
               bool equal_nan = false);
/// True if isclose holds everywhere (torch.allclose). Reads values (eager only).
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8,
              bool equal_nan = false);
/// True if a and b have the same shape and equal elements (torch.equal): dtypes
/// may differ (compared by value), NaN equals nothing. Reads values (eager only).
bool equal(const Tensor& a, const Tensor& b);

// ---------------- indexing with tensors (libtorch's x.index / x.index_put_) ----------------
/// x[indices] for one index tensor, as PyTorch's x[t]: a bool mask whose shape
/// equals x's leading dims selects the rows where it is true, [count, rest...]
/// in row-major order (masked_select's values; eager only: the count depends on
/// values); an integer tensor picks entries along dim 0 (negative ones count
/// from the end), [t.shape..., rest...]. Differentiable in x (the gradient
/// scatters back). Other index lists (slices, several tensors) are kiln::Errors.
Tensor index(const Tensor& x, const std::vector<Tensor>& indices);
/// x with x[mask] = values (torch.index_put, accumulate=false): `values`
/// broadcasts to the selected shape [count, rest...] (a scalar fills). A bool
/// mask only, as index(); differentiable in x and values; eager only.
Tensor index_put(const Tensor& x, const std::vector<Tensor>& indices, const Tensor& values);
Tensor index_put(const Tensor& x, const std::vector<Tensor>& indices, const Scalar& value);

/// Comparisons as operators (libtorch's a < b): bool tensors, broadcast.
#define KILN_COMPARE_OP_DECL(op)                        \
  Tensor operator op(const Tensor& a, const Tensor& b); \
  Tensor operator op(const Tensor& a, const Scalar& b); \
  Tensor operator op(const Scalar& a, const Tensor& b);
KILN_COMPARE_OP_DECL(<)
KILN_COMPARE_OP_DECL(<=)
KILN_COMPARE_OP_DECL(>)
KILN_COMPARE_OP_DECL(>=)
KILN_COMPARE_OP_DECL(==)
KILN_COMPARE_OP_DECL(!=)
#undef KILN_COMPARE_OP_DECL
/// Logical and / or / not of bool tensors (PyTorch's (a > 0) & (b < 1), ~mask);
/// other dtypes are kiln::Errors (kiln has no bitwise integer ops).
Tensor operator&(const Tensor& a, const Tensor& b);
Tensor operator|(const Tensor& a, const Tensor& b);
Tensor operator~(const Tensor& x);

/// Sums g over broadcast dims so it has `shape` (the reverse of expand).
Tensor sum_to(const Tensor& g, const Dims& shape);
/// Broadcast shape of two shapes (NumPy rules); `op` names the caller in errors.
Dims broadcast_shapes(const Dims& a, const Dims& b, const char* op);
/// Maps a possibly negative dim into [0, rank); errors name `op`.
int64_t wrap_dim(int64_t dim, int64_t rank, const char* op);

}  // namespace kiln
