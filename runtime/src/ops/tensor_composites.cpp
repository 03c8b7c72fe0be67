// Composites over tensor layout and values that PyTorch users reach for:
// flip, roll, repeat/tile, split/chunk/unbind, one_hot, nonzero/masked_select,
// clamp with tensor bounds, isnan/isinf/isfinite, nan_to_num and max/min along
// a dim. Written with primitives, so autograd and tracing come for free; the
// value-dependent ones (nonzero, masked_select) are eager only.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kiln/autograd.h"
#include "ops/helpers.h"

namespace kiln {
namespace {

// Wrapped, duplicate-free dims; errors name `op`.
Dims unique_dims(const Dims& dims, int64_t rank, const char* op) {
  Dims out;
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, rank, op);
    KILN_CHECK(std::find(out.begin(), out.end(), w) == out.end(), "[", op, "] dim ", w,
               " appears multiple times in the list of dims ", dims);
    out.push_back(w);
  }
  return out;
}

// Value-dependent output shapes cannot be traced.
void check_eager(const Tensor& t, const char* op) {
  KILN_CHECK(!t.is_symbolic(), "[", op,
             "] is not traceable: its output shape depends on the "
             "input's values, so it cannot run inside kiln::compile (call it eagerly)");
}

// The largest finite value of a floating dtype.
double finite_max(DType dt) {
  switch (dt) {
    case DType::f64:
      return std::numeric_limits<double>::max();
    case DType::f16:
      return 65504.0;
    case DType::bf16:
      return 3.3895313892515355e38;
    default:
      return std::numeric_limits<float>::max();
  }
}

}  // namespace

Tensor flip(const Tensor& x, const Dims& dims) {
  Tensor r = x;
  for (int64_t d : unique_dims(dims, x.dim(), "flip")) {
    if (x.dim() == 0 || x.size(d) < 2) continue;
    r = index_select(r, d, arange(x.size(d) - 1, -1, -1));
  }
  return r.is_same(x) ? copy(x) : r;
}

Tensor roll(const Tensor& x, const Dims& shifts, const Dims& dims) {
  if (dims.empty()) {
    KILN_CHECK(shifts.size() == 1, "[roll] without dims, shifts must hold one value, got ", shifts);
    return reshape(roll(reshape(x, {-1}), shifts, {0}), x.shape());
  }
  KILN_CHECK(shifts.size() == dims.size(), "[roll] shifts ", shifts, " and dims ", dims,
             " must have the same length");
  Tensor r = x;
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], x.dim(), "roll");
    const int64_t n = x.dim() == 0 ? 1 : x.size(d);
    if (n == 0) continue;
    const int64_t s = ((shifts[i] % n) + n) % n;
    if (s == 0) continue;
    r = cat({narrow(r, d, n - s, s), narrow(r, d, 0, n - s)}, d);
  }
  return r.is_same(x) ? copy(x) : r;
}

Tensor repeat(const Tensor& x, const Dims& repeats) {
  const int64_t rank = static_cast<int64_t>(repeats.size());
  KILN_CHECK(rank >= x.dim(), "[repeat] the number of repeats (", rank,
             ") cannot be smaller than the number of dims of x (shape ", x.shape(), ")");
  // x as [1, s0, 1, s1, ...], expanded to [r0, s0, r1, s1, ...], then merged pairwise.
  Dims ones_shape, full_shape, out_shape;
  for (int64_t i = 0; i < rank; ++i) {
    const int64_t r = repeats[static_cast<size_t>(i)];
    KILN_CHECK(r >= 0, "[repeat] repeats must be non-negative, got ", repeats);
    const int64_t s = i < rank - x.dim() ? 1 : x.size(i - (rank - x.dim()));
    ones_shape.push_back(1);
    ones_shape.push_back(s);
    full_shape.push_back(r);
    full_shape.push_back(s);
    out_shape.push_back(r * s);
  }
  return reshape(expand(reshape(x, ones_shape), full_shape), out_shape);
}

