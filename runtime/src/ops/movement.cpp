// Movement primitives. reshape/permute/expand/slice return views in eager
// mode (sharing storage) whenever the layout allows; the others copy.
// Derivatives are movement ops again: reshape<->reshape, permute<->permute,
// expand<->sum_to (done by the engine), slice/pad<->pad, gather<->scatter_add.
#include <algorithm>
#include <cstring>

#include "ops/helpers.h"
#include "ops/registry.h"

namespace kiln {

// PyTorch's computeStride: split and merge runs of contiguous dims.
bool view_strides(const Dims& shape, const Dims& strides, const Dims& new_shape, Dims& out) {
  out = Dims(new_shape.size(), 0);
  if (numel_of(shape) == 0) {
    out = contiguous_strides(new_shape);
    return true;
  }
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

namespace ops {
namespace {

// ---------------- reshape ----------------
// Resolves one -1 and checks the element count.
Dims infer_shape(const Dims& shape, int64_t numel, const Dims& from, const char* op) {
  Dims out = shape;
  int64_t known = 1;
  int64_t infer_at = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      KILN_CHECK(infer_at < 0, "[", op, "] only one dimension can be -1, got shape ", shape);
      infer_at = static_cast<int64_t>(i);
    } else {
      KILN_CHECK(out[i] >= 0, "[", op, "] invalid dimension ", out[i], " in shape ", shape);
      known = checked_mul(known, out[i], op);
    }
  }
  if (infer_at >= 0) {
    KILN_CHECK(known != 0 && numel % known == 0, "[", op, "] shape ", shape,
               " is invalid for input of shape ", from, " (", numel, " elements)");
    out[static_cast<size_t>(infer_at)] = numel / known;
  } else {
    KILN_CHECK(known == numel, "[", op, "] shape ", shape, " is invalid for input of shape ", from,
               " (", numel, " elements)");
  }
  return out;
}

void infer_reshape(std::span<const Tensor> in, const Attrs& a, std::vector<TensorMeta>& out) {
  out.push_back(
      {in[0].dtype(), infer_shape(a.dims("shape"), in[0].numel(), in[0].shape(), "reshape")});
}
void kernel_reshape(std::span<const Tensor> in, const Attrs& a, std::span<Tensor> out) {
  const Tensor& x = in[0];
  Dims shape = infer_shape(a.dims("shape"), x.numel(), x.shape(), "reshape");
  Dims st;
  if (view_strides(x.shape(), x.strides(), shape, st)) {
    out[0] = as_strided(x, shape, st, x.offset());
  } else {
    Tensor c = make_tensor(x.shape(), x.dtype(), x.device());
    copy_into(c, x);
    out[0] = as_strided(c, shape, contiguous_strides(shape), 0);
  }
}
void vjp_reshape(const VjpArgs& a, std::vector<Tensor>& gi) {
  gi[0] = reshape(a.grads[0], a.in_meta[0].shape);
}

// ---------------- permute ----------------
Dims check_perm(const Dims& dims, int64_t rank) {
  KILN_CHECK(static_cast<int64_t>(dims.size()) == rank, "[permute] got ", dims.size(), " dims ",
             dims, " for a tensor of rank ", rank);
  Dims p;
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, rank, "permute");
    KILN_CHECK(!seen[static_cast<size_t>(w)], "[permute] dimension ", d, " repeats in ", dims);
    seen[static_cast<size_t>(w)] = true;
    p.push_back(w);
  }
  return p;
}
void infer_permute(std::span<const Tensor> in, const Attrs& a, std::vector<TensorMeta>& out) {
  Dims p = check_perm(a.dims("dims"), in[0].dim());
  Dims shape;
  for (int64_t d : p) shape.push_back(in[0].shape()[d]);
  out.push_back({in[0].dtype(), shape});
}
void kernel_permute(std::span<const Tensor> in, const Attrs& a, std::span<Tensor> out) {
  const Tensor& x = in[0];
  Dims p = check_perm(a.dims("dims"), x.dim());
  Dims shape, st;
  for (int64_t d : p) {
    shape.push_back(x.shape()[d]);
    st.push_back(x.strides()[d]);
  }
  out[0] = as_strided(x, shape, st, x.offset());
}
void vjp_permute(const VjpArgs& a, std::vector<Tensor>& gi) {
  Dims p = check_perm(a.attrs.dims("dims"), static_cast<int64_t>(a.in_meta[0].shape.size()));
  Dims inv(p.size());
  for (size_t i = 0; i < p.size(); ++i) inv[static_cast<size_t>(p[i])] = static_cast<int64_t>(i);
  gi[0] = permute(a.grads[0], inv);
}

