// 2-D pooling of the conv family: max_pool2d (values + flat indices),
// avg_pool2d and its adjoint avg_pool2d_grad. Inputs are [C, H, W] or
// [N, C, H, W]; each (n, c) plane is independent, so planes run in parallel.
#include <bit>
#include <cmath>
#include <limits>

#include "ops/gemm.h"
#include "ops/helpers.h"
#include "ops/pool.h"

namespace kiln {
namespace ops {
namespace {

struct PoolGeom {
  bool batched;
  int64_t N, C, H, W;
  int64_t kH, kW, sh, sw, ph, pw, dh, dw;
  int64_t Ho, Wo;
  Dims out_shape() const { return batched ? Dims{N, C, Ho, Wo} : Dims{C, Ho, Wo}; }
};

PoolGeom pool_geom(const Dims& xs, const Attrs& at, const char* op, bool dilated) {
  KILN_CHECK(xs.size() == 3 || xs.size() == 4, "[", op,
             "] expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got shape ", xs);
  PoolGeom g{};
  g.batched = xs.size() == 4;
  const size_t o = g.batched ? 1 : 0;
  g.N = g.batched ? xs[0] : 1;
  g.C = xs[o];
  g.H = xs[o + 1];
  g.W = xs[o + 2];
  KILN_CHECK(g.N >= 0 && g.C > 0 && g.H > 0 && g.W > 0, "[", op,
             "] expected non-empty C, H and W in input of shape ", xs);
  KILN_CHECK(at.has("kernel_size"), "[", op, "] missing attribute kernel_size");
  Dims k = pair_attr(at, "kernel_size", 1, op);
  // An empty stride means stride = kernel_size (PyTorch's default).
  bool has_stride = at.has("stride") && !at.dims("stride").empty();
  Dims s = has_stride ? pair_attr(at, "stride", 1, op) : k;
  Dims p = pair_attr(at, "padding", 0, op);
  Dims d = dilated ? pair_attr(at, "dilation", 1, op) : Dims{1, 1};
  KILN_CHECK(k[0] > 0 && k[1] > 0, "[", op, "] kernel_size must be positive, got ", k);
  KILN_CHECK(s[0] > 0 && s[1] > 0, "[", op, "] stride must be positive, got ", s);
  KILN_CHECK(p[0] >= 0 && p[1] >= 0, "[", op, "] padding must be non-negative, got ", p);
  KILN_CHECK(d[0] > 0 && d[1] > 0, "[", op, "] dilation must be positive, got ", d);
  // Overflow-checked: the attributes may be anything a user passes.
  const int64_t ekh = checked_add(checked_mul(d[0], k[0] - 1, op), 1, op),
                ekw = checked_add(checked_mul(d[1], k[1] - 1, op), 1, op);
  KILN_CHECK(p[0] <= ekh / 2 && p[1] <= ekw / 2, "[", op, "] padding ", p,
             " should be at most half of the effective kernel size [", ekh, ", ", ekw, "]");
  const int64_t nh = g.H - (ekh - 2 * p[0]), nw = g.W - (ekw - 2 * p[1]);  // 2p <= ekh
  KILN_CHECK(nh >= 0 && nw >= 0, "[", op, "] input of shape ", xs, " is too small for kernel ", k,
             " with padding ", p, " and dilation ", d, ": the output would be empty");
  g.kH = k[0];
  g.kW = k[1];
  g.sh = s[0];
  g.sw = s[1];
  g.ph = p[0];
  g.pw = p[1];
  g.dh = d[0];
  g.dw = d[1];
  g.Ho = nh / g.sh + 1;
  g.Wo = nw / g.sw + 1;
  return g;
}

// Taps [k0, k1) of a window starting at `start` (step d, k taps) inside [0, n).
inline void tap_range(int64_t start, int64_t d, int64_t k, int64_t n, int64_t& k0, int64_t& k1) {
  if (start >= 0 && start + (k - 1) * d < n) {  // interior: no division
    k0 = 0;
    k1 = k;
    return;
  }
  k0 = start >= 0 ? 0 : (-start + d - 1) / d;
  k1 = start > n - 1 ? 0 : std::min(k, (n - 1 - start) / d + 1);
  if (k1 < k0) k1 = k0;
}

template <typename C>
constexpr bool is_nan(C v) {
  if constexpr (std::is_floating_point_v<C>)
    return v != v;
  else
    return false;
}

int64_t plane_grain(const PoolGeom& g) {
  return std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(g.Ho * g.Wo * g.kH * g.kW, 1));
}

// ---- max_pool2d ----
void infer_max(std::span<const Tensor> in, const Attrs& at, std::vector<TensorMeta>& out) {
  KILN_CHECK(in[0].dtype() != DType::b8, "[max_pool2d] is not supported on bool tensors (shape ",
             in[0].shape(), ")");
  PoolGeom g = pool_geom(in[0].shape(), at, "max_pool2d", true);
  out.push_back({in[0].dtype(), g.out_shape()});
  out.push_back({DType::i64, g.out_shape()});
}

// t ? a : b without a branch: the compiler turns that ternary on floats into
// a branch, which random data mispredicts half the time.
template <typename C>
inline C select_bits(bool t, C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    using U = std::conditional_t<sizeof(C) == 8, uint64_t, uint32_t>;
    const U m = U(0) - U(t);
    return std::bit_cast<C>(static_cast<U>((std::bit_cast<U>(a) & m) | (std::bit_cast<U>(b) & ~m)));
  } else {
    return t ? a : b;
  }
}

// The common 2x2 window with stride 2, no padding or dilation, contiguous rows
// (every CNN's pooling): four taps per output in the general loop's order (the
// first maximum and the first NaN win), selected without branches; 6-7x
// faster than the general loop on random data.
template <typename T>
void max_pool_2x2(const T* xp, const PoolGeom& geom, int64_t sN, int64_t sC, int64_t sH, T* y,
                  int64_t* yi) {
  using C = compute_t<T>;
  parallel_for(0, geom.N * geom.C, plane_grain(geom), [&](int64_t p0, int64_t p1) {
    const int64_t W = geom.W, Ho = geom.Ho, Wo = geom.Wo;
    for (int64_t p = p0; p < p1; ++p) {
      const T* X = xp + (p / geom.C) * sN + (p % geom.C) * sC;
      for (int64_t oh = 0; oh < Ho; ++oh) {
        const T* r0 = X + 2 * oh * sH;
        const T* r1 = r0 + sH;
        T* yr = y + (p * Ho + oh) * Wo;
        int64_t* ir = yi + (p * Ho + oh) * Wo;
        for (int64_t ow = 0; ow < Wo; ++ow) {
          C b = C(r0[2 * ow]);
          int64_t k = 0;
          // (v > b or v is NaN) and b is not NaN, i.e. !(v <= b) and b == b.
          auto tap = [&](C v, int64_t at) {
            const bool t = !(v <= b) & !is_nan(b);
            b = select_bits(t, v, b);
            const int64_t m = -static_cast<int64_t>(t);
            k = (at & m) | (k & ~m);
          };
          tap(C(r0[2 * ow + 1]), 1);
          tap(C(r1[2 * ow]), W);
          tap(C(r1[2 * ow + 1]), W + 1);
          yr[ow] = T(b);
          ir[ow] = 2 * oh * W + 2 * ow + k;
        }
      }
    }
  });
}

template <typename T>
void max_pool(const Tensor& x, const PoolGeom& geom, T* y, int64_t* yi) {
  using C = compute_t<T>;
  const T* xp = static_cast<const T*>(x.data_ptr());
  const Dims& st = x.strides();
  const size_t o = geom.batched ? 1 : 0;
  const int64_t sN = geom.batched ? st[0] : 0, sC = st[o], sH = st[o + 1], sW = st[o + 2];
  const int64_t L = geom.Ho * geom.Wo;
  if (geom.kH == 2 && geom.kW == 2 && geom.sh == 2 && geom.sw == 2 && geom.ph == 0 &&
      geom.pw == 0 && geom.dh == 1 && geom.dw == 1 && sW == 1) {
    max_pool_2x2(xp, geom, sN, sC, sH, y, yi);
    return;
  }
  parallel_for(0, geom.N * geom.C, plane_grain(geom), [&](int64_t p0, int64_t p1) {
    const PoolGeom g = geom;  // a local copy: the output stores cannot alias it
    for (int64_t p = p0; p < p1; ++p) {
      const T* X = xp + (p / g.C) * sN + (p % g.C) * sC;
      for (int64_t oh = 0; oh < g.Ho; ++oh) {
        const int64_t hs = oh * g.sh - g.ph;
        int64_t k0, k1;
        tap_range(hs, g.dh, g.kH, g.H, k0, k1);
        for (int64_t ow = 0; ow < g.Wo; ++ow) {
          const int64_t ws = ow * g.sw - g.pw;
          int64_t j0, j1;
          tap_range(ws, g.dw, g.kW, g.W, j0, j1);
          C best = std::is_floating_point_v<C> ? -std::numeric_limits<C>::infinity()
                                               : std::numeric_limits<C>::lowest();
          // A window of padding only (possible with dilation) points at its
          // clipped start, like PyTorch.
          int64_t bi =
              std::clamp<int64_t>(hs, 0, g.H - 1) * g.W + std::clamp<int64_t>(ws, 0, g.W - 1);
          if (k0 < k1 && j0 < j1) {
            best = C(X[(hs + k0 * g.dh) * sH + (ws + j0 * g.dw) * sW]);
            bi = (hs + k0 * g.dh) * g.W + ws + j0 * g.dw;
            // Strict >: the first maximum wins; the first NaN wins for good.
            // Branch-free selects: on real data the comparison is unpredictable.
            for (int64_t ki = k0; ki < k1; ++ki) {
              const int64_t ih = hs + ki * g.dh;
              const T* row = X + ih * sH;
              for (int64_t kj = j0; kj < j1; ++kj) {
                const int64_t iw = ws + kj * g.dw;
                const C v = C(row[iw * sW]);
                const bool take = ((v > best) | is_nan(v)) & !is_nan(best);
                best = take ? v : best;
                bi = take ? ih * g.W + iw : bi;
              }
            }
          }
          y[p * L + oh * g.Wo + ow] = T(best);
          yi[p * L + oh * g.Wo + ow] = bi;
        }
      }
    }
  });
}

void kernel_max(std::span<const Tensor> in, const Attrs& at, std::span<Tensor> out) {
  PoolGeom g = pool_geom(in[0].shape(), at, "max_pool2d", true);
  if (out[0].numel() == 0) return;
  visit_dtype(in[0].dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>)
      max_pool<T>(in[0], g, static_cast<T*>(out[0].data_ptr()), out[1].data<int64_t>());
  });
}

