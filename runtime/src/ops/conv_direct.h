// Internal: direct convolution (no im2col, no GEMM) for unit stride on the CPU,
// used by conv.cpp's forward, through its flipped-weight form by the input
// gradient, and (a kernel of its own) for the weight gradient. See conv_direct.cpp for the method.
#pragma once

#include <cstdint>

namespace kiln::ops {

/// A validated convolution's geometry: NCHW input, [O, C/groups, kH, kW] weight.
struct DirectConvShape {
  int64_t N, C, H, W;  // input
  int64_t O, kH, kW;   // weight (output channels, kernel size)
  int64_t Ho, Wo;      // output size
  int64_t sh, sw, ph, pw, dh, dw, groups;
};

/// True when direct_conv_forward serves this convolution: unit stride, not an
/// unpadded 1x1 (a plain GEMM), and at most half the work spent on padding.
bool direct_conv_applies(const DirectConvShape& s);

/// y = conv2d(x, w) (no bias) for a shape where direct_conv_applies; T is float
/// or double; x, w, y contiguous. Results do not depend on the thread count.
template <typename T>
void direct_conv_forward(const T* x, const T* w, T* y, const DirectConvShape& s);

/// True when direct_conv_grad_weight serves this convolution: as
/// direct_conv_applies, with at least 4 input channels per group.
bool direct_conv_grad_weight_applies(const DirectConvShape& s);

/// gw = conv2d's weight gradient for input x and output gradient gy, for a shape
/// where direct_conv_grad_weight_applies; results do not depend on the threads.
template <typename T>
void direct_conv_grad_weight(const T* x, const T* gy, T* gw, const DirectConvShape& s);

}  // namespace kiln::ops