// ---------------- expand ----------------
Dims expand_shape(const Tensor& x, const Dims& shape) {
  KILN_CHECK(shape.size() >= x.shape().size(), "[expand] the number of sizes provided (",
             shape.size(), ") must be at least the tensor's rank (", x.dim(), "); shape ",
             x.shape(), " to ", shape);
  Dims out = shape;
  size_t off = shape.size() - x.shape().size();
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < off) {
      KILN_CHECK(shape[i] >= 0, "[expand] the new dimension ", i, " cannot be ", shape[i]);
      continue;
    }
    int64_t s = x.shape()[i - off];
    if (shape[i] == -1) out[i] = s;
    KILN_CHECK(out[i] == s || s == 1, "[expand] cannot expand shape ", x.shape(), " to ", shape,
               " (dim ", i, ": ", s, " -> ", shape[i], ")");
  }
  return out;
}
void infer_expand(std::span<const Tensor> in, const Attrs& a, std::vector<TensorMeta>& out) {
  out.push_back({in[0].dtype(), expand_shape(in[0], a.dims("shape"))});
}
void kernel_expand(std::span<const Tensor> in, const Attrs& a, std::span<Tensor> out) {
  const Tensor& x = in[0];
  Dims shape = expand_shape(x, a.dims("shape"));
  Dims st(shape.size(), 0);
  size_t off = shape.size() - x.shape().size();
  for (size_t i = off; i < shape.size(); ++i)
    st[i] = x.shape()[i - off] == 1 && shape[i] != 1 ? 0 : x.strides()[i - off];
  out[0] = as_strided(x, shape, st, x.offset());
}
void vjp_identity(const VjpArgs& a, std::vector<Tensor>& gi) {
  gi[0] = a.grads[0];
}

// ---------------- slice ----------------
// attrs dim, start, end, step: already normalized (0 <= start <= end <= size).
void infer_slice(std::span<const Tensor> in, const Attrs& a, std::vector<TensorMeta>& out) {
  int64_t d = wrap_dim(a.i("dim"), in[0].dim(), "slice");
  int64_t start = a.i("start"), end = a.i("end"), step = a.i("step");
  int64_t size = in[0].shape()[d];
  KILN_CHECK(step > 0, "[slice] step must be positive, got ", step);
  KILN_CHECK(0 <= start && start <= end && end <= size, "[slice] range [", start, ", ", end,
             ") is invalid for dimension ", d, " of size ", size);
  Dims shape = in[0].shape();
  shape[d] = end == start ? 0 : (end - start - 1) / step + 1;  // no overflow for any step
  out.push_back({in[0].dtype(), shape});
}
void kernel_slice(std::span<const Tensor> in, const Attrs& a, std::span<Tensor> out) {
  const Tensor& x = in[0];
  int64_t d = wrap_dim(a.i("dim"), x.dim(), "slice");
  int64_t start = a.i("start"), end = a.i("end"), step = a.i("step");
  Dims shape = x.shape(), st = x.strides();
  shape[d] = end == start ? 0 : (end - start - 1) / step + 1;
  // A step past the end leaves one element: its stride is never used.
  st[d] = shape[d] > 1 ? st[d] * step : st[d];
  out[0] = as_strided(x, shape, st, x.offset() + start * x.strides()[d]);
}
void vjp_slice(const VjpArgs& a, std::vector<Tensor>& gi) {
  const Dims& in_shape = a.in_meta[0].shape;
  int64_t rank = static_cast<int64_t>(in_shape.size());
  int64_t d = wrap_dim(a.attrs.i("dim"), rank, "slice");
  int64_t start = a.attrs.i("start"), end = a.attrs.i("end"), step = a.attrs.i("step");
  const Tensor& g = a.grads[0];
  if (step == 1) {
    Dims pads(static_cast<size_t>(2 * rank), 0);
    size_t k = static_cast<size_t>(2 * (rank - 1 - d));
    pads[k] = start;
    pads[k + 1] = in_shape[d] - end;
    gi[0] = pad(g, pads, 0.0);
    return;
  }
  // Strided slice: scatter the gradient back at start, start+step, ...
  Tensor idx = arange(start, end, step);
  Dims ishape(static_cast<size_t>(rank), 1);
  ishape[d] = idx.numel();
  Tensor index = expand(reshape(idx, ishape), g.shape());
  gi[0] = scatter_add(zeros(in_shape, g.dtype(), g.device()), d, index, g);
}

