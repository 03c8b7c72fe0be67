// Internal: running a fused kernel with column sums (fuse.cpp, rule 9). Each
// fixed block of the work items accumulates into its own row of f64 partials;
// the rows are then added in block order into the sums' outputs, as eager's
// column sums add their blocks, so results do not depend on the thread count.
#pragma once

#include <span>
#include <vector>

#include "kernels/kernel_cache.h"
#include "kiln/tensor.h"

namespace kiln::detail {

/// One column sum of a launch: its kernel argument, the output it ends in (f32
/// or f64, contiguous, `columns` elements) and the partials, one row per block.
struct ColumnPartial {
  size_t arg = 0;
  Tensor out;
  Tensor partials;
};

/// Blocks a launch of `items` work items over `elements` elements runs in.
int64_t column_blocks(int64_t items, int64_t elements);

/// Zeroed partials for `blocks` blocks of `columns` columns.
Tensor column_partials(int64_t blocks, int64_t columns);

/// Runs `kernel` over items [0, items) in `blocks` blocks on the thread pool,
/// each block's column-sum arguments pointing at its row of partials, then
/// writes every sum's total into its output.
void launch_with_column_sums(const kir::LoadedKernel& kernel, std::vector<void*> ptrs,
                             const int64_t* sizes, int64_t items, int64_t blocks,
                             std::span<const ColumnPartial> sums);

}  // namespace kiln::detail
