// 2-D convolution and its two gradients on CUDA tensors, built from the
// device's own ops as the CPU kernel is from im2col + GEMM: the windows of the
// padded input are a strided view, copied into the im2col matrix
// [N, groups, C/groups*kH*kW, Ho*Wo], and one batched cuBLASLt product does
// the rest (groups are a batch dim). The gradient for the input scatters the
// column gradient back with one strided add per kernel tap (col2im). The op's
// shape rule validated the operands before these run.
#include "kernels/cuda/device_ops.h"
#include "kiln/attrs.h"
#include "kiln/autograd.h"
#include "kiln/functional.h"
#include "kiln/tensor.h"

namespace kiln::cuda {
namespace {

struct Geom {
  int64_t N, C, H, W;  // input
  int64_t O, Cg, kH, kW;
  int64_t Ho, Wo;
  int64_t sh, sw, ph, pw, dh, dw, G;
  int64_t Hp() const { return H + 2 * ph; }
  int64_t Wp() const { return W + 2 * pw; }
  int64_t Og() const { return O / G; }
  int64_t K() const { return Cg * kH * kW; }
  int64_t L() const { return Ho * Wo; }
};

Dims pair(const Attrs& at, const char* name, int64_t dflt) {
  if (!at.has(name)) return {dflt, dflt};
  const Dims& d = at.dims(name);
  return d.size() == 1 ? Dims{d[0], d[0]} : d;
}

// From the input, weight and output shapes the shape rule produced.
Geom geom(const Dims& x, const Dims& w, const Dims& y, const Attrs& at) {
  const Dims st = pair(at, "stride", 1), pd = pair(at, "padding", 0), dl = pair(at, "dilation", 1);
  const int64_t groups = at.has("groups") ? at.i("groups") : 1;
  return {x[0], x[1],  x[2],  x[3],  w[0],  w[1],  w[2],  w[3],  y[2],
          y[3], st[0], st[1], pd[0], pd[1], dl[0], dl[1], groups};
}

// The padded input, contiguous.
Tensor padded(const Tensor& x, const Geom& g) {
  return (g.ph || g.pw) ? pad(x, {g.pw, g.pw, g.ph, g.ph}) : x.contiguous();
}

// The im2col matrix [N, G, K, L] of x.
Tensor unfold(const Tensor& x, const Geom& g) {
  const Tensor xp = padded(x, g);
  const int64_t Hp = g.Hp(), Wp = g.Wp(), plane = Hp * Wp;
  const Tensor windows =
      as_strided(xp, {g.N, g.G, g.Cg, g.kH, g.kW, g.Ho, g.Wo},
                 {g.C * plane, g.Cg * plane, plane, g.dh * Wp, g.dw, g.sh * Wp, g.sw}, xp.offset());
  return windows.contiguous().reshape({g.N, g.G, g.K(), g.L()});
}

void write(const Tensor& out, const Tensor& value) {
  Tensor o = out;
  o.copy_(value.reshape(out.shape()));
}

}  // namespace

void device_conv2d(const Tensor& x, const Tensor& w, const Attrs& at, const Tensor& out) {
  GradModeGuard no_grad(false);  // a kernel: its inner ops record nothing
  const Geom g = geom(x.shape(), w.shape(), out.shape(), at);
  if (out.numel() == 0) return;
  if (g.K() == 0) {
    write(out, zeros(out.shape(), out.dtype(), out.device()));
    return;
  }
  // [G, Og, K] x [N, G, K, L] -> [N, G, Og, L]
  write(out, matmul(w.reshape({g.G, g.Og(), g.K()}), unfold(x, g)));
}

void device_conv2d_grad_weight(const Tensor& x, const Tensor& gy, const Attrs& at,
                               const Tensor& out) {
  GradModeGuard no_grad(false);
  const Geom g = geom(x.shape(), out.shape(), gy.shape(), at);
  if (out.numel() == 0) return;
  if (g.N == 0 || g.L() == 0) {
    write(out, zeros(out.shape(), out.dtype(), out.device()));
    return;
  }
  // sum over N of [N, G, Og, L] x [N, G, L, K]
  const Tensor gy2 = gy.reshape({g.N, g.G, g.Og(), g.L()});
  write(out, sum(matmul(gy2, transpose(unfold(x, g), -1, -2)), Dims{0}));
}

void device_conv2d_grad_input(const Tensor& gy, const Tensor& w, const Attrs& at,
                              const Tensor& out) {
  GradModeGuard no_grad(false);
  const Geom g = geom(out.shape(), w.shape(), gy.shape(), at);
  if (out.numel() == 0) return;
  const int64_t Hp = g.Hp(), Wp = g.Wp(), plane = Hp * Wp, K = g.K(), L = g.L();
  Tensor gxp = zeros({g.N, g.C, Hp, Wp}, out.dtype(), out.device());
  if (K > 0 && L > 0 && g.Og() > 0) {
    // [G, K, Og] x [N, G, Og, L] -> [N, G, K, L], contiguous
    const Tensor cols =
        matmul(transpose(w.reshape({g.G, g.Og(), K}), -1, -2), gy.reshape({g.N, g.G, g.Og(), L}))
            .contiguous();
    // col2im: each kernel tap adds its [N, G, Cg, Ho, Wo] slice of the columns
    // into the input positions it read (taps overlap: one add at a time).
    const Dims at_shape = {g.N, g.G, g.Cg, g.Ho, g.Wo};
    const Dims dst_strides = {g.C * plane, g.Cg * plane, plane, g.sh * Wp, g.sw};
    const Dims src_strides = {g.G * K * L, K * L, g.kH * g.kW * L, g.Wo, 1};
    for (int64_t i = 0; i < g.kH; ++i) {
      for (int64_t j = 0; j < g.kW; ++j) {
        Tensor dst =
            as_strided(gxp, at_shape, dst_strides, gxp.offset() + i * g.dh * Wp + j * g.dw);
        const Tensor src =
            as_strided(cols, at_shape, src_strides, cols.offset() + (i * g.kW + j) * L);
        dst.copy_(add(dst, src));
      }
    }
  }
  write(out,
        as_strided(gxp, out.shape(), {g.C * plane, plane, Wp, 1}, gxp.offset() + g.ph * Wp + g.pw));
}

}  // namespace kiln::cuda
