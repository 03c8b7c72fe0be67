// Internal: the GPU printer. Turns a kernel IR kernel (kernels/kernel_ir.h) into
// "GPU C" source. A prelude per dialect (CUDA for NVRTC, OpenCL C for the
// emulated device) supplies the qualifiers, thread ids, barriers, shuffles,
// types, the f16/bf16 conversions and the integer rules; kernels are plain C
// over those.
//
// Launch ABI of a printed kernel, in parameter order: one device pointer per
// kernel argument, then the work-item count n (64-bit: elements, or rows for
// kernels with reductions), then the iteration sizes s0..s{rank-1} (64-bit).
// Pointwise kernels run a grid-stride loop over the flattened index space with
// 64-bit indices (any grid). Kernels with reductions take one block per row
// (grid-stride over rows) of any number of whole warps, or of one thread, which
// reduces in index order (how reassoc = false kernels are launched).
//
// Semantics follow the kernel IR's (the eager kernels' scalar rules): integer
// arithmetic wraps, integer division floors and x / 0 = 0, f16/bf16 compute in
// float and round after every op, bool is a byte. Transcendentals are the
// kernel-IR expansions (kernels/math_expand.h: explicit fma, compiled with
// --fmad=false), so they equal the CPU's and the interpreter's bits;
// KILN_CUDA_LIBM=1 prints the device's own libm instead (CUDA's expf etc.,
// within 2 ulp of exact). Everything else is exact.
// Column sums (accumulating stores, kernel_ir.h) take one more parameter after
// the sizes, `parts` (column_parts()), and write per-part f64 partials
// [parts, inner] where the kernel IR's argument is: part p covers rows
// [rows * p / parts, rows * (p + 1) / parts), each column summed in index order
// by one thread (a register in pointwise kernels, its own partial element in
// row kernels); print_column_combine adds them in a fixed order. Results depend on
// the sizes only, not on the grid, the block size or the device.
#pragma once

#include <string>

#include "kernels/kernel_ir.h"

