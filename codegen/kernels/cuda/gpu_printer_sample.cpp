// The GPU printer's multinomial kernels (gpu_printer.h): the CPU kernel's
// rule (runtime/src/ops/sort.cpp) step for step. A row pass checks the weights
// and, with replacement, writes their running sums in index order (the CPU's
// additions, so the same doubles); a draw per sample searches them; without
// replacement the race keys, whose log is ops/sample_rule.h's text
// (race_log_source() goes once between the prelude and that kernel).
#include <cmath>
#include <sstream>

#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/gpu_printer_internal.h"

namespace kiln::cuda {

using namespace detail;

std::string print_multinomial_rows(DType t, bool replacement, const std::string& symbol) {
  const std::string big = hex_float(1.7976931348623157e308, false);  // DBL_MAX: finite
  std::ostringstream os;
  os << "KILN_KERNEL void " << symbol
     << "(KILN_GLOBAL kiln_i64* status, KILN_GLOBAL double* cdf, KILN_GLOBAL kiln_i64* last,\n"
     << "    KILN_GLOBAL const " << storage_type(t)
     << "* p, kiln_i64 rows, kiln_i64 len, kiln_i64 n) {\n"
     << grid_loop("rows") << "    const kiln_i64 base = i * len;\n"
     << "    double total = 0;\n"
     << "    kiln_i64 nonzero = 0, last_nonzero = 0;\n"
     << "    int bad = 0;\n"
     << "    for (kiln_i64 c = 0; c < len; ++c) {\n"
     << "      const double v = (double)(" << load(t, "p", "base + c") << ");\n"
     << "      if (!(v >= 0 && v <= " << big << ")) bad = 1;\n"
     << "      total = total + v;\n"
     << "      if (v > 0) {\n"
     << "        ++nonzero;\n"
     << "        last_nonzero = c;\n"
     << "      }\n";
  if (replacement) os << "      cdf[base + c] = total;\n";
  os << "    }\n"
     << "    if (!(total > 0 && total <= " << big << ")) bad = 1;\n";
  if (!replacement) os << "    if (nonzero < n) bad = 1;\n";
  // The first bad row is rows - max(status): the one the CPU's error names.
  os << "    status[i] = bad ? rows - i : 0;\n";
  if (replacement) os << "    last[i] = last_nonzero;\n";
  os << "  }\n}\n";
  return os.str();
}

std::string print_multinomial_draw(const std::string& symbol) {
  // std::upper_bound: the first c with t < cdf[c] (the sums never decrease).
  std::ostringstream os;
  os << "KILN_KERNEL void " << symbol
     << "(KILN_GLOBAL kiln_i64* out, KILN_GLOBAL const double* cdf, KILN_GLOBAL const kiln_i64* "
        "last,\n"
     << "    KILN_GLOBAL const double* u, kiln_i64 count, kiln_i64 len, kiln_i64 n) {\n"
     << grid_loop("count") << "    const kiln_i64 row = i / n;\n"
     << "    KILN_GLOBAL const double* sums = cdf + row * len;\n"
     << "    const double t = u[i] * sums[len - 1];\n"
     << "    kiln_i64 lo = 0, hi = len;\n"
     << "    while (lo < hi) {\n"
     << "      const kiln_i64 mid = lo + (hi - lo) / 2;\n"
     << "      if (t < sums[mid]) hi = mid;\n"
     << "      else lo = mid + 1;\n"
     << "    }\n"
     << "    out[i] = lo < last[row] ? lo : last[row];  /* u * total rounding up to total */\n"
     << "  }\n}\n";
  return os.str();
}

std::string print_race_keys(DType t, const std::string& symbol) {
  std::ostringstream os;
  os << "KILN_KERNEL void " << symbol
     << "(KILN_GLOBAL double* key, KILN_GLOBAL const double* u, KILN_GLOBAL const "
     << storage_type(t) << "* p, kiln_i64 n) {\n"
     << grid_loop("n") << "    const double w = (double)(" << load(t, "p", "i") << ");\n"
     << "    key[i] = w > 0 ? kiln_race_log(1.0 - u[i]) / w : " << hex_float(-HUGE_VAL, false)
     << ";\n"
     << "  }\n}\n";
  return os.str();
}

}  // namespace kiln::cuda