// ---------------- copy ----------------
void infer_same(std::span<const Tensor> in, const Attrs&, std::vector<TensorMeta>& out) {
  out.push_back({in[0].dtype(), in[0].shape()});
}
void kernel_copy(std::span<const Tensor> in, const Attrs&, std::span<Tensor> out) {
  copy_into(out[0], in[0]);
}

// ---------------- pad ----------------
Dims padded_shape(const Tensor& x, const Dims& pads) {
  KILN_CHECK(pads.size() % 2 == 0 && pads.size() / 2 <= x.shape().size(),
             "[pad] pads must hold (before, after) pairs for at most ", x.dim(), " dims, got ",
             pads);
  Dims shape = x.shape();
  size_t rank = shape.size();
  for (size_t k = 0; k < pads.size() / 2; ++k) {
    size_t d = rank - 1 - k;
    int64_t n = checked_add(checked_add(shape[d], pads[2 * k], "pad"), pads[2 * k + 1], "pad");
    KILN_CHECK(n >= 0, "[pad] pads ", pads, " give a negative size ", n, " for dim ", d,
               " of shape ", x.shape());
    shape[d] = n;
  }
  return shape;
}
void infer_pad(std::span<const Tensor> in, const Attrs& a, std::vector<TensorMeta>& out) {
  out.push_back({in[0].dtype(), padded_shape(in[0], a.dims("pads"))});
}
void kernel_pad(std::span<const Tensor> in, const Attrs& a, std::span<Tensor> out) {
  const Tensor& x = in[0];
  const Dims& pads = a.dims("pads");
  Tensor& o = out[0];
  // The region both tensors share: crop x where a pad is negative, offset o where positive.
  Dims shape = x.shape();
  int64_t xoff = x.offset(), ooff = 0;
  bool empty = false;
  size_t rank = shape.size();
  for (size_t k = 0; k < pads.size() / 2; ++k) {
    size_t d = rank - 1 - k;
    int64_t lo = pads[2 * k], hi = pads[2 * k + 1];
    int64_t n = shape[d] + std::min<int64_t>(lo, 0) + std::min<int64_t>(hi, 0);
    if (n <= 0) empty = true;
    if (lo < 0)
      xoff -= lo * x.strides()[d];
    else
      ooff += lo * o.strides()[d];
    shape[d] = std::max<int64_t>(n, 0);
  }
  const Tensor value = scalar_tensor(a.f("value"));
  if (empty || numel_of(shape) == 0) {
    copy_into(o, value);
    return;
  }
  // Only the border takes the value (the slabs before and after the copied
  // range along each padded dim; corners twice): filling the whole output
  // first wrote the interior twice (a slice's backward pads every gradient).
  for (size_t k = 0; k < pads.size() / 2; ++k) {
    const size_t d = rank - 1 - k;
    const int64_t lo = std::max<int64_t>(pads[2 * k], 0);
    const int64_t after = lo + shape[d];
    Dims slab = o.shape();
    if (lo > 0) {
      slab[d] = lo;
      copy_into(as_strided(o, slab, o.strides(), 0), value);
    }
    if (after < o.shape()[d]) {
      slab[d] = o.shape()[d] - after;
      copy_into(as_strided(o, slab, o.strides(), after * o.strides()[d]), value);
    }
  }
  copy_into(as_strided(o, shape, o.strides(), ooff), as_strided(x, shape, x.strides(), xoff));
}
void vjp_pad(const VjpArgs& a, std::vector<Tensor>& gi) {
  Dims neg = a.attrs.dims("pads");
  for (auto& p : neg) p = -p;
  gi[0] = pad(a.grads[0], neg, 0.0);
}