namespace kiln::cuda {

/// Whether printed kernels call the device's libm for transcendentals
/// (KILN_CUDA_LIBM=1) instead of kiln's expansions (the default).
bool device_math_uses_libm();

/// Row kernels' held twins hold this many elements per thread by default: a
/// warp holds a row of 1024. On an H200 (2026-11-27, cuda_harness) compiled
/// softmax rows of 1024 in warp rows ran at 82% of copy bandwidth so, 73%
/// streaming; but the same kernel holding rows of 256 or 512 (half its slots
/// or fewer) ran at a third to a half of the streaming kernel's speed.
constexpr int kDefaultRowHeld = 32;
/// Elements per thread the held twins of row kernels hold in registers
/// (KILN_CUDA_ROW_HELD, default kDefaultRowHeld; 0: no twins, rows stream; see
/// print_row_kernel in gpu_printer_internal.h).
int row_held();
/// What the held twin of `k` holds per thread: row_held() for a row kernel
/// summing in any order without column sums (a column-sum kernel's blocks
/// are its parts), else 0 (no twin).
int held_of(const kir::Kernel& k);
/// The held twin of row kernel `k` (held_of(k) > 0) named `symbol`: print_kernel's
/// streaming kernel holding each row in registers, `held` per thread (0:
/// held_of(k); else at most that). Printed and compiled only where a launch
/// holds rows (launch_kernel's KernelFns, which picks the count per row
/// length: twin_held): its straight-line code took NVRTC seconds per kernel
/// that most graphs never launch.
std::string print_held_twin(const kir::Kernel& k, const std::string& symbol, int held = 0);
/// The suffix of a held twin's symbol.
inline constexpr char kHeldTwin[] = "_held";

/// Warps per block of a row kernel with column sums in its column-warps form
/// (print_kernel; launch_kernel's choice where the row fits): each warp takes
/// every kColumnWarps-th row of the block's part, the warps' column partials
/// then added in warp order.
constexpr int kColumnWarps = 4;
/// The longest row the column-warps form of `k` takes on kColumnWarps warps
/// (twice that on half as many): every warp's partial row of each column sum
/// sits in shared memory, 32 KiB in all.
int64_t column_warps_cap(const kir::Kernel& k);

/// The CUDA prelude (for NVRTC): printed once at the top of every program.
std::string cuda_prelude();
/// The OpenCL C prelude: the same printed kernels compile on the emulated
/// device (PoCL; see pocl_driver.h) after it.
std::string opencl_prelude();
/// The C++ prelude: printed kernels compile as C++ with one OS thread per GPU
/// thread (its kiln_cpp::launch), for ThreadSanitizer and ASan (tests only).
std::string cpp_prelude();

/// The kernel's GPU C as a kernel (KILN_KERNEL) function named `symbol`.
/// Pointwise kernels with broadcast arguments hold two loops: 32-bit
/// (unsigned) indices, so coordinates need no 64-bit division, when the
/// work-item count n <= narrow_index_limit(), else 64-bit ones; kernels whose
/// arguments are all dense have the 64-bit loop only. Row kernels stream their
/// rows (print_held_twin holds them).
std::string print_kernel(const kir::Kernel& k, const std::string& symbol);

/// The largest n a printed pointwise kernel indexes in 32 bits (2^31 - 1).
int64_t narrow_index_limit();
/// Test hook: kernels printed from now on use 32-bit indices only up to
/// `limit` (-1: never; they hold the 64-bit loop alone, so tests reach it
/// with small tensors).
/// Their text differs, so the kernel cache keeps both variants apart.
void set_narrow_index_limit(int64_t limit);

/// The strided copy's shape argument, laid out as the prelude's KilnStrides.
struct KilnStrides {
  long long size[8], dst[8], src[8];
};

/// A kernel copying a strided tensor of dtype `from` into a strided tensor of
/// dtype `to` (the cast rule of the kernel IR): parameters (dst, src, n, rank,
/// KilnStrides g) with rank <= 8 sizes and element strides in g.
std::string print_strided_copy(DType from, DType to, const std::string& symbol);
/// The same copy moving 16 bytes (a float4's bits) per element: sizes and
/// strides in units of 16 bytes, both buffers 16-byte aligned.
std::string print_quad_copy(const std::string& symbol);
/// A fill of n 16-byte quads with the pattern of four 32-bit words:
/// parameters (dst, n, w0, w1, w2, w3), dst 16-byte aligned (`full`'s fill).
std::string print_quad_fill(const std::string& symbol);

/// The indexing kernels' shape argument, laid out as the prelude's
/// KilnIndexGeom: sizes of the iteration space and the element strides of the
/// output, the data operand and the index along each dim (rank <= 8).
struct KilnIndexGeom {
  long long size[8], out[8], x[8], idx[8];
};

/// out = x gathered along `dim` (torch.gather; index_select with the index
/// broadcast): parameters (out, x, idx, err, tag, n, rank, dim, bound,
/// KilnIndexGeom g) over the n elements of out; an index outside [0, bound) is
/// skipped and, if the error record `err` (device_errors.h) is still clear,
/// recorded there with `tag`.
std::string print_gather(DType t, DType index_t, const std::string& symbol);
/// index_select of whole contiguous rows (x and out contiguous: an embedding
/// lookup): out[o, r, :] = x[o, idx[r * istride], :], rows of `inner`
/// elements, parameters (out, x, idx, err, tag, rows = outer * nidx, nidx,
/// inner, istride, bound); a block per row, its threads along the row, so no
/// element divides its index into coordinates (print_gather's per-element
/// division loop ran [8192, 512] lookups at a fifth of the copy bandwidth).
/// A bad index skips its row and is recorded as print_gather's.
std::string print_index_rows(DType t, DType index_t, const std::string& symbol);
/// out[.., idx[.., k, ..], ..] += src[.., k, ..] along `dim` (torch.scatter_add
/// into a copy of its input): parameters (out, src, idx, err, tag, lines, rank,
/// dim, bound, len, KilnIndexGeom g over the index's shape), bad indices as
/// print_gather's; each thread adds one line of the index in order, so results
/// do not depend on scheduling (lines never share an output element) and the
/// sums need no atomics.
std::string print_scatter_add(DType t, DType index_t, const std::string& symbol);
/// Sort keys of a scatter_add index read along `dim` (stride `stride`):
/// keys[k] = idx[k] * len + k (parameters keys, idx, stride, len), unique, so
/// sorting them orders the entries by index value, then by k.
std::string print_scatter_keys(DType index_t, const std::string& symbol);
/// print_scatter_add for an index whose value depends on its `dim` coordinate
/// only (an embedding's backward: one row index broadcast over the columns):
/// parameters (out, src, idx, err, tag, total = len * lines, rank, dim, bound,
/// perm, lines, len, g), `perm` the argsort of print_scatter_keys's keys. One
/// thread per run of equal indices and line adds the run in ascending k: the
/// CPU's order, so the same bits, with len * lines threads instead of lines.
std::string print_scatter_add_sorted(DType t, DType index_t, const std::string& symbol);
/// print_scatter_add_sorted's case without a sort, for few output rows: one
/// block per `group` of output rows (along `dim`) and tile of lines, which
/// scans the index for the entries of its rows, kScatterWindow at a time
/// (each window's matches put in ascending k in shared memory), and adds them
/// in ascending k: the same bits. Parameters (out, src, idx, err, tag, work =
/// ceil(bound / group) * tiles, rank, dim, bound, lines, len, group, g); an
/// out-of-range index is reported by the first group's first tile. Launch
/// with kScatterWindow / 4 threads.
std::string print_scatter_add_scan(DType t, DType index_t, const std::string& symbol);
/// The address tables of a pointer-array batched product (cuBLASLt's
/// CUBLASLT_BATCH_MODE_POINTER_ARRAY): parameters (table, n, rank, a, b, d,
/// KilnIndexGeom g); batch i's coordinates over g.size (rank <= 8) give
/// table[i] = a + their byte offset by g.x, table[n + i] = b + by g.idx and
/// table[2n + i] = d + by g.out.
std::string print_pointer_table(const std::string& symbol);
/// The index entries one block of print_scatter_add_scan examines at once.
constexpr int kScatterWindow = 1024;

/// cumsum (cumprod with `product`) of x of dtype t along contiguous lines:
/// parameters (out, x, lines, len, reverse); one thread per line, in the CPU
/// kernel's order and accumulators (double for floats, wrapping 64-bit
/// integers into i64), so results equal the CPU's bit for bit.
std::string print_scan(bool product, DType t, const std::string& symbol);
/// Elements a block of the argsort kernels sorts in shared memory (a power of 2).
constexpr long long kSortTile = 2048;
/// argsort of contiguous lines of x (dtype t) in the CPU's total order (NaN
/// above every number, then ties by position: stable) as a bitonic sort over
/// each line padded to `width` (a power of 2 >= len; padding sorts last):
/// parameters (out [lines, k] of i64, x, gv, gi, lines, len, k, width, stage,
/// desc); one block per tile of min(width, kSortTile) elements (grid-stride).
/// stage 0 sorts each tile from x (ascending and descending alternately, as
/// the network needs), stage s > kSortTile finishes merge stage s in shared
/// memory (its steps below kSortTile) from gv/gi ([lines, width] of the key
/// type and i64). A block whose tile ends the sort (width <= kSortTile, or
/// stage == width) writes the first k positions to out; others write gv/gi.
std::string print_argsort(DType t, const std::string& symbol);
/// One global step (merge stage kk, distance j >= kSortTile) of the bitonic
/// sort over gv/gi: parameters (gv, gi, lines, len, width, kk, j, desc).
std::string print_argsort_step(DType t, const std::string& symbol);

/// multinomial's row pass over contiguous rows of weights of dtype t:
/// parameters (status, cdf, last, p, rows, len, n); one thread per row adds the
/// weights in index order as the CPU kernel does (doubles); status[row] =
/// rows - row where the CPU would raise (a weight negative or not finite, a sum
/// 0 or not finite, fewer than n nonzero weights without `replacement`), else
/// 0; with `replacement` cdf [rows, len] gets the running sums and last[row]
/// the last nonzero category (cdf and last are unused without).
std::string print_multinomial_rows(DType t, bool replacement, const std::string& symbol);
/// multinomial's draws with replacement: parameters (out, cdf, last, u, count
/// = rows * n, len, n); sample i of row r is the first category whose running
/// sum exceeds u[i] * total (std::upper_bound), at most last[r].
std::string print_multinomial_draw(const std::string& symbol);
/// multinomial's race keys without replacement, log(1 - u) / p (-inf where
/// p == 0) with the CPU's log (ops/sample_rule.h: race_log_source() goes once
/// between the prelude and such kernels): parameters (key, u, p, n) over n
/// elements, p of dtype t; the CPU kernel's keys bit for bit.
std::string print_race_keys(DType t, const std::string& symbol);

/// A kernel drawing uniform or `normal` random numbers of floating dtype `dt`
/// with kiln's Philox rule (runtime/src/random_rule.h: rng::random_rule_source()
/// goes once between the prelude and such kernels): parameters
/// (out, n, seed, offset) with offset a multiple of 4; each thread computes
/// whole Philox blocks of 4 words (grid-stride).
std::string print_random(bool normal, DType dt, const std::string& symbol);

/// True when `k` has column sums (accumulating stores).
bool has_column_sums(const kir::Kernel& k);

/// Work blocks ("parts") the column sums over `rows` rows of `inner` columns
/// are split into: a function of the sizes only (never of the grid or the
/// device), so the sums are equal run to run and on every launch shape.
int64_t column_parts(int64_t rows, int64_t inner);
/// Parts of an eager (standalone) column sum: about 2^18 (part, column)
/// threads in all, at least 8 rows a part; sizes only, as column_parts.
int64_t column_sum_parts(int64_t rows, int64_t cols);

/// Eager sum over leading dims: x viewed as [rows, cols] (contiguous, dtype
/// `x`) summed per column into partials [parts, cols] of the accumulator
/// dtype `acc` (f64 for f32/f64, f32 for f16/bf16, i64 wrapping otherwise):
/// parameters (partial, x, rows, cols, parts); part p sums rows
/// [rows * p / parts, rows * (p + 1) / parts) of each column in index order,
/// one thread per column and part.
std::string print_column_sum(DType x, DType acc, const std::string& symbol);
/// out[j] = the partials of column j, converted to `out`: parameters (out,
/// partial, cols, parts); parts = 0 writes zeros. The parts are split into
/// column_combine_slices() slices, slice q = parts [parts * q / S,
/// parts * (q + 1) / S); each slice is added in part order, then the slices
/// in order. The kernel runs min(S, parts) slices, which gives the same bits
/// (below S parts every slice holds at most one part, the others add +0).
/// Launch with blockDim.x >= S (min(S, parts) * c threads take c columns at a
/// time), any grid: no result depends on either.
std::string print_column_combine(DType acc, DType out, const std::string& symbol);
/// The combine's slices per column (S above).
int column_combine_slices();
/// The slices the combine of `parts` parts runs (min(S, parts), at least 1).
int64_t column_combine_slices(int64_t parts);

}  // namespace kiln::cuda