// The gradient goes to each window's maximum: scatter-add into flat planes.
void vjp_max(const VjpArgs& a, std::vector<Tensor>& gi) {
  const Tensor& g = a.grads[0];
  if (!g.defined()) return;
  const Dims& xs = a.in_meta[0].shape;
  const Tensor& idx = a.outputs[1];
  const bool batched = xs.size() == 4;
  const int64_t H = xs[xs.size() - 2], W = xs[xs.size() - 1];
  const int64_t Ho = g.size(-2), Wo = g.size(-1);
  Dims fx = batched ? Dims{xs[0], xs[1], H * W} : Dims{xs[0], H * W};
  Dims fy = batched ? Dims{xs[0], xs[1], Ho * Wo} : Dims{xs[0], Ho * Wo};
  const int64_t dim = batched ? 2 : 1;
  // The zeros as one broadcast element: scatter_add's copy of its base is then
  // a fill (one write) instead of a zeroed buffer copied (a write, then a read
  // and a write).
  const Tensor base = zeros({}, g.dtype(), g.device()).expand(fx);
  Tensor r = scatter_add(base, dim, reshape(idx, fy), reshape(g, fy));
  gi[0] = reshape(r, xs);
}

// ---- avg_pool2d and avg_pool2d_grad ----
// Window of output (oh, ow) clipped to the input, and its divisor.
struct Window {
  int64_t h0, h1, w0, w1, div;
};
inline Window window(const PoolGeom& g, int64_t oh, int64_t ow, bool count_pad) {
  int64_t h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw;
  int64_t h1 = std::min(h0 + g.kH, g.H + g.ph), w1 = std::min(w0 + g.kW, g.W + g.pw);
  const int64_t padded = (h1 - h0) * (w1 - w0);
  h0 = std::max<int64_t>(h0, 0);
  w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, g.H);
  w1 = std::min(w1, g.W);
  const int64_t div = count_pad ? padded : (h1 - h0) * (w1 - w0);
  return {h0, h1, w0, w1, std::max<int64_t>(div, 1)};
}

