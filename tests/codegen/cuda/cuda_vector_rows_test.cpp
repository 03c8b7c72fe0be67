// Row kernels printed with quad loops (RowLoops::quads: float4 loads and
// stores where a row's pointers are 16-byte aligned, else the same elements
// one by one in the same order) and with hoisted row values (RowLoops::hoist):
// on the device (the emulated one here) their results do not depend on the
// rows' alignment, and equal the interpreter's bit for bit (the inputs' f64 sums are exact, so any
// order gives the interpreter's; index-order kernels run on one thread).
#include <cmath>
#include <functional>
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

// Calls f(sizes, rows, exact, ref) for each of `shapes` that `k` takes (a
// rank-3 kernel gets a middle dim of 3; layer_norm only its baked-in length),
// with inputs whose f64 sums are exact (the interpreter's bits in any order),
// then inputs whose sums depend on the order; `ref` holds the interpreter's
// outputs.
void for_each_case(const kir::Kernel& k, const std::vector<std::vector<int64_t>>& shapes,
                   std::mt19937& rng,
                   const std::function<void(const std::vector<int64_t>&, int64_t, bool,
                                            const std::vector<kir::testing::Buffer>&)>& f) {
  for (const std::vector<int64_t>& shape : shapes) {
    std::vector<int64_t> sizes = shape;
    if (k.rank == 3) sizes = {shape[0], 3, shape[1]};
    const int64_t inner = sizes.back(), rows = kir::work_items(k, sizes.data());
    if (k.name == "layer_norm" &&
        std::abs(1.0 / static_cast<double>(inner) - static_cast<double>(k.exprs[2].value)) > 1e-9)
      continue;  // its 1/N is baked in
    for (const bool exact : {true, false}) {
      auto ref = kir::testing::make_buffers(k, sizes, rng, exact ? exact_value : wide_value);
      auto ptrs = kir::testing::pointers(ref);
      kir::interpret(k, 0, rows, ptrs.data(), sizes.data());
      f(sizes, rows, exact, ref);
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
    // rows per block; bits equal across alignments on order-dependent sums
    // (the same order on both paths).
    for_each_case(
        k,
        {{5, 0},
         {6, 1},
         {5, 3},
         {7, 13},
         {6, 4},
         {4, 16},
         {3, 53},
         {5, 1027},
         {3, 1024},
         {2, 2049}},
        rng,
        [&](const std::vector<int64_t>& sizes, int64_t rows, bool exact,
            const std::vector<kir::testing::Buffer>& ref) {
          const int64_t inner = sizes.back();
          const auto threads = static_cast<unsigned>(row_threads(k, inner, 0));
          for (const unsigned blocks : {static_cast<unsigned>(std::max<int64_t>(rows, 1)), 2u})
            for (size_t o = 0; o < std::size(kLoops); ++o) {
              expect_same_on_every_alignment(
                  mod, str("v", i, "_", o), k, ref, sizes, blocks, threads, exact,
                  str(k.name, exact ? " exact" : "", " sizes ", ::testing::PrintToString(sizes),
                      " ", blocks, " x ", threads, " quads ", kLoops[o].quads, " hoist ",
                      kLoops[o].hoist));
              quad_launches += inner >= 4 && kLoops[o].quads;
            }
        });
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
  // print_kernel prints row kernels streaming with default_row_loops(), their
  // held twins with held_of().
  const kir::Kernel softmax = testing::softmax_kernel(DType::f32);
  EXPECT_EQ(detail::print_row_variant(softmax, "k", detail::kRowUnroll, 0, false,
                                      detail::default_row_loops()),
            print_kernel(softmax, "k"));
  if (held_of(softmax) == 0) return;  // KILN_CUDA_ROW_HELD=0: no twins
  EXPECT_TRUE(detail::print_row_variant(softmax, "k", detail::kRowUnroll, held_of(softmax), false,
                                        detail::default_row_loops()) ==
              print_held_twin(softmax, "k"));  // (not printed: 4000 lines)
}

// Held rows printed with quads (print_row_kernel's held, RowLoops::quads):
// one quad per thread, and four (rows of 1024 on 64 threads).
constexpr int kHeldQuads[] = {4, 16};

// Held quads: each thread holds the streaming quad loops' quads, so on the
// same block they equal the streaming quad kernel bit for bit on any inputs
// (the same sums in the same order), on every alignment (aligned rows filling
// every quad take the copy without guards), and the interpreter where the
// sums are exact. log_softmax and layer_norm reuse x - max / x - mean across
// phases, softmax exp(x - max).
TEST(CudaVectorRows, HeldQuadsEqualTheStreamingQuadsAndTheInterpreter) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device: " << unavailable_reason();
  set_device(0);
  auto kernels = quad_kernels();
  kernels.push_back({testing::log_softmax_kernel(DType::f32), false});
  // The emulated device compiles each held kernel for each block size it
  // meets: this sweep took 4-10 minutes from a cold PoCL cache, past CI's
  // shard limit. There softmax and log_softmax held 4 on three sizes (the C++
  // dialect's tests check a held softmax too); a GPU runs the whole sweep.
  const bool emulated = driver().emulated;
  if (emulated)
    kernels = {{testing::softmax_kernel(DType::f32), false},
               {testing::log_softmax_kernel(DType::f32), false}};
  const std::vector<int> held_quads =
      emulated ? std::vector<int>{4}
               : std::vector<int>(std::begin(kHeldQuads), std::end(kHeldQuads));
  // The emulated device's prelude leaves the held path out unless asked.
  std::string source = "#define KILN_HELD_ROWS 1\n" + device_prelude();
  for (size_t i = 0; i < kernels.size(); ++i) {
    source += detail::print_row_variant(kernels[i].k, str("s", i), detail::kRowUnroll, 0, false,
                                        {true, false});
    for (int h : held_quads)
      source += detail::print_row_variant(kernels[i].k, str("h", i, "_", h), detail::kRowUnroll, h,
                                          false, {true, false});
  }
  const std::vector<char> image = compile_for_device(source, "held_quads.cu", 0);
  Module mod(image.data());
  std::mt19937 rng(31);
  int held = 0, full = 0;
  for (size_t i = 0; i < kernels.size(); ++i) {
    const kir::Kernel& k = kernels[i].k;
    const std::vector<std::vector<int64_t>> all = {{5, 0},    {6, 1},    {5, 3},    {6, 4},
                                                   {7, 13},   {4, 16},   {3, 53},   {2, 128},
                                                   {5, 1027}, {3, 1024}, {2, 2048}, {2, 2049}};
    const std::vector<std::vector<int64_t>> few = {{6, 4}, {2, 128}, {2, 2049}};
    for_each_case(
        k, emulated ? few : all, rng,
        [&](const std::vector<int64_t>& sizes, int64_t rows, bool exact,
            const std::vector<kir::testing::Buffer>& ref) {
          const int64_t inner = sizes.back();
          for (int h : held_quads) {
            const std::string hs = str("h", i, "_", h), ss = str("s", i);
            const int64_t cap =
                std::min(max_block_threads(mod.function(hs)), max_block_threads(mod.function(ss)));
            const auto threads = static_cast<unsigned>(row_threads(k, inner, h, cap));
            held += inner > 0 && inner <= h * static_cast<int64_t>(threads);
            full += inner > 0 && inner == 4 * ((h + 3) / 4) * static_cast<int64_t>(threads);
            // Exact inputs on one block per row, the others on two blocks
            // taking several rows each.
            const unsigned blocks = exact ? static_cast<unsigned>(std::max<int64_t>(rows, 1)) : 2u;
            const std::string what =
                str(k.name, exact ? " exact" : "", " sizes ", ::testing::PrintToString(sizes),
                    " held ", h, " quads, ", blocks, " x ", threads);
            expect_same_on_every_alignment(mod, hs, k, ref, sizes, blocks, threads, exact, what);
            for (int offset : {0, 1}) {
              const auto a = run_at(mod, hs, k, ref, sizes, blocks, threads, offset);
              const auto b = run_at(mod, ss, k, ref, sizes, blocks, threads, offset);
              for (size_t g = 0; g < k.args.size(); ++g)
                EXPECT_TRUE(!k.args[g].is_output || a[g].bytes == b[g].bytes)
                    << what << " offset " << offset << " arg " << g << ": held != streaming";
            }
          }
        });
  }
  EXPECT_GT(held, emulated ? 4 : 80);
  EXPECT_GT(full, emulated ? 0 : 20);
}

// Occurrences of `what` in `s`.
int count_of(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// The held softmax with quads reads its row as float4s once and computes
// exp(x - max) once per element, the division taking the sum's value: one
// rintf (the exp expansion's) per slot in each of the held part's two copies
// (every quad full; guarded), 16 slots each, where the streaming loops print
// it in two loops.
TEST(GpuPrinterRows, HeldQuadSoftmaxComputesExpOncePerElement) {
  const std::string src = detail::print_row_variant(testing::softmax_kernel(DType::f32), "k",
                                                    detail::kRowUnroll, 16, false, {true, false});
  const size_t begin = src.find("if (KILN_HELD_ROWS && inner <= 16 * (kiln_i64)blockDim.x) {");
  ASSERT_NE(begin, std::string::npos);
  const size_t end = src.find("\n    } else {\n", begin);
  ASSERT_NE(end, std::string::npos);
  const std::string held = src.substr(begin, end - begin);
  EXPECT_EQ(count_of(held, "rintf("), 2 * 16);
  EXPECT_EQ(count_of(held, "(KILN_GLOBAL const float4*)(p0 + b0 * inner))[qh_"), 2 * 4);
  EXPECT_EQ(count_of(held, "(KILN_GLOBAL float4*)(p1 + b1 * inner))[qh_"), 2 * 4);
  // Each slot's sum term and quotient read the same value.
  EXPECT_NE(held.find("acc1 = acc1 + (double)e47_3_3;"), std::string::npos) << held;
  EXPECT_NE(held.find("(e47_3_3 / e48_3_3)"), std::string::npos) << held;
  // The held element slots compute it once as well (one copy of the phases).
  const std::string elements =
      detail::print_row_variant(testing::softmax_kernel(DType::f32), "k", detail::kRowUnroll, 16);
  const size_t eb = elements.find("if (KILN_HELD_ROWS && inner <= 16 * (kiln_i64)blockDim.x) {");
  EXPECT_EQ(count_of(elements.substr(eb, elements.find("\n    } else {\n", eb) - eb), "rintf("),
            16);
}

}  // namespace
}  // namespace kiln::cuda
