// cuda_cpp_gen: prints the GPU printer's kernels as C++ (gpu_printer.h:
// cpp_prelude) with their test data into one source file, at build time. The
// expected results come from the kernel IR interpreter, or for the printer's
// own kernels (copies, indexing, column combine, scan, sort) from the rule
// gpu_printer.h documents, computed here on the CPU; the sanitized tests that
// compile the file (cuda_cpp_test.cpp) need no compiler and no kiln library.
// Usage: cuda_cpp_gen OUTPUT.cpp
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <tuple>

#include "codegen/cuda/row_kernels.h"
#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/gpu_printer_internal.h"
#include "kiln/error.h"
#include "random_rule.h"

namespace {

using kiln::DType;
using kiln::OpId;
namespace kir = kiln::kir;
namespace cuda = kiln::cuda;
using Bytes = std::vector<unsigned char>;

// One buffer of a case: its contents before and after the launch.
struct GenBuf {
  Bytes init, expect;
  bool checked = false;
  DType dtype = DType::u8;
};

template <typename T>
Bytes bytes_of(const std::vector<T>& v) {
  Bytes b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}
template <typename T>
GenBuf input(const std::vector<T>& v) {
  return GenBuf{bytes_of(v), {}, false, DType::u8};
}
template <typename T>
GenBuf output(const std::vector<T>& init, const std::vector<T>& expect, DType t) {
  return GenBuf{bytes_of(init), bytes_of(expect), true, t};
}

const char* kind(DType t) {
  switch (t) {
    case DType::f32:
      return "kiln_cpp::Kind::kF32";
    case DType::f64:
      return "kiln_cpp::Kind::kF64";
    case DType::f16:
      return "kiln_cpp::Kind::kF16";
    case DType::bf16:
      return "kiln_cpp::Kind::kBf16";
    default:
      return "kiln_cpp::Kind::kBytes";
  }
}

std::string array(const std::string& name, const Bytes& b) {
  std::ostringstream os;
  os << "static const unsigned char " << name << "[] = {";
  for (size_t i = 0; i < b.size(); ++i)
    os << (i == 0 ? "" : ",") << (i % 24 ? "" : "\n  ") << static_cast<int>(b[i]);
  if (b.empty()) os << "0";
  os << "};\n";
  return os.str();
}

// The generated file: kernels and data, then the case table.
struct Gen {
  std::ostringstream src, table;
  int n = 0;
  std::vector<std::string> racy;  // cases with a race the sanitizer must report

  // The next kernel's symbol.
  std::string symbol() const { return "kiln_k" + std::to_string(n); }

