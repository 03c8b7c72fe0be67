// Fused column sums: blocked launch and the ordered combine (see column_sums.h).
#include "executor/column_sums.h"

#include <algorithm>

#include "kiln/functional.h"
#include "kiln/thread_pool.h"

namespace kiln::detail {

namespace {
constexpr int64_t kBlockElements = 32768;  // a block's share: about one core's L2 worth of rows
constexpr int64_t kMaxBlocks = 64;
}  // namespace

int64_t column_blocks(int64_t items, int64_t elements) {
  if (items <= 1) return 1;  // also no work at all: every sum is then 0
  return std::clamp<int64_t>(elements / kBlockElements, 1, std::min(items, kMaxBlocks));
}

Tensor column_partials(int64_t blocks, int64_t columns) {
  return zeros({blocks, columns}, DType::f64);
}

void launch_with_column_sums(const kir::LoadedKernel& kernel, std::vector<void*> ptrs,
                             const int64_t* sizes, int64_t items, int64_t blocks,
                             std::span<const ColumnPartial> sums) {
  parallel_for(0, blocks, 1, [&](int64_t b, int64_t e) {
    std::vector<void*> p = ptrs;
    for (int64_t blk = b; blk < e; ++blk) {
      for (const ColumnPartial& s : sums)
        p[s.arg] = static_cast<double*>(s.partials.data_ptr()) + blk * s.partials.size(1);
      kernel(items * blk / blocks, items * (blk + 1) / blocks, p.data(), sizes);
    }
  });
  for (const ColumnPartial& s : sums) {
    const int64_t n = s.partials.size(1);
    const double* part = static_cast<const double*>(s.partials.data_ptr());
    std::vector<double> total(part, part + n);
    for (int64_t blk = 1; blk < blocks; ++blk)
      for (int64_t j = 0; j < n; ++j) total[static_cast<size_t>(j)] += part[blk * n + j];
    if (s.out.dtype() == DType::f64) {
      std::copy(total.begin(), total.end(), static_cast<double*>(s.out.data_ptr()));
    } else {
      float* o = static_cast<float*>(s.out.data_ptr());
      for (int64_t j = 0; j < n; ++j) o[j] = static_cast<float>(total[static_cast<size_t>(j)]);
    }
  }
}

}  // namespace kiln::detail
