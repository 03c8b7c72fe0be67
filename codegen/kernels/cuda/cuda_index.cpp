// Indexing on CUDA tensors (device_ops.h): the printer's gather and
// scatter_add kernels over strided operands, indices checked on the device
// and bad ones reported at the host's next synchronization (device_errors.h).
#include <algorithm>
#include <vector>

#include "kernels/cuda/device_errors.h"
#include "kernels/cuda/device_ops.h"
#include "kernels/cuda/driver.h"
#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/module.h"
#include "kernels/cuda/stream.h"
#include "kiln/env.h"
#include "kiln/error.h"
#include "kiln/functional.h"
#include "kiln/tensor.h"

namespace kiln::cuda {
namespace {

CUdeviceptr addr(const Tensor& t) {
  return reinterpret_cast<CUdeviceptr>(t.data_ptr());
}

int64_t wrap(int64_t dim, int64_t rank, const char* op) {
  const int64_t r = std::max<int64_t>(rank, 1);
  KILN_CHECK(dim >= -r && dim < r, "[", op, "] dim ", dim, " is out of range for rank ", rank);
  return dim < 0 ? dim + r : dim;
}

// A 0-d tensor as [1] (the kernels index a dim).
Tensor at_least_1d(const Tensor& t) {
  return t.dim() == 0 ? t.reshape({1}) : t;
}

void fill(long long* a, const Dims& v) {
  for (size_t d = 0; d < v.size(); ++d) a[d] = v[d];
}

// With KILN_CUDA_SYNC=1 (which synchronizes after every launch anyway) a bad
// index is reported at its launch.
void check_at_launch(int device) {
  if (sync_launches()) check_device_errors(device, kAtLaunch);
}

// Launches `sym` (printed by `print` the first time) over `count` items with
// `params` (the error record and tag are the 4th and 5th). No host read: a
// bad index is found at the host's next synchronization (device_errors.h), or
// right away with KILN_CUDA_SYNC=1 (which synchronizes after every launch anyway).
void launch_checked(const std::function<std::string()>& print, const std::string& sym, int device,
                    std::vector<void*>& params, long long count) {
  launch_printed(print, sym, device, count, params);
  check_at_launch(device);
}

// out = x gathered through an index with strides `idx_strides` over out's shape.
void gather_impl(const Tensor& x0, int64_t dim, const Tensor& index, const Dims& idx_strides,
                 const Tensor& out0, const char* op) {
  const Tensor x = at_least_1d(x0), out = at_least_1d(out0);
  const int rank = static_cast<int>(out.dim());
  KILN_CHECK(rank <= 8 && x.dim() == rank, "[", op, "] CUDA indexing handles at most 8 dims, got ",
             x0.shape(), " and ", out0.shape());
  long long n = out.numel();
  if (n == 0) return;
  KilnIndexGeom g{};
  fill(g.size, out.shape());
  fill(g.out, out.strides());
  fill(g.x, x.strides());
  fill(g.idx, idx_strides);
  const std::string sym =
      str("kiln_gather_", dtype_name(x.dtype()), "_", dtype_name(index.dtype()));
  const int device = out.device().index;
  long long bound = x.shape()[static_cast<size_t>(dim)];
  ErrorSlot slot = index_error_slot(device, op, dim, bound);
  CUdeviceptr po = addr(out), px = addr(x), pi = addr(index);
  int r = rank, d = static_cast<int>(dim);
  std::vector<void*> params = {&po, &px, &pi, &slot.record, &slot.tag, &n, &r, &d, &bound, &g};
  launch_checked([&] { return print_gather(x.dtype(), index.dtype(), sym); }, sym, device, params,
                 n);
}

}  // namespace

void device_gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  const int64_t d = wrap(dim, x.dim(), "gather");
  const Tensor idx = at_least_1d(index);
  gather_impl(x, d, idx, idx.strides(), out, "gather");
}

