// 2-D convolution as im2col + GEMM (per image and group) or, for unit stride,
// the direct kernels of conv_direct.cpp; its two gradient primitives, and the
// public conv2d (which adds the bias). The pooling ops of this family live in
// pool.cpp.
//
// conv2d_grad_input and conv2d_grad_weight are the adjoints of conv2d in each
// argument, so their own derivatives are again these three primitives: double
// backward through a convolution needs no new kernels.
#include "autograd_internal.h"
#include "ops/conv_direct.h"
#include "ops/gemm.h"
#include "ops/helpers.h"
#include "ops/pool.h"
#include "ops/registry.h"

namespace kiln {
namespace ops {
namespace {

// Geometry of one convolution, validated.
struct ConvGeom {
  int64_t N, C, H, W;     // input
  int64_t O, Cg, kH, kW;  // weight (Cg = C / groups)
  int64_t Ho, Wo;         // output
  int64_t sh, sw, ph, pw, dh, dw, groups;
  int64_t Og() const { return O / groups; }
  int64_t kdim() const { return Cg * kH * kW; }  // rows of the im2col matrix
  int64_t L() const { return Ho * Wo; }          // columns of the im2col matrix
  // 1x1, stride 1, no padding: the input already is the im2col matrix.
  bool direct() const { return kH == 1 && kW == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0; }
  Dims out_shape() const { return {N, O, Ho, Wo}; }
};

ConvGeom conv_geom(const Dims& xs, const Dims& ws, const Attrs& at, const char* op) {
  KILN_CHECK(xs.size() == 4, "[", op, "] expected a 4-D input [N, C, H, W], got shape ", xs);
  KILN_CHECK(ws.size() == 4, "[", op, "] expected a 4-D weight [O, C/groups, kH, kW], got shape ",
             ws);
  Dims st = pair_attr(at, "stride", 1, op), pd = pair_attr(at, "padding", 0, op),
       dl = pair_attr(at, "dilation", 1, op);
  int64_t groups = at.has("groups") ? at.i("groups") : 1;
  KILN_CHECK(st[0] > 0 && st[1] > 0, "[", op, "] stride must be positive, got ", st);
  KILN_CHECK(pd[0] >= 0 && pd[1] >= 0, "[", op, "] padding must be non-negative, got ", pd);
  KILN_CHECK(dl[0] > 0 && dl[1] > 0, "[", op, "] dilation must be positive, got ", dl);
  KILN_CHECK(groups > 0, "[", op, "] groups must be positive, got ", groups);
  for (int64_t s : xs) KILN_CHECK(s >= 0, "[", op, "] invalid input shape ", xs);
  KILN_CHECK(ws[0] >= 0 && ws[1] >= 0 && ws[2] > 0 && ws[3] > 0, "[", op, "] invalid weight shape ",
             ws, " (kernel sizes must be positive)");
  const int64_t channels = checked_mul(ws[1], groups, op);
  KILN_CHECK(xs[1] == channels, "[", op, "] input of shape ", xs, " has ", xs[1],
             " channels, but weight of shape ", ws, " with groups=", groups, " expects ", channels);
  KILN_CHECK(ws[0] % groups == 0, "[", op, "] weight of shape ", ws, " has ", ws[0],
             " output channels, not divisible by groups=", groups);
  ConvGeom g{xs[0], xs[1], xs[2], xs[3], ws[0], ws[1], ws[2], ws[3], 0,
             0,     st[0], st[1], pd[0], pd[1], dl[0], dl[1], groups};
  // Padded extent and kernel span per spatial dim, overflow-checked (huge padding).
  auto padded = [&](int64_t n, int64_t p) { return checked_add(n, checked_mul(2, p, op), op); };
  auto span = [&](int64_t d, int64_t k) { return checked_add(checked_mul(d, k - 1, op), 1, op); };
  const int64_t ph = padded(g.H, g.ph), pw = padded(g.W, g.pw);
  const int64_t kh = span(g.dh, g.kH), kw = span(g.dw, g.kW);
  const int64_t nh = ph - kh, nw = pw - kw;
  KILN_CHECK(nh >= 0 && nw >= 0, "[", op, "] input of shape ", xs, " (", ph, " x ", pw,
             " after padding) is smaller than the kernel of weight shape ", ws, " (", kh, " x ", kw,
             " with dilation): the output would be empty");
  g.Ho = nh / g.sh + 1;
  g.Wo = nw / g.sw + 1;
  // The output and each image's im2col buffer [Cg*kH*kW, Ho*Wo] must be addressable.
  check_shape({g.N, g.O, g.Ho, g.Wo}, op, "output shape");
  check_shape({g.Cg, g.kH, g.kW, g.Ho, g.Wo}, op, "im2col buffer");
  return g;
}

void check_dtypes(const Tensor& a, const Tensor& b, const char* op, const char* an,
                  const char* bn) {
  KILN_CHECK(a.dtype() == b.dtype(), "[", op, "] expected ", an, " and ", bn,
             " to have the same dtype, got ", a.dtype(), " and ", b.dtype(), " (shapes ", a.shape(),
             " and ", b.shape(), ")");
  KILN_CHECK(is_floating(a.dtype()), "[", op, "] expected a floating dtype, got ", a.dtype(),
             " (shapes ", a.shape(), " and ", b.shape(), ")");
}

// [a, b) of output positions o with 0 <= o * s + off < n.
inline void valid_range(int64_t n, int64_t s, int64_t off, int64_t count, int64_t& a, int64_t& b) {
  a = off >= 0 ? 0 : (-off + s - 1) / s;
  b = n - 1 - off < 0 ? 0 : (n - 1 - off) / s + 1;
  a = std::min(a, count);
  b = std::min(b, count);
  if (b < a) b = a;
}

// col [Cg*kH*kW, Ho*Wo] from the Cg input planes at x (contiguous).
template <typename T>
void im2col(const T* x, const ConvGeom& g, T* col) {
  const int64_t kk = g.kH * g.kW, L = g.L();
  const int64_t grain = std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(L, 1));
  parallel_for(0, g.kdim(), grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t c = r / kk, ki = (r / g.kW) % g.kH, kj = r % g.kW;
      const T* src = x + c * g.H * g.W;
      T* dst = col + r * L;
      const int64_t offw = kj * g.dw - g.pw;
      int64_t w0, w1;
      valid_range(g.W, g.sw, offw, g.Wo, w0, w1);
      for (int64_t oh = 0; oh < g.Ho; ++oh) {
        T* d = dst + oh * g.Wo;
        const int64_t ih = oh * g.sh - g.ph + ki * g.dh;
        if (ih < 0 || ih >= g.H) {
          std::fill(d, d + g.Wo, T(0));
          continue;
        }
        std::fill(d, d + w0, T(0));
        const T* s = src + ih * g.W;
        if (g.sw == 1) {
          for (int64_t ow = w0; ow < w1; ++ow) d[ow] = s[ow + offw];
        } else {
          for (int64_t ow = w0; ow < w1; ++ow) d[ow] = s[ow * g.sw + offw];
        }
        std::fill(d + w1, d + g.Wo, T(0));
      }
    }
  });
}