Tensor tile(const Tensor& x, const Dims& reps) {
  Dims r;
  for (int64_t i = static_cast<int64_t>(reps.size()); i < x.dim(); ++i) r.push_back(1);
  for (int64_t v : reps) r.push_back(v);
  return repeat(x, r);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  KILN_CHECK(x.dim() > 0, "[split] cannot split a 0-d tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  const int64_t n = x.size(d);
  KILN_CHECK(split_size > 0 || (split_size == 0 && n == 0),
             "[split] split_size must be positive, "
             "got ",
             split_size, " for dimension ", d, " of size ", n);
  if (n == 0) return {x};
  std::vector<Tensor> out;
  for (int64_t at = 0; at < n; at += split_size)
    out.push_back(narrow(x, d, at, std::min(split_size, n - at)));
  return out;
}

std::vector<Tensor> split_with_sizes(const Tensor& x, const Dims& split_sizes, int64_t dim) {
  KILN_CHECK(x.dim() > 0, "[split] cannot split a 0-d tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : split_sizes) {
    KILN_CHECK(s >= 0, "[split] split sizes must be non-negative, got ", split_sizes);
    total += s;
  }
  KILN_CHECK(total == x.size(d), "[split] split sizes ", split_sizes, " sum to ", total,
             ", not to the size ", x.size(d), " of dimension ", d, " (shape ", x.shape(), ")");
  std::vector<Tensor> out;
  int64_t at = 0;
  for (int64_t s : split_sizes) {
    out.push_back(narrow(x, d, at, s));
    at += s;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, const Dims& split_sizes, int64_t dim) {
  return split_with_sizes(x, split_sizes, dim);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  KILN_CHECK(chunks > 0, "[chunk] chunks must be positive, got ", chunks);
  KILN_CHECK(x.dim() > 0, "[chunk] cannot chunk a 0-d tensor");
  const int64_t n = x.size(wrap_dim(dim, x.dim(), "chunk"));
  return split(x, (n + chunks - 1) / chunks, dim);
}

std::vector<Tensor> unbind(const Tensor& x, int64_t dim) {
  KILN_CHECK(x.dim() > 0, "[unbind] a 0-d tensor has no dimension to unbind");
  const int64_t d = wrap_dim(dim, x.dim(), "unbind");
  std::vector<Tensor> out;
  for (int64_t i = 0; i < x.size(d); ++i) out.push_back(select(x, d, i));
  return out;
}

Tensor nonzero(const Tensor& x) {
  check_eager(x, "nonzero");
  Tensor m;
  {
    NoGradGuard ng;
    m = ne(x, 0).cpu().contiguous();
  }
  const bool* p = m.data<bool>();
  const int64_t n = m.numel(), rank = m.dim();
  std::vector<int64_t> idx;
  std::vector<int64_t> coord(static_cast<size_t>(rank));
  for (int64_t i = 0; i < n; ++i) {
    if (!p[i]) continue;
    int64_t r = i;
    for (int64_t d = rank; d-- > 0;) {
      coord[static_cast<size_t>(d)] = r % m.size(d);
      r /= m.size(d);
    }
    idx.insert(idx.end(), coord.begin(), coord.end());
  }
  const int64_t count =
      rank == 0 ? (n == 1 && p[0] ? 1 : 0) : static_cast<int64_t>(idx.size()) / rank;
  Tensor out = from_vector(idx, {count, rank});
  return out.to(x.device());
}

Tensor masked_select(const Tensor& x, const Tensor& mask) {
  KILN_CHECK(mask.dtype() == DType::b8, "[masked_select] mask must be a bool tensor, got ",
             mask.dtype());
  check_eager(x, "masked_select");
  check_eager(mask, "masked_select");
  const Dims shape = broadcast_shapes(x.shape(), mask.shape(), "masked_select");
  Tensor where_true = reshape(nonzero(reshape(expand(mask, shape), {-1})), {-1});
  return index_select(reshape(expand(x, shape), {-1}), 0, where_true);
}

Tensor one_hot(const Tensor& index, int64_t num_classes) {
  KILN_CHECK(is_integral(index.dtype()), "[one_hot] index must be an integer tensor, got dtype ",
             index.dtype());
  if (!index.is_symbolic() && index.numel() > 0) {
    NoGradGuard ng;
    const int64_t lo = amin(cast(index, DType::i64)).item<int64_t>();
    const int64_t hi = amax(cast(index, DType::i64)).item<int64_t>();
    KILN_CHECK(lo >= 0, "[one_hot] class values must be non-negative, got ", lo);
    if (num_classes < 0) num_classes = hi + 1;
    KILN_CHECK(hi < num_classes, "[one_hot] class value ", hi,
               " is out of range for num_classes = ", num_classes);
  }
  KILN_CHECK(num_classes >= 0,
             "[one_hot] num_classes = -1 (inferred from the values) needs an "
             "eager, non-empty index; pass num_classes",
             index.is_symbolic() ? " inside kiln::compile" : " for an empty index");
  const int64_t n = index.numel();
  // A scatter of ones: its kernel refuses out-of-range classes, in compiled calls too.
  Tensor rows = scatter_add(zeros({n, num_classes}, DType::i64), 1,
                            reshape(cast(index, DType::i64), {n, 1}), ones({n, 1}, DType::i64));
  Dims shape = index.shape();
  shape.push_back(num_classes);
  return reshape(rows, shape);
}

// maximum/minimum propagate NaN and promote, as torch.clamp with tensor bounds.
Tensor clamp(const Tensor& x, const Tensor& lo, const Tensor& hi) {
  KILN_CHECK(lo.defined() || hi.defined(), "[clamp] at least one of the bounds must be defined");
  Tensor r = lo.defined() ? maximum(x, lo) : x;
  return hi.defined() ? minimum(r, hi) : r;
}
Tensor clamp_min(const Tensor& x, const Tensor& lo) {
  return clamp(x, lo, Tensor());
}
Tensor clamp_max(const Tensor& x, const Tensor& hi) {
  return clamp(x, Tensor(), hi);
}
Tensor clip(const Tensor& x, const Scalar& lo, const Scalar& hi) {
  return clamp(x, lo, hi);
}
Tensor clip(const Tensor& x, const Tensor& lo, const Tensor& hi) {
  return clamp(x, lo, hi);
}

// Integers are never NaN or infinite: x != x is all false for them.
Tensor isnan(const Tensor& x) {
  return ne(x, x);
}
Tensor isinf(const Tensor& x) {
  return is_floating(x.dtype()) ? eq(abs(x), std::numeric_limits<double>::infinity()) : ne(x, x);
}
Tensor isfinite(const Tensor& x) {
  return is_floating(x.dtype()) ? lt(abs(x), std::numeric_limits<double>::infinity()) : eq(x, x);
}

Tensor nan_to_num(const Tensor& x, std::optional<double> nan, std::optional<double> posinf,
                  std::optional<double> neginf) {
  if (!is_floating(x.dtype())) return copy(x);
  const double inf = std::numeric_limits<double>::infinity();
  const double big = finite_max(x.dtype());
  Tensor r = where(isnan(x), nan.value_or(0.0), x);
  r = where(eq(x, inf), posinf.value_or(big), r);
  return where(eq(x, -inf), neginf.value_or(-big), r);
}

namespace {
// (values, indices) of the extremes along dim: the values are gathered at the
// indices, so the gradient goes to the chosen element only, as in PyTorch.
std::tuple<Tensor, Tensor> extreme_along(const Tensor& x, int64_t dim, bool keepdim, bool is_max) {
  Tensor idx = is_max ? argmax(x, dim, true) : argmin(x, dim, true);
  if (x.dim() == 0) return {copy(x), idx};
  const int64_t d = wrap_dim(dim, x.dim(), is_max ? "max" : "min");
  Tensor v = gather(x, d, idx);
  if (keepdim) return {v, idx};
  return {squeeze(v, d), squeeze(idx, d)};
}
}  // namespace

std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_along(x, dim, keepdim, true);
}
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_along(x, dim, keepdim, false);
}

}  // namespace kiln
