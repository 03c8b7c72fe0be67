// The GPU printer's indexing kernels (gpu_printer.h): gather (also
// index_select) and scatter_add over strided operands of rank <= 8, with the
// out-of-range index skipped and recorded in the device's error record
// (device_errors.h) instead of a fault.
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/gpu_printer_internal.h"

namespace kiln::cuda {

using namespace detail;

namespace {

// The kernel's error helper and signature. `err` is the device's error record
// (device_errors.h): the first bad index of any launch claims it with its
// launch's `tag` (a compare-and-swap on the int at byte 0), then stores the
// value at byte 8; later ones leave it as it is.
std::string bad_fn(const std::string& symbol) {
  return str("KILN_FN void ", symbol, "_bad(KILN_GLOBAL int* err, int tag, kiln_i64 v) {\n",
             "#ifdef __OPENCL_VERSION__\n",
             "  if (atomic_cmpxchg((volatile KILN_GLOBAL int*)err, 0, tag) == 0)\n", "#else\n",
             "  if (atomicCAS(err, 0, tag) == 0)\n", "#endif\n",
             "    *(KILN_GLOBAL kiln_i64*)(err + 2) = v;\n", "}\n");
}

std::string head(const std::string& symbol, DType t, DType index_t, const char* data,
                 const char* count) {
  return str(bad_fn(symbol), "KILN_KERNEL void ", symbol, "(KILN_GLOBAL ", storage_type(t),
             "* out, KILN_GLOBAL const ", storage_type(t), "* ", data, ", KILN_GLOBAL const ",
             storage_type(index_t), "* idx, KILN_GLOBAL int* err, int tag, kiln_i64 ", count,
             ", int rank, int dim, kiln_i64 bound, ");
}

// out[o] plus src's entry k of the line at `so`: the kernel IR's add
// (wrapping integers, f16/bf16 rounded); bool adds as or.
std::string scatter_sum(DType t) {
  const std::string cur = load(t, "out", "o"), add = load(t, "src", "so + k * g.x[dim]");
  return t == DType::b8 ? str("(", cur, " || ", add, ")")
                        : rounded(t, op_expr(OpId::add, t, t, cur, add, ""));
}

// The coordinates of item `item` over g.size (d = rank - 1 down to 0, in
// the unsigned type `it`; see index_loops, gpu_printer_internal.h) summed
// into the offsets `decl` declares by the statements `sums` (each reading the
// coordinate c); a dim for which `skip` holds has no coordinate.
std::string coordinate_offsets(const char* it, const char* item, const std::string& decl,
                               const std::vector<std::string>& sums, const char* skip = nullptr) {
  std::string body;
  for (const std::string& line : sums) body += str("      ", line, "\n");
  return str("    ", it, " r = ", item, ";\n    kiln_i64 ", decl, ";\n",
             "    for (int d = rank - 1; d >= 0; --d) {\n",
             skip ? str("      if (", skip, ") continue;\n") : std::string(), "      const ", it,
             " c = r % (", it, ")g.size[d];\n", "      r /= (", it, ")g.size[d];\n", body,
             "    }\n");
}

// The offsets of line `line` (the index's coordinates other than `dim`): oo
// into out, so into src, and io into idx when `with_idx`; coordinates in the
// unsigned type `t`.
std::string line_offsets(const char* line, bool with_idx, const char* t = "kiln_i64") {
  std::vector<std::string> sums = {"oo += (kiln_i64)c * g.out[d];", "so += (kiln_i64)c * g.x[d];"};
  if (with_idx) sums.push_back("io += (kiln_i64)c * g.idx[d];");
  return coordinate_offsets(t, line, with_idx ? "oo = 0, so = 0, io = 0" : "oo = 0, so = 0", sums,
                            "d == dim");
}

}  // namespace

std::string print_gather(DType t, DType index_t, const std::string& symbol) {
  std::ostringstream os;
  // Element i of out: its coordinates give out's and idx's offsets; x's come
  // from the same coordinates with the index's value along `dim`.
  auto body = [&](const char* it) {
    return str(coordinate_offsets(it, "i", "oo = 0, xo = 0, io = 0",
                                  {"oo += (kiln_i64)c * g.out[d];", "io += (kiln_i64)c * g.idx[d];",
                                   "if (d != dim) xo += (kiln_i64)c * g.x[d];"}),
               "    const kiln_i64 v = (kiln_i64)idx[io];\n", "    if (v < 0 || v >= bound) { ",
               symbol, "_bad(err, tag, v); continue; }\n", "    out[oo] = x[xo + v * g.x[dim]];\n");
  };
  os << head(symbol, t, index_t, "x", "n") << "KilnIndexGeom g) {\n"
     << index_loops("n", body) << "}\n";
  return os.str();
}

std::string print_index_rows(DType t, DType index_t, const std::string& symbol) {
  const std::string st = storage_type(t);
  std::ostringstream os;
  os << bad_fn(symbol) << "KILN_KERNEL void " << symbol << "(KILN_GLOBAL " << st
     << "* out, KILN_GLOBAL const " << st << "* x, KILN_GLOBAL const " << storage_type(index_t)
     << "* idx, KILN_GLOBAL int* err, int tag, kiln_i64 rows, kiln_i64 nidx, kiln_i64 inner, "
        "kiln_i64 istride, kiln_i64 bound) {\n"
     << "  for (kiln_i64 row = blockIdx.x; row < rows; row += gridDim.x) {\n"
     << "    const kiln_i64 o = row / nidx, r = row - o * nidx;\n"
     << "    const kiln_i64 v = (kiln_i64)idx[r * istride];\n"
     << "    if (v < 0 || v >= bound) {\n"
     << "      if (threadIdx.x == 0) " << symbol << "_bad(err, tag, v);\n"
     << "      continue;\n"
     << "    }\n"
     << "    KILN_GLOBAL const " << st << "* src = x + (o * bound + v) * inner;\n"
     << "    KILN_GLOBAL " << st << "* dst = out + row * inner;\n"
     << "    for (kiln_i64 c = threadIdx.x; c < inner; c += blockDim.x) dst[c] = src[c];\n"
     << "  }\n}\n";
  return os.str();
}

std::string print_scatter_add(DType t, DType index_t, const std::string& symbol) {
  std::ostringstream os;
  // Line i: the index's coordinates other than `dim`; its entries along `dim`
  // are added in order.
  os << head(symbol, t, index_t, "src", "lines") << "kiln_i64 len, KilnIndexGeom g) {\n"
     << grid_loop("lines") << line_offsets("i", true)
     << "    for (kiln_i64 k = 0; k < len; ++k) {\n"
     << "      const kiln_i64 v = (kiln_i64)idx[io + k * g.idx[dim]];\n"
     << "      if (v < 0 || v >= bound) { " << symbol << "_bad(err, tag, v); continue; }\n"
     << "      const kiln_i64 o = oo + v * g.out[dim];\n"
     << "      out[o] = " << store_value(t, scatter_sum(t)) << ";\n"
     << "    }\n  }\n}\n";
  return os.str();
}

std::string print_scatter_keys(DType index_t, const std::string& symbol) {
  return str("KILN_KERNEL void ", symbol, "(KILN_GLOBAL kiln_i64* keys, KILN_GLOBAL const ",
             storage_type(index_t), "* idx, kiln_i64 stride, kiln_i64 len) {\n", grid_loop("len"),
             "    keys[i] = (kiln_i64)idx[i * stride] * len + i;\n  }\n}\n");
}

std::string print_scatter_add_sorted(DType t, DType index_t, const std::string& symbol) {
  std::ostringstream os;
  // Item i: sorted position j = i / lines and line i % lines. Only the first
  // position of each run of equal indices works: it adds the run's entries
  // (ascending k, as the keys sort them) into its line's output element.
  auto body = [&](const char* it) {
    return str("    const ", it, " j = i / (", it, ")lines, line = i % (", it, ")lines;\n",
               "    const kiln_i64 s = g.idx[dim];\n",
               "    const kiln_i64 v = (kiln_i64)idx[perm[j] * s];\n",
               "    if (j > 0 && (kiln_i64)idx[perm[j - 1] * s] == v) continue;\n",
               "    if (v < 0 || v >= bound) {\n", "      if (line == 0) ", symbol,
               "_bad(err, tag, v);\n", "      continue;\n    }\n", line_offsets("line", false, it),
               "    const kiln_i64 o = oo + v * g.out[dim];\n",
               "    for (kiln_i64 m = j; m < len; ++m) {\n", "      const kiln_i64 k = perm[m];\n",
               "      if ((kiln_i64)idx[k * s] != v) break;\n",
               "      out[o] = ", store_value(t, scatter_sum(t)), ";\n", "    }\n");
  };
  os << head(symbol, t, index_t, "src", "total")
     << "KILN_GLOBAL const kiln_i64* perm, kiln_i64 lines, kiln_i64 len, KilnIndexGeom g) {\n"
     << index_loops("total", body) << "}\n";
  return os.str();
}

std::string print_scatter_add_scan(DType t, DType index_t, const std::string& symbol) {
  std::ostringstream os;
  const int w = kScatterWindow;
  os << head(symbol, t, index_t, "src", "work")
     << "kiln_i64 lines, kiln_i64 len, kiln_i64 group, KilnIndexGeom g) {\n"
     << "  __shared__ kiln_i64 kiln_found[" << w << "];\n"
     << "  __shared__ kiln_i64 kiln_order[" << w << "];\n"
     << "  __shared__ int kiln_found_row[" << w << "];\n"
     << "  __shared__ int kiln_order_row[" << w << "];\n"
     << "  __shared__ int kiln_count;\n"
     << "  const kiln_i64 tiles = (lines + blockDim.x - 1) / blockDim.x, s = g.idx[dim];\n"
     << "  for (kiln_i64 w = blockIdx.x; w < work; w += gridDim.x) {\n"
     // Rows v0 .. v0 + group - 1 (below bound), one tile of lines.
     << "    const kiln_i64 v0 = (w / tiles) * group, l = (w % tiles) * blockDim.x + threadIdx.x;\n"
     << "    const kiln_i64 v1 = v0 + group < bound ? v0 + group : bound;\n"
     << "    const bool live = l < lines;\n"
     << line_offsets("(live ? l : 0)", false)
     << "    for (kiln_i64 base = 0; base < len; base += " << w << ") {\n"
     << "      if (threadIdx.x == 0) kiln_count = 0;\n"
     << "      __syncthreads();\n"
     // The window's entries of the block's rows, in the order the threads find them.
     << "      for (kiln_i64 e = threadIdx.x; e < " << w
     << " && base + e < len; e += blockDim.x) {\n"
     << "        const kiln_i64 x = (kiln_i64)idx[(base + e) * s];\n"
     << "        if (x >= v0 && x < v1) {\n"
     << "          const int at = kiln_shared_inc(&kiln_count);\n"
     << "          kiln_found[at] = base + e;\n"
     << "          kiln_found_row[at] = (int)(x - v0);\n"
     << "        } else if (w == 0 && (x < 0 || x >= bound)) {\n"
     << "          " << symbol << "_bad(err, tag, x);\n"
     << "        }\n"
     << "      }\n"
     << "      __syncthreads();\n"
     // Each found k's place is the number of smaller ones (they are distinct):
     // every row's entries in ascending k, the CPU's order.
     << "      const int n = kiln_count;\n"
     << "      for (int f = (int)threadIdx.x; f < n; f += (int)blockDim.x) {\n"
     << "        int at = 0;\n"
     << "        for (int q = 0; q < n; ++q) at += kiln_found[q] < kiln_found[f];\n"
     << "        kiln_order[at] = kiln_found[f];\n"
     << "        kiln_order_row[at] = kiln_found_row[f];\n"
     << "      }\n"
     << "      __syncthreads();\n"
     << "      for (int q = 0; live && q < n; ++q) {\n"
     << "        const kiln_i64 k = kiln_order[q];\n"
     << "        const kiln_i64 o = oo + (v0 + kiln_order_row[q]) * g.out[dim];\n"
     << "        out[o] = " << store_value(t, scatter_sum(t)) << ";\n"
     << "      }\n"
     << "      __syncthreads();\n"
     << "    }\n  }\n}\n";
  return os.str();
}

std::string print_pointer_table(const std::string& symbol) {
  // Batch n's coordinates (row-major over g.size) give its byte offsets in
  // the three operands: g.x for a, g.idx for b, g.out for d.
  auto body = [&](const char* it) {
    return str(coordinate_offsets(it, "i", "oa = 0, ob = 0, od = 0",
                                  {"oa += (kiln_i64)c * g.x[d];", "ob += (kiln_i64)c * g.idx[d];",
                                   "od += (kiln_i64)c * g.out[d];"}),
               "    table[i] = a + (kiln_u64)oa;\n", "    table[n + i] = b + (kiln_u64)ob;\n",
               "    table[2 * n + i] = d + (kiln_u64)od;\n");
  };
  return str("KILN_KERNEL void ", symbol,
             "(KILN_GLOBAL kiln_u64* table, kiln_i64 n, int rank, kiln_u64 a, kiln_u64 b, "
             "kiln_u64 d, KilnIndexGeom g) {\n",
             index_loops("n", body), "}\n");
}

}  // namespace kiln::cuda
