// Internal: the rows of a tensor along one dim, for kernels that work on whole
// rows (scans, sorting, sampling): row r of x starts at x_offset(r) and steps
// by the dim's stride; the other dims, in row-major order, number the rows.
#pragma once

#include "kiln/tensor.h"

namespace kiln::ops {

/// Rows of `x` along `dim` (wrapped; a 0-d tensor is one row of one element).
struct AlongDim {
  int64_t len = 1;      ///< elements per row (x.size(dim))
  int64_t stride = 0;   ///< x's stride along dim, in elements
  int64_t rows = 1;     ///< number of rows (product of the other dims)
  Dims sizes, strides;  ///< the other dims of x and their strides

  AlongDim(const Tensor& x, int64_t dim) {
    if (x.dim() == 0) return;
    len = x.size(dim);
    stride = x.stride(dim);
    for (int64_t i = 0; i < x.dim(); ++i) {
      if (i == dim) continue;
      sizes.push_back(x.size(i));
      strides.push_back(x.stride(i));
      rows *= x.size(i);
    }
  }
  /// Element offset (from x's data pointer) of row r's first element.
  int64_t offset(int64_t r) const {
    int64_t off = 0;
    for (size_t i = sizes.size(); i-- > 0;) {
      off += (r % sizes[i]) * strides[i];
      r /= sizes[i];
    }
    return off;
  }
};

}  // namespace kiln::ops