  // Adds a case whose kernel `text` is named symbol(); `scalars` follow the
  // first `lead` buffers' pointers in the launch (gpu_printer.h's parameter
  // order; a later buffer b appears there as kiln_cpp::Ptr{p[b]}). A
  // non-empty `body` replaces that launch: statements over p, grid and block.
  // `warp_rows`: each block size b runs as warp rows, 32 x b / 32 threads.
  std::string add(const std::string& name, const std::string& text, const std::vector<GenBuf>& bufs,
                  const std::vector<unsigned>& blocks, unsigned grid, const std::string& scalars,
                  double tol = 0, size_t lead = SIZE_MAX, const std::string& body = "",
                  bool warp_rows = false) {
    const std::string sym = symbol(), c = "kiln_case" + std::to_string(n++);
    // Kernels without shared memory run their blocks at once (cpp_prelude).
    const bool together = text.find("__shared__") == std::string::npos &&
                          text.find("KILN_SHUFFLE_SCRATCH") == std::string::npos;
    src << "// " << name << "\n" << text;
    std::ostringstream entry, call;
    for (size_t b = 0; b < bufs.size(); ++b) {
      const std::string id = c + "_" + std::to_string(b);
      const bool junk = bufs[b].checked && std::all_of(bufs[b].init.begin(), bufs[b].init.end(),
                                                       [](unsigned char x) { return x == 0x5a; });
      if (!junk) src << array(id + "_in", bufs[b].init);
      if (bufs[b].checked) src << array(id + "_out", bufs[b].expect);
      entry << "      {" << (junk ? "nullptr" : id + "_in") << ", "
            << (bufs[b].checked ? id + "_out" : "nullptr") << ", " << bufs[b].init.size() << ", "
            << kind(bufs[b].dtype) << ", " << tol << "},\n";
      if (b < lead) call << ", kiln_cpp::Ptr{p[" << b << "]}";
    }
    std::ostringstream sizes;
    for (unsigned t : blocks) sizes << (sizes.tellp() > 0 ? ", " : "") << t << "u";
    std::ostringstream out;
    out << "  kiln_cpp::Case{\"" << name << "\",\n    {\n"
        << entry.str() << "    },\n    {" << sizes.str() << "}, " << grid << "u,\n"
        << "    [](void** p, unsigned grid, unsigned block) {\n";
    if (body.empty())
      out << "      kiln_cpp::launch(grid, "
          << (warp_rows ? "kiln_cpp::Block(32, block / 32)" : "block") << ", "
          << (together ? "true" : "false") << ", " << sym << call.str() << scalars << ");\n";
    else
      out << body;
    out << "    }}";
    return out.str();
  }
  void push(const std::string& entry) { table << entry << ",\n"; }
};

std::mt19937 rng(19);
// The printer's 32-bit index limit before any case changes it.
const int64_t kNarrowLimit = cuda::narrow_index_limit();

// A kernel IR kernel printed by `print`, checked against the interpreter over
// `sizes`. Column sums (accumulating stores) get [parts, inner] f64 partials,
// each the interpreter's sum over its part's range.
void add_kir(Gen& g, const std::string& name, const kir::Kernel& k, const std::string& text,
             const std::vector<int64_t>& sizes, const std::vector<unsigned>& blocks, unsigned grid,
             bool exact, bool warp_rows = false) {
  std::vector<kir::testing::Buffer> ref =
      kir::testing::make_buffers(k, sizes, rng, cuda::testing::row_value);
  const int64_t work = kir::work_items(k, sizes.data());
  const int64_t inner = sizes.back(), rows = k.has_reductions() ? work : work / inner;
  const int64_t parts = cuda::has_column_sums(k) ? cuda::column_parts(rows, inner) : 0;
  std::vector<char> summed(k.args.size(), 0);
  for (const kir::Store& s : k.stores)
    if (s.accumulate) summed[static_cast<size_t>(s.arg)] = 1;
  const std::vector<kir::testing::Buffer> before = ref;
  kir::interpret(k, 0, work, kir::testing::pointers(ref).data(), sizes.data());
  std::vector<GenBuf> bufs;
  for (size_t a = 0; a < k.args.size(); ++a) {
    GenBuf b;
    b.dtype = k.args[a].dtype;
    if (!k.args[a].is_output) {
      b.init.assign(before[a].bytes.begin(), before[a].bytes.end());
    } else if (!summed[a]) {
      b.checked = true;
      b.init.assign(ref[a].bytes.size(), 0x5a);
      b.expect.assign(ref[a].bytes.begin(), ref[a].bytes.end());
    } else {  // partial p: the interpreter over part p's rows, from zero
      b.checked = true;
      b.init.assign(static_cast<size_t>(parts * inner) * sizeof(double), 0x5a);
      for (int64_t p = 0; p < parts; ++p) {
        std::vector<kir::testing::Buffer> part = before;
        std::fill(part[a].bytes.begin(), part[a].bytes.end(), 0);
        const int64_t per = k.has_reductions() ? 1 : inner;
        kir::interpret(k, rows * p / parts * per, rows * (p + 1) / parts * per,
                       kir::testing::pointers(part).data(), sizes.data());
        b.expect.insert(b.expect.end(), part[a].bytes.begin(), part[a].bytes.end());
      }
    }
    bufs.push_back(std::move(b));
  }
  std::string scalars = ", (long long)" + std::to_string(work);
  for (int64_t s : sizes) scalars += ", (long long)" + std::to_string(s);
  if (parts > 0) scalars += ", (long long)" + std::to_string(parts);
  const bool half = std::any_of(k.args.begin(), k.args.end(),
                                [](const kir::Arg& a) { return a.dtype == DType::f16; });
  g.push(g.add(name, text, bufs, blocks, grid, scalars, exact ? 0 : (half ? 1e-2 : 1e-4), SIZE_MAX,
               "", warp_rows));
}

kir::Kernel pointwise_kernel(DType t) {
  kir::testing::Builder b(2, std::string("pointwise_") + kiln::dtype_name(t));
  const int x = b.load(b.in(t, {true, true}));
  const int w = b.load(b.in(t, {false, true}));
  const int r = b.load(b.in(t, {true, false}));
  const int e = b.op(OpId::mul, t, b.op(OpId::tanh, t, x), w);
  b.store(b.out(t, {true, true}), b.op(OpId::add, t, e, b.op(OpId::div, t, r, x)));
  return b.k;
}

kir::Kernel dense_kernel() {
  kir::testing::Builder b(2, "dense");
  const int x = b.load(b.in(DType::f32, {true, true}));
  const int y = b.load(b.in(DType::f32, {true, true}));
  b.store(b.out(DType::f32, {true, true}),
          b.op(OpId::add, DType::f32, b.op(OpId::exp, DType::f32, x), y));
  return b.k;
}

// Column sums of w * x beside the elementwise product; with `row`, x - mean
// of its row instead (a row kernel with column sums: layer_norm's backward).
kir::Kernel column_kernel(bool row, int64_t inner) {
  const DType f = DType::f32;
  kir::testing::Builder b(2, row ? "row_columns" : "columns");
  int x = b.load(b.in(f, {true, true}));
  const int w = b.load(b.in(f, {false, true}));
  if (row) {
    const int mean = b.op(OpId::mul, f, b.reduce(OpId::sum, x, 0, f),
                          b.cnst(f, 1.0 / static_cast<double>(inner)));
    x = b.op(OpId::sub, f, x, mean);
  }
  const int y = b.op(OpId::mul, f, x, w);
  b.store(b.out(f, {true, true}), y);
  b.k.stores.push_back(
      kir::Store{b.out(DType::f64, {false, true}), b.op(OpId::cast, DType::f64, y), true});
  return b.k;
}

void add_pointwise(Gen& g) {
  const std::vector<unsigned> blocks = {1, 32, 64};
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    const kir::Kernel k = pointwise_kernel(t);
    add_kir(g, k.name + " (32-bit loop)", k, cuda::print_kernel(k, g.symbol()), {7, 33}, blocks, 3,
            true);
    cuda::set_narrow_index_limit(-1);
    add_kir(g, k.name + " (64-bit loop)", k, cuda::print_kernel(k, g.symbol()), {7, 33}, blocks, 3,
            true);
    cuda::set_narrow_index_limit(kNarrowLimit);
  }
  const kir::Kernel d = dense_kernel();
  add_kir(g, "dense (float4)", d, cuda::print_kernel(d, g.symbol()), {5, 64}, blocks, 2, true);
}