// ---------------- cat ----------------
// PyTorch skips 1-D empty tensors in cat (legacy); so do we.
bool skipped(const Tensor& t) {
  return t.dim() == 1 && t.numel() == 0;
}
void infer_cat(std::span<const Tensor> in, const Attrs& a, std::vector<TensorMeta>& out) {
  KILN_CHECK(!in.empty(), "[cat] expected a non-empty list of tensors");
  const Tensor* ref = nullptr;
  for (const Tensor& t : in)
    if (!skipped(t)) {
      ref = &t;
      break;
    }
  if (!ref) {
    out.push_back({result_type(in), Dims{0}});
    return;
  }
  int64_t d = wrap_dim(a.i("dim"), ref->dim(), "cat");
  Dims shape = ref->shape();
  shape[d] = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const Tensor& t = in[i];
    if (skipped(t)) continue;
    KILN_CHECK(t.dim() == ref->dim(), "[cat] tensor ", i, " has rank ", t.dim(),
               " but tensor 0 "
               "has rank ",
               ref->dim(), " (shapes ", t.shape(), " and ", ref->shape(), ")");
    for (int64_t k = 0; k < t.dim(); ++k)
      KILN_CHECK(k == d || t.shape()[k] == ref->shape()[k],
                 "[cat] sizes must match except in "
                 "dimension ",
                 d, ": tensor ", i, " has shape ", t.shape(), ", expected ", ref->shape());
    shape[d] = checked_add(shape[d], t.shape()[d], "cat");
  }
  out.push_back({result_type(in), shape});
}
void kernel_cat(std::span<const Tensor> in, const Attrs& a, std::span<Tensor> out) {
  Tensor& o = out[0];
  if (o.dim() == 1 && o.numel() == 0) return;
  int64_t d = wrap_dim(a.i("dim"), o.dim(), "cat");
  int64_t pos = 0;
  for (const Tensor& t : in) {
    if (skipped(t)) continue;
    Dims shape = o.shape();
    shape[d] = t.shape()[d];
    copy_into(as_strided(o, shape, o.strides(), pos * o.strides()[d]), t);
    pos += t.shape()[d];
  }
}
void vjp_cat(const VjpArgs& a, std::vector<Tensor>& gi) {
  const Tensor& g = a.grads[0];
  int64_t d = wrap_dim(a.attrs.i("dim"), g.dim(), "cat");
  int64_t pos = 0;
  for (size_t i = 0; i < a.in_meta.size(); ++i) {
    const Dims& s = a.in_meta[i].shape;
    if (s.size() == 1 && s[0] == 0 && g.dim() != 1) continue;
    int64_t n = s[static_cast<size_t>(d)];
    if (a.needs(i)) gi[i] = slice(g, d, pos, pos + n);
    pos += n;
  }
}

// ---------------- gather / index_select / scatter_add ----------------
void check_index_dtype(const Tensor& idx, const char* op) {
  KILN_CHECK(idx.dtype() == DType::i64 || idx.dtype() == DType::i32, "[", op,
             "] index must be an i64 or i32 tensor, got ", idx.dtype());
}

// Reads index element (as int64) at byte pointer p.
inline int64_t read_index(const char* p, DType t) {
  return t == DType::i64 ? *reinterpret_cast<const int64_t*>(p)
                         : *reinterpret_cast<const int32_t*>(p);
}

// Calls f(offset in a, offset in b) for every index element: a's offset has
// the index value as its `dim` coordinate, b's the element's own coordinates.
// Lines along `dim` (all other coordinates fixed) run in parallel: two lines
// never reach the same element of a (their other coordinates differ; a is a
// fresh dense output or only read), and each line runs in order, so
// scatter_add sums every element's contributions in index order as before.
template <typename F>
void for_each_index(const Tensor& index, const Tensor& a, const Tensor& b, int64_t dim,
                    const char* op, int64_t bound, F f) {
  const Dims& sh = index.shape();
  const int64_t n = index.numel();
  if (n == 0) return;
  const char* ip = static_cast<const char*>(index.data_ptr());
  const int64_t ies = static_cast<int64_t>(index.element_size());
  const int64_t rank = index.dim();
  const int64_t len = rank == 0 ? 1 : sh[static_cast<size_t>(dim)];
  const int64_t is = rank == 0 ? 0 : index.strides()[static_cast<size_t>(dim)];
  const int64_t bs = rank == 0 ? 0 : b.strides()[static_cast<size_t>(dim)];
  const int64_t as = a.dim() == 0 ? 0 : a.strides()[static_cast<size_t>(dim)];
  auto lines = [&](int64_t l0, int64_t l1) {
    for (int64_t line = l0; line < l1; ++line) {
      int64_t rem = line, ioff = 0, aoff = 0, boff = 0;
      for (int64_t d = rank; d-- > 0;) {
        if (d == dim) continue;
        const size_t u = static_cast<size_t>(d);
        const int64_t c = rem % sh[u];
        rem /= sh[u];
        ioff += c * index.strides()[u];
        aoff += c * a.strides()[u];
        boff += c * b.strides()[u];
      }
      for (int64_t k = 0; k < len; ++k, ioff += is, boff += bs) {
        int64_t v = read_index(ip + ioff * ies, index.dtype());
        KILN_CHECK(v >= 0 && v < bound, "[", op, "] index ", v, " is out of bounds for dimension ",
                   dim, " with size ", bound);
        f(aoff + v * as, boff);
      }
    }
  };
  parallel_for(0, n / len, std::max<int64_t>(1, kDefaultGrain / len), lines);
}

