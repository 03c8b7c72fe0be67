// Indexing with tensors (PyTorch's x[mask], x[idx], x[mask] = v), whole-tensor
// comparisons (isclose, allclose, equal) and the comparison / logical
// operators. Composites of primitives: autograd and, where shapes do not
// depend on values, tracing come for free; boolean masks are eager only.
#include <cmath>
#include <limits>

#include "kiln/autograd.h"
#include "ops/helpers.h"

namespace kiln {
namespace {

// A boolean mask selects a number of rows that depends on its values.
void check_eager_mask(const Tensor& x, const Tensor& mask, const char* op) {
  KILN_CHECK(!x.is_symbolic() && !mask.is_symbolic(), "[", op,
             "] with a bool mask is not traceable: the number of selected elements depends on "
             "the mask's values (a data-dependent shape), so it cannot run inside kiln::compile "
             "(call it eagerly, or use where / masked_fill, whose shapes are fixed)");
}

// The one index tensor of an index list; errors name `op`.
const Tensor& single_index(const std::vector<Tensor>& indices, const char* op) {
  KILN_CHECK(indices.size() == 1, "[", op,
             "] supports exactly one index tensor (a bool mask or an integer tensor), got ",
             indices.size(), " indices");
  KILN_CHECK(indices[0].defined(), "[", op, "] the index tensor is undefined");
  return indices[0];
}

// x viewed as [rows, rest...] where rows spans the mask's dims, and the i64
// row numbers where the mask is true. The mask's shape must equal x's leading
// dims (PyTorch's rule; a 0-d mask adds a leading dim of 1, as x[True]).
std::pair<Tensor, Tensor> mask_rows(const Tensor& x, const Tensor& mask, const char* op) {
  check_eager_mask(x, mask, op);
  Tensor xs = mask.dim() == 0 ? unsqueeze(x, 0) : x;
  const Dims mshape = mask.dim() == 0 ? Dims{1} : mask.shape();
  const auto k = static_cast<int64_t>(mshape.size());
  bool match = k <= xs.dim();
  for (int64_t d = 0; match && d < k; ++d) match = mshape[d] == xs.size(d);
  KILN_CHECK(match, "[", op, "] the mask's shape ", mask.shape(),
             " does not match the indexed tensor's shape ", x.shape(),
             " (a mask must have the shape of the tensor's leading dims)");
  Dims flat_shape{numel_of(mshape)};
  for (int64_t d = k; d < xs.dim(); ++d) flat_shape.push_back(xs.size(d));
  Tensor rows = reshape(nonzero(reshape(mask, {-1})), {-1});
  return {reshape(xs, flat_shape), rows};
}

// Integer indices along dim 0, negative ones wrapped (index_select refuses them).
Tensor wrap_rows(const Tensor& x, const Tensor& idx, const char* op) {
  KILN_CHECK(x.dim() > 0, "[", op, "] cannot index a 0-d tensor with an integer tensor");
  Tensor i = cast(idx, DType::i64);
  // Known indices (eager, or constants of a trace) are checked here, so an
  // index below -size is not reported as its wrapped value; traced ones by
  // index_select's kernel.
  if (!i.is_symbolic() && i.device().is_cpu()) {
    const int64_t n = x.size(0);
    for (int64_t v : i.to_vector<int64_t>())
      KILN_CHECK(v >= -n && v < n, "[", op, "] index ", v, " is out of range for dim 0 of size ",
                 n);
  }
  return where(lt(i, 0), add(i, x.size(0)), i);
}

}  // namespace

Tensor index(const Tensor& x, const std::vector<Tensor>& indices) {
  const Tensor& t = single_index(indices, "index");
  if (t.dtype() == DType::b8) {
    auto [flat, rows] = mask_rows(x, t, "index");
    return index_select(flat, 0, rows);
  }
  KILN_CHECK(is_integral(t.dtype()), "[index] index tensors must be bool or integer, got dtype ",
             t.dtype());
  Tensor picked = index_select(x, 0, reshape(wrap_rows(x, t, "index"), {-1}));
  Dims shape = t.shape();
  for (int64_t d = 1; d < x.dim(); ++d) shape.push_back(x.size(d));
  return reshape(picked, shape);
}

Tensor index_put(const Tensor& x, const std::vector<Tensor>& indices, const Tensor& values) {
  const Tensor& mask = single_index(indices, "index_put");
  KILN_CHECK(values.defined(), "[index_put] values is an undefined tensor");
  KILN_CHECK(mask.dtype() == DType::b8,
             "[index_put] supports a bool mask index only (x[mask] = v), got an index of dtype ",
             mask.dtype());
  check_eager_mask(values, mask, "index_put");
  auto [flat, rows] = mask_rows(x, mask, "index_put");
  Dims selected = flat.shape();
  selected[0] = rows.numel();
  bool fits = values.dim() <= static_cast<int64_t>(selected.size());
  for (int64_t d = 1; fits && d <= values.dim(); ++d) {
    const int64_t v = values.size(-d), want = selected[selected.size() - static_cast<size_t>(d)];
    fits = v == want || v == 1;
  }
  KILN_CHECK(fits, "[index_put] values of shape ", values.shape(),
             " cannot be broadcast to the selected shape ", selected);
  if (rows.numel() == 0) return copy(x);
  // Row r of the result takes values row (number of true mask rows before r):
  // a gather, so the values' gradient gathers back without any additions.
  Tensor m = reshape(mask, {-1});
  Tensor source = clamp_min(sub(cumsum(m, 0), 1), 0);
  Tensor v = expand(cast(values, x.dtype()), selected);
  Tensor placed = index_select(v, 0, source);
  Dims mshape{flat.size(0)};
  for (int64_t d = 1; d < flat.dim(); ++d) mshape.push_back(1);
  return reshape(where(reshape(m, mshape), placed, flat), x.shape());
}

Tensor index_put(const Tensor& x, const std::vector<Tensor>& indices, const Scalar& value) {
  const Tensor& mask = single_index(indices, "index_put");
  KILN_CHECK(mask.dtype() == DType::b8,
             "[index_put] supports a bool mask index only (x[mask] = v), got an index of dtype ",
             mask.dtype());
  auto [flat, rows] = mask_rows(x, mask, "index_put");
  Dims mshape{flat.size(0)};
  for (int64_t d = 1; d < flat.dim(); ++d) mshape.push_back(1);
  return reshape(masked_fill(flat, reshape(mask, mshape), value), x.shape());
}

Tensor isclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  KILN_CHECK(rtol >= 0 && atol >= 0,
             "[isclose] rtol and atol must be non-negative, got rtol = ", rtol,
             " and atol = ", atol);
  NoGradGuard ng;
  Tensor x = cast(a, DType::f64), y = cast(b, DType::f64);
  Tensor close = eq(x, y);  // equal values, equal infinities too
  if (equal_nan) close = logical_or(close, logical_and(isnan(x), isnan(y)));
  // Only finite differences are measured: |1 - inf| <= rtol * inf must not count.
  Tensor diff = abs(sub(x, y));
  Tensor within = logical_and(isfinite(diff), le(diff, add(mul(abs(y), rtol), atol)));
  return logical_or(close, within);
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  NoGradGuard ng;
  return sum(logical_not(isclose(a, b, rtol, atol, equal_nan))).item<int64_t>() == 0;
}

