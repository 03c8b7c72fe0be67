// Column sums on CUDA tensors (device_ops.h): eager sums over leading dims and
// compiled graphs' column-sum kernels, both through per-part partials that one
// combine kernel adds in part order (gpu_printer_columns.cpp).
#include <algorithm>
#include <vector>

#include "kernels/cuda/device_ops.h"
#include "kernels/cuda/driver.h"
#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/module.h"
#include "kernels/cuda/stream.h"
#include "kiln/error.h"
#include "kiln/functional.h"
#include "kiln/tensor.h"

namespace kiln::cuda {
namespace {

CUdeviceptr addr(const Tensor& t) {
  return reinterpret_cast<CUdeviceptr>(t.data_ptr());
}

// The partials' dtype of an eager sum of dtype `x` (the CPU's accumulators).
DType accumulator(DType x) {
  if (x == DType::f32 || x == DType::f64) return DType::f64;
  if (x == DType::f16 || x == DType::bf16) return DType::f32;
  return DType::i64;
}

// out (cols values of out_t) = the partials added in part order.
void combine(CUdeviceptr out, DType out_t, CUdeviceptr partial, DType acc, int64_t cols,
             int64_t parts, int device) {
  if (cols <= 0) return;
  const std::string sym = str("kiln_colsum_combine_", dtype_name(acc), "_", dtype_name(out_t));
  const CUfunction fn =
      cached_kernel(device, sym, sym, [&] { return print_column_combine(acc, out_t, sym); });
  long long c = cols, p = parts;
  void* params[] = {&out, &partial, &c, &p};
  // Blocks of S threads per column (the slices the combine runs), up to 1024
  // threads: 32 columns of 32 slices, 512 of 2.
  const int64_t slices = column_combine_slices(parts);
  const int64_t width =
      std::clamp<int64_t>(cols, 1, std::min<int64_t>(1024, max_block_threads(fn)) / slices);
  const long long blocks = std::min<long long>((cols + width - 1) / width, 1 << 16);
  check(driver().cuLaunchKernel(fn, static_cast<unsigned>(blocks), 1, 1,
                                static_cast<unsigned>(width * slices), 1, 1, 0,
                                current_cu_stream(device), params, nullptr),
        "cuLaunchKernel (column sum combine)");
  after_launch(sym);
}

}  // namespace

bool device_column_sum(const Tensor& x, const Dims& dims, const Tensor& out) {
  // A column sum: every reduced dim before every kept dim of size > 1, and
  // more than one column (a full sum stays a row reduction).
  int64_t rows = 1, cols = 1, last_reduced = -1;
  for (int64_t d : dims) {
    rows *= x.shape()[static_cast<size_t>(d)];
    last_reduced = std::max(last_reduced, d);
  }
  for (int64_t d = 0; d < x.dim(); ++d) {
    const int64_t s = x.shape()[static_cast<size_t>(d)];
    if (std::find(dims.begin(), dims.end(), d) != dims.end()) continue;
    if (s > 1 && d < last_reduced) return false;
    cols *= s;
  }
  if (cols <= 1 || dims.empty() || !out.is_contiguous()) return false;
  const Tensor xc = x.contiguous();  // [rows, cols] in memory order
  const int device = out.device().index;
  const DType acc = accumulator(x.dtype());
  const int64_t parts = column_sum_parts(rows, cols);
  const Tensor partial = make_tensor({std::max<int64_t>(parts, 1), cols}, acc, out.device());
  if (parts > 0) {
    const std::string sym = str("kiln_colsum_", dtype_name(x.dtype()), "_", dtype_name(acc));
    const CUfunction fn =
        cached_kernel(device, sym, sym, [&] { return print_column_sum(x.dtype(), acc, sym); });
    CUdeviceptr pp = addr(partial), xp = addr(xc);
    long long r = rows, c = cols, p = parts;
    void* params[] = {&pp, &xp, &r, &c, &p};
    const int64_t threads = std::min<int64_t>(256, (cols + 31) / 32 * 32);
    const int64_t blocks =
        std::min<int64_t>(parts * ((cols + threads - 1) / threads), int64_t{1} << 16);
    check(driver().cuLaunchKernel(fn, static_cast<unsigned>(blocks), 1, 1,
                                  static_cast<unsigned>(threads), 1, 1, 0,
                                  current_cu_stream(device), params, nullptr),
          "cuLaunchKernel (column sum)");
    after_launch(sym);
  }
  combine(addr(out), out.dtype(), addr(partial), acc, cols, parts, device);
  return true;
}

void launch_column_sums(CUfunction fn, const kir::Kernel& k, std::vector<CUdeviceptr> ptrs,
                        const int64_t* sizes, std::span<const DType> sum_dtypes, int device) {
  int64_t rows = 1;
  for (int d = 0; d + 1 < k.rank; ++d) rows *= sizes[d];
  const int64_t inner = sizes[k.rank - 1];
  const int64_t parts = column_parts(rows, inner);
  struct Sum {
    CUdeviceptr out;
    DType dtype;
    Tensor partial;
  };
  std::vector<char> summed(k.args.size(), 0);
  for (const kir::Store& s : k.stores)
    if (s.accumulate) summed[static_cast<size_t>(s.arg)] = 1;
  std::vector<Sum> sums;
  for (size_t a = 0; a < k.args.size(); ++a) {
    if (!summed[a]) continue;
    KILN_CHECK(sums.size() < sum_dtypes.size(), "[cuda] kernel '", k.name,
               "' has more column sums ", "than the ", sum_dtypes.size(), " output dtypes given");
    const DType dt = sum_dtypes[sums.size()];
    KILN_CHECK(dt == DType::f32 || dt == DType::f64, "[cuda] kernel '", k.name,
               "': a column sum is f32 or f64, not ", dtype_name(dt));
    // Freed when this returns: the allocator reuses it only after the
    // combine, queued before on this stream, has read it.
    Tensor partial =
        make_tensor({std::max<int64_t>(parts, 1), inner}, DType::f64, Device::cuda(device));
    CUdeviceptr& p = ptrs[a];
    sums.push_back({p, dt, partial});
    p = addr(partial);
  }
  launch_kernel(fn, k, ptrs, sizes, current_cu_stream(device), parts);
  for (const Sum& s : sums)
    combine(s.out, s.dtype, addr(s.partial), DType::f64, inner, parts, device);
}

}  // namespace kiln::cuda
