// Batched pointwise kernels (gpu_printer_batch.h): print_kernel's loops over
// the instance a block finds in its launch's table.
#include "kernels/cuda/gpu_printer_batch.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/gpu_printer_internal.h"
#include "kernels/math_expand.h"
#include "kiln/error.h"

namespace kiln::cuda {

using kir::Kernel;

namespace {

// The words of one instance's record: n, the sizes s1..s{R-1}, the addresses.
int record_words(const Kernel& k) {
  return k.rank + static_cast<int>(k.args.size());
}

}  // namespace

bool batchable(const Kernel& k) {
  return !k.has_reductions() && !has_column_sums(k);
}

int batch_capacity(const Kernel& k, int words) {
  // w[0], the m + 1 first blocks, then the records.
  return std::min(kMaxBatch, (words - 2) / (1 + record_words(k)));
}

std::string print_batched_kernel(const Kernel& kernel, const std::string& symbol, int words) {
  KILN_CHECK(batchable(kernel), "[cuda] kernel '", kernel.name,
             "' has reductions or column sums: it has no batched form");
  const int cap = batch_capacity(kernel, words);
  KILN_CHECK(cap >= 1, "[cuda] kernel '", kernel.name, "' has ", kernel.args.size(),
             " arguments: its batched table does not fit ", words, " words");
  // print_kernel's pointwise choices, so each element's expression is its own.
  const detail::PointwiseOptions o = detail::default_pointwise();
  std::vector<char> normal_div;
  const Kernel k = o.libm ? kernel : kir::expand_math(kernel, &normal_div);
  kir::verify(k);
  const int rank = k.rank;
  int half = 1;  // the search's first step: the largest power of 2 below cap
  while (half * 2 < cap) half *= 2;
  std::ostringstream os;
  os << detail::tables_for(k);
  // One table type per program (its dialect's words). On CUDA the table is a
  // __grid_constant__, read in place where a block indexes it by its
  // instance, never copied to local memory (NVRTC 13.0 reads a plain const
  // struct in place too: 0 bytes stack frame either way for sm_90).
  os << "#ifndef KILN_BATCH_TABLE\n#define KILN_BATCH_TABLE\n"
     << "typedef struct KilnBatch { kiln_i64 w[" << words << "]; } KilnBatch;\n"
     << "#ifdef __CUDACC__\n#define KILN_BATCH_PARAM const __grid_constant__ KilnBatch\n"
     << "#else\n#define KILN_BATCH_PARAM const KilnBatch\n#endif\n#endif\n";
  os << "KILN_KERNEL void " << symbol << "(KILN_BATCH_PARAM t) {\n"
     << "  // This block's instance j: the last whose first block is at most blockIdx.x.\n"
     << "  const kiln_i64 m = t.w[0], b = (kiln_i64)blockIdx.x;\n"
     << "  int j = 0;\n";
  if (cap > 1)
    os << "  for (int h = " << half << "; h > 0; h >>= 1)\n"
       << "    if (j + h < m && t.w[1 + j + h] <= b) j += h;\n";
  os << "  const kiln_i64 kiln_b = b - t.w[1 + j], kiln_nb = t.w[2 + j] - t.w[1 + j];\n"
     << "  const int rec = " << 2 + cap << " + j * " << record_words(k) << ";\n"
     << "  const kiln_i64 n = t.w[rec];\n";
  for (int d = 1; d < rank; ++d) os << "  const kiln_i64 s" << d << " = t.w[rec + " << d << "];\n";
  for (size_t a = 0; a < k.args.size(); ++a) {
    const kir::Arg& arg = k.args[a];
    const std::string type =
        str("KILN_GLOBAL ", arg.is_output ? "" : "const ", detail::storage_type(arg.dtype), "*");
    os << "  " << type << " p" << a << " = (" << type << ")t.w[rec + " << rank + a << "];\n";
  }
  os << detail::pointwise_body(k, normal_div, o, "kiln_b", "kiln_nb") << "}\n";
  return os.str();
}

void batch_table(const Kernel& k, std::span<int64_t> w, std::span<const BatchInstance> instances) {
  const int cap = batch_capacity(k, static_cast<int>(w.size()));
  const auto m = static_cast<int64_t>(instances.size());
  KILN_CHECK(m >= 1 && m <= cap, "[cuda] a batched launch of kernel '", k.name, "' takes 1 to ",
             cap, " instances, got ", m);
  std::fill(w.begin(), w.end(), 0);
  w[0] = m;
  const size_t rec = static_cast<size_t>(record_words(k));
  for (size_t j = 0; j < instances.size(); ++j) {
    const BatchInstance& in = instances[j];
    w[2 + j] = w[1 + j] + in.blocks;
    int64_t* r = &w[2 + static_cast<size_t>(cap) + j * rec];
    r[0] = kir::work_items(k, in.sizes);
    for (int d = 1; d < k.rank; ++d) r[d] = in.sizes[d];
    for (size_t a = 0; a < k.args.size(); ++a)
      r[static_cast<size_t>(k.rank) + a] = static_cast<int64_t>(in.ptrs[a]);
  }
}

}  // namespace kiln::cuda
