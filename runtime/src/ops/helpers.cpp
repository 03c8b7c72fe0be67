#include "ops/helpers.h"

#include <algorithm>

namespace kiln {

Dims broadcast_shapes(const Dims& a, const Dims& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Dims out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    KILN_CHECK(da == db || da == 1 || db == 1, "[", op, "] shapes ", a, " and ", b,
               " cannot be broadcast together (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t wrap_dim(int64_t dim, int64_t rank, const char* op) {
  int64_t r = std::max<int64_t>(rank, 1);
  KILN_CHECK(dim >= -r && dim < r, "[", op, "] dimension ", dim,
             " is out of range for a tensor "
             "of rank ",
             rank, " (expected in [", -r, ", ", r - 1, "])");
  return dim < 0 ? dim + r : dim;
}

namespace ops {

DType result_type(std::span<const Tensor> ts) {
  // Per priority group: 0 = dimensioned, 1 = zero-dim, 2 = wrapped number.
  bool has[3] = {false, false, false};
  DType grp[3] = {DType::b8, DType::b8, DType::b8};
  for (const Tensor& t : ts) {
    int g = t.impl()->wrapped_number ? 2 : (t.dim() > 0 ? 0 : 1);
    DType d = t.dtype();
    if (g == 2 && d == DType::f64) d = kDefaultFloat;
    grp[g] = has[g] ? promote_types(grp[g], d) : d;
    has[g] = true;
  }
  DType r = DType::b8;
  bool any = false;
  for (int g = 0; g < 3; ++g) {
    if (!has[g]) continue;
    if (!any) {
      r = grp[g];
      any = true;
    } else if (dtype_category(grp[g]) > dtype_category(r)) {
      r = grp[g];
    }
  }
  return r;
}

Dims broadcast_all(std::span<const Tensor> ts, const char* op) {
  Dims out;
  for (size_t i = 0; i < ts.size(); ++i)
    out = i == 0 ? ts[i].shape() : broadcast_shapes(out, ts[i].shape(), op);
  return out;
}

Dims normalize_dims(const Dims& dims, int64_t rank, const char* op) {
  Dims out;
  if (dims.empty()) {
    for (int64_t i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  for (int64_t d : dims) {
    if (rank == 0) {
      KILN_CHECK(d == 0 || d == -1, "[", op, "] dimension ", d,
                 " is out of range for a 0-d tensor");
      continue;
    }
    int64_t w = wrap_dim(d, rank, op);
    for (int64_t e : out)
      KILN_CHECK(e != w, "[", op, "] dimension ", d, " appears twice in ", dims);
    out.push_back(w);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Dims reduced_shape(const Dims& shape, const Dims& dims, bool keepdim) {
  Dims out;
  size_t j = 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    bool red = j < dims.size() && dims[j] == static_cast<int64_t>(i);
    if (red) {
      ++j;
      if (keepdim) out.push_back(1);
    } else {
      out.push_back(shape[i]);
    }
  }
  return out;
}

}  // namespace ops
}  // namespace kiln
