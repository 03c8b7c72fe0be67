// 2-D pooling on CUDA tensors (max_pool2d with its indices, avg_pool2d and
// its adjoint), built from the device's own ops. The window geometry is a
// small table made on the host once per call: for each output position and
// kernel tap, the flat input position it reads (h * W + w), or -1 for a tap
// in the padding. The planes' windows are then one index_select, the
// reductions run over the tap dim, and avg_pool2d_grad is one deterministic
// scatter_add. Semantics follow the CPU kernels (runtime/src/ops/pool.cpp):
// the first maximum (or first NaN) of a window wins, padding never does, and
// avg_pool2d divides by the padded or the clipped window size
// (count_include_pad). The op's shape rule validated the attributes.
#include <limits>

#include "kernels/cuda/device_ops.h"
#include "kiln/attrs.h"
#include "kiln/autograd.h"
#include "kiln/functional.h"
#include "kiln/tensor.h"

namespace kiln::cuda {
namespace {

struct Pool {
  int64_t P, H, W, Ho, Wo, kH, kW;   // P = N * C planes
  Tensor taps;                       // i64 [Ho * Wo, kH * kW] on the device
  Tensor padded_count, valid_count;  // f64 [Ho * Wo] on the host
};

Dims pair(const Attrs& at, const char* name, int64_t dflt) {
  if (!at.has(name) || at.dims(name).empty()) return {dflt, dflt};
  const Dims& d = at.dims(name);
  return d.size() == 1 ? Dims{d[0], d[0]} : d;
}

// x: the input's shape ([C, H, W] or [N, C, H, W]); y: the output's.
Pool pool(const Dims& x, const Dims& y, const Attrs& at, bool dilated, Device device) {
  const size_t o = x.size() == 4 ? 1 : 0;
  Pool p{};
  p.P = (o ? x[0] : 1) * x[o];
  p.H = x[o + 1];
  p.W = x[o + 2];
  p.Ho = y[o + 1];
  p.Wo = y[o + 2];
  const Dims k = pair(at, "kernel_size", 1), pd = pair(at, "padding", 0);
  const Dims s = at.has("stride") && !at.dims("stride").empty() ? pair(at, "stride", 1) : k;
  const Dims d = dilated ? pair(at, "dilation", 1) : Dims{1, 1};
  p.kH = k[0];
  p.kW = k[1];
  const int64_t L = p.Ho * p.Wo, K = p.kH * p.kW;
  std::vector<int64_t> taps(static_cast<size_t>(L * K));
  std::vector<double> padded(static_cast<size_t>(L)), valid(static_cast<size_t>(L));
  for (int64_t oh = 0; oh < p.Ho; ++oh) {
    for (int64_t ow = 0; ow < p.Wo; ++ow) {
      const int64_t l = oh * p.Wo + ow, h0 = oh * s[0] - pd[0], w0 = ow * s[1] - pd[1];
      int64_t in_padded = 0, in_input = 0;
      for (int64_t i = 0; i < p.kH; ++i) {
        for (int64_t j = 0; j < p.kW; ++j) {
          const int64_t h = h0 + i * d[0], w = w0 + j * d[1];
          const bool inside = h >= 0 && h < p.H && w >= 0 && w < p.W;
          in_padded += h < p.H + pd[0] && w < p.W + pd[1];
          in_input += inside;
          taps[static_cast<size_t>(l * K + i * p.kW + j)] = inside ? h * p.W + w : -1;
        }
      }
      padded[static_cast<size_t>(l)] = double(std::max<int64_t>(in_padded, 1));
      valid[static_cast<size_t>(l)] = double(std::max<int64_t>(in_input, 1));
    }
  }
  p.taps = from_vector<int64_t>(taps, {L, K}).to(device);
  p.padded_count = from_vector<double>(padded, {L});
  p.valid_count = from_vector<double>(valid, {L});
  return p;
}

// [P, L, K]: each window's values (padding taps read position 0: mask them).
Tensor windows(const Tensor& x, const Pool& p) {
  const Tensor planes = x.contiguous().reshape({p.P, p.H * p.W});
  const Tensor at = where(ge(p.taps, 0.0), p.taps, full({}, 0, DType::i64)).reshape({-1});
  return index_select(planes, 1, at).reshape({p.P, p.Ho * p.Wo, p.kH * p.kW});
}

void write(const Tensor& out, const Tensor& value) {
  Tensor o = out;
  o.copy_(value.reshape(out.shape()));
}

double lowest(DType t) {
  switch (t) {
    case DType::i64:
      return double(std::numeric_limits<int64_t>::lowest());
    case DType::i32:
      return double(std::numeric_limits<int32_t>::lowest());
    case DType::u8:
      return 0.0;
    default:
      return -std::numeric_limits<double>::infinity();
  }
}

}  // namespace

void device_max_pool2d(const Tensor& x, const Attrs& at, const Tensor& values,
                       const Tensor& indices) {
  GradModeGuard no_grad(false);  // a kernel: its inner ops record nothing
  if (values.numel() == 0) return;
  const Pool p = pool(x.shape(), values.shape(), at, true, x.device());
  const int64_t K = p.kH * p.kW;
  const Tensor v = windows(x, p);
  const Tensor valid = ge(p.taps, 0.0);  // [L, K], broadcast over the planes
  // The maximum over real taps (NaN if one is), then its first position.
  const Tensor m = amax(where(valid, v, lowest(x.dtype())), {2}, true);
  const Tensor hit = logical_and(valid, logical_or(eq(v, m), logical_and(ne(v, v), ne(m, m))));
  const Tensor pos = arange(K).to(x.device()).reshape({1, 1, K});
  const Tensor first = amin(where(hit, pos, full({}, K, DType::i64)), {2}, true);
  write(values, gather(v, 2, first));
  write(indices, gather(p.taps.expand({p.P, p.Ho * p.Wo, K}), 2, first));
}

void device_avg_pool2d(const Tensor& x, const Attrs& at, const Tensor& out) {
  GradModeGuard no_grad(false);
  if (out.numel() == 0) return;
  const Pool p = pool(x.shape(), out.shape(), at, false, x.device());
  const bool count_pad = at.has("count_include_pad") ? at.b("count_include_pad") : true;
  const Tensor div = (count_pad ? p.padded_count : p.valid_count).to(x.dtype()).to(x.device());
  const Tensor s = sum(where(ge(p.taps, 0.0), windows(x, p), 0.0), Dims{2});  // [P, L]
  write(out, s / div);
}

void device_avg_pool2d_grad(const Tensor& gy, const Attrs& at, const Tensor& out) {
  GradModeGuard no_grad(false);
  if (out.numel() == 0) return;
  const Pool p = pool(out.shape(), gy.shape(), at, false, gy.device());
  const bool count_pad = at.has("count_include_pad") ? at.b("count_include_pad") : true;
  const Tensor div = (count_pad ? p.padded_count : p.valid_count).to(gy.dtype()).to(gy.device());
  const int64_t L = p.Ho * p.Wo, K = p.kH * p.kW, HW = p.H * p.W;
  // Every tap of a window gets its share; padding taps go to a spare column.
  const Tensor share = (gy.reshape({p.P, L}) / div).reshape({p.P, L, 1}).expand({p.P, L, K});
  const Tensor to =
      where(ge(p.taps, 0.0), p.taps, full({}, double(HW), DType::i64)).reshape({1, L * K});
  const Tensor sums = scatter_add(zeros({p.P, HW + 1}, gy.dtype(), gy.device()), 1,
                                  to.expand({p.P, L * K}), share.reshape({p.P, L * K}));
  write(out, sums.slice(1, 0, HW));
}

}  // namespace kiln::cuda