// Adds col [Cg*kH*kW, Ho*Wo] back into the Cg (zeroed) planes at x. Each
// channel only receives its own rows, so channels run in parallel.
template <typename T>
void col2im(const T* col, const ConvGeom& g, T* x) {
  const int64_t kk = g.kH * g.kW, L = g.L();
  const int64_t grain = std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(kk * L, 1));
  parallel_for(0, g.Cg, grain, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      T* dst = x + c * g.H * g.W;
      for (int64_t ki = 0; ki < g.kH; ++ki) {
        for (int64_t kj = 0; kj < g.kW; ++kj) {
          const T* src = col + (c * kk + ki * g.kW + kj) * L;
          const int64_t offw = kj * g.dw - g.pw;
          int64_t w0, w1;
          valid_range(g.W, g.sw, offw, g.Wo, w0, w1);
          for (int64_t oh = 0; oh < g.Ho; ++oh) {
            const int64_t ih = oh * g.sh - g.ph + ki * g.dh;
            if (ih < 0 || ih >= g.H) continue;
            T* d = dst + ih * g.W;
            const T* s = src + oh * g.Wo;
            for (int64_t ow = w0; ow < w1; ++ow) d[ow * g.sw + offw] += s[ow];
          }
        }
      }
    }
  });
}

// ---- the three kernels, in the compute type T (float or double) ----
// Images run in parallel, whole GEMMs per core (inside parallel_for gemm()
// does not split); each range of images has its own im2col buffer. A single
// image runs inline, and its GEMMs split over the pool.