// Sum of a window's elements in double. Rows of 8 or more taps go in 8
// partial sums (one dependent add per element made a global 32x32 pool
// latency-bound; the lanes vectorize): f32 terms add exactly in double unless
// their exponents span more than 29 binades, so the order rarely shows in the
// rounded result (f64 terms: a few ulps of the sum). Narrower windows keep the
// plain row-major order.
template <typename T>
double window_sum(const T* X, int64_t W, const Window& w) {
  constexpr int64_t kL = 8;
  double acc[kL] = {};
  double s = 0;
  for (int64_t ih = w.h0; ih < w.h1; ++ih) {
    const T* row = X + ih * W;
    int64_t iw = w.w0;
    for (; iw + kL <= w.w1; iw += kL)
      for (int64_t j = 0; j < kL; ++j) acc[j] += double(compute_t<T>(row[iw + j]));
    for (; iw < w.w1; ++iw) s += double(compute_t<T>(row[iw]));
  }
  for (int64_t h = kL / 2; h > 0; h /= 2)
    for (int64_t j = 0; j < h; ++j) acc[j] += acc[j + h];
  return w.w1 - w.w0 >= kL ? acc[0] + s : s;
}

void check_float(const Tensor& x, const char* op) {
  KILN_CHECK(is_floating(x.dtype()), "[", op, "] expected a floating dtype, got ", x.dtype(),
             " (shape ", x.shape(), ")");
}