namespace {

// index_select of whole contiguous rows (print_index_rows): false where x or
// out is not contiguous (print_gather's strided loop then).
bool index_rows(const Tensor& x0, int64_t d, const Tensor& idx, const Tensor& out0) {
  const Tensor x = at_least_1d(x0), out = at_least_1d(out0);
  if (!x.is_contiguous() || !out.is_contiguous() || x.dim() != out.dim()) return false;
  long long outer = 1, inner = 1;
  for (int64_t k = 0; k < d; ++k) outer *= out.shape()[static_cast<size_t>(k)];
  for (int64_t k = d + 1; k < out.dim(); ++k) inner *= out.shape()[static_cast<size_t>(k)];
  long long nidx = out.shape()[static_cast<size_t>(d)], rows = outer * nidx;
  if (rows == 0 || inner == 0) return true;
  long long bound = x.shape()[static_cast<size_t>(d)], istride = idx.strides()[0];
  const std::string sym =
      str("kiln_index_rows_", dtype_name(x.dtype()), "_", dtype_name(idx.dtype()));
  const int device = out.device().index;
  const CUfunction fn = cached_kernel(
      device, sym, sym, [&] { return print_index_rows(x.dtype(), idx.dtype(), sym); });
  ErrorSlot slot = index_error_slot(device, "index_select", d, bound);
  CUdeviceptr po = addr(out), px = addr(x), pi = addr(idx);
  void* params[] = {&po, &px, &pi, &slot.record, &slot.tag, &rows, &nidx, &inner, &istride, &bound};
  // A block per row, a warp's multiple up to 256 threads along it.
  const long long threads = std::clamp<long long>((inner + 31) / 32 * 32, 32, 256);
  const long long blocks = std::min<long long>(rows, 1 << 16);
  check(driver().cuLaunchKernel(fn, static_cast<unsigned>(blocks), 1, 1,
                                static_cast<unsigned>(threads), 1, 1, 0, current_cu_stream(device),
                                params, nullptr),
        "cuLaunchKernel (index_select rows)");
  after_launch(sym);
  check_at_launch(device);
  return true;
}

}  // namespace

void device_index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  const int64_t d = wrap(dim, x.dim(), "index_select");
  const Tensor idx = at_least_1d(index);
  if (out.numel() == 0 || index_rows(x, d, idx, out)) return;
  // The 1-D index read along `dim` at every other coordinate.
  Dims strides(static_cast<size_t>(std::max<int64_t>(out.dim(), 1)), 0);
  strides[static_cast<size_t>(d)] = idx.strides()[0];
  gather_impl(x, d, idx, strides, out, "index_select");
}

void device_arg_extreme(bool is_max, const Tensor& x0, int64_t dim, bool keepdim, bool flat,
                        const Tensor& out) {
  const char* op = is_max ? "argmax" : "argmin";
  const Tensor x = flat ? x0.reshape({-1}) : at_least_1d(x0);
  const int64_t d = flat ? 0 : wrap(dim, x0.dim(), op);
  const int64_t n = x.shape()[static_cast<size_t>(d)];
  KILN_CHECK(n > 0, "[", op, "] cannot reduce over a zero-size dimension (shape ", x0.shape(), ")");
  // The extreme (NaN if the line has one), then the first position holding it.
  const Tensor m = is_max ? amax(x, {d}, true) : amin(x, {d}, true);
  const Tensor hit = logical_or(eq(x, m), logical_and(ne(x, x), ne(m, m)));
  Dims line(static_cast<size_t>(x.dim()), 1);
  line[static_cast<size_t>(d)] = n;
  const Tensor pos = arange(n).to(x.device()).reshape(line);
  Tensor first = amin(where(hit, pos, full({}, n, DType::i64)), {d}, keepdim && !flat);
  if (first.shape() != out.shape()) first = first.reshape(out.shape());
  Tensor o = out;
  o.copy_(first);
}