void add_rows(Gen& g) {
  namespace detail = cuda::detail;
  const std::vector<unsigned> warps = {32, 64, 128};
  for (const cuda::testing::RowKernel& r : cuda::testing::row_kernels()) {
    const std::vector<int64_t> sizes =
        r.k.rank == 3 ? std::vector<int64_t>{2, 3, 53} : std::vector<int64_t>{6, 53};
    const std::vector<unsigned> blocks = r.k.reassoc ? warps : std::vector<unsigned>{1};
    add_kir(g, r.k.name + " (default loops)", r.k, cuda::print_kernel(r.k, g.symbol()), sizes,
            blocks, 2, r.exact);
    add_kir(g, r.k.name + " (element loops)", r.k,
            detail::print_row_variant(r.k, g.symbol(), detail::kRowUnroll, 0, false, {}), sizes,
            blocks, 2, r.exact);
  }
  // Warp rows (one warp per row, 2 and 4 rows per block): 7 or 9 rows on 2
  // blocks leave a warp past the last row, which must neither store nor
  // skip the block's barriers (the emulated shuffles').
  for (const cuda::testing::RowKernel& r : cuda::testing::row_kernels()) {
    if (!r.k.reassoc) continue;
    const std::vector<int64_t> sizes =
        r.k.rank == 3 ? std::vector<int64_t>{3, 3, 53} : std::vector<int64_t>{7, 53};
    add_kir(g, r.k.name + " (warp rows)", r.k, cuda::print_kernel(r.k, g.symbol()), sizes,
            {64, 128}, 2, r.exact, true);
  }
  const kir::Kernel s = cuda::testing::softmax_kernel(DType::f32);
  add_kir(g, "softmax long rows (quad loops)", s, cuda::print_kernel(s, g.symbol()), {3, 700},
          warps, 2, false);
  add_kir(g, "softmax held rows", s, detail::print_row_variant(s, g.symbol(), 16, 2), {6, 53},
          {32, 64}, 2, false);
  add_kir(g, "softmax held warp rows", s, detail::print_row_variant(s, g.symbol(), 16, 2), {7, 53},
          {64, 128}, 2, false, true);
  // The held twin (print_held_twin: 32 per lane) on warp rows: rows of 1024
  // fill every quad (the unguarded copy), 1000 do not.
  for (const int64_t inner : {1024, 1000})
    add_kir(g, "softmax held twin warp rows", s, cuda::print_held_twin(s, g.symbol()), {7, inner},
            {64, 128}, 2, false, true);
  // The twins holding 8 and 16 per lane: rows of 256 and 300 in one warp.
  add_kir(g, "softmax held twin 8 warp rows", s, cuda::print_held_twin(s, g.symbol(), 8), {7, 256},
          {64, 128}, 2, false, true);
  add_kir(g, "softmax held twin 16 warp rows", s, cuda::print_held_twin(s, g.symbol(), 16),
          {7, 300}, {64, 128}, 2, false, true);
  const kir::Kernel c = column_kernel(true, 128);
  add_kir(g, "row kernel with column sums", c, cuda::print_kernel(c, g.symbol()), {32, 128}, warps,
          2, false);
  // Column warps (32 x 2, 32 x 4): 37 rows in 2 parts leave warps past a
  // part's last row, which must meet the block's barriers and add nothing.
  add_kir(g, "row kernel with column sums (column warps)", c, cuda::print_kernel(c, g.symbol()),
          {37, 128}, {64, 128}, 2, false, true);
  const kir::Kernel p = column_kernel(false, 128);
  add_kir(g, "pointwise column sums", p, cuda::print_kernel(p, g.symbol()), {32, 128}, {32, 64}, 4,
          true);
}