// Images per task: about a million multiply-adds of GEMM work.
int64_t image_grain(const ConvGeom& g) {
  const int64_t macs = std::max<int64_t>(1, g.O * g.kdim() * g.L());
  return std::max<int64_t>(1, (int64_t{1} << 20) / macs);
}

// The GEMM operand of one image's group planes at xg: the planes themselves
// for a direct (1x1, unit stride, no padding) conv, else their im2col in col.
template <typename T>
const T* image_cols(const T* xg, const ConvGeom& g, std::vector<T>& col) {
  if (g.direct()) return xg;
  im2col(xg, g, col.data());
  return col.data();
}

DirectConvShape direct_shape(const ConvGeom& g) {
  return {g.N,  g.C,  g.H,  g.W,  g.O,  g.kH, g.kW, g.Ho,
          g.Wo, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.groups};
}

template <typename T>
void conv_fwd(const T* x, const T* w, T* y, const ConvGeom& g) {
  const DirectConvShape ds = direct_shape(g);
  if (direct_conv_applies(ds)) {  // unit stride: no im2col (conv_direct.cpp)
    direct_conv_forward(x, w, y, ds);
    return;
  }
  const int64_t Og = g.Og(), K = g.kdim(), L = g.L();
  parallel_for(0, g.N, image_grain(g), [&](int64_t n0, int64_t n1) {
    std::vector<T> col(g.direct() ? 0 : static_cast<size_t>(K * L));
    for (int64_t n = n0; n < n1; ++n) {
      for (int64_t gr = 0; gr < g.groups; ++gr) {
        const T* b = image_cols(x + (n * g.C + gr * g.Cg) * g.H * g.W, g, col);
        gemm<T>(false, false, Og, L, K, w + gr * Og * K, K, b, L, y + (n * g.O + gr * Og) * L, L,
                false, "conv2d");
      }
    }
  });
}

// With stride 1 and padding p <= d (k - 1) (both dims; "same" 3x3 included),
// the input gradient is itself a convolution: of gy padded by d (k - 1) - p,
// by the weight flipped in space with its two channel roles swapped
// (wt[c, o, i, j] = w[o, c, kH-1-i, kW-1-j] within each group). That is one
// im2col + GEMM per image, as forward, instead of a tall GEMM into a column
// buffer and col2im's scattered adds. Returns false for other convolutions.
template <typename T>
bool conv_grad_input_as_conv(const T* gy, const T* w, T* gx, const ConvGeom& g) {
  const int64_t ph = g.dh * (g.kH - 1) - g.ph, pw = g.dw * (g.kW - 1) - g.pw;
  if (g.sh != 1 || g.sw != 1 || g.direct() || ph < 0 || pw < 0) return false;
  const int64_t Og = g.Og(), kk = g.kH * g.kW;
  const ConvGeom t{g.N, g.O, g.Ho, g.Wo, g.C, Og,   g.kH, g.kW,    g.H,
                   g.W, 1,   1,    ph,   pw,  g.dh, g.dw, g.groups};
  std::vector<T> wt(static_cast<size_t>(g.O * g.Cg * kk));
  for (int64_t gr = 0; gr < g.groups; ++gr)
    for (int64_t o = 0; o < Og; ++o)
      for (int64_t c = 0; c < g.Cg; ++c) {
        const T* src = w + ((gr * Og + o) * g.Cg + c) * kk;
        T* dst = wt.data() + ((gr * g.Cg + c) * Og + o) * kk;
        for (int64_t k = 0; k < kk; ++k) dst[k] = src[kk - 1 - k];  // flip both spatial dims
      }
  conv_fwd(gy, wt.data(), gx, t);
  return true;
}

