// The public movement API: thin wrappers that normalize arguments the way
// PyTorch does and call the movement primitives (movement.cpp).
#include <algorithm>

#include "ops/helpers.h"

namespace kiln {

Tensor reshape(const Tensor& x, const Dims& shape) {
  return dispatch1(OpId::reshape, {x}, Attrs().set("shape", shape));
}

Tensor permute(const Tensor& x, const Dims& dims) {
  return dispatch1(OpId::permute, {x}, Attrs().set("dims", dims));
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  int64_t r = x.dim();
  if (r == 0) {
    wrap_dim(d0, r, "transpose");
    wrap_dim(d1, r, "transpose");
    return x;
  }
  d0 = wrap_dim(d0, r, "transpose");
  d1 = wrap_dim(d1, r, "transpose");
  Dims p;
  for (int64_t i = 0; i < r; ++i) p.push_back(i);
  std::swap(p[d0], p[d1]);
  return permute(x, p);
}

Tensor expand(const Tensor& x, const Dims& shape) {
  if (shape == x.shape()) return x;
  return dispatch1(OpId::expand, {x}, Attrs().set("shape", shape));
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  KILN_CHECK(x.dim() > 0, "[slice] cannot slice a 0-d tensor");
  int64_t d = wrap_dim(dim, x.dim(), "slice");
  KILN_CHECK(step > 0, "[slice] step must be positive, got ", step);
  int64_t n = x.shape()[d];
  // Python slice semantics: negative bounds count from the end, then clamp.
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  return dispatch1(OpId::slice, {x},
                   Attrs().set("dim", d).set("start", start).set("end", end).set("step", step));
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  KILN_CHECK(x.dim() > 0, "[narrow] cannot narrow a 0-d tensor");
  int64_t d = wrap_dim(dim, x.dim(), "narrow");
  int64_t n = x.shape()[d];
  if (start < 0) start += n;
  KILN_CHECK(start >= 0 && start <= n && length >= 0 && length <= n - start, "[narrow] start ",
             start, " + length ", length, " exceeds dimension ", d, " of size ", n);
  return dispatch1(
      OpId::slice, {x},
      Attrs().set("dim", d).set("start", start).set("end", start + length).set("step", int64_t{1}));
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  KILN_CHECK(x.dim() > 0, "[select] cannot select from a 0-d tensor");
  int64_t d = wrap_dim(dim, x.dim(), "select");
  int64_t n = x.shape()[d];
  KILN_CHECK(index >= -n && index < n, "[select] index ", index, " is out of range for dimension ",
             d, " with size ", n);
  if (index < 0) index += n;
  Tensor s = narrow(x, d, index, 1);
  Dims shape = x.shape();
  shape.erase(static_cast<size_t>(d));
  return reshape(s, shape);
}

Tensor squeeze(const Tensor& x) {
  Dims shape;
  for (int64_t s : x.shape())
    if (s != 1) shape.push_back(s);
  return shape.size() == x.shape().size() ? x : reshape(x, shape);
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  if (x.dim() == 0) {
    wrap_dim(dim, 0, "squeeze");
    return x;
  }
  int64_t d = wrap_dim(dim, x.dim(), "squeeze");
  if (x.shape()[d] != 1) return x;
  Dims shape = x.shape();
  shape.erase(static_cast<size_t>(d));
  return reshape(x, shape);
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  int64_t d = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  Dims shape = x.shape();
  shape.insert(static_cast<size_t>(d), 1);
  return reshape(x, shape);
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  if (x.dim() == 0) return reshape(x, {1});
  int64_t s = wrap_dim(start_dim, x.dim(), "flatten");
  int64_t e = wrap_dim(end_dim, x.dim(), "flatten");
  KILN_CHECK(s <= e, "[flatten] start_dim ", start_dim, " comes after end_dim ", end_dim);
  Dims shape;
  int64_t prod = 1;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i < s || i > e) {
      shape.push_back(x.shape()[i]);
    } else {
      prod *= x.shape()[i];
      if (i == e) shape.push_back(prod);
    }
  }
  return reshape(x, shape);
}

Tensor copy(const Tensor& x) {
  return dispatch1(OpId::copy, {x});
}

Tensor pad(const Tensor& x, const Dims& pads, double value) {
  return dispatch1(OpId::pad, {x}, Attrs().set("pads", pads).set("value", value));
}

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  return dispatch1(OpId::cat, std::span<const Tensor>(xs), Attrs().set("dim", dim));
}

Tensor stack(const std::vector<Tensor>& xs, int64_t dim) {
  KILN_CHECK(!xs.empty(), "[stack] expected a non-empty list of tensors");
  int64_t d = wrap_dim(dim, xs[0].dim() + 1, "stack");
  std::vector<Tensor> u;
  u.reserve(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    KILN_CHECK(xs[i].shape() == xs[0].shape(),
               "[stack] all tensors must have the same shape: "
               "tensor ",
               i, " has shape ", xs[i].shape(), ", tensor 0 has ", xs[0].shape());
    u.push_back(unsqueeze(xs[i], d));
  }
  return cat(u, d);
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  return dispatch1(OpId::gather, {x, index}, Attrs().set("dim", dim));
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  return dispatch1(OpId::index_select, {x, index}, Attrs().set("dim", dim));
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return dispatch1(OpId::scatter_add, {x, index, src}, Attrs().set("dim", dim));
}

namespace {
// (col - row) for the last two dims, as an i64 [rows, cols] tensor on x's device.
Tensor diag_offset(const Tensor& x, const char* op) {
  KILN_CHECK(x.dim() >= 2, "[", op, "] expects a tensor of rank >= 2, got shape ", x.shape());
  int64_t r = x.shape()[x.dim() - 2], c = x.shape()[x.dim() - 1];
  return (reshape(arange(c), {1, c}) - reshape(arange(r), {r, 1})).to(x.device());
}
}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) {
  return where(le(diag_offset(x, "tril"), diagonal), x, zeros({}, x.dtype()));
}

Tensor triu(const Tensor& x, int64_t diagonal) {
  return where(ge(diag_offset(x, "triu"), diagonal), x, zeros({}, x.dtype()));
}

}  // namespace kiln