// One combine case: [parts, cols] partials of dtype `acc` (integer-valued
// for i64) into `out`, the expected columns by the rule in the accumulator's
// arithmetic (f32 sums in float, i64 wrapping).
std::vector<GenBuf> combine_case(DType acc, DType out, int64_t parts, int64_t cols) {
  const int64_t slices = cuda::column_combine_slices();
  std::vector<double> v(static_cast<size_t>(parts * cols));
  std::uniform_real_distribution<double> u(-1, 1);
  for (double& x : v)
    x = acc == DType::i64   ? std::floor(u(rng) * 1000)
        : acc == DType::f32 ? double(float(u(rng)))
                            : u(rng);
  Bytes partial, want;
  auto put = [](Bytes& b, const auto& x) {
    const auto* c = reinterpret_cast<const unsigned char*>(&x);
    b.insert(b.end(), c, c + sizeof x);
  };
  for (double x : v) {
    if (acc == DType::f64) put(partial, x);
    if (acc == DType::f32) put(partial, static_cast<float>(x));
    if (acc == DType::i64) put(partial, static_cast<int64_t>(x));
  }
  for (int64_t j = 0; j < cols; ++j) {
    double td = 0;
    float tf = 0;
    uint64_t ti = 0;
    for (int64_t q = 0; q < slices; ++q) {
      double sd = 0;
      float sf = 0;
      uint64_t si = 0;
      for (int64_t p = parts * q / slices; p < parts * (q + 1) / slices; ++p) {
        const double x = v[static_cast<size_t>(p * cols + j)];
        sd = sd + x;
        sf = sf + static_cast<float>(x);
        si = si + static_cast<uint64_t>(static_cast<int64_t>(x));
      }
      td = q == 0 ? sd : td + sd;
      tf = q == 0 ? sf : tf + sf;
      ti = q == 0 ? si : ti + si;
    }
    const double t = acc == DType::f64 ? td : acc == DType::f32 ? tf : 0;
    if (out == DType::f32) put(want, static_cast<float>(t));
    if (out == DType::f64) put(want, t);
    if (out == DType::f16) put(want, kiln::Half(static_cast<float>(t)));
    if (out == DType::i64) put(want, static_cast<int64_t>(ti));
  }
  return {GenBuf{Bytes(want.size(), 0x5a), want, true, out}, GenBuf{partial, {}, false, acc}};
}

std::string combine_scalars(int64_t parts, int64_t cols) {
  return kiln::str(", (long long)", cols, ", (long long)", parts);
}

// The column combine (print_column_combine's rule: slices of parts in order,
// then the slices in order): 37 parts (slices of 1 and 2), 5 (empty slices),
// none (zeros), f32 sums into f16, wrapping i64; and a racy copy with its
// first barrier removed.
void add_combine(Gen& g) {
  struct Shape {
    DType acc, out;
    int64_t parts, cols;
  };
  for (const Shape& c :
       {Shape{DType::f64, DType::f32, 37, 45}, Shape{DType::f64, DType::f64, 5, 70},
        Shape{DType::f64, DType::f32, 0, 10}, Shape{DType::f32, DType::f16, 40, 33},
        Shape{DType::i64, DType::i64, 3, 20}})
    g.push(g.add(kiln::str("column combine ", kiln::dtype_name(c.acc), " -> ",
                           kiln::dtype_name(c.out), ", ", c.parts, " parts"),
                 cuda::print_column_combine(c.acc, c.out, g.symbol()),
                 combine_case(c.acc, c.out, c.parts, c.cols), {32, 64, 96}, c.parts == 5 ? 1 : 2,
                 combine_scalars(c.parts, c.cols)));
  std::string racy = cuda::print_column_combine(DType::f64, DType::f32, g.symbol());
  const std::string barrier = "    __syncthreads();\n";
  racy.erase(racy.find(barrier), barrier.size());
  g.racy.push_back(g.add("column combine without its first barrier", racy,
                         combine_case(DType::f64, DType::f32, 37, 45), {64}, 1,
                         combine_scalars(37, 45)));
}

// A [5, 7, 9] f32 -> f16 copy from a transposed source (strides 1, 5, 35).
void add_copy(Gen& g) {
  const int64_t a = 5, b = 7, c = 9;
  std::vector<float> src(static_cast<size_t>(a * b * c));
  std::uniform_real_distribution<float> u(-70000, 70000);  // some past f16's range
  for (float& v : src) v = u(rng) / static_cast<float>(1 + rng() % 1000);
  std::vector<uint16_t> dst(src.size(), 0x5a5a), want(src.size());
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j)
      for (int64_t k = 0; k < c; ++k) {
        const kiln::Half h(src[static_cast<size_t>(k * a * b + j * a + i)]);
        std::memcpy(&want[static_cast<size_t>((i * b + j) * c + k)], &h, 2);
      }
  const std::string geom = kiln::str(", 3, KilnStrides{{", a, ", ", b, ", ", c, "}, {", b * c, ", ",
                                     c, ", 1}, {1, ", a, ", ", a * b, "}}");
  g.push(g.add("strided copy f32 -> f16",
               cuda::print_strided_copy(DType::f32, DType::f16, g.symbol()),
               {output(dst, want, DType::f16), input(src)}, {32, 64}, 3,
               kiln::str(", (long long)", a * b * c, geom)));
  // 16 bytes a move: [4, 3, 2] quads (f32 [4, 3, 8]) copied as [3, 4, 2].
  std::vector<float> qs(4 * 3 * 8), qd(qs.size(), -1.0f), qw(qs.size());
  for (size_t i = 0; i < qs.size(); ++i) qs[i] = static_cast<float>(i) + 0.25f;
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t k = 0; k < 8; ++k)
        qw[static_cast<size_t>((i * 4 + j) * 8 + k)] = qs[static_cast<size_t>((j * 3 + i) * 8 + k)];
  g.push(g.add("quad copy", cuda::print_quad_copy(g.symbol()),
               {output(qd, qw, DType::f32), input(qs)}, {32, 64}, 2,
               ", (long long)24, 3, KilnStrides{{3, 4, 2}, {8, 2, 1}, {2, 6, 1}}"));
  // A fill of 10 quads with four words' pattern (a NaN payload among them).
  const std::vector<uint32_t> words = {0x3fc00000u, 0x7fc00123u, 0x80000000u, 0x00000001u};
  std::vector<uint32_t> fd(40, 0x5a5a5a5au), fw;
  for (int q = 0; q < 10; ++q) fw.insert(fw.end(), words.begin(), words.end());
  g.push(g.add("quad fill", cuda::print_quad_fill(g.symbol()), {output(fd, fw, DType::u8)},
               {32, 64}, 2, ", (long long)10, 0x3fc00000u, 0x7fc00123u, 0x80000000u, 0x00000001u"));
}