void check_gather_shapes(const Tensor& x, const Tensor& idx, int64_t d, const char* op,
                         const Tensor* src) {
  KILN_CHECK(idx.dim() == x.dim(), "[", op, "] index rank ", idx.dim(), " (shape ", idx.shape(),
             ") must equal the input rank ", x.dim(), " (shape ", x.shape(), ")");
  for (int64_t k = 0; k < x.dim(); ++k) {
    KILN_CHECK(k == d || idx.shape()[k] <= x.shape()[k], "[", op, "] index shape ", idx.shape(),
               " exceeds input shape ", x.shape(), " at dimension ", k);
    if (src)
      KILN_CHECK(idx.shape()[k] <= src->shape()[k], "[", op, "] index shape ", idx.shape(),
                 " exceeds src shape ", src->shape(), " at dimension ", k);
  }
}

void infer_gather(std::span<const Tensor> in, const Attrs& a, std::vector<TensorMeta>& out) {
  check_index_dtype(in[1], "gather");
  int64_t d = wrap_dim(a.i("dim"), in[0].dim(), "gather");
  check_gather_shapes(in[0], in[1], d, "gather", nullptr);
  out.push_back({in[0].dtype(), in[1].shape()});
}
void kernel_gather(std::span<const Tensor> in, const Attrs& a, std::span<Tensor> out) {
  const Tensor& x = in[0];
  int64_t d = wrap_dim(a.i("dim"), x.dim(), "gather");
  const char* xp = static_cast<const char*>(x.data_ptr());
  char* op = static_cast<char*>(out[0].data_ptr());
  size_t es = x.element_size();
  int64_t bound = x.dim() == 0 ? 1 : x.shape()[d];
  for_each_index(in[1], x, out[0], d, "gather", bound, [&](int64_t xo, int64_t oo) {
    std::memcpy(op + oo * static_cast<int64_t>(es), xp + xo * static_cast<int64_t>(es), es);
  });
}
void vjp_gather(const VjpArgs& a, std::vector<Tensor>& gi) {
  int64_t d = a.attrs.i("dim");
  gi[0] = scatter_add(zeros(a.in_meta[0].shape, a.grads[0].dtype(), a.grads[0].device()), d,
                      a.inputs[1], a.grads[0]);
}

void infer_index_select(std::span<const Tensor> in, const Attrs& a, std::vector<TensorMeta>& out) {
  check_index_dtype(in[1], "index_select");
  KILN_CHECK(in[1].dim() <= 1, "[index_select] index must be 0-d or 1-D, got shape ",
             in[1].shape());
  int64_t d = wrap_dim(a.i("dim"), in[0].dim(), "index_select");
  Dims shape = in[0].shape();
  if (!shape.empty()) shape[d] = in[1].numel();
  out.push_back({in[0].dtype(), shape});
}
void kernel_index_select(std::span<const Tensor> in, const Attrs& a, std::span<Tensor> out) {
  const Tensor& x = in[0];
  int64_t d = wrap_dim(a.i("dim"), x.dim(), "index_select");
  Tensor idx = in[1].reshape({-1});
  std::vector<int64_t> iv = idx.to_vector<int64_t>();
  int64_t size = x.dim() == 0 ? 1 : x.shape()[d];
  for (int64_t& v : iv) {
    KILN_CHECK(v >= 0 && v < size, "[index_select] index ", v, " is out of bounds for dimension ",
               d, " with size ", size);
  }
  if (x.dim() == 0) {
    copy_into(out[0], x);
    return;
  }
  Dims shape = x.shape();
  shape[d] = 1;
  Dims ost = out[0].strides();
  for (size_t k = 0; k < iv.size(); ++k) {
    Tensor src = as_strided(x, shape, x.strides(), x.offset() + iv[k] * x.strides()[d]);
    Tensor dst = as_strided(out[0], shape, ost, static_cast<int64_t>(k) * ost[d]);
    copy_into(dst, src);
  }
}
void vjp_index_select(const VjpArgs& a, std::vector<Tensor>& gi) {
  const Tensor& g = a.grads[0];
  const Dims& in_shape = a.in_meta[0].shape;
  if (in_shape.empty()) {
    gi[0] = sum(g);
    return;
  }
  int64_t d = wrap_dim(a.attrs.i("dim"), static_cast<int64_t>(in_shape.size()), "index_select");
  Dims ishape(in_shape.size(), 1);
  ishape[d] = a.inputs[1].numel();
  Tensor index = expand(reshape(a.inputs[1], ishape), g.shape());
  gi[0] = scatter_add(zeros(in_shape, g.dtype(), g.device()), d, index, g);
}