bool count_pad(const Attrs& at) {
  return at.has("count_include_pad") ? at.b("count_include_pad") : true;
}

void infer_avg(std::span<const Tensor> in, const Attrs& at, std::vector<TensorMeta>& out) {
  check_float(in[0], "avg_pool2d");
  PoolGeom g = pool_geom(in[0].shape(), at, "avg_pool2d", false);
  out.push_back({in[0].dtype(), g.out_shape()});
}

void kernel_avg(std::span<const Tensor> in, const Attrs& at, std::span<Tensor> out) {
  PoolGeom g = pool_geom(in[0].shape(), at, "avg_pool2d", false);
  if (out[0].numel() == 0) return;
  const bool cp = count_pad(at);
  const int64_t L = g.Ho * g.Wo;
  visit_dtype(in[0].dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<compute_t<T>>) {
      Tensor x = contiguous_raw(in[0], in[0].dtype());
      const T* xp = static_cast<const T*>(x.data_ptr());
      T* y = static_cast<T*>(out[0].data_ptr());
      parallel_for(0, g.N * g.C, plane_grain(g), [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) {
          const T* X = xp + p * g.H * g.W;
          for (int64_t oh = 0; oh < g.Ho; ++oh) {
            for (int64_t ow = 0; ow < g.Wo; ++ow) {
              const Window w = window(g, oh, ow, cp);
              const double s = window_sum(X, g.W, w);
              y[p * L + oh * g.Wo + ow] = T(static_cast<compute_t<T>>(s / double(w.div)));
            }
          }
        }
      });
    }
  });
}

PoolGeom avg_grad_geom(const Tensor& g, const Attrs& at) {
  const char* op = "avg_pool2d_grad";
  KILN_CHECK(at.has("input_shape"), "[", op, "] missing attribute input_shape");
  const Dims& xs = at.dims("input_shape");
  PoolGeom geom = pool_geom(xs, at, op, false);
  KILN_CHECK(g.shape() == geom.out_shape(), "[", op, "] grad of shape ", g.shape(),
             " does not match the avg_pool2d output shape ", geom.out_shape(), " of input shape ",
             xs);
  return geom;
}