// gather along dim 1 of x [4, 10] by idx [4, 6] with one index out of range
// (skipped and recorded with tag 7), printed with both index loops.
void add_gather(Gen& g) {
  const int64_t rows = 4, cols = 6, width = 10;
  std::vector<float> x(static_cast<size_t>(rows * width));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.5f;
  std::vector<int64_t> idx(static_cast<size_t>(rows * cols));
  for (int64_t& v : idx) v = static_cast<int64_t>(rng() % width);
  idx[13] = width;
  std::vector<float> out(idx.size(), -1.0f), want = out;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t v = idx[static_cast<size_t>(r * cols + j)];
      if (v < width)
        want[static_cast<size_t>(r * cols + j)] = x[static_cast<size_t>(r * width + v)];
    }
  std::vector<int64_t> err(2, 0), err_want = {7, width};
  const std::vector<GenBuf> bufs = {output(out, want, DType::f32), input(x), input(idx),
                                    output(err, err_want, DType::i64)};
  const std::string scalars =
      kiln::str(", 7, (long long)", rows * cols, ", 2, 1, (long long)", width, ", KilnIndexGeom{{",
                rows, ", ", cols, "}, {", cols, ", 1}, {", width, ", 1}, {", cols, ", 1}}");
  for (int64_t limit : {kNarrowLimit, int64_t{-1}}) {
    cuda::set_narrow_index_limit(limit);
    g.push(g.add(limit < 0 ? "gather (64-bit loop)" : "gather (32-bit loop)",
                 cuda::print_gather(DType::f32, DType::i64, g.symbol()), bufs, {32, 64}, 2,
                 scalars));
  }
  cuda::set_narrow_index_limit(kNarrowLimit);
}

// The matmul's pointer tables: batches [2, 3] of a ([2, 3] heads of
// [2, L, 3, D], strides 4000 and 256 bytes), b (broadcast: stride 0 over the
// heads) and d (contiguous [2, 3] batches of 512 bytes).
void add_pointer_table(Gen& g) {
  const uint64_t a = 0x10000, b = 0x7000000, d = 0x123400;
  std::vector<uint64_t> table(18, 0), want;
  for (const auto& [base, s0, s1] :
       {std::tuple{a, 4000, 256}, std::tuple{b, 96, 0}, std::tuple{d, 1536, 512}})
    for (uint64_t i = 0; i < 2; ++i)
      for (uint64_t j = 0; j < 3; ++j) want.push_back(base + i * s0 + j * s1);
  g.push(g.add("pointer table", cuda::print_pointer_table(g.symbol()),
               {output(table, want, DType::i64)}, {4, 32}, 1,
               ", (long long)6, 2, 0x10000ull, 0x7000000ull, 0x123400ull, KilnIndexGeom{{2, 3}, "
               "{1536, 512}, {4000, 256}, {96, 0}}"));
}