template <typename T>
void conv_grad_input(const T* gy, const T* w, T* gx, const ConvGeom& g) {
  if (conv_grad_input_as_conv(gy, w, gx, g)) return;
  const int64_t Og = g.Og(), K = g.kdim(), L = g.L();
  parallel_for(0, g.N, image_grain(g), [&](int64_t n0, int64_t n1) {
    std::fill(gx + n0 * g.C * g.H * g.W, gx + n1 * g.C * g.H * g.W, T(0));
    std::vector<T> col(g.direct() ? 0 : static_cast<size_t>(K * L));
    for (int64_t n = n0; n < n1; ++n) {
      for (int64_t gr = 0; gr < g.groups; ++gr) {
        T* xg = gx + (n * g.C + gr * g.Cg) * g.H * g.W;
        const T* gyg = gy + (n * g.O + gr * Og) * L;
        // col = W_g^T @ grad_g; a direct conv writes straight into the planes.
        T* c = g.direct() ? xg : col.data();
        gemm<T>(true, false, K, L, Og, w + gr * Og * K, K, gyg, L, c, L, false,
                "conv2d_grad_input");
        if (!g.direct()) col2im(col.data(), g, xg);
      }
    }
  });
}

template <typename T>
void conv_grad_weight(const T* x, const T* gy, T* gw, const ConvGeom& g) {
  const DirectConvShape ds = direct_shape(g);
  if (direct_conv_grad_weight_applies(ds)) {  // unit stride: conv_direct.cpp
    direct_conv_grad_weight(x, gy, gw, ds);
    return;
  }
  const int64_t Og = g.Og(), K = g.kdim(), L = g.L();
  // gW = sum over images of grad_n @ col_n^T: fixed blocks of images (set by
  // N alone, so results do not depend on the threads) sum into their own
  // partial gW, added up in block order.
  const int64_t blocks = std::clamp<int64_t>(g.N, 1, 16);
  const int64_t wsize = g.O * K;
  std::vector<T> part(static_cast<size_t>(std::max<int64_t>(blocks - 1, 0) * wsize));
  auto dst = [&](int64_t blk) { return blk == 0 ? gw : part.data() + (blk - 1) * wsize; };
  parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    std::vector<T> col(g.direct() ? 0 : static_cast<size_t>(K * L));
    for (int64_t blk = b0; blk < b1; ++blk) {
      T* out = dst(blk);
      std::fill(out, out + wsize, T(0));
      for (int64_t n = g.N * blk / blocks; n < g.N * (blk + 1) / blocks; ++n) {
        for (int64_t gr = 0; gr < g.groups; ++gr) {
          const T* b = image_cols(x + (n * g.C + gr * g.Cg) * g.H * g.W, g, col);
          // gW_g += grad_g @ col^T, summed over the block's images.
          gemm<T>(false, true, Og, K, L, gy + (n * g.O + gr * Og) * L, L, b, L, out + gr * Og * K,
                  K, true, "conv2d_grad_weight");
        }
      }
    }
  });
  for (int64_t blk = 1; blk < blocks; ++blk) {
    const T* p = dst(blk);
    for (int64_t i = 0; i < wsize; ++i) gw[i] += p[i];
  }
}

// Runs f(p0, p1, out) in float/double on contiguous copies of the inputs;
// f16/bf16 compute in f32 and are cast back into `out`.
template <typename F>
void run_float(const Tensor& a, const Tensor& b, const Tensor& out, F&& f) {
  const DType dt = out.dtype();
  const DType ct = dt == DType::f64 ? DType::f64 : DType::f32;
  Tensor ac = contiguous_raw(a, ct), bc = contiguous_raw(b, ct);
  Tensor oc = dt == ct ? out : make_tensor(out.shape(), ct);
  if (ct == DType::f64)
    f(ac.data<double>(), bc.data<double>(), oc.data<double>());
  else
    f(ac.data<float>(), bc.data<float>(), oc.data<float>());
  if (!oc.is_same(out)) copy_into(out, oc);
}