void infer_scatter_add(std::span<const Tensor> in, const Attrs& a, std::vector<TensorMeta>& out) {
  check_index_dtype(in[1], "scatter_add");
  int64_t d = wrap_dim(a.i("dim"), in[0].dim(), "scatter_add");
  KILN_CHECK(in[2].dim() == in[0].dim(), "[scatter_add] src rank ", in[2].dim(), " (shape ",
             in[2].shape(), ") must equal the input rank ", in[0].dim());
  check_gather_shapes(in[0], in[1], d, "scatter_add", &in[2]);
  out.push_back({in[0].dtype(), in[0].shape()});
}
void kernel_scatter_add(std::span<const Tensor> in, const Attrs& a, std::span<Tensor> out) {
  Tensor& o = out[0];
  copy_into(o, in[0]);
  int64_t d = wrap_dim(a.i("dim"), o.dim(), "scatter_add");
  Tensor src = to_dtype_raw(in[2], o.dtype());
  int64_t bound = o.dim() == 0 ? 1 : o.shape()[d];
  visit_dtype(o.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    T* op = static_cast<T*>(o.data_ptr());
    const T* sp = static_cast<const T*>(src.data_ptr());
    // Index entries of one line may hit the same output element: lines run in order.
    for_each_index(in[1], o, src, d, "scatter_add", bound, [&](int64_t oo, int64_t so) {
      if constexpr (std::is_same_v<T, bool>)
        op[oo] = op[oo] || sp[so];
      else
        op[oo] = static_cast<T>(static_cast<C>(op[oo]) + static_cast<C>(sp[so]));
    });
  });
}
void vjp_scatter_add(const VjpArgs& a, std::vector<Tensor>& gi) {
  const Tensor& g = a.grads[0];
  int64_t d = a.attrs.i("dim");
  if (a.needs(0)) gi[0] = g;
  if (a.needs(2)) {
    Tensor gs = gather(g, d, a.inputs[1]);
    // Positions of src that the index does not cover get no gradient.
    const Dims& src_shape = a.in_meta[2].shape;
    if (!(gs.shape() == src_shape)) {
      Dims pads;
      for (size_t k = src_shape.size(); k-- > 0;) {
        pads.push_back(0);
        pads.push_back(src_shape[k] - gs.shape()[k]);
      }
      gs = pad(gs, pads, 0.0);
    }
    gi[2] = gs;
  }
}

void set(OpTable& t, OpId id, InferFn inf, KernelFn k, VjpFn v, uint8_t saves,
         uint32_t nondiff = 0) {
  OpInfo& e = t[id];
  e.infer = inf;
  e.kernel = k;
  e.vjp = v;
  e.saves = saves;
  e.nondiff_inputs = nondiff;
}

}  // namespace

void register_movement(OpTable& t) {
  set(t, OpId::reshape, infer_reshape, kernel_reshape, vjp_reshape, kSaveNone);
  set(t, OpId::permute, infer_permute, kernel_permute, vjp_permute, kSaveNone);
  set(t, OpId::expand, infer_expand, kernel_expand, vjp_identity, kSaveNone);
  set(t, OpId::slice, infer_slice, kernel_slice, vjp_slice, kSaveNone);
  set(t, OpId::copy, infer_same, kernel_copy, vjp_identity, kSaveNone);
  set(t, OpId::pad, infer_pad, kernel_pad, vjp_pad, kSaveNone);
  set(t, OpId::cat, infer_cat, kernel_cat, vjp_cat, kSaveNone);
  set(t, OpId::gather, infer_gather, kernel_gather, vjp_gather, kSaveInputs, 2u);
  set(t, OpId::index_select, infer_index_select, kernel_index_select, vjp_index_select, kSaveInputs,
      2u);
  set(t, OpId::scatter_add, infer_scatter_add, kernel_scatter_add, vjp_scatter_add, kSaveInputs,
      2u);
}

}  // namespace ops
}  // namespace kiln
