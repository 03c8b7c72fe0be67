// The GPU printer's scans and orderings (gpu_printer.h): cumsum/cumprod as
// one thread per line in the CPU kernel's order and accumulators, and argsort
// (sort, topk) as a bitonic sort in the CPU's total order: tiles of
// kSortTile elements in shared memory, longer lines merged through global
// memory (O(len log^2 len) per line).
#include <sstream>

#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/gpu_printer_internal.h"

namespace kiln::cuda {

using namespace detail;

namespace {

// The type a sort keeps its keys in: the compute type (bools as bytes, as the
// CPU compares them).
const char* key_type(DType t) {
  return t == DType::b8 ? "unsigned char" : compute_type(t);
}

// KILN_FN int <name>(va, ia, vb, ib, len, desc): whether element (va, ia) goes
// before (vb, ib) in the CPU's total order (runtime/src/ops/sort.cpp's
// RowOrder: NaN above every number, then ties by position); padding
// (positions >= len) after every element.
std::string print_before(DType t, const std::string& name) {
  const std::string T = key_type(t);
  std::ostringstream os;
  os << "KILN_FN int " << name << "(" << T << " va, kiln_i64 ia, " << T
     << " vb, kiln_i64 ib, kiln_i64 len, int desc) {\n"
     << "  if (ia >= len || ib >= len) return ia < ib;\n";
  if (is_floating(t))
    os << "  const int na = va != va, nb = vb != vb;\n"
       << "  if (na || nb) return na && nb ? ia < ib : (desc ? na : nb);\n";
  os << "  if (va != vb) return desc ? va > vb : va < vb;\n"
     << "  return ia < ib;\n"
     << "}\n";
  return os.str();
}

// One compare-exchange of a bitonic network between (V[i], I[i]) and
// (V[l], I[l]) (arrays in shared or global memory), in stage kk's direction at
// global position `at`.
std::string print_exchange(DType t, const std::string& before, const std::string& V,
                           const std::string& I, const std::string& at, const std::string& ind) {
  const std::string T = key_type(t);
  std::ostringstream os;
  os << ind << "const " << T << " va = " << V << "[i], vb = " << V << "[l];\n"
     << ind << "const kiln_i64 ia = " << I << "[i], ib = " << I << "[l];\n"
     << ind << "if ((((" << at << ") & kk) == 0) ? " << before << "(vb, ib, va, ia, len, desc)\n"
     << ind << "                             : " << before << "(va, ia, vb, ib, len, desc)) {\n"
     << ind << "  " << V << "[i] = vb;\n"
     << ind << "  " << V << "[l] = va;\n"
     << ind << "  " << I << "[i] = ib;\n"
     << ind << "  " << I << "[l] = ia;\n"
     << ind << "}\n";
  return os.str();
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
  const std::string T = key_type(t), before = symbol + "_before";
  const std::string x = t == DType::b8 ? "(unsigned char)" + load(t, "x", "line * len + pos")
                                       : load(t, "x", "line * len + pos");
  std::ostringstream os;
  os << print_before(t, before) << "KILN_KERNEL void " << symbol
     << "(KILN_GLOBAL kiln_i64* out, KILN_GLOBAL const " << storage_type(t) << "* x,\n"
     << "    KILN_GLOBAL " << T << "* gv, KILN_GLOBAL kiln_i64* gi, kiln_i64 lines, kiln_i64 len, "
     << "kiln_i64 k,\n"
     << "    kiln_i64 width, kiln_i64 stage, int desc) {\n"
     << "  __shared__ " << T << " sv[" << kSortTile << "];\n"
     << "  __shared__ kiln_i64 si[" << kSortTile << "];\n"
     << "  const kiln_i64 tile = width < " << kSortTile << " ? width : " << kSortTile
     << ", per = width / tile;\n"
     << "  const int last = stage == width || tile == width;  /* the line ends sorted */\n"
     << "  for (kiln_i64 b = blockIdx.x; b < lines * per; b += gridDim.x) {\n"
     << "    const kiln_i64 line = b / per, start = (b % per) * tile;\n"
     << "    for (kiln_i64 e = threadIdx.x; e < tile; e += blockDim.x) {\n"
     << "      const kiln_i64 pos = start + e;\n"
     << "      if (stage == 0) {\n"
     << "        si[e] = pos;\n"
     << "        sv[e] = pos < len ? " << x << " : (" << T << ")0;\n"
     << "      } else {\n"
     << "        si[e] = gi[line * width + pos];\n"
     << "        sv[e] = gv[line * width + pos];\n"
     << "      }\n"
     << "    }\n"
     << "    __syncthreads();\n"
     << "    for (kiln_i64 kk = stage == 0 ? 2 : stage; kk <= (stage == 0 ? tile : stage); kk *= "
        "2)\n"
     << "      for (int j = (int)(kk < tile ? kk : tile) / 2; j > 0; j /= 2) {\n"
     << "        for (int q = (int)threadIdx.x; q < (int)tile / 2; q += (int)blockDim.x) {\n"
     << "          /* pair q's lower element: q with a 0 bit inserted at j (a power of 2) */\n"
     << "          const int i = ((q & ~(j - 1)) << 1) | (q & (j - 1)), l = i + j;\n"
     << print_exchange(t, before, "sv", "si", "start + i", "          ") << "        }\n"
     << "        __syncthreads();\n"
     << "      }\n"
     << "    for (kiln_i64 e = threadIdx.x; e < tile; e += blockDim.x) {\n"
     << "      const kiln_i64 pos = start + e;\n"
     << "      if (!last) {\n"
     << "        gv[line * width + pos] = sv[e];\n"
     << "        gi[line * width + pos] = si[e];\n"
     << "      } else if (pos < k) {\n"
     << "        out[line * k + pos] = si[e];\n"
     << "      }\n"
     << "    }\n"
     << "    __syncthreads();\n"
     << "  }\n}\n";
  return os.str();
}

std::string print_argsort_step(DType t, const std::string& symbol) {
  const std::string T = key_type(t), before = symbol + "_before";
  std::ostringstream os;
  os << print_before(t, before) << "KILN_KERNEL void " << symbol << "(KILN_GLOBAL " << T
     << "* gv, KILN_GLOBAL kiln_i64* gi, kiln_i64 lines, kiln_i64 len,\n"
     << "    kiln_i64 width, kiln_i64 kk, kiln_i64 j, int desc) {\n"
     << grid_loop("lines * (width / 2)") << "    const kiln_i64 r = i % (width / 2);\n"
     << "    KILN_GLOBAL " << T << "* v = gv + (i / (width / 2)) * width;\n"
     << "    KILN_GLOBAL kiln_i64* ix = gi + (i / (width / 2)) * width;\n"
     << "    const kiln_i64 a = ((r & ~(j - 1)) << 1) | (r & (j - 1)), b = a + j;\n"
     << "    {\n"
     << "      const kiln_i64 i = a, l = b;\n"
     << print_exchange(t, before, "v", "ix", "i", "      ") << "    }\n"
     << "  }\n}\n";
  return os.str();
}

}  // namespace kiln::cuda