bool equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  NoGradGuard ng;
  return sum(logical_not(eq(a.cpu(), b.cpu()))).item<int64_t>() == 0;
}

#define KILN_COMPARE_OP_DEF(op, fn)                      \
  Tensor operator op(const Tensor& a, const Tensor& b) { \
    return fn(a, b);                                     \
  }                                                      \
  Tensor operator op(const Tensor& a, const Scalar& b) { \
    return fn(a, b);                                     \
  }                                                      \
  Tensor operator op(const Scalar& a, const Tensor& b) { \
    return fn(a, b);                                     \
  }
KILN_COMPARE_OP_DEF(<, lt)
KILN_COMPARE_OP_DEF(<=, le)
KILN_COMPARE_OP_DEF(>, gt)
KILN_COMPARE_OP_DEF(>=, ge)
KILN_COMPARE_OP_DEF(==, eq)
KILN_COMPARE_OP_DEF(!=, ne)
#undef KILN_COMPARE_OP_DEF

namespace {
void check_bool(const Tensor& t, const char* op) {
  KILN_CHECK(t.dtype() == DType::b8, "[", op,
             "] needs bool tensors (logical and/or/not; kiln has no bitwise integer ops), got "
             "dtype ",
             t.dtype());
}
}  // namespace

Tensor operator&(const Tensor& a, const Tensor& b) {
  check_bool(a, "operator&");
  check_bool(b, "operator&");
  return logical_and(a, b);
}
Tensor operator|(const Tensor& a, const Tensor& b) {
  check_bool(a, "operator|");
  check_bool(b, "operator|");
  return logical_or(a, b);
}
Tensor operator~(const Tensor& x) {
  check_bool(x, "operator~");
  return logical_not(x);
}

}  // namespace kiln
