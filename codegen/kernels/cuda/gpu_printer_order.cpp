// The GPU printer's scans and orderings (gpu_printer.h): cumsum/cumprod as
// one thread per line in the CPU kernel's order and accumulators, and argsort
// (sort, topk) as each element's rank in the CPU's total order.
#include <sstream>

#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/gpu_printer_internal.h"

namespace kiln::cuda {

using namespace detail;

namespace {

std::string grid_loop(const char* count) {
  return str("  for (kiln_i64 i = (kiln_i64)blockIdx.x * blockDim.x + threadIdx.x; i < ", count,
             ";\n       i += (kiln_i64)gridDim.x * blockDim.x) {\n");
}

}  // namespace

std::string print_scan(bool product, DType t, const std::string& symbol) {
  const bool fl = is_floating(t);
  const DType out_t = fl ? t : DType::i64;
  // As runtime/src/ops/scan.cpp: floats accumulate in double from the element
  // read in its compute type, each output rounded through that type; integers
  // and bool in wrapping 64 bits.
  const std::string x = load(t, "x", "at");
  const std::string v =
      fl ? str("(double)(", compute_type(t), ")(", x, ")") : str("(kiln_u64)(kiln_i64)(", x, ")");
  const std::string put =
      fl ? store_value(out_t, str("(", compute_type(t), ")acc")) : "(kiln_i64)acc";
  std::ostringstream os;
  os << "KILN_KERNEL void " << symbol << "(KILN_GLOBAL " << storage_type(out_t)
     << "* out, KILN_GLOBAL const " << storage_type(t)
     << "* x, kiln_i64 lines, kiln_i64 len, int reverse) {\n"
     << grid_loop("lines") << "    " << (fl ? "double" : "kiln_u64")
     << " acc = " << (product ? 1 : 0) << ";\n"
     << "    for (kiln_i64 j = 0; j < len; ++j) {\n"
     << "      const kiln_i64 at = i * len + (reverse ? len - 1 - j : j);\n"
     << "      acc = acc " << (product ? "*" : "+") << " " << v << ";\n"
     << "      out[at] = " << put << ";\n"
     << "    }\n  }\n}\n";
  return os.str();
}

std::string print_argsort(DType t, const std::string& symbol) {
  // Element (line, e)'s place: the elements ordered before it (NaN above every
  // number, then ties by position: runtime/src/ops/sort.cpp's RowOrder).
  const std::string a = load(t, "x", "base + e"), b = load(t, "x", "base + j");
  const bool fl = is_floating(t);
  std::ostringstream os;
  os << "KILN_KERNEL void " << symbol << "(KILN_GLOBAL kiln_i64* out, KILN_GLOBAL const "
     << storage_type(t) << "* x, kiln_i64 n, kiln_i64 len, kiln_i64 k, int desc) {\n"
     << grid_loop("n") << "    const kiln_i64 line = i / len, e = i % len, base = line * len;\n"
     << "    const " << compute_type(t) << " va = " << a << ";\n"
     << "    kiln_i64 place = 0;\n"
     << "    for (kiln_i64 j = 0; j < len && place < k; ++j) {\n"
     << "      if (j == e) continue;\n"
     << "      const " << compute_type(t) << " vb = " << b << ";\n"
     << "      int before;\n";
  if (fl)
    os << "      const int na = va != va, nb = vb != vb;\n"
       << "      if (na || nb) before = na && nb ? j < e : (desc ? nb : na);\n"
       << "      else ";
  else
    os << "      ";
  os << "if (va != vb) before = desc ? vb > va : vb < va;\n"
     << "      else before = j < e;\n"
     << "      place += before;\n"
     << "    }\n"
     << "    if (place < k) out[line * k + place] = e;\n"
     << "  }\n}\n";
  return os.str();
}

}  // namespace kiln::cuda
