// Internal: eager CUDA ops beyond the kernel IR's (the device runtime,
// cuda_device.cpp, dispatches to them): indexing through the printer's
// gather/scatter kernels (cuda_index.cpp), convolution and pooling from the
// device's own ops (cuda_conv.cpp, cuda_pool.cpp). Indices are checked on the
// device; a bad one raises kiln::Error naming the op and the offending index
// at the host's next synchronization with the device (device_errors.h), with
// no host read at the launch.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kernels/kernel_ir.h"
#include "kiln/dims.h"

namespace kiln {
class Attrs;
class Tensor;
}  // namespace kiln

namespace kiln::cuda {

/// While one lives on this thread, host <-> device copies are left out of
/// transfer_stats(): the emulated device's host GEMM, which a GPU runs in
/// cuBLASLt without any copy.
class UncountedTransfers {
 public:
  UncountedTransfers();
  ~UncountedTransfers();
  UncountedTransfers(const UncountedTransfers&) = delete;
  UncountedTransfers& operator=(const UncountedTransfers&) = delete;
};

/// The compiled function `symbol` of `source` (the dialect's prelude added) on
/// `device`, compiled once per source (the device runtime's cache).
CUfunction cached_kernel(int device, const std::string& source, const std::string& symbol);
/// The same, the source found by `key` (naming it, e.g. its symbol when that
/// fixes the text) and printed by `print` only the first time.
CUfunction cached_kernel(int device, const std::string& key, const std::string& symbol,
                         const std::function<std::string()>& print);
/// Kernel sources printed to be looked up so far: every cached_kernel by
/// source, the keyed one's first call per key.
int64_t printed_kernel_sources();

/// Launches `symbol` (cached_kernel, keyed by the symbol and
/// narrow_index_limit(): its text is `print()`'s, printed the first time
/// only) on the current stream of `device` with `params`: blocks of 256
/// threads for `count` work items, at most 2^16 blocks (the printed kernels
/// are grid-stride loops).
void launch_printed(const std::function<std::string()>& print, const std::string& symbol,
                    int device, long long count, std::vector<void*>& params);

/// Device copies that moved 16 bytes per element (print_quad_copy) so far.
int64_t quad_copies();
/// `full`s written as 16-byte quads of their pattern (print_quad_fill) so far.
int64_t quad_fills();

/// Compiled graphs' kernels built in batches (one program per batch) so far.
struct GraphProgramStats {
  int64_t programs = 0;             ///< programs compiled (one NVRTC call / module each)
  int64_t kernels = 0;              ///< kernels they held
  int64_t column_sum_launches = 0;  ///< launches of fused kernels with column sums
  int64_t instances = 0;            ///< fused kernel instances run (each a launch before batching)
  int64_t launches = 0;             ///< launches of fused kernels (a batched one counts once)
  int64_t batched_launches = 0;     ///< of those, launches of batched kernels
};
GraphProgramStats graph_program_stats();

/// out = gather(x, dim, index) (torch.gather); `out` has index's shape.
void device_gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out);
/// out = index_select(x, dim, index) for a 0-d or 1-D index.
void device_index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out);
/// out = argmax/argmin(x) (`is_max`) with the op's attrs (dim, keepdim, flat):
/// the first position of the extreme, NaN counting as the extreme, built from
/// the device's reductions and elementwise ops.
void device_arg_extreme(bool is_max, const Tensor& x, int64_t dim, bool keepdim, bool flat,
                        const Tensor& out);
/// out = scatter_add(x, dim, index, src): a copy of x with src added at index.
void device_scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src,
                        const Tensor& out);

/// out = cumsum(x) or cumprod(x) (`product`) with the op's attrs (dim,
/// reverse): the CPU's accumulation order and types, so equal to its results.
void device_scan(bool product, const Tensor& x, const Attrs& attrs, const Tensor& out);
/// out = argsort(x) with the op's attrs (dim, descending, k >= 0: topk's first
/// k): the CPU's stable total order (NaN above every number).
void device_argsort(const Tensor& x, const Attrs& attrs, const Tensor& out);

/// out = sum(x, dims) when it is a column sum (the reduced dims lead the kept
/// ones of size > 1; more than one column): per-part partials and their
/// combine in part order (gpu_printer.h), so results do not depend on the
/// launch. False (nothing done) for any other sum.
bool device_column_sum(const Tensor& x, const Dims& dims, const Tensor& out);
/// Launches printed kernel `fn` of `k`, which has column sums: `ptrs` holds
/// each column sum's output address (sizes[rank - 1] values of its
/// `sum_dtypes` entry, in argument order); the f64 partials are allocated on
/// the current stream and combined into the outputs.
void launch_column_sums(CUfunction fn, const kir::Kernel& k, std::vector<CUdeviceptr> ptrs,
                        const int64_t* sizes, std::span<const DType> sum_dtypes, int device);

/// out = rand_uniform / rand_normal (`normal`) with the op's attrs (seed,
/// offset, a multiple of 4): the CPU's Philox rule (random_rule.h) printed as
/// one kernel per dtype, so the values equal the CPU's draw.
void device_random(bool normal, const Attrs& attrs, const Tensor& out);

/// out = multinomial(probs, u) with the op's attrs (num_samples,
/// replacement): the CPU kernel's rule on the device (gpu_printer.h's
/// multinomial kernels), so the categories equal the CPU's draw from the same
/// uniforms; bad weights raise the CPU's kiln::Error.
void device_multinomial(const Tensor& probs, const Tensor& u, const Attrs& attrs,
                        const Tensor& out);

/// out = conv2d(x, w) with the op's attrs (stride, padding, dilation, groups):
/// im2col as a strided view + copy, then a batched cuBLASLt product.
void device_conv2d(const Tensor& x, const Tensor& w, const Attrs& attrs, const Tensor& out);
/// out = conv2d_grad_input(grad, w): the columns' gradient, then col2im as
/// one strided add per kernel tap.
void device_conv2d_grad_input(const Tensor& grad, const Tensor& w, const Attrs& attrs,
                              const Tensor& out);
/// out = conv2d_grad_weight(x, grad): grad x im2col(x)^T, summed over the batch.
void device_conv2d_grad_weight(const Tensor& x, const Tensor& grad, const Attrs& attrs,
                               const Tensor& out);

/// values, indices = max_pool2d(x) with the op's attrs: the first maximum (or
/// NaN) of each window, padding never; indices flat over each plane (H * W).
void device_max_pool2d(const Tensor& x, const Attrs& attrs, const Tensor& values,
                       const Tensor& indices);
/// out = avg_pool2d(x) with the op's attrs (count_include_pad as on the CPU).
void device_avg_pool2d(const Tensor& x, const Attrs& attrs, const Tensor& out);
/// out = avg_pool2d_grad(grad): each window's share added back (scatter_add).
void device_avg_pool2d_grad(const Tensor& grad, const Attrs& attrs, const Tensor& out);

}  // namespace kiln::cuda