// ---- conv2d ----
void infer_conv(std::span<const Tensor> in, const Attrs& at, std::vector<TensorMeta>& out) {
  check_dtypes(in[0], in[1], "conv2d", "input", "weight");
  ConvGeom g = conv_geom(in[0].shape(), in[1].shape(), at, "conv2d");
  out.push_back({in[0].dtype(), g.out_shape()});
}
void kernel_conv(std::span<const Tensor> in, const Attrs& at, std::span<Tensor> out) {
  ConvGeom g = conv_geom(in[0].shape(), in[1].shape(), at, "conv2d");
  if (out[0].numel() == 0) return;
  run_float(in[0], in[1], out[0], [&](auto* x, auto* w, auto* y) { conv_fwd(x, w, y, g); });
}

// ---- conv2d_grad_input(grad, weight), attr input_shape ----
ConvGeom grad_input_geom(std::span<const Tensor> in, const Attrs& at) {
  const char* op = "conv2d_grad_input";
  KILN_CHECK(at.has("input_shape"), "[", op, "] missing attribute input_shape");
  ConvGeom g = conv_geom(at.dims("input_shape"), in[1].shape(), at, op);
  KILN_CHECK(in[0].shape() == g.out_shape(), "[", op, "] grad of shape ", in[0].shape(),
             " does not match the conv2d output shape ", g.out_shape(), " of input shape ",
             at.dims("input_shape"), " and weight shape ", in[1].shape());
  return g;
}
void infer_conv_gi(std::span<const Tensor> in, const Attrs& at, std::vector<TensorMeta>& out) {
  check_dtypes(in[0], in[1], "conv2d_grad_input", "grad", "weight");
  ConvGeom g = grad_input_geom(in, at);
  out.push_back({in[0].dtype(), {g.N, g.C, g.H, g.W}});
}
void kernel_conv_gi(std::span<const Tensor> in, const Attrs& at, std::span<Tensor> out) {
  ConvGeom g = grad_input_geom(in, at);
  if (out[0].numel() == 0) return;
  run_float(in[0], in[1], out[0],
            [&](auto* gy, auto* w, auto* gx) { conv_grad_input(gy, w, gx, g); });
}

// ---- conv2d_grad_weight(input, grad), attr weight_shape ----
ConvGeom grad_weight_geom(std::span<const Tensor> in, const Attrs& at) {
  const char* op = "conv2d_grad_weight";
  KILN_CHECK(at.has("weight_shape"), "[", op, "] missing attribute weight_shape");
  ConvGeom g = conv_geom(in[0].shape(), at.dims("weight_shape"), at, op);
  KILN_CHECK(in[1].shape() == g.out_shape(), "[", op, "] grad of shape ", in[1].shape(),
             " does not match the conv2d output shape ", g.out_shape(), " of input shape ",
             in[0].shape(), " and weight shape ", at.dims("weight_shape"));
  return g;
}
void infer_conv_gw(std::span<const Tensor> in, const Attrs& at, std::vector<TensorMeta>& out) {
  check_dtypes(in[0], in[1], "conv2d_grad_weight", "input", "grad");
  ConvGeom g = grad_weight_geom(in, at);
  out.push_back({in[0].dtype(), {g.O, g.Cg, g.kH, g.kW}});
}
void kernel_conv_gw(std::span<const Tensor> in, const Attrs& at, std::span<Tensor> out) {
  ConvGeom g = grad_weight_geom(in, at);
  if (out[0].numel() == 0) return;
  run_float(in[0], in[1], out[0],
            [&](auto* x, auto* gy, auto* gw) { conv_grad_weight(x, gy, gw, g); });
}

// ---- derivative rules ----
// The geometry attributes of `at` plus one shape attribute.
Attrs with_shape(const Attrs& at, const char* name, const Dims& shape) {
  Attrs r;
  for (const char* k : {"stride", "padding", "dilation", "groups"})
    for (const auto& [key, v] : at.items())
      if (std::strcmp(key, k) == 0) r.set(k, v);
  if (name) r.set(name, shape);
  return r;
}

Tensor call_gi(const Tensor& g, const Tensor& w, const Attrs& at, const Dims& input_shape) {
  return dispatch1(OpId::conv2d_grad_input, {g, w}, with_shape(at, "input_shape", input_shape));
}
Tensor call_gw(const Tensor& x, const Tensor& g, const Attrs& at, const Dims& weight_shape) {
  return dispatch1(OpId::conv2d_grad_weight, {x, g}, with_shape(at, "weight_shape", weight_shape));
}
Tensor call_conv(const Tensor& x, const Tensor& w, const Attrs& at) {
  return dispatch1(OpId::conv2d, {x, w}, with_shape(at, nullptr, {}));
}

