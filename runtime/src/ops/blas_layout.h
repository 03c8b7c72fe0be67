// Internal: which strided matrices BLAS reads or writes as they are. Shared by
// the matmul kernel and the executor's placement planning, which must agree.
#pragma once

#include <algorithm>
#include <cstdint>

namespace kiln::ops {

/// Whether BLAS can use a rows x cols matrix with element strides (rs, cs) as
/// is: row-major (trans = false, unit column stride) or as the transpose of a
/// row-major matrix (trans = true, unit row stride); ld is its leading dim.
inline bool blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, bool& trans,
                        int64_t& ld) {
  if ((cols == 1 || cs == 1) && (rows == 1 || rs >= std::max<int64_t>(cols, 1))) {
    trans = false;
    ld = rows == 1 ? std::max<int64_t>(cols, 1) : rs;
    return true;
  }
  if ((rows == 1 || rs == 1) && (cols == 1 || cs >= std::max<int64_t>(rows, 1))) {
    trans = true;
    ld = cols == 1 ? std::max<int64_t>(rows, 1) : cs;
    return true;
  }
  return false;
}

}  // namespace kiln::ops
