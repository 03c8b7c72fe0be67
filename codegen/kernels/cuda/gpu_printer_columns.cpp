// The GPU printer's column sums (gpu_printer.h): sums over the leading dims
// with per-part partials, and the ordered combine of the parts.
//
// A part is a fixed run of rows (column_parts() depends on the sizes only);
// one thread sums one column of one part in index order, and the combine adds
// the parts in order, so no result depends on the grid, the block size or how
// the device schedules blocks. (Atomics would make the order the scheduler's.)
#include <algorithm>
#include <sstream>

#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/gpu_printer_internal.h"
#include "kiln/error.h"

namespace kiln::cuda {
namespace {

// A row kernel with column sums (layer_norm's backward) runs one block per
// part: 256 parts of [8192, 512] left an H200 at 6% occupancy, 310 GB/s
// (2026-11-27); 1024 parts of 8 rows fill it four times better.
constexpr int64_t kRowsPerPart = 8;         // fewer rows: the combine costs as much as the sum
constexpr int64_t kElementsPerPart = 2048;  // a part's share when columns are few
constexpr int64_t kMaxParts = 1024;         // the partials stay a fraction of the input
// An eager column sum's (part, column) threads: about one wave of a large GPU
// (132 SMs x 2048). Its partials are written and read once more: [8192, 1536]
// in 1024 parts of 8 rows wrote 12.6 MB of them for 50 MB read (an H200: 40
// us, a third of copy bandwidth); 171 parts write 2.1 MB.
constexpr int64_t kColumnSumThreads = int64_t{1} << 18;
// The combine splits a column's parts into this many slices (one thread each)
// and loads this many parts of a slice at once; the block's width in columns
// is blockDim.x / kCombineSlices, which no result depends on.
constexpr int kCombineSlices = 32;
constexpr int kUnroll = 8;

// The C type an accumulator of dtype `acc` adds in (integers wrap in 64 bits).
const char* acc_ctype(DType acc) {
  return acc == DType::i64 ? "kiln_u64" : detail::compute_type(acc);
}

// The loop over (part, column tile) work items of a column kernel: `part` and
// the thread's column `j` (< `cols`) in scope inside; the caller closes two braces.
std::string part_loop_head(const std::string& cols) {
  return str("  const kiln_i64 tiles = (", cols,
             " + blockDim.x - 1) / blockDim.x;\n"
             "  for (kiln_i64 w = blockIdx.x; w < parts * tiles; w += gridDim.x) {\n"
             "    const kiln_i64 part = w / tiles;\n"
             "    const kiln_i64 j = (w % tiles) * blockDim.x + threadIdx.x;\n"
             "    if (j < ",
             cols, ") {\n");
}

}  // namespace

int64_t column_parts(int64_t rows, int64_t inner) {
  if (rows <= 0) return 0;
  return std::clamp<int64_t>(std::min(rows / kRowsPerPart, rows * inner / kElementsPerPart), 1,
                             kMaxParts);
}

int64_t column_sum_parts(int64_t rows, int64_t cols) {
  if (rows <= 0) return 0;
  const int64_t want =
      (kColumnSumThreads + std::max<int64_t>(cols, 1) - 1) / std::max<int64_t>(cols, 1);
  return std::clamp<int64_t>(std::min(want, rows / kRowsPerPart), 1, kMaxParts);
}

std::string print_column_sum(DType x, DType acc, const std::string& symbol) {
  KILN_CHECK(acc == DType::f64 || acc == DType::f32 || acc == DType::i64,
             "[cuda] column sum accumulates in f64, f32 or i64, not ", dtype_name(acc));
  const char* at = acc_ctype(acc);
  auto value_at = [&](const std::string& row) {
    const std::string v = detail::load(x, "x", str(row, " * cols + j"));
    return acc == DType::i64 ? str("(kiln_u64)(kiln_i64)", v) : str("(", at, ")", v);
  };
  std::ostringstream os;
  os << "KILN_KERNEL void " << symbol << "(KILN_GLOBAL " << detail::storage_type(acc)
     << "* partial, KILN_GLOBAL const " << detail::storage_type(x)
     << "* x, kiln_i64 rows, kiln_i64 cols, kiln_i64 parts) {\n"
     << part_loop_head("cols") << "      " << at << " acc = (" << at << ")0;\n"
     << "      const kiln_i64 end = rows * (part + 1) / parts;\n"
     << "      kiln_i64 r = rows * part / parts;\n"
     // kUnroll rows' loads at once, added in row order.
     << "      for (; r + " << kUnroll << " <= end; r += " << kUnroll << ") {\n";
  for (int u = 0; u < kUnroll; ++u)
    os << "        const " << at << " v" << u << " = " << value_at(str("(r + ", u, ")")) << ";\n";
  for (int u = 0; u < kUnroll; ++u) os << "        acc = acc + v" << u << ";\n";
  os << "      }\n"
     << "      for (; r < end; ++r) acc = acc + " << value_at("r") << ";\n"
     << "      partial[part * cols + j] = (" << detail::storage_type(acc) << ")acc;\n"
     << "    }\n  }\n}\n";
  return os.str();
}

int column_combine_slices() {
  return kCombineSlices;
}

int64_t column_combine_slices(int64_t parts) {
  return std::clamp<int64_t>(parts, 1, kCombineSlices);
}

std::string print_column_combine(DType acc, DType out, const std::string& symbol) {
  KILN_CHECK(acc == DType::f64 || acc == DType::f32 || acc == DType::i64,
             "[cuda] column sum accumulates in f64, f32 or i64, not ", dtype_name(acc));
  const char* at = acc_ctype(acc);
  const DType ct = acc == DType::i64 ? DType::i64 : acc;  // the value's dtype for the cast
  const std::string t = acc == DType::i64 ? "(kiln_i64)t" : "t";
  const std::string value = detail::store_value(
      out, detail::rounded(out, detail::op_expr(OpId::cast, ct, out, t, "", "")));
  std::ostringstream os;
  // Thread (slice, lane) of a block of S * c threads sums slice `slice` of
  // column base + lane; the block then adds the slices in order. Loads of a
  // slice go kUnroll at a time: a column's chain of dependent loads is
  // parts / S / kUnroll long instead of parts (1024 parts one at a time:
  // an H200's synchronized profile took about 0.12 ms per eager column sum
  // of [8192, 512], where reading the input takes 6 us).
  os << "KILN_KERNEL void " << symbol << "(KILN_GLOBAL " << detail::storage_type(out)
     << "* out, KILN_GLOBAL const " << detail::storage_type(acc)
     << "* partial, kiln_i64 cols, kiln_i64 parts) {\n"
     << "  __shared__ " << at << " kiln_slice[" << kCombineSlices * kCombineSlices
     << "];\n"
     // S = min(kCombineSlices, parts) slices: the bits of kCombineSlices (a
     // slice holds at most one part then) without idle threads (an eager sum
     // of [32, 131072] in 4 parts left 28 of every 32 threads without one).
     << "  const kiln_i64 S = parts < " << kCombineSlices
     << " ? (parts > 0 ? parts : 1) : " << kCombineSlices << ";\n"
     << "  const kiln_i64 c = blockDim.x / S;\n"
     << "  const kiln_i64 lane = threadIdx.x % c, slice = threadIdx.x / c;\n"
     << "  const kiln_i64 lo = slice < S ? parts * slice / S : 0, hi = slice < S ? parts * (slice "
        "+ 1) / S : 0;\n"
     << "  for (kiln_i64 base = (kiln_i64)blockIdx.x * c; base < cols; base += (kiln_i64)gridDim.x "
        "* c) {\n"
     << "    const kiln_i64 j = base + lane;\n"
     << "    " << at << " s = (" << at << ")0;\n"
     << "    if (j < cols) {\n"
     << "      kiln_i64 p = lo;\n"
     << "      for (; p + " << kUnroll << " <= hi; p += " << kUnroll << ") {\n";
  for (int u = 0; u < kUnroll; ++u)
    os << "        const " << at << " v" << u << " = (" << at << ")partial[(p + " << u
       << ") * cols + j];\n";
  for (int u = 0; u < kUnroll; ++u) os << "        s = s + v" << u << ";\n";
  os << "      }\n"
     << "      for (; p < hi; ++p) s = s + (" << at << ")partial[p * cols + j];\n"
     << "    }\n"
     << "    kiln_slice[threadIdx.x] = s;\n"
     << "    __syncthreads();\n"
     << "    if (slice == 0 && j < cols) {\n"
     << "      " << at << " t = kiln_slice[lane];\n"
     << "      for (kiln_i64 q = 1; q < S; ++q) t = t + kiln_slice[q * c + lane];\n"
     << "      out[j] = " << value << ";\n"
     << "    }\n"
     << "    __syncthreads();\n"
     << "  }\n}\n";
  return os.str();
}

namespace detail {

std::string print_column_kernel(const kir::Kernel& k, const std::string& symbol) {
  std::vector<int> summed;
  for (const kir::Store& s : k.stores)
    if (s.accumulate) summed.push_back(s.arg);
  std::ostringstream os;
  os << kernel_head(k, symbol, "n") << "  const kiln_i64 inner = s" << k.rank - 1 << ";\n"
     << "  const kiln_i64 rows = n / inner;\n"
     << part_loop_head("inner");
  for (int a : summed) os << "      double acc" << a << " = 0.0;\n";
  // Element i of the flat index space is (row, j): one thread per column and
  // part, rows in order (elementwise outputs are stored on the way), `unroll`
  // rows loaded at once: a row's loads may not pass the stores before them
  // (an output may alias an input), so one row at a time left a thread one
  // row's loads in flight, its part's rows in series. Each element is still
  // loaded before it is stored, the sums still add in row order.
  int loads = 0;
  for (const kir::Expr& e : k.exprs) loads += e.kind == kir::ExprKind::kLoad ? 1 : 0;
  const int unroll = std::clamp(16 / std::max(loads, 1), 2, 8);
  std::vector<LaneText> lanes;
  for (int u = 0; u < unroll; ++u)
    lanes.push_back(lane_text(k, str("((row + ", u, ") * inner + j)"), str("_", u), "        "));
  const LaneText t = lane_text(k, "i", "", "        ");
  os << "      const kiln_i64 end = rows * (part + 1) / parts;\n"
     << "      kiln_i64 row = rows * part / parts;\n"
     << "      for (; row + " << unroll - 1 << " < end; row += " << unroll << ") {\n"
     << lanes_text(lanes, "        ") << "      }\n"
     << "      for (; row < end; ++row) {\n"
     << "        const kiln_i64 i = row * inner + j;\n"
     << t.loads << t.math << t.stores << "      }\n";
  for (int a : summed) os << "      p" << a << "[part * inner + j] = acc" << a << ";\n";
  os << "    }\n  }\n}\n";
  return os.str();
}

}  // namespace detail
}  // namespace kiln::cuda