// scatter_add along dim 0 into out [6, 5]: by lines (index [10, 5]), and by
// sorted runs (an index [10] broadcast over the columns, perm its argsort).
void add_scatter(Gen& g) {
  const int64_t rows = 6, cols = 5, len = 10;
  std::uniform_real_distribution<float> u(-2, 2);
  std::vector<float> out(static_cast<size_t>(rows * cols)), src(static_cast<size_t>(len * cols));
  for (float& v : out) v = u(rng);
  for (float& v : src) v = u(rng);
  std::vector<int64_t> idx(src.size()), row_idx(static_cast<size_t>(len));
  for (int64_t& v : idx) v = static_cast<int64_t>(rng() % rows);
  for (int64_t& v : row_idx) v = static_cast<int64_t>(rng() % 3);  // runs of equal indices
  std::vector<float> want = out, want_sorted = out;
  for (int64_t k = 0; k < len; ++k)
    for (int64_t j = 0; j < cols; ++j) {
      const size_t s = static_cast<size_t>(k * cols + j);
      want[static_cast<size_t>(idx[s] * cols + j)] += src[s];
      want_sorted[static_cast<size_t>(row_idx[static_cast<size_t>(k)] * cols + j)] += src[s];
    }
  std::vector<int64_t> perm(static_cast<size_t>(len));
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) {
    return row_idx[static_cast<size_t>(a)] < row_idx[static_cast<size_t>(b)];
  });
  const std::vector<int64_t> err(2, 0);
  const std::string geom =
      kiln::str("{{", len, ", ", cols, "}, {", cols, ", 1}, {", cols, ", 1}, {");
  g.push(
      g.add("scatter_add", cuda::print_scatter_add(DType::f32, DType::i64, g.symbol()),
            {output(out, want, DType::f32), input(src), input(idx), output(err, err, DType::i64)},
            {32, 64}, 2,
            kiln::str(", 7, (long long)", cols, ", 2, 0, (long long)", rows, ", (long long)", len,
                      ", KilnIndexGeom", geom, cols, ", 1}}")));
  // The racy one: out's column stride 0, so every line adds into column 0;
  // one line per block, the blocks at once (no shared memory).
  g.racy.push_back(g.add("scatter_add with lines sharing an output, across blocks",
                         cuda::print_scatter_add(DType::f32, DType::i64, g.symbol()),
                         {input(out), input(src), input(idx), input(err)}, {1},
                         static_cast<unsigned>(cols),
                         kiln::str(", 7, (long long)", cols, ", 2, 0, (long long)", rows,
                                   ", (long long)", len, ", KilnIndexGeom{{", len, ", ", cols,
                                   "}, {", cols, ", 0}, {", cols, ", 1}, {", cols, ", 1}}")));
  // By scanning: a block per output row (6, one tile of lines each), its
  // entries found in windows through a shared counter, added in ascending k;
  // then a block per group of 4 rows (the second group cut at row 6).
  for (int64_t group : {1, 4})
    g.push(g.add(group == 1 ? "scatter_add by scanning rows" : "scatter_add by scanning row groups",
                 cuda::print_scatter_add_scan(DType::f32, DType::i64, g.symbol()),
                 {output(out, want_sorted, DType::f32), input(src), input(row_idx),
                  output(err, err, DType::i64)},
                 {32, 64}, 2,
                 kiln::str(", 7, (long long)", (rows + group - 1) / group, ", 2, 0, (long long)",
                           rows, ", (long long)", cols, ", (long long)", len, ", (long long)",
                           group, ", KilnIndexGeom", geom, "1, 0}}")));
  g.push(g.add("scatter_add by sorted runs",
               cuda::print_scatter_add_sorted(DType::f32, DType::i64, g.symbol()),
               {output(out, want_sorted, DType::f32), input(src), input(row_idx),
                output(err, err, DType::i64), input(perm)},
               {32, 64}, 2,
               kiln::str(", 7, (long long)", len * cols, ", 2, 0, (long long)", rows,
                         ", kiln_cpp::Ptr{p[4]}, (long long)", cols, ", (long long)", len,
                         ", KilnIndexGeom", geom, "1, 0}}"),
               0, 4));
}

// cumsum of [3, 50] f32 lines (the CPU's double accumulator), and argsort of
// [3, 100] lines with ties (stable: ties by position), one tile per line.
void add_order(Gen& g) {
  const int64_t lines = 3, len = 50;
  std::vector<float> x(static_cast<size_t>(lines * len));
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& v : x) v = u(rng);
  std::vector<float> out(x.size(), 0.0f), want(x.size());
  for (int64_t l = 0; l < lines; ++l) {
    double acc = 0;
    for (int64_t i = 0; i < len; ++i) {
      acc += static_cast<double>(x[static_cast<size_t>(l * len + i)]);
      want[static_cast<size_t>(l * len + i)] = static_cast<float>(acc);
    }
  }
  g.push(g.add("cumsum", cuda::print_scan(false, DType::f32, g.symbol()),
               {output(out, want, DType::f32), input(x)}, {32, 64}, 2,
               kiln::str(", (long long)", lines, ", (long long)", len, ", 0")));

  const int64_t n = 100, width = 128;
  std::vector<float> keys(static_cast<size_t>(lines * n));
  for (float& v : keys) v = static_cast<float>(rng() % 20);
  keys[17] = std::nanf("");
  std::vector<int64_t> order(keys.size(), -1), want_order(keys.size());
  for (int64_t l = 0; l < lines; ++l) {
    std::vector<int64_t> o(static_cast<size_t>(n));
    std::iota(o.begin(), o.end(), 0);
    const float* k = keys.data() + l * n;
    std::stable_sort(o.begin(), o.end(), [&](int64_t a, int64_t b) {
      return !std::isnan(k[a]) && (std::isnan(k[b]) || k[a] < k[b]);
    });
    std::copy(o.begin(), o.end(), want_order.begin() + l * n);
  }
  std::vector<float> gv(static_cast<size_t>(lines * width));
  std::vector<int64_t> gi(gv.size());
  g.push(g.add("argsort", cuda::print_argsort(DType::f32, g.symbol()),
               {output(order, want_order, DType::i64), input(keys), input(gv), input(gi)},
               {32, 64, 128}, 2,
               kiln::str(", (long long)", lines, ", (long long)", n, ", (long long)", n,
                         ", (long long)", width, ", 0LL, 0")));
}