void vjp_conv(const VjpArgs& a, std::vector<Tensor>& gi) {
  const Tensor& g = a.grads[0];
  if (a.needs(0)) {
    autograd::DestinationsFor only(0);
    gi[0] = call_gi(g, a.inputs[1], a.attrs, a.in_meta[0].shape);
  }
  if (a.needs(1)) {
    autograd::DestinationsFor only(1);
    gi[1] = call_gw(a.inputs[0], g, a.attrs, a.in_meta[1].shape);
  }
}
// y = grad_input(g, w): d/dg = conv2d(gy, w), d/dw = grad_weight(gy, g).
void vjp_conv_gi(const VjpArgs& a, std::vector<Tensor>& gi) {
  const Tensor& gy = a.grads[0];
  if (a.needs(0)) {
    autograd::DestinationsFor only(0);
    gi[0] = call_conv(gy, a.inputs[1], a.attrs);
  }
  if (a.needs(1)) {
    autograd::DestinationsFor only(1);
    gi[1] = call_gw(gy, a.inputs[0], a.attrs, a.in_meta[1].shape);
  }
}
// y = grad_weight(x, g): d/dx = grad_input(g, gy), d/dg = conv2d(x, gy).
void vjp_conv_gw(const VjpArgs& a, std::vector<Tensor>& gi) {
  const Tensor& gy = a.grads[0];
  if (a.needs(0)) {
    autograd::DestinationsFor only(0);
    gi[0] = call_gi(a.inputs[1], gy, a.attrs, a.in_meta[0].shape);
  }
  if (a.needs(1)) {
    autograd::DestinationsFor only(1);
    gi[1] = call_conv(a.inputs[0], gy, a.attrs);
  }
}

}  // namespace

Dims pair_attr(const Attrs& at, const char* name, int64_t dflt, const char* op) {
  if (!at.has(name)) return {dflt, dflt};
  const Dims& d = at.dims(name);
  KILN_CHECK(d.size() == 1 || d.size() == 2, "[", op, "] ", name, " must have 1 or 2 values, got ",
             d);
  return d.size() == 1 ? Dims{d[0], d[0]} : d;
}

void register_conv(OpTable& t) {
  struct Entry {
    OpId op;
    InferFn infer;
    KernelFn kernel;
    VjpFn vjp;
  };
  for (const Entry& e :
       {Entry{OpId::conv2d, infer_conv, kernel_conv, vjp_conv},
        Entry{OpId::conv2d_grad_input, infer_conv_gi, kernel_conv_gi, vjp_conv_gi},
        Entry{OpId::conv2d_grad_weight, infer_conv_gw, kernel_conv_gw, vjp_conv_gw}}) {
    OpInfo& i = t[e.op];
    i.infer = e.infer;
    i.kernel = e.kernel;
    i.vjp = e.vjp;
    i.saves = kSaveInputs;
  }
  register_pool_ops(t);
}

}  // namespace ops

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
              const Conv2dFuncOptions& opts) {
  KILN_CHECK(x.defined() && weight.defined(), "[conv2d] input and weight must be defined");
  // Like PyTorch, an unbatched [C, H, W] input gives an unbatched output.
  const bool unbatched = x.dim() == 3;
  Attrs at;
  at.set("stride", opts.stride)
      .set("padding", opts.padding)
      .set("dilation", opts.dilation)
      .set("groups", AttrValue(opts.groups));
  Tensor y = dispatch1(OpId::conv2d, {unbatched ? unsqueeze(x, 0) : x, weight}, at);
  if (bias.defined()) {
    const int64_t O = weight.dim() >= 1 ? weight.size(0) : 0;
    KILN_CHECK(bias.dim() == 1 && bias.size(0) == O, "[conv2d] bias of shape ", bias.shape(),
               " does not match the ", O, " output channels of weight shape ", weight.shape());
    y = y + reshape(bias, {1, O, 1, 1});
  }
  return unbatched ? squeeze(y, 0) : y;
}

}  // namespace kiln