namespace {

// Index lengths from which an index that varies along `dim` only is added
// by scanning it per output row (scatter_scan) or by sorted runs
// (scatter_sorted): below, a thread per line loops over it.
constexpr int64_t kSortedScatterMin = 64;

// Whether idx's value depends on its `dim` coordinate only.
bool varies_along_dim_only(const Tensor& idx, int64_t d) {
  for (int64_t e = 0; e < idx.dim(); ++e)
    if (e != d && idx.size(e) > 1 && idx.stride(e) != 0) return false;
  return true;
}

// scatter_add's sorted form (print_scatter_add_sorted): the entries' keys
// sorted on the device, then one thread per run of equal indices and line.
// An embedding's backward ([8192] rows into [1000, 512]) had 512 threads
// adding 8192 entries each: 2.6 ms on an H200.
void scatter_sorted(const Tensor& out, const Tensor& s, const Tensor& idx, int64_t d,
                    const KilnIndexGeom& geom, long long lines, long long len) {
  const int device = out.device().index;
  Tensor keys = make_tensor({len}, DType::i64, out.device());
  CUdeviceptr pk = addr(keys), pi = addr(idx);
  long long stride = idx.stride(d), n = len;
  std::vector<void*> kp = {&pk, &pi, &stride, &n};
  const std::string ksym = str("kiln_scatter_keys_", dtype_name(idx.dtype()));
  launch_printed([&] { return print_scatter_keys(idx.dtype(), ksym); }, ksym, device, len, kp);
  const Tensor perm = argsort(keys);
  const std::string sym =
      str("kiln_scatter_add_sorted_", dtype_name(out.dtype()), "_", dtype_name(idx.dtype()));
  long long bound = out.shape()[static_cast<size_t>(d)], total = len * lines;
  ErrorSlot slot = index_error_slot(device, "scatter_add", d, bound);
  CUdeviceptr po = addr(out), ps = addr(s), pp = addr(perm);
  int r = static_cast<int>(idx.dim()), dd = static_cast<int>(d);
  KilnIndexGeom g = geom;
  std::vector<void*> params = {&po, &ps,    &pi, &slot.record, &slot.tag, &total, &r,
                               &dd, &bound, &pp, &lines,       &len,      &g};
  launch_checked([&] { return print_scatter_add_sorted(out.dtype(), idx.dtype(), sym); }, sym,
                 device, params, total);
}

// Output rows times index entries up to which scatter_add of such an index
// scans the index once per output row (print_scatter_add_scan) instead of
// sorting it: an embedding's backward ([8192] entries into [1000, 512]) took
// a keys kernel, an argsort (its 2048-entry tiles on 4 blocks, one after
// another for the merges) and the add; the scan reads 64 KiB of index per
// row from L2 in one launch.
constexpr int64_t kScanScatterMaxWork = int64_t{1} << 24;

// scatter_add's scanning form (print_scatter_add_scan): one block per group
// of output rows and tile of lines. Each block reads the whole index (from
// L2), so a group holds as many rows as keep at least kScanBlocks blocks: the
// token embedding's backward ([8192] entries into [1000, 512], 2 tiles) read
// 2000 x 64 KiB of index one row a block (47 us on an H200); in groups of 15
// rows, 134 blocks.
constexpr int64_t kScanBlocks = 128, kScanGroupMax = 16;

void scatter_scan(const Tensor& out, const Tensor& s, const Tensor& idx, int64_t d,
                  const KilnIndexGeom& geom, long long lines, long long len) {
  static_assert(kScatterWindow / 4 == 256, "launch_printed's blocks are 256 threads");
  const int device = out.device().index;
  const std::string sym =
      str("kiln_scatter_add_scan_", dtype_name(out.dtype()), "_", dtype_name(idx.dtype()));
  long long bound = out.shape()[static_cast<size_t>(d)], tiles = (lines + 255) / 256;
  long long group = std::clamp<long long>(bound * tiles / kScanBlocks, 1, kScanGroupMax);
  long long work = (bound + group - 1) / group * tiles;
  ErrorSlot slot = index_error_slot(device, "scatter_add", d, bound);
  CUdeviceptr po = addr(out), ps = addr(s), pi = addr(idx);
  int r = static_cast<int>(idx.dim()), dd = static_cast<int>(d);
  KilnIndexGeom g = geom;
  std::vector<void*> params = {&po, &ps,    &pi,    &slot.record, &slot.tag, &work, &r,
                               &dd, &bound, &lines, &len,         &group,    &g};
  // One 256-thread block per work item (at most 2^16, grid-stride).
  launch_checked([&] { return print_scatter_add_scan(out.dtype(), idx.dtype(), sym); }, sym, device,
                 params, work * 256);
}

}  // namespace

void device_scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src,
                        const Tensor& out0) {
  Tensor o = out0;
  o.copy_(x);
  const Tensor out = at_least_1d(out0), idx = at_least_1d(index);
  const Tensor s = at_least_1d(src.dtype() == out.dtype() ? src : src.to(out.dtype()));
  const int64_t d = wrap(dim, out.dim(), "scatter_add");
  const int rank = static_cast<int>(idx.dim());
  KILN_CHECK(rank <= 8, "[scatter_add] CUDA indexing handles at most 8 dims, got ", index.shape());
  if (idx.numel() == 0) return;
  KilnIndexGeom g{};
  fill(g.size, idx.shape());
  fill(g.out, out.strides());
  fill(g.x, s.strides());
  fill(g.idx, idx.strides());
  long long len = idx.shape()[static_cast<size_t>(d)];
  long long lines = idx.numel() / len;
  if (len >= kSortedScatterMin && varies_along_dim_only(idx, d)) {
    const int64_t bound = out.shape()[static_cast<size_t>(d)];
    if (bound > 0 && bound <= kScanScatterMaxWork / len)  // no overflow
      return scatter_scan(out, s, idx, d, g, lines, len);
    return scatter_sorted(out, s, idx, d, g, lines, len);
  }
  const std::string sym =
      str("kiln_scatter_add_", dtype_name(out.dtype()), "_", dtype_name(idx.dtype()));
  const int device = out.device().index;
  long long bound = out.shape()[static_cast<size_t>(d)];
  ErrorSlot slot = index_error_slot(device, "scatter_add", d, bound);
  CUdeviceptr po = addr(out), ps = addr(s), pi = addr(idx);
  int r = rank, dd = static_cast<int>(d);
  std::vector<void*> params = {&po, &ps, &pi,    &slot.record, &slot.tag, &lines,
                               &r,  &dd, &bound, &len,         &g};
  launch_checked([&] { return print_scatter_add(out.dtype(), idx.dtype(), sym); }, sym, device,
                 params, lines);
}

}  // namespace kiln::cuda