// argsort of a line longer than a tile (kSortTile): the tiles sorted in shared
// memory, then merge stage 4096 as a global step (print_argsort_step, blocks
// at once) and the tiles' last steps, as cuda_order.cpp launches them.
void add_long_argsort(Gen& g) {
  const int64_t len = 3000, width = 4096, tile = cuda::kSortTile;
  std::vector<float> keys(static_cast<size_t>(len));
  for (float& v : keys) v = static_cast<float>(rng() % 500);  // ties
  std::vector<int64_t> want(keys.size());
  std::iota(want.begin(), want.end(), 0);
  std::stable_sort(want.begin(), want.end(), [&](int64_t a, int64_t b) {
    return keys[static_cast<size_t>(a)] < keys[static_cast<size_t>(b)];
  });
  const std::string sym = g.symbol(), step = sym + "_step";
  const std::string text =
      cuda::print_argsort(DType::f32, sym) + cuda::print_argsort_step(DType::f32, step);
  auto sort = [&](int64_t stage) {
    return kiln::str("      kiln_cpp::launch(grid, block, false, ", sym,
                     ", kiln_cpp::Ptr{p[0]}, kiln_cpp::Ptr{p[1]}, kiln_cpp::Ptr{p[2]}, "
                     "kiln_cpp::Ptr{p[3]}, 1LL, ",
                     len, "LL, ", len, "LL, ", width, "LL, ", stage, "LL, 0);\n");
  };
  std::string body = sort(0);
  for (int64_t kk = 2 * tile; kk <= width; kk *= 2) {
    for (int64_t j = kk / 2; j >= tile; j /= 2)
      body += kiln::str("      kiln_cpp::launch(grid, block, true, ", step,
                        ", kiln_cpp::Ptr{p[2]}, kiln_cpp::Ptr{p[3]}, 1LL, ", len, "LL, ", width,
                        "LL, ", kk, "LL, ", j, "LL, 0);\n");
    body += sort(kk);
  }
  const std::vector<int64_t> junk(want.size(), -7);
  const std::vector<double> gv(static_cast<size_t>(width));
  const std::vector<int64_t> gi(gv.size());
  g.push(g.add("argsort of a line of 2 tiles", text,
               {output(junk, want, DType::i64), input(keys), input(gv), input(gi)}, {128, 256}, 2,
               "", 0, 0, body));
}

// rand/randn's kernel (print_random) against the CPU's rule (random_rule.h):
// element i at offset o maps words o + i * W, word j being Philox block j / 4's
// word j % 4. Normal draws call libm (the same host's here: within rounding).
void add_random(Gen& g) {
  namespace rng = kiln::rng;
  g.src << rng::random_rule_source() << "\n";
  const int64_t n = 203, offset = 8;
  const uint64_t seed = 12345;
  auto word = [&](int64_t j) {
    unsigned w[4];
    rng::kiln_philox4x32(static_cast<uint64_t>(j / 4), 0, seed, w);
    return w[j % 4];
  };
  std::vector<float> uf(static_cast<size_t>(n)), nf(uf.size()), junk_f(uf.size(), 0.0f);
  std::vector<double> ud(uf.size()), junk_d(uf.size(), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const size_t e = static_cast<size_t>(i);
    uf[e] = rng::kiln_rand_unit_f32(word(offset + i));
    nf[e] = rng::kiln_rand_normal_f32(word(offset + 2 * i), word(offset + 2 * i + 1));
    ud[e] = rng::kiln_rand_unit_f64(word(offset + 2 * i), word(offset + 2 * i + 1));
  }
  const std::string scalars =
      kiln::str(", (long long)", n, ", (unsigned long long)", seed, "ull, (long long)", offset);
  g.push(g.add("rand f32", cuda::print_random(false, DType::f32, g.symbol()),
               {output(junk_f, uf, DType::f32)}, {32, 64}, 2, scalars));
  g.push(g.add("randn f32", cuda::print_random(true, DType::f32, g.symbol()),
               {output(junk_f, nf, DType::f32)}, {32, 64}, 2, scalars, 1e-6));
  g.push(g.add("rand f64", cuda::print_random(false, DType::f64, g.symbol()),
               {output(junk_d, ud, DType::f64)}, {32, 64}, 2, scalars));
}

