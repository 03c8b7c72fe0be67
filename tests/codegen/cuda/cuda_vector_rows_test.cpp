// Row kernels printed with quad loops (RowLoops::quads: float4 loads and
// stores where a row's pointers are 16-byte aligned, else the same elements
// one by one in the same order) and with hoisted row values (RowLoops::hoist):
// on the device (the emulated one here) their results do not depend on the
// rows' alignment, and equal the interpreter's bit for bit (the inputs' f64 sums are exact, so any
// order gives the interpreter's; index-order kernels run on one thread).
#include <cmath>
#include <iterator>

#include "codegen/cuda/row_kernels.h"
#include "codegen/cuda/run_kernel.h"
#include "kernels/cuda/driver.h"
#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/gpu_printer_internal.h"
#include "kernels/cuda/module.h"

namespace kiln::cuda {
namespace {

// Runs printed kernel `name` of `k` over `sizes` with the inputs of `ref` on
// `blocks` x `threads`, every buffer `offset` floats past an aligned base;
// returns every buffer.
std::vector<kir::testing::Buffer> run_at(const Module& mod, const std::string& name,
                                         const kir::Kernel& k,
                                         const std::vector<kir::testing::Buffer>& ref,
                                         const std::vector<int64_t>& sizes, unsigned blocks,
                                         unsigned threads, int offset) {
  std::vector<DeviceBuffer> dev;
  std::vector<CUdeviceptr> ptrs;
  const size_t shift = 4 * static_cast<size_t>(offset);
  for (size_t a = 0; a < ref.size(); ++a) {
    const size_t bytes = ref[a].bytes.size();
    dev.emplace_back(bytes + 16);
    std::vector<char> host(bytes + 16, 0x5a);
    if (!k.args[a].is_output)
      std::copy(ref[a].bytes.begin(), ref[a].bytes.end(), host.begin() + shift);
    dev.back().upload(host.data(), host.size());
    ptrs.push_back(dev.back().get() + shift);
  }
  testing::launch_on(mod.function(name), k, ptrs, sizes, blocks, threads);
  check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
  std::vector<kir::testing::Buffer> got = ref;
  for (size_t a = 0; a < ref.size(); ++a) {
    if (!k.args[a].is_output) continue;
    std::vector<char> host(ref[a].bytes.size() + 16);
    dev[a].download(host.data(), host.size());
    std::copy(host.begin() + static_cast<std::ptrdiff_t>(shift),
              host.begin() + static_cast<std::ptrdiff_t>(shift + ref[a].bytes.size()),
              got[a].bytes.begin());
  }
  return got;
}

// Inputs whose f64 sums are exact in any order: row_value rounded to a
// multiple of 2^-8 (products exact in f32) (NaNs and integers as they are).
double exact_value(DType t, std::mt19937& g) {
  const double v = testing::row_value(t, g);
  if (!is_floating(t) || std::isnan(v)) return v;
  return std::ldexp(std::nearbyint(std::ldexp(v, 8)), -8);
}

// Whether the vector variant of `k` prints quad loops.
bool prints_quads(const kir::Kernel& k) {
  return detail::print_row_variant(k, "k", detail::kRowUnroll, 0, false, {true, false})
             .find("float4") != std::string::npos;
}

// Inputs whose f64 sums depend on their order: row_value, with every 8th
// value 2^40 and every 8th from the 4th -2^40 (small values added while the
// sum is near 2^40 are lost, those added between are kept).
double wide_value(DType t, std::mt19937& g) {
  static int calls = 0;
  const int c = calls++ % 8;
  if (!is_floating(t) || (c != 0 && c != 4)) return testing::row_value(t, g);
  return c == 0 ? 0x1p40 : -0x1p40;
}

// The row kernels of row_kernels() that print quad loops, plus layer_norm at
// the lengths tested.
std::vector<testing::RowKernel> quad_kernels() {
  std::vector<testing::RowKernel> out;
  for (const testing::RowKernel& r : testing::row_kernels())
    if (r.k.name != "layer_norm" && prints_quads(r.k)) out.push_back(r);
  for (int64_t n : {3, 13, 1027}) out.push_back({testing::layer_norm_kernel(n), false});
  return out;
}

// The streaming loops' forms tested: quads, hoisted row values, both.
const detail::RowLoops kLoops[] = {{true, false}, {false, true}, {true, true}};

// Runs `name` with every buffer 0 to 3 floats past alignment: each output's
// bits equal offset 0's, and (`exact`) the interpreter's `ref`.
void expect_same_on_every_alignment(const Module& mod, const std::string& name,
                                    const kir::Kernel& k,
                                    const std::vector<kir::testing::Buffer>& ref,
                                    const std::vector<int64_t>& sizes, unsigned blocks,
                                    unsigned threads, bool exact, const std::string& what) {
  std::vector<std::vector<kir::testing::Buffer>> runs;
  for (int offset : {0, 1, 2, 3})
    runs.push_back(run_at(mod, name, k, ref, sizes, blocks, threads, offset));
  for (size_t a = 0; a < k.args.size(); ++a) {
    if (!k.args[a].is_output) continue;
    for (size_t o = 1; o < runs.size(); ++o)
      EXPECT_TRUE(runs[o][a].bytes == runs[0][a].bytes)
          << what << " arg " << a << ": offset " << o << " differs from offset 0";
    int bad = 0;
    for (int64_t e = 0; exact && e < ref[a].numel && bad < 3; ++e) {
      const double want = ref[a].get(e), have = runs[0][a].get(e);
      if ((std::isnan(want) && std::isnan(have)) || want == have) continue;
      ++bad;
      ADD_FAILURE() << what << " arg " << a << " element " << e << ": GPU " << have
                    << ", interpreter " << want;
    }
  }
}

TEST(CudaVectorRows, EqualTheInterpreterOnEveryAlignment) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device: " << unavailable_reason();
  set_device(0);
  const auto kernels = quad_kernels();
  std::string source = device_prelude();
  for (size_t i = 0; i < kernels.size(); ++i)
    for (size_t o = 0; o < std::size(kLoops); ++o)
      source += detail::print_row_variant(kernels[i].k, str("v", i, "_", o), detail::kRowUnroll, 0,
                                          false, kLoops[o]);
  const std::vector<char> image = compile_for_device(source, "vector_rows.cu", 0);
  Module mod(image.data());
  std::mt19937 rng(23);
  int quad_launches = 0;
  for (size_t i = 0; i < kernels.size(); ++i) {
    const kir::Kernel& k = kernels[i].k;
    // Rows shorter than 4, odd lengths (every other row misaligned), a
    // partial last quad, lengths a multiple of 4 (aligned rows), several
    // rows per block.
    for (const std::vector<int64_t>& shape : {std::vector<int64_t>{5, 0},
                                              {6, 1},
                                              {5, 3},
                                              {7, 13},
                                              {6, 4},
                                              {4, 16},
                                              {3, 53},
                                              {5, 1027},
                                              {3, 1024},
                                              {2, 2049}}) {
      std::vector<int64_t> sizes = shape;
      if (k.rank == 3) sizes = {shape[0], 3, shape[1]};
      const int64_t inner = sizes.back(), rows = kir::work_items(k, sizes.data());
      if (k.name == "layer_norm" &&
          std::abs(1.0 / static_cast<double>(inner) - static_cast<double>(k.exprs[2].value)) > 1e-9)
        continue;  // its 1/N is baked in
      // Inputs with exact sums (the interpreter's bits), then inputs whose
      // sums depend on the order (bits equal across alignments: the same
      // order on both paths).
      for (const bool exact : {true, false}) {
        auto ref = kir::testing::make_buffers(k, sizes, rng, exact ? exact_value : wide_value);
        auto ptrs = kir::testing::pointers(ref);
        kir::interpret(k, 0, rows, ptrs.data(), sizes.data());
        const auto threads = static_cast<unsigned>(row_threads(k, inner, 0));
        for (const unsigned blocks : {static_cast<unsigned>(std::max<int64_t>(rows, 1)), 2u})
          for (size_t o = 0; o < std::size(kLoops); ++o) {
            expect_same_on_every_alignment(
                mod, str("v", i, "_", o), k, ref, sizes, blocks, threads, exact,
                str(k.name, exact ? " exact" : "", " sizes ", ::testing::PrintToString(sizes), " ",
                    blocks, " x ", threads, " quads ", kLoops[o].quads, " hoist ",
                    kLoops[o].hoist));
            quad_launches += inner >= 4 && kLoops[o].quads;
          }
      }
    }
  }
  EXPECT_GT(quad_launches, 160);
}

// Quad loops only where every row argument is f32: softmax in f32 prints
// float4 accesses, in f16 and f64 the element loops; integer rows neither.
TEST(GpuPrinterRows, QuadLoopsOnlyForF32Rows) {
  const auto quads = prints_quads;
  EXPECT_TRUE(quads(testing::softmax_kernel(DType::f32)));
  EXPECT_TRUE(quads(testing::layer_norm_kernel(64)));
  EXPECT_FALSE(quads(testing::softmax_kernel(DType::f16)));
  EXPECT_FALSE(quads(testing::softmax_kernel(DType::f64)));
  EXPECT_EQ(quad_kernels().size(), 6u);  // softmax, ordered_sum, rank3, 3 layer_norms
  // print_kernel prints row kernels with default_row_loops() (held rows off).
  EXPECT_EQ(detail::print_row_variant(testing::softmax_kernel(DType::f32), "k", detail::kRowUnroll,
                                      0, false, detail::default_row_loops()),
            print_kernel(testing::softmax_kernel(DType::f32), "k"));
}

}  // namespace
}  // namespace kiln::cuda