void infer_avg_grad(std::span<const Tensor> in, const Attrs& at, std::vector<TensorMeta>& out) {
  check_float(in[0], "avg_pool2d_grad");
  avg_grad_geom(in[0], at);
  out.push_back({in[0].dtype(), at.dims("input_shape")});
}

void kernel_avg_grad(std::span<const Tensor> in, const Attrs& at, std::span<Tensor> out) {
  PoolGeom g = avg_grad_geom(in[0], at);
  if (out[0].numel() == 0) return;
  const bool cp = count_pad(at);
  const int64_t L = g.Ho * g.Wo;
  // Accumulate in f32/f64 (overlapping windows add up), then cast into out.
  const DType ct = out[0].dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor gy = contiguous_raw(in[0], ct);
  Tensor gx = out[0].dtype() == ct ? out[0] : make_tensor(out[0].shape(), ct);
  visit_dtype(ct, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      const T* gp = static_cast<const T*>(gy.data_ptr());
      T* xp = static_cast<T*>(gx.data_ptr());
      parallel_for(0, g.N * g.C, plane_grain(g), [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) {
          T* X = xp + p * g.H * g.W;
          std::fill(X, X + g.H * g.W, T(0));
          for (int64_t oh = 0; oh < g.Ho; ++oh) {
            for (int64_t ow = 0; ow < g.Wo; ++ow) {
              const Window w = window(g, oh, ow, cp);
              const T v = gp[p * L + oh * g.Wo + ow] / T(w.div);
              for (int64_t ih = w.h0; ih < w.h1; ++ih)
                for (int64_t iw = w.w0; iw < w.w1; ++iw) X[ih * g.W + iw] += v;
            }
          }
        }
      });
    }
  });
  if (!gx.is_same(out[0])) copy_into(out[0], gx);
}

// avg_pool2d and avg_pool2d_grad are adjoint linear maps.
void vjp_avg(const VjpArgs& a, std::vector<Tensor>& gi) {
  Attrs at = a.attrs;
  at.set("input_shape", a.in_meta[0].shape);
  gi[0] = dispatch1(OpId::avg_pool2d_grad, {a.grads[0]}, at);
}
void vjp_avg_grad(const VjpArgs& a, std::vector<Tensor>& gi) {
  gi[0] = dispatch1(OpId::avg_pool2d, {a.grads[0]}, a.attrs);
}

}  // namespace

void register_pool_ops(OpTable& t) {
  OpInfo& m = t[OpId::max_pool2d];
  m.infer = infer_max;
  m.kernel = kernel_max;
  m.vjp = vjp_max;
  m.saves = kSaveOutputs;  // the indices
  OpInfo& a = t[OpId::avg_pool2d];
  a.infer = infer_avg;
  a.kernel = kernel_avg;
  a.vjp = vjp_avg;
  a.saves = kSaveNone;
  OpInfo& ag = t[OpId::avg_pool2d_grad];
  ag.infer = infer_avg_grad;
  ag.kernel = kernel_avg_grad;
  ag.vjp = vjp_avg_grad;
  ag.saves = kSaveNone;
}

}  // namespace ops

namespace {
Attrs pool_attrs(const Pool2dOptions& o, bool is_max) {
  Attrs at;
  at.set("kernel_size", o.kernel_size)
      .set("stride", o.stride.empty() ? o.kernel_size : o.stride)
      .set("padding", o.padding);
  if (is_max)
    at.set("dilation", o.dilation);
  else
    at.set("count_include_pad", AttrValue(o.count_include_pad));
  return at;
}
}  // namespace

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const Pool2dOptions& opts) {
  auto outs = dispatch(OpId::max_pool2d, std::span<const Tensor>(&x, 1), pool_attrs(opts, true));
  return {outs[0], outs[1]};
}

Tensor max_pool2d(const Tensor& x, const Pool2dOptions& opts) {
  return max_pool2d_with_indices(x, opts).first;
}

Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& opts) {
  return dispatch1(OpId::avg_pool2d, {x}, pool_attrs(opts, false));
}

}  // namespace kiln
