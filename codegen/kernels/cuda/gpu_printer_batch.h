// Internal: batched pointwise kernels. A compiled graph's step runs many
// instances of one fused kernel (an optimizer's update of every parameter);
// on a device each instance was a launch of its own (a transformer's AdamW:
// 30 launches, most of one small block). A batched kernel runs up to
// batch_capacity() instances in one launch: its one parameter, a table of
// 64-bit words passed by value (copied at the launch, so a captured CUDA
// graph records it), holds each instance's first block, element count, sizes
// and argument addresses; every block finds its instance (a binary search)
// and runs print_kernel's loops over it as a launch of the instance's own
// blocks would, with the same expression per element: the same bits.
//
// Table layout (w = the words; M = batch_capacity, R = rank, A = arguments):
// w[0] = m, the instances of this launch (1..M); w[1 + j] = instance j's first
// block, w[1 + m] = the grid's blocks; instance j's record at
// w[2 + M + j * (R + A)]: n, the sizes s1..s{R-1}, the A addresses.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "kernels/kernel_ir.h"

namespace kiln::cuda {

/// The table's words on CUDA: 4088 bytes, under the classic 4096-byte limit
/// on a launch's parameters (every architecture, every CUDA 12/13 driver).
constexpr int kBatchWordsCuda = 511;
/// The table's words on the emulated device: 1016 bytes, under PoCL's
/// CL_DEVICE_MAX_PARAMETER_SIZE (1024: the OpenCL minimum, PoCL 3.1's CPU device).
constexpr int kBatchWordsOpenCl = 127;
/// The most instances one batched launch takes (the block's search is over
/// at most this many first blocks).
constexpr int kMaxBatch = 32;

/// Whether `k` has a batched form: pointwise (no row reductions, no column sums).
bool batchable(const kir::Kernel& k);
/// Instances of `k` one launch takes with a table of `words` words (>= 1 for
/// every kernel of at most words / 2 - 2 arguments and sizes).
int batch_capacity(const kir::Kernel& k, int words);

/// The batched form of print_kernel(k) (a pointwise kernel) as kernel
/// `symbol` taking one KilnBatch table of `words` words (the program's
/// dialect: kBatchWordsCuda or kBatchWordsOpenCl; one value per program).
std::string print_batched_kernel(const kir::Kernel& k, const std::string& symbol, int words);

/// One instance of a batched launch: its argument addresses (one per kernel
/// argument), its sizes (kernel rank) and the blocks it takes.
struct BatchInstance {
  const uint64_t* ptrs = nullptr;
  const int64_t* sizes = nullptr;
  int64_t blocks = 0;
};
/// Writes the table for `instances` (1..batch_capacity(k, w.size())) of `k`
/// into `w` (the words of print_batched_kernel's table).
void batch_table(const kir::Kernel& k, std::span<int64_t> w,
                 std::span<const BatchInstance> instances);

}  // namespace kiln::cuda
