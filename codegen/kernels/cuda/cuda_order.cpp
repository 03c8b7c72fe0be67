// Scans and orderings on CUDA tensors (device_ops.h): cumsum/cumprod and
// argsort (sort, topk) through the printer's kernels over contiguous lines
// (the dim moved last), results written back through a view of the output.
// argsort is a bitonic sort: one launch where a line fits a block's tile
// (kSortTile), else the tiles sorted, then each merge stage as global steps
// and a last launch of the tiles.
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

// The permutation moving `dim` of a rank-r tensor last.
Dims dim_last(int64_t dim, int64_t r) {
  Dims p;
  for (int64_t i = 0; i < r; ++i)
    if (i != dim) p.push_back(i);
  p.push_back(dim);
  return p;
}

// x with `dim` moved last, contiguous: rows of len elements.
Tensor lines_of(const Tensor& x, int64_t dim) {
  return x.dim() == 0 ? x.reshape({1}) : kiln::permute(x, dim_last(dim, x.dim())).contiguous();
}

// Writes `lines` (dim last) into out (the dim in place), through a view of out.
void write_back(const Tensor& lines, int64_t dim, const Tensor& out) {
  Tensor o = out.dim() == 0 ? out.reshape({1}) : kiln::permute(out, dim_last(dim, out.dim()));
  o.copy_(lines);
}

int64_t wrap(int64_t dim, int64_t rank, const char* op) {
  const int64_t r = std::max<int64_t>(rank, 1);
  KILN_CHECK(dim >= -r && dim < r, "[", op, "] dim ", dim, " is out of range for rank ", rank);
  return dim < 0 ? dim + r : dim;
}

}  // namespace

void launch_printed(const std::function<std::string()>& print, const std::string& sym, int device,
                    long long count, std::vector<void*>& params) {
  const CUfunction fn =
      cached_kernel(device, str(sym, " narrow ", narrow_index_limit()), sym, print);
  const long long blocks = std::clamp<long long>((count + 255) / 256, 1, 1 << 16);
  check(driver().cuLaunchKernel(fn, static_cast<unsigned>(blocks), 1, 1, 256, 1, 1, 0,
                                current_cu_stream(device), params.data(), nullptr),
        "cuLaunchKernel (printed kernel)");
  after_launch(sym);
}

void device_scan(bool product, const Tensor& x, const Attrs& attrs, const Tensor& out) {
  const char* op = product ? "cumprod" : "cumsum";
  if (out.numel() == 0) return;
  const int64_t d = wrap(attrs.i("dim"), x.dim(), op);
  const Tensor in = lines_of(x, d);
  Tensor res = make_tensor(in.shape(), out.dtype(), out.device());
  const std::string sym = str("kiln_", op, "_", dtype_name(x.dtype()));
  long long len = in.shape().back(), lines = in.numel() / len;
  int reverse = attrs.has("reverse") && attrs.b("reverse") ? 1 : 0;
  CUdeviceptr po = addr(res), px = addr(in);
  std::vector<void*> params = {&po, &px, &lines, &len, &reverse};
  launch_printed([&] { return print_scan(product, x.dtype(), sym); }, sym, out.device().index,
                 lines, params);
  write_back(res, d, out);
}

void device_argsort(const Tensor& x, const Attrs& attrs, const Tensor& out) {
  const char* op = attrs.i("k") >= 0 ? "topk" : "argsort";
  if (out.numel() == 0) return;
  const int64_t d = wrap(attrs.i("dim"), x.dim(), op);
  const Tensor in = lines_of(x, d);
  long long len = in.shape().back(), lines = in.numel() / len;
  long long k = attrs.i("k") >= 0 ? attrs.i("k") : len;
  Dims shape = in.shape();
  shape.back() = k;
  Tensor res = make_tensor(shape, DType::i64, out.device());
  // The bitonic network's width: len padded to a power of 2.
  long long width = 1;
  while (width < len) width *= 2;
  const long long tile = std::min(width, kSortTile), tiles = lines * (width / tile);
  // Keys (8 bytes each covers every key type) and positions between stages.
  Tensor gv, gi;
  if (width > tile) {
    gv = make_tensor({lines * width}, DType::f64, out.device());
    gi = make_tensor({lines * width}, DType::i64, out.device());
  }
  const int device = out.device().index;
  const std::string sym = str("kiln_argsort_", dtype_name(x.dtype())), step = sym + "_step";
  int desc = attrs.b("descending") ? 1 : 0;
  CUdeviceptr po = addr(res), px = addr(in), pv = gv.defined() ? addr(gv) : 0,
              pi = gi.defined() ? addr(gi) : 0;
  long long stage = 0;
  std::vector<void*> params = {&po, &px, &pv, &pi, &lines, &len, &k, &width, &stage, &desc};
  auto block_source = [&] { return print_argsort(x.dtype(), sym); };
  launch_printed(block_source, sym, device, tiles * 256, params);
  for (long long kk = 2 * tile; kk <= width; kk *= 2) {
    for (long long j = kk / 2; j >= tile; j /= 2) {
      std::vector<void*> sp = {&pv, &pi, &lines, &len, &width, &kk, &j, &desc};
      launch_printed([&] { return print_argsort_step(x.dtype(), step); }, step, device,
                     lines * (width / 2), sp);
    }
    stage = kk;
    launch_printed(block_source, sym, device, tiles * 256, params);
  }
  write_back(res, d, out);
}

}  // namespace kiln::cuda