// The eager column sum's partials (print_column_sum), scatter_add's sort keys,
// multinomial's row pass and draws (the CPU's rule: running sums in index
// order, std::upper_bound), and a row kernel on the host's libm (KILN_CUDA_LIBM=1).
void add_more(Gen& g) {
  const int64_t rows = 32, cols = 128, parts = cuda::column_parts(rows, cols);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& v : x) v = u(rng);
  std::vector<double> partial(static_cast<size_t>(parts * cols));
  for (int64_t p = 0; p < parts; ++p)
    for (int64_t j = 0; j < cols; ++j) {
      double acc = 0;
      for (int64_t r = rows * p / parts; r < rows * (p + 1) / parts; ++r)
        acc = acc + static_cast<double>(x[static_cast<size_t>(r * cols + j)]);
      partial[static_cast<size_t>(p * cols + j)] = acc;
    }
  g.push(g.add("column sum partials", cuda::print_column_sum(DType::f32, DType::f64, g.symbol()),
               {output(std::vector<double>(partial.size()), partial, DType::f64), input(x)},
               {32, 64}, 3,
               kiln::str(", (long long)", rows, ", (long long)", cols, ", (long long)", parts)));

  const int64_t len = 20, stride = 3;
  std::vector<int64_t> idx(static_cast<size_t>(len * stride)), keys(static_cast<size_t>(len));
  for (int64_t& v : idx) v = static_cast<int64_t>(rng() % 7);
  for (int64_t i = 0; i < len; ++i)
    keys[static_cast<size_t>(i)] = idx[static_cast<size_t>(i * stride)] * len + i;
  g.push(g.add("scatter_add keys", cuda::print_scatter_keys(DType::i64, g.symbol()),
               {output(std::vector<int64_t>(keys.size()), keys, DType::i64), input(idx)}, {32}, 2,
               kiln::str(", (long long)", stride, ", (long long)", len)));

  const int64_t m = 4, cats = 9, n = 3;
  std::vector<float> w(static_cast<size_t>(m * cats));
  for (float& v : w) v = static_cast<float>(rng() % 4);  // zeros among them
  w[static_cast<size_t>(cats + 8)] = 0;
  std::vector<float> bad_w = w;
  bad_w[static_cast<size_t>(2 * cats + 3)] = -1;  // row 2 is bad
  // The row pass's status, running sums and last nonzero category of `wt`.
  std::vector<int64_t> status(static_cast<size_t>(m)), last(status.size());
  std::vector<double> cdf(w.size());
  auto row_pass = [&](const std::vector<float>& wt) {
    for (int64_t r = 0; r < m; ++r) {
      double total = 0;
      bool bad = false;
      last[static_cast<size_t>(r)] = 0;
      for (int64_t c = 0; c < cats; ++c) {
        const double v = wt[static_cast<size_t>(r * cats + c)];
        bad = bad || v < 0;
        total = total + v;
        cdf[static_cast<size_t>(r * cats + c)] = total;
        if (v > 0) last[static_cast<size_t>(r)] = c;
      }
      status[static_cast<size_t>(r)] = bad || !(total > 0) ? m - r : 0;
    }
  };
  row_pass(bad_w);
  const std::vector<int64_t> zeros(status.size(), 0);
  g.push(g.add(
      "multinomial rows", cuda::print_multinomial_rows(DType::f32, true, g.symbol()),
      {output(zeros, status, DType::i64), output(std::vector<double>(cdf.size()), cdf, DType::f64),
       output(zeros, last, DType::i64), input(bad_w)},
      {32}, 2, kiln::str(", (long long)", m, ", (long long)", cats, ", (long long)", n)));
  row_pass(w);  // the draws read good rows' sums
  std::vector<double> draws(static_cast<size_t>(m * n));
  std::uniform_real_distribution<double> unit(0, 1);
  for (double& v : draws) v = unit(rng);
  std::vector<int64_t> picked(draws.size()), junk(draws.size(), -7);
  for (int64_t i = 0; i < m * n; ++i) {
    const int64_t r = i / n;
    const double* sums = cdf.data() + r * cats;
    const double t = draws[static_cast<size_t>(i)] * sums[cats - 1];
    const int64_t c = std::upper_bound(sums, sums + cats, t) - sums;
    picked[static_cast<size_t>(i)] = std::min(c, last[static_cast<size_t>(r)]);
  }
  g.push(g.add("multinomial draws", cuda::print_multinomial_draw(g.symbol()),
               {output(junk, picked, DType::i64), input(cdf), input(last), input(draws)}, {32}, 2,
               kiln::str(", (long long)", m * n, ", (long long)", cats, ", (long long)", n)));

  const kir::Kernel sm = cuda::testing::softmax_kernel(DType::f32);
  add_kir(g, "softmax on libm", sm,
          cuda::detail::print_row_variant(sm, g.symbol(), cuda::detail::kRowUnroll, 0, true),
          {6, 53}, {32, 64}, 2, false);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: cuda_cpp_gen OUTPUT.cpp\n");
    return 2;
  }
  Gen g;
  add_pointwise(g);
  add_rows(g);
  add_combine(g);
  add_copy(g);
  add_gather(g);
  add_pointer_table(g);
  add_scatter(g);
  add_order(g);
  add_random(g);
  add_more(g);
  add_long_argsort(g);
  std::ostringstream f;
  f << "// Generated by cuda_cpp_gen (tests/codegen/cuda_cpp): do not edit.\n"
    << cuda::cpp_prelude() << "#include \"cuda_cpp_case.h\"\n\n"
    << g.src.str() << "\nnamespace kiln_cpp {\n\nconst std::vector<Case>& cases() {\n"
    << "  static const std::vector<Case> all = {\n"
    << g.table.str() << "  };\n  return all;\n}\n\n"
    << "const std::vector<Case>& racy_cases() {\n  static const std::vector<Case> all = {\n";
  for (const std::string& c : g.racy) f << c << ",\n";
  f << "  };\n  return all;\n}\n\n}  // namespace kiln_cpp\n";
  // Written only when it changes: a rebuilt kiln library that prints the same
  // kernels does not recompile the sanitized tests (Ninja restats the output).
  std::ifstream old(argv[1]);
  std::ostringstream was;
  was << old.rdbuf();
  if (old.is_open() && was.str() == f.str()) return 0;
  std::ofstream out(argv[1]);
  out << f.str();
  return out.good() ? 0 : 1;
}
