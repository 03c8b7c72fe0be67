// What the CUDA layer does on a real GPU (plain executable; run by
// tools/device/gpu_checks.sh on a lent machine): the device's facts, the
// bandwidth of a printed copy kernel and of cuMemcpyDtoD, and printed GELU
// (tanh form) over 16M f32 against that bandwidth, with its print variants
// (libm, elements per thread, float4, 32-bit indices, without KILN_ISSUE), and
// the row kernels' sweeps, warp rows against a block per row, a row kernel
// with a column sum at other parts and block sizes, and the data movement
// around a transformer's products (cuda_probe_moves.cpp). Kernels come
// from the kernel IR through the GPU printer and NVRTC, exactly as compiled
// graphs will.
//   cuda_probe [--n N] [--reps R] [--only warp_rows]   (warp_rows: that and the
//                                                     column-sum row kernel lines)
//   cuda_probe --dump DIR   (no GPU: the kernels' source and sm_90 cubin, for
//                            cuobjdump -sass)
// Times are medians of R launches measured with CUDA events.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cuda_probe_moves.h"
#include "kernels/cuda/cublaslt.h"
#include "kernels/cuda/driver.h"
#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/gpu_printer_internal.h"
#include "kernels/cuda/module.h"
#include "kernels/cuda/nvrtc_lib.h"
#include "kernels/kernel_ir.h"
#include "kiln/kiln.h"

using namespace kiln;
using namespace kiln::cuda;

namespace {

kir::Kernel copy_kernel() {
  kir::Kernel k;
  k.name = "copy";
  k.args = {{DType::f32, false, {true}}, {DType::f32, true, {true}}};
  k.exprs = {kir::Expr::load(0, DType::f32)};
  k.stores = {{1, 0}};
  return k;
}

// The probe's kernels written as kernel IR by hand (f32 unless said):
// expressions appended to `k`, each call returning the new one's index.
struct Ir {
  kir::Kernel& k;
  int push(kir::Expr e) {
    k.exprs.push_back(e);
    return static_cast<int>(k.exprs.size()) - 1;
  }
  int load(int arg) { return push(kir::Expr::load(arg, k.args[static_cast<size_t>(arg)].dtype)); }
  int cnst(double v) { return push(kir::Expr::constant(v, DType::f32)); }
  int op(OpId o, int a, int b = -1, DType t = DType::f32) {
    return push(kir::Expr::make_op(o, t, a, b));
  }
  // Reduction `o` of expression x in phase `phase`, read back as an expression.
  int reduce(OpId o, int x, int phase) {
    k.reductions.push_back({o, x, phase, DType::f32});
    kir::Expr e;
    e.kind = kir::ExprKind::kReduced;
    e.arg = static_cast<int>(k.reductions.size()) - 1;
    e.dtype = DType::f32;
    return push(e);
  }
};

// gelu(x) = 0.5 x (1 + tanh(0.7978845608 (x + 0.044715 x^3))), PyTorch's tanh form.
kir::Kernel gelu_kernel() {
  kir::Kernel k;
  k.name = "gelu";
  k.args = {{DType::f32, false, {true}}, {DType::f32, true, {true}}};
  Ir b{k};
  const int x = b.load(0);
  const int x3 = b.op(OpId::mul, x, b.op(OpId::mul, x, x));
  const int inner = b.op(OpId::add, x, b.op(OpId::mul, x3, b.cnst(0.044715)));
  const int t = b.op(OpId::tanh, b.op(OpId::mul, inner, b.cnst(0.7978845608)));
  const int one_t = b.op(OpId::add, t, b.cnst(1.0));
  const int hx = b.op(OpId::mul, x, b.cnst(0.5));
  k.stores = {{1, b.op(OpId::mul, hx, one_t)}};
  return k;
}

// softmax along rows of `inner` f32: max, sum of exp, normalize (one kernel);
// with `log`, log_softmax: (x - max) - log(sum).
kir::Kernel softmax_kernel(bool log = false) {
  kir::Kernel k;
  k.name = log ? "log_softmax" : "softmax";
  k.rank = 2;
  k.args = {{DType::f32, false, {true, true}}, {DType::f32, true, {true, true}}};
  Ir b{k};
  const int x = b.load(0);
  const int d = b.op(OpId::sub, x, b.reduce(OpId::max, x, 0));
  const int e = b.op(OpId::exp, d);
  const int s = b.reduce(OpId::sum, e, 1);
  k.stores = {{1, log ? b.op(OpId::sub, d, b.op(OpId::log, s)) : b.op(OpId::div, e, s)}};
  return k;
}

// layer_norm along rows of `inner` (compiled in) f32 with weight and bias (eps 1e-5): mean,
// variance, normalize (one kernel; PyTorch's biased variance).
kir::Kernel layer_norm_kernel(int64_t inner) {
  kir::Kernel k;
  k.name = "layer_norm";
  k.rank = 2;
  k.args = {{DType::f32, false, {true, true}},
            {DType::f32, false, {false, true}},
            {DType::f32, false, {false, true}},
            {DType::f32, true, {true, true}}};
  Ir b{k};
  const int x = b.load(0), w = b.load(1), bias = b.load(2);
  const int n = b.cnst(static_cast<double>(inner));
  const int d = b.op(OpId::sub, x, b.op(OpId::div, b.reduce(OpId::sum, x, 0), n));
  const int var = b.op(OpId::div, b.reduce(OpId::sum, b.op(OpId::mul, d, d), 1), n);
  const int r = b.op(OpId::rsqrt, b.op(OpId::add, var, b.cnst(1e-5)));
  k.stores = {{3, b.op(OpId::add, b.op(OpId::mul, b.op(OpId::mul, d, r), w), bias)}};
  return k;
}

double median_ms(int reps, const std::function<void()>& run) {
  const Driver& d = driver();
  CUevent a, b;
  check(d.cuEventCreate(&a, CU_EVENT_DEFAULT), "cuEventCreate");
  check(d.cuEventCreate(&b, CU_EVENT_DEFAULT), "cuEventCreate");
  run();  // warm-up
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    check(d.cuEventRecord(a, nullptr), "cuEventRecord");
    run();
    check(d.cuEventRecord(b, nullptr), "cuEventRecord");
    check(d.cuEventSynchronize(b), "cuEventSynchronize");
    float ms = 0;
    check(d.cuEventElapsedTime(&ms, a, b), "cuEventElapsedTime");
    t.push_back(ms);
  }
  d.cuEventDestroy(a);
  d.cuEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The largest |got - want| over `want`'s elements of the output buffer.
double worst_of(const DeviceBuffer& out, const std::vector<float>& want) {
  std::vector<float> got(want.size());
  check(driver().cuMemcpyDtoH(got.data(), out.get(), got.size() * 4), "cuMemcpyDtoH");
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, static_cast<double>(std::abs(got[i] - want[i])));
  return worst;
}

// Without KILN_ISSUE (the loads then go where NVVM puts them, as printed at
// 2db58a3). Printed last in a program: it redefines the prelude's macro.
const char* kNoIssue = "#undef KILN_ISSUE\n#define KILN_ISSUE(...)\n";

// Printed GELU variants beside print_kernel's (kernel kv<i>): what the issue-19
// runs compare. Variants without KILN_ISSUE come last.
struct Variant {
  const char* label;
  cuda::detail::PointwiseOptions o;
  bool no_issue = false;
};
std::vector<Variant> gelu_variants() {
  auto opt = [](bool libm, int per, bool vec, bool narrow, bool fast_div = false) {
    cuda::detail::PointwiseOptions o;
    o.libm = libm;
    o.per_thread = per;
    o.vector = vec;
    o.narrow_dense = narrow;
    o.fast_division = fast_div;
    return o;
  };
  return {{"scalar, div.rn (d5c2f20)", opt(false, 4, false, false)},
          {"libm (KILN_CUDA_LIBM=1)", opt(true, 4, false, false)},
          {"libm, float4", opt(true, 4, true, false)},
          {"8 per thread", opt(false, 8, false, false)},
          {"32-bit index", opt(false, 4, false, true)},
          {"float4", opt(false, 4, true, false)},
          {"float4, 32-bit index", opt(false, 4, true, true)},
          {"2 float4 per thread", opt(false, 8, true, false)},
          {"2 float4, 32-bit index", opt(false, 8, true, true)},
          {"fast division", opt(false, 4, false, false, true)},
          {"fast division, float4", opt(false, 4, true, false, true)},
          {"fast div., float4, 32-bit", opt(false, 4, true, true, true)},
          {"without KILN_ISSUE", opt(false, 4, false, false), true}};
}

std::string variants_source(const kir::Kernel& gelu, const std::string& prelude) {
  std::string src = prelude;
  const std::vector<Variant> vs = gelu_variants();
  bool issue = true;
  for (size_t i = 0; i < vs.size(); ++i) {
    if (vs[i].no_issue && issue) src += kNoIssue;
    issue = issue && !vs[i].no_issue;
    KILN_CHECK(issue || vs[i].no_issue, "variants without KILN_ISSUE come last");
    src += cuda::detail::print_pointwise_variant(gelu, str("kv", i), vs[i].o);
  }
  return src;
}

// Each variant on the probe's buffers: time, share of the copy's speed, and
// the largest difference from the interpreter's `ref`. Launched as
// launch_kernel launches pointwise kernels (256 threads), with per_thread
// elements per thread.
void gelu_variant_lines(const kir::Kernel& gelu, int64_t n, int reps, double t_memcpy,
                        const DeviceBuffer& in, const DeviceBuffer& out,
                        const std::vector<float>& ref) {
  const std::vector<Variant> vs = gelu_variants();
  const std::vector<char> image =
      compile_for_device(variants_source(gelu, device_prelude()), "probe_variants.cu", 0);
  Module mod(image.data());
  const double gb = 2.0 * static_cast<double>(n) * 4 / 1e9;
  for (size_t v = 0; v < vs.size(); ++v) {
    const CUfunction fn = mod.function(str("kv", v));
    CUdeviceptr a = in.get(), b = out.get();
    long long nn = n, s0 = n;
    void* params[4] = {&a, &b, &nn, &s0};
    const long long threads = 256, per = vs[v].o.per_thread;
    const auto blocks = static_cast<unsigned>(
        std::min<long long>((n + threads * per - 1) / (threads * per), 1 << 16));
    check(driver().cuMemsetD8(out.get(), 0, static_cast<size_t>(n) * 4), "cuMemsetD8");
    const double t = median_ms(reps, [&] {
      check(driver().cuLaunchKernel(fn, blocks, 1, 1, threads, 1, 1, 0, nullptr, params, nullptr),
            "cuLaunchKernel");
    });
    const double worst = worst_of(out, ref);
    std::printf(
        "    GELU %-24s %8.3f ms  %7.0f GB/s  (%.0f%% of cuMemcpyDtoD); max |gpu - "
        "interpreter| %.3g\n",
        vs[v].label, t, gb / t * 1e3, 100 * t_memcpy / t, worst);
  }
}

// A row kernel of the probe: its name, kernel, symbol prefix, row length and buffers.
struct Row {
  const char* name;
  const kir::Kernel* k;
  const char* symbol;
  int64_t inner;
  std::vector<CUdeviceptr> ptrs;
};

// The same launch of `row`'s kernel printed without KILN_ISSUE (2db58a3's
// print), with quad loops (float4 rows), for softmax with libm's expf (with
// and without quads), for layer_norm with its row values hoisted (with and
// without quads): share of the copy, and the
// largest difference of the first 64 rows from the interpreter's (and the
// default kernel `f`'s).
void row_variant_lines(const Row& row, const int64_t* rs, int reps, double t_memcpy,
                       const DeviceBuffer& in, const DeviceBuffer& out, const Module& row_mod,
                       CUfunction f) {
  const int64_t n = rs[0] * rs[1];
  const double gb = 2.0 * static_cast<double>(n) * 4 / 1e9;
  std::vector<float> ref(static_cast<size_t>(std::min<int64_t>(rs[0], 64) * row.inner));
  std::vector<float> x(static_cast<size_t>(n)), w(static_cast<size_t>(row.inner), 1.0f),
      bias(static_cast<size_t>(row.inner), 0.0f);
  in.download(x.data(), static_cast<size_t>(n) * 4);
  std::vector<void*> hp = {x.data()};
  if (row.ptrs.size() == 4) {  // layer_norm: weight 1, bias 0 (as uploaded)
    hp.push_back(w.data());
    hp.push_back(bias.data());
  }
  hp.push_back(ref.data());
  kir::interpret(*row.k, 0, static_cast<int64_t>(ref.size()) / row.inner, hp.data(), rs);
  // Suffix, label, and whether softmax / layer_norm print it (libm changes
  // softmax's exp only; layer_norm alone has row values to hoist).
  struct Variant {
    const char *sfx, *label;
    bool softmax, layer_norm;
  };
  const Variant variants[] = {{"_noissue", "without KILN_ISSUE", true, true},
                              {"_libm", "libm (expf)", true, false},
                              {"_quad", "float4 (quads)", true, true},
                              {"_quad_libm", "float4 + libm", true, false},
                              {"_hoist", "row values hoisted", false, true},
                              {"_quad_hoist", "float4 + hoisted", false, true}};
  const bool softmax = !std::strcmp(row.name, "softmax");
  for (const Variant& v : variants) {
    if (!(softmax ? v.softmax : v.layer_norm)) continue;
    const char *sfx = v.sfx, *label = v.label;
    const CUfunction fv = row_mod.function(str(row.symbol, sfx));
    const double tv =
        median_ms(reps, [&] { launch_kernel(fv, *row.k, row.ptrs, rs, nullptr, -1, 0); });
    std::printf(
        "    %-18s %8.3f ms  %7.0f GB/s  (%.0f%% of cuMemcpyDtoD); first 64 rows: max "
        "|gpu - interpreter| %.3g\n",
        label, tv, gb / tv * 1e3, 100 * t_memcpy / tv, worst_of(out, ref));
  }
  launch_kernel(f, *row.k, row.ptrs, rs, nullptr, -1, 0);
  std::printf("    default: first 64 rows: max |gpu - interpreter| %.3g\n", worst_of(out, ref));
}

// Whether kiln_fdiv_fast (the prelude's division without div.rn's slow path,
// for tanh's 2/(e+1): PointwiseOptions::fast_division) gives div.rn's bits:
// 2/d for every f32 d in [4, 5e8] (e+1 is in [4.49, 4.86e8]) and x/y for
// pseudo-random pairs with exponents in [-60, 60]; mismatches in bad[0], bad[1].
const char* kDivCheck = R"(
KILN_KERNEL void kdivcheck(unsigned lo, unsigned count, unsigned long long* bad) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
    const float d = __uint_as_float(lo + i);
    if (__float_as_uint(2.0f / d) != __float_as_uint(kiln_fdiv_fast(2.0f, d))) atomicAdd(bad, 1ull);
    unsigned h = i * 2654435761u;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    unsigned g = h * 3266489917u; g ^= g >> 16;
    const float x = __uint_as_float(((h & 0x807fffffu) | ((67u + (h >> 8) % 121u) << 23)));
    const float y = __uint_as_float(((g & 0x807fffffu) | ((67u + (g >> 8) % 121u) << 23)));
    if (__float_as_uint(x / y) != __float_as_uint(kiln_fdiv_fast(x, y))) atomicAdd(bad + 1, 1ull);
  }
}
)";

// The line of kDivCheck's counts (real GPUs only: the emulated device's
// kiln_fdiv_fast is a plain division).
void fast_division_check() {
  if (device_prelude().find("(CUDA)") == std::string::npos) return;
  const std::vector<char> image =
      compile_for_device(cuda_prelude() + kDivCheck, "probe_divcheck.cu", 0);
  Module mod(image.data());
  DeviceBuffer bad(16);
  check(driver().cuMemsetD8(bad.get(), 0, 16), "cuMemsetD8");
  const float flo = 4.0f, fhi = 5.0e8f;
  unsigned lo = 0, hi = 0;
  std::memcpy(&lo, &flo, 4);
  std::memcpy(&hi, &fhi, 4);
  unsigned count = hi - lo;
  CUdeviceptr pb = bad.get();
  void* cp[3] = {&lo, &count, &pb};
  check(driver().cuLaunchKernel(mod.function("kdivcheck"), 4096, 1, 1, 256, 1, 1, 0, nullptr, cp,
                                nullptr),
        "cuLaunchKernel");
  unsigned long long got[2] = {0, 0};
  bad.download(got, 16);
  std::printf(
      "    fast division vs div.rn: 2/d for every f32 d in [4, 5e8]: %llu of %u differ; x/y, %u "
      "pseudo-random pairs, exponents in [-60, 60]: %llu differ\n",
      got[0], count, count, got[1]);
}

// Row kernels: the launch's own choice, then a sweep of elements per thread
// per loop step (the printer's unroll; element loops, then quad loops with
// hoisted row values), of rows held in registers, and of
// block sizes (any multiple of 32). Percentages are of cuMemcpyDtoD's time.
void row_kernels(const kir::Kernel& softmax, int64_t n, int reps, double t_memcpy,
                 const DeviceBuffer& in, const DeviceBuffer& out) {
  const double gb = 2.0 * static_cast<double>(n) * 4 / 1e9;  // read + write
  const std::vector<CUdeviceptr> p = {in.get(), out.get()};
  DeviceBuffer wb(static_cast<size_t>(n) * 4), bb(static_cast<size_t>(n) * 4);
  {  // layer_norm's weight 1 and bias 0 (what the interpreter's reference takes)
    std::vector<float> v(static_cast<size_t>(n), 1.0f);
    wb.upload(v.data(), v.size() * 4);
    std::fill(v.begin(), v.end(), 0.0f);
    bb.upload(v.data(), v.size() * 4);
  }
  const kir::Kernel ln1k = layer_norm_kernel(1024), ln4k = layer_norm_kernel(4096);
  const int unrolls[3] = {4, 8, 16};
  const int helds[3] = {8, 16, 32};  // rows held in registers (print_row_kernel's held)
  std::string row_src = device_prelude();
  const cuda::detail::RowLoops both{true, true};  // quads, row values hoisted
  for (int u : unrolls)
    row_src += cuda::detail::print_row_variant(softmax, str("ksm_u", u), u, 0) +
               cuda::detail::print_row_variant(ln1k, str("kln1k_u", u), u, 0) +
               cuda::detail::print_row_variant(ln4k, str("kln4k_u", u), u, 0) +
               cuda::detail::print_row_variant(softmax, str("ksm_q", u), u, 0, false, both) +
               cuda::detail::print_row_variant(ln1k, str("kln1k_q", u), u, 0, false, both) +
               cuda::detail::print_row_variant(ln4k, str("kln4k_q", u), u, 0, false, both);
  const int ru = cuda::detail::kRowUnroll;
  const cuda::detail::RowLoops quads{true, false}, hoist{false, true};
  for (int h : helds)  // held element slots (_h), held quads (_hq: float4 where aligned)
    row_src += cuda::detail::print_row_variant(softmax, str("ksm_h", h), 4, h) +
               cuda::detail::print_row_variant(ln1k, str("kln1k_h", h), 4, h) +
               cuda::detail::print_row_variant(ln4k, str("kln4k_h", h), 4, h) +
               cuda::detail::print_row_variant(softmax, str("ksm_hq", h), ru, h, false, quads) +
               cuda::detail::print_row_variant(ln1k, str("kln1k_hq", h), ru, h, false, quads) +
               cuda::detail::print_row_variant(ln4k, str("kln4k_hq", h), ru, h, false, quads);
  row_src += cuda::detail::print_row_variant(softmax, "ksm_libm", ru, 0, true);
  // Quad loops (float4 rows) and hoisted row values (RowLoops), with libm for softmax.
  row_src += cuda::detail::print_row_variant(softmax, "ksm_quad", ru, 0, false, quads) +
             cuda::detail::print_row_variant(softmax, "ksm_quad_libm", ru, 0, true, quads);
  for (const auto& [k, sym] : {std::pair{&ln1k, "kln1k"}, std::pair{&ln4k, "kln4k"}})
    row_src += cuda::detail::print_row_variant(*k, str(sym, "_quad"), ru, 0, false, quads) +
               cuda::detail::print_row_variant(*k, str(sym, "_hoist"), ru, 0, false, hoist) +
               cuda::detail::print_row_variant(*k, str(sym, "_quad_hoist"), ru, 0, false, both);
  row_src += std::string(kNoIssue) +
             cuda::detail::print_row_variant(softmax, "ksm_noissue", ru, 0) +
             cuda::detail::print_row_variant(ln1k, "kln1k_noissue", ru, 0) +
             cuda::detail::print_row_variant(ln4k, "kln4k_noissue", ru, 0);
  const std::vector<char> row_image = compile_for_device(row_src, "probe_rows.cu", 0);
  Module row_mod(row_image.data());
  const std::vector<CUdeviceptr> ln_ptrs = {in.get(), wb.get(), bb.get(), out.get()};
  const Row rows[4] = {{"softmax", &softmax, "ksm", 1024, p},
                       {"softmax", &softmax, "ksm", 4096, p},
                       {"layer_norm", &ln1k, "kln1k", 1024, ln_ptrs},
                       {"layer_norm", &ln4k, "kln4k", 4096, ln_ptrs}};
  for (const Row& row : rows) {
    const int64_t rs[2] = {n / row.inner, row.inner};
    // Kernel `sym` launched on `threads` per block, one block per row (at
    // most 2^16, grid-stride): its share of the copy's speed, or why not.
    auto launch_on = [&](CUfunction fn, unsigned threads) {
      long long nrows = rs[0], s0 = rs[0], s1 = rs[1];
      std::vector<CUdeviceptr> ptrs = row.ptrs;
      std::vector<void*> params;
      for (CUdeviceptr& q : ptrs) params.push_back(&q);
      params.push_back(&nrows);
      params.push_back(&s0);
      params.push_back(&s1);
      const unsigned blocks = static_cast<unsigned>(std::min<long long>(nrows, 1 << 16));
      check(driver().cuLaunchKernel(fn, blocks, 1, 1, threads, 1, 1, 0, nullptr, params.data(),
                                    nullptr),
            "cuLaunchKernel");
    };
    auto sweep_cell = [&](const std::string& sym, unsigned threads) -> std::string {
      try {
        const CUfunction fn = row_mod.function(sym);
        const double ts = median_ms(reps, [&] { launch_on(fn, threads); });
        return str(static_cast<int>(100 * t_memcpy / ts + 0.5), "%");
      } catch (const std::exception&) {
        return "fail";
      }
    };
    // The held kernel as launch_kernel fits it (row_threads): its time, its
    // registers, and whether its first 64 rows equal the streaming kernel
    // `streaming`'s on the same block (they must: same elements per thread,
    // same order).
    auto held_check = [&](const std::string& sym, int h,
                          const std::string& streaming) -> std::string {
      try {
        const CUfunction fh = row_mod.function(sym);
        const CUfunction fs = row_mod.function(streaming);
        const auto threads = static_cast<unsigned>(row_threads(*row.k, row.inner, h));
        const size_t head = static_cast<size_t>(std::min<int64_t>(rs[0], 64) * row.inner);
        std::vector<float> a(head), b(head);
        launch_on(fs, threads);
        check(driver().cuMemcpyDtoH(a.data(), out.get(), head * 4), "cuMemcpyDtoH");
        launch_on(fh, threads);
        check(driver().cuMemcpyDtoH(b.data(), out.get(), head * 4), "cuMemcpyDtoH");
        const bool same = std::memcmp(a.data(), b.data(), head * 4) == 0;
        int regs = 0;
        check(driver().cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fh),
              "cuFuncGetAttribute");
        const double ts =
            median_ms(reps, [&] { launch_kernel(fh, *row.k, row.ptrs, rs, nullptr, -1, h); });
        return str("fitted ", threads, " threads: ", static_cast<int>(100 * t_memcpy / ts + 0.5),
                   "% (", regs, " regs), bits as streaming: ", same ? "same" : "DIFFER");
      } catch (const std::exception& e) {
        return str("fail: ", e.what());
      }
    };
    const CUfunction f4 = row_mod.function(str(row.symbol, "_u", cuda::detail::kRowUnroll));
    const double t =
        median_ms(reps, [&] { launch_kernel(f4, *row.k, row.ptrs, rs, nullptr, -1, 0); });
    std::printf("printed %-10s rows of %5lld %8.3f ms  %7.0f GB/s  (%.0f%% of cuMemcpyDtoD)\n",
                row.name, static_cast<long long>(row.inner), t, gb / t * 1e3, 100 * t_memcpy / t);
    row_variant_lines(row, rs, reps, t_memcpy, in, out, row_mod, f4);
    // Element loops, then quad loops with hoisted row values (RowLoops).
    for (const char* form : {"_u", "_q"})
      for (int u : unrolls) {
        std::printf("    %s %2d", form[1] == 'u' ? "unroll" : "quads ", u);
        for (unsigned threads : {32u, 64u, 128u, 256u, 512u})
          std::printf(" | %u threads: %s", threads,
                      sweep_cell(str(row.symbol, form, u), threads).c_str());
        std::printf("\n");
      }
    // The row held in registers, `held` elements per thread: a cell is "-"
    // where the row does not fit the block (the kernel would stream).
    // Then held quads, checked against the streaming quad loops.
    for (const bool q : {false, true})
      for (int h : helds) {
        const std::string sym = str(row.symbol, q ? "_hq" : "_h", h);
        std::printf("    held %2d%s", h, q ? " quads" : "      ");
        for (unsigned threads : {32u, 64u, 128u, 256u, 512u})
          std::printf(" | %u threads: %s", threads,
                      row.inner <= h * static_cast<int64_t>(threads)
                          ? sweep_cell(sym, threads).c_str()
                          : "  -");
        const std::string streaming =
            q ? str(row.symbol, "_quad") : str(row.symbol, "_u", cuda::detail::kRowUnroll);
        std::printf(" | %s\n", held_check(sym, h, streaming).c_str());
      }
  }
}

// A row kernel with a column sum, layer_norm's backward in miniature: y = (x -
// mean(x)) * w per row and the column sums of y, per part of rows into f64
// partials (gpu_printer.h). Its blocks are the parts (column_parts: 1024 at
// most), so the block's threads decide how full the GPU is.
kir::Kernel row_column_kernel(int64_t inner) {
  kir::Kernel k;
  k.name = "row_columns";
  k.rank = 2;
  k.args = {{DType::f32, false, {true, true}},
            {DType::f32, false, {false, true}},
            {DType::f32, true, {true, true}},
            {DType::f64, true, {false, true}}};
  Ir b{k};
  const int x = b.load(0), w = b.load(1);
  const int mean =
      b.op(OpId::mul, b.reduce(OpId::sum, x, 0), b.cnst(1.0 / static_cast<double>(inner)));
  const int y = b.op(OpId::mul, b.op(OpId::sub, x, mean), w);
  k.stores = {{2, y}, {3, b.op(OpId::cast, y, -1, DType::f64), true}};
  return k;
}

// The row kernel with a column sum over [8192, 512] (the transformer's
// layer_norm rows) and [16384, 1024], kernel only (the combine after it not
// timed): parts (the default, 2x, 4x) by threads per block (64, 128, 256) in
// the block-per-part form, and the default parts in the column-warps form
// (32 x 2 and 32 x 4 per block where the shared partials hold the row), as GB/s
// of x and y. The default launch: column warps 32 x kColumnWarps where the
// row fits, else column_parts() on row_threads().
void column_row_lines(int64_t n, int reps, const DeviceBuffer& in, const DeviceBuffer& out,
                      const DeviceBuffer& ones) {
  const int64_t shapes[2][2] = {{8192, 512}, {16384, 1024}};
  for (const auto& shape : shapes) {
    const int64_t inner = shape[1], rows = std::min(shape[0], n / inner);  // fewer for a small n
    if (rows < 8) continue;
    const kir::Kernel k = row_column_kernel(inner);
    const std::vector<char> image =
        compile_for_device(device_prelude() + print_kernel(k, "krc"), "probe_row_columns.cu", 0);
    Module mod(image.data());
    const CUfunction fn = mod.function("krc");
    const int64_t base = column_parts(rows, inner);
    DeviceBuffer partial(static_cast<size_t>(4 * base * inner) * 8);
    const RowBlock def = row_block(k, rows, inner, 0, max_block_threads(fn));
    std::printf("row kernel + column sum [%lld, %lld] (default: %lld parts, %lld x %lld threads):",
                static_cast<long long>(rows), static_cast<long long>(inner),
                static_cast<long long>(base), static_cast<long long>(def.x),
                static_cast<long long>(def.y));
    auto run = [&](int64_t parts, unsigned threads, unsigned warps) {
      CUdeviceptr p[4] = {in.get(), ones.get(), out.get(), partial.get()};
      long long n = rows, s0 = rows, s1 = inner, np = parts;
      void* params[] = {&p[0], &p[1], &p[2], &p[3], &n, &s0, &s1, &np};
      const double ms = median_ms(reps, [&] {
        check(driver().cuLaunchKernel(fn, static_cast<unsigned>(std::min<int64_t>(parts, 1 << 16)),
                                      1, 1, threads, warps, 1, 0, nullptr, params, nullptr),
              "cuLaunchKernel");
      });
      return 2.0 * static_cast<double>(rows * inner) * 4 / ms / 1e6;
    };
    for (const int64_t parts : {base, 2 * base, 4 * base})
      for (const unsigned threads : {64u, 128u, 256u})
        std::printf(" | %lld x %u: %.0f GB/s", static_cast<long long>(parts), threads,
                    run(parts, threads, 1));
    // The column-warps form (32 x warps per part), the default where the row fits.
    for (const unsigned warps : {2u, 4u})  // at most kColumnWarps: the shared rows' count
      if (inner <= column_warps_cap(k) * kColumnWarps / static_cast<int64_t>(warps))
        std::printf(" | column warps %lld x 32 x %u: %.0f GB/s", static_cast<long long>(base),
                    warps, run(base, 32, warps));
    std::printf("\n");
  }
}

// Warp rows (module.h's row_block) against a block per row, on softmax and
// layer_norm over n f32 in rows of 64 to 1024 (the transformer's attention
// rows are 256, its layer_norm rows 512): the default kernel launched on a
// block per row (row_threads) and on 32 x y for y = 1, 2, 4, 8, as % of
// cuMemcpyDtoD; then whether warp rows' first 64 rows have the bits of a
// 32-thread block's (they must).
void warp_row_lines(const kir::Kernel& softmax, int64_t n, int reps, double t_memcpy,
                    const DeviceBuffer& in, const DeviceBuffer& out, const DeviceBuffer& ones,
                    const DeviceBuffer& zeros) {
  const int64_t inners[] = {64, 256, 512, 1024};
  std::vector<kir::Kernel> lns;
  std::string src = device_prelude() + print_kernel(softmax, "kw_softmax");
  for (int64_t inner : inners) {
    lns.push_back(layer_norm_kernel(inner));
    src += print_kernel(lns.back(), str("kw_ln", inner));
  }
  const std::vector<char> image = compile_for_device(src, "probe_warp_rows.cu", 0);
  Module mod(image.data());
  for (size_t i = 0; i < std::size(inners); ++i)
    for (const bool ln : {false, true}) {
      const int64_t inner = inners[i], rows = n / inner;
      const kir::Kernel& k = ln ? lns[i] : softmax;
      const CUfunction fn = mod.function(ln ? str("kw_ln", inner) : std::string("kw_softmax"));
      std::vector<CUdeviceptr> ptrs =
          ln ? std::vector<CUdeviceptr>{in.get(), ones.get(), zeros.get(), out.get()}
             : std::vector<CUdeviceptr>{in.get(), out.get()};
      auto launch = [&](unsigned x, unsigned y) {
        long long nrows = rows, s0 = rows, s1 = inner;
        std::vector<CUdeviceptr> q = ptrs;
        std::vector<void*> params;
        for (CUdeviceptr& a : q) params.push_back(&a);
        for (long long* v : {&nrows, &s0, &s1}) params.push_back(v);
        const auto blocks = static_cast<unsigned>(std::min<long long>((rows + y - 1) / y, 1 << 16));
        check(
            driver().cuLaunchKernel(fn, blocks, 1, 1, x, y, 1, 0, nullptr, params.data(), nullptr),
            "cuLaunchKernel");
      };
      auto pct = [&](unsigned x, unsigned y) {
        return static_cast<int>(100 * t_memcpy / median_ms(reps, [&] { launch(x, y); }) + 0.5);
      };
      const auto bx = static_cast<unsigned>(row_threads(k, inner));
      std::printf("warp rows: %-10s [%lld, %4lld] block per row (%u threads) %3d%%", k.name.c_str(),
                  static_cast<long long>(rows), static_cast<long long>(inner), bx, pct(bx, 1));
      for (unsigned y : {1u, 2u, 4u, 8u}) std::printf(" | 32 x %u %3d%%", y, pct(32, y));
      const size_t head = static_cast<size_t>(64 * inner);
      std::vector<float> a(head), b(head);
      launch(32, 1);
      check(driver().cuMemcpyDtoH(a.data(), out.get(), head * 4), "cuMemcpyDtoH");
      launch(32, 4);
      check(driver().cuMemcpyDtoH(b.data(), out.get(), head * 4), "cuMemcpyDtoH");
      const RowBlock chosen = row_block(k, rows, inner, 0, max_block_threads(fn));
      std::printf(" | launch_kernel: %lld x %lld | bits: %s\n", static_cast<long long>(chosen.x),
                  static_cast<long long>(chosen.y),
                  std::memcmp(a.data(), b.data(), head * 4) == 0 ? "same" : "DIFFER");
    }
}

// --dump DIR (no GPU needed): the probe's kernels as CUDA C and sm_90 cubins
// (with ptxas's register report) for reading their machine code (cuobjdump -sass).
int dump(const std::string& dir) {
  const kir::Kernel gelu = gelu_kernel(), softmax = softmax_kernel();
  const kir::Kernel ln = layer_norm_kernel(1024), log_softmax = softmax_kernel(true);
  // Rows held in registers (16 elements per thread: rows of 1024 on 64
  // threads, 4096 on 256), element slots and quads (each value computed once).
  std::string held;
  for (const auto& [k, sym] : {std::pair{&softmax, "ksoftmax"}, std::pair{&ln, "klayer_norm"},
                               std::pair{&log_softmax, "klog_softmax"}})
    held += cuda::detail::print_row_variant(*k, str(sym, "_held16"), 4, 16) +
            cuda::detail::print_row_variant(*k, str(sym, "_held16_quad"), cuda::detail::kRowUnroll,
                                            16, false, {true, false}) +
            cuda::detail::print_row_variant(*k, str(sym, "_held32_quad"), cuda::detail::kRowUnroll,
                                            32, false, {true, false});
  // The variants last: the ones without KILN_ISSUE redefine it for what follows.
  const std::string src =
      cuda_prelude() + kDivCheck + print_kernel(gelu, "kgelu") + print_kernel(softmax, "ksoftmax") +
      print_kernel(ln, "klayer_norm") + print_kernel(log_softmax, "klog_softmax") + held +
      cuda::detail::print_row_variant(softmax, "ksoftmax_quad", cuda::detail::kRowUnroll, 0, false,
                                      {true, false}) +
      cuda::detail::print_row_variant(ln, "klayer_norm_quad", cuda::detail::kRowUnroll, 0, false,
                                      {true, false}) +
      cuda::detail::print_row_variant(ln, "klayer_norm_hoist", cuda::detail::kRowUnroll, 0, false,
                                      {false, true}) +
      cuda::detail::print_row_variant(ln, "klayer_norm_quad_hoist", cuda::detail::kRowUnroll, 0,
                                      false, {true, true}) +
      variants_source(gelu, "") + print_kernel(softmax, "ksoftmax_noissue") +
      print_kernel(ln, "klayer_norm_noissue");
  const NvrtcOutput out = nvrtc_compile(src, "probe.cu", 90, true, {"--ptxas-options=-v"});
  auto write = [&](const std::string& name, const char* data, size_t size) {
    FILE* f = std::fopen((dir + "/" + name).c_str(), "wb");
    KILN_CHECK(f, "cannot write ", dir, "/", name);
    std::fwrite(data, 1, size, f);
    std::fclose(f);
  };
  write("probe.cu", src.data(), src.size());
  write("probe.cubin", out.cubin.data(), out.cubin.size());
  const std::string ptx = nvrtc_compile(src, "probe.cu", 90, false).ptx;
  write("probe.ptx", ptx.data(), ptx.size());
  std::printf("%s", out.log.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = int64_t{1} << 24;
  int reps = 20;
  bool only_warp_rows = false;  // --only warp_rows: that section alone (quick)
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--n")) n = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--only")) only_warp_rows = !std::strcmp(argv[i + 1], "warp_rows");
  }
  for (int i = 1; i + 1 < argc; i += 2)
    if (!std::strcmp(argv[i], "--dump")) return dump(argv[i + 1]);
  if (!is_available()) {
    std::printf("no CUDA device: %s\n", unavailable_reason().c_str());
    return 0;
  }
  try {
    set_device(0);
    const DeviceInfo info = device_info(0);
    const double peak = 2.0 * info.memory_clock_khz * 1e3 * info.memory_bus_bits / 8 / 1e9;
    std::printf(
        "device: %s, sm_%d%d, %d SMs, %.1f GiB, L2 %d MiB, driver %d, peak DRAM %.0f GB/s\n",
        info.name.c_str(), info.cc_major, info.cc_minor, info.multiprocessors,
        static_cast<double>(info.total_memory) / (1 << 30), info.l2_bytes >> 20, driver().version,
        peak);
    const kir::Kernel copy = copy_kernel(), gelu = gelu_kernel(), softmax = softmax_kernel();
    const std::string src = device_prelude() + print_kernel(copy, "kcopy") +
                            print_kernel(gelu, "kgelu") + print_kernel(softmax, "ksoftmax");
    const std::vector<char> image = compile_for_device(src, "probe.cu", 0);
    Module mod(image.data());
    const size_t bytes = static_cast<size_t>(n) * 4;
    DeviceBuffer in(bytes), out(bytes);
    std::vector<float> host(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      host[static_cast<size_t>(i)] = static_cast<float>(i % 2001 - 1000) / 250.0f;
    in.upload(host.data(), bytes);
    const std::vector<CUdeviceptr> p = {in.get(), out.get()};
    const int64_t sizes[1] = {n};
    const CUfunction fcopy = mod.function("kcopy"), fgelu = mod.function("kgelu");
    const double gb = 2.0 * static_cast<double>(bytes) / 1e9;  // read + write
    const double t_memcpy = median_ms(
        reps, [&] { check(driver().cuMemcpyDtoD(out.get(), in.get(), bytes), "cuMemcpyDtoD"); });
    const double t_copy = median_ms(reps, [&] { launch_kernel(fcopy, copy, p, sizes); });
    const double t_gelu = median_ms(reps, [&] { launch_kernel(fgelu, gelu, p, sizes); });
    std::vector<float> got(static_cast<size_t>(n));
    out.download(got.data(), bytes);
    std::vector<float> ref(static_cast<size_t>(n));
    void* ptrs[2] = {host.data(), ref.data()};
    kir::interpret(gelu, 0, n, ptrs, sizes);
    double worst = 0;
    for (int64_t i = 0; i < n; ++i)
      worst = std::max(worst, static_cast<double>(std::abs(got[static_cast<size_t>(i)] -
                                                           ref[static_cast<size_t>(i)])));
    std::printf("n = %lld f32 (%.0f MB per buffer), medians of %d\n", static_cast<long long>(n),
                static_cast<double>(bytes) / 1e6, reps);
    std::printf("cuMemcpyDtoD        %8.3f ms  %7.0f GB/s\n", t_memcpy, gb / t_memcpy * 1e3);
    std::printf("printed copy kernel %8.3f ms  %7.0f GB/s  (%.0f%% of cuMemcpyDtoD)\n", t_copy,
                gb / t_copy * 1e3, 100 * t_memcpy / t_copy);
    std::printf(
        "printed GELU (tanh) %8.3f ms  %7.0f GB/s  (%.0f%% of cuMemcpyDtoD); max |gpu - "
        "interpreter| %.3g\n",
        t_gelu, gb / t_gelu * 1e3, 100 * t_memcpy / t_gelu, worst);
    if (!only_warp_rows) {
      gelu_variant_lines(gelu, n, reps, t_memcpy, in, out, ref);
      fast_division_check();
      row_kernels(softmax, n, reps, t_memcpy, in, out);
    }
    {
      DeviceBuffer ones(static_cast<size_t>(n) * 4), zeros(static_cast<size_t>(n) * 4);
      std::vector<float> v(static_cast<size_t>(n), 1.0f);
      ones.upload(v.data(), v.size() * 4);
      std::fill(v.begin(), v.end(), 0.0f);
      zeros.upload(v.data(), v.size() * 4);
      warp_row_lines(softmax, n, reps, t_memcpy, in, out, ones, zeros);
      column_row_lines(n, reps, in, out, ones);
    }
    if (!only_warp_rows)
      move_lines([&](const std::function<void()>& f) { return median_ms(reps, f); });
    if (only_warp_rows) return 0;
    // matmul through cuBLASLt on device tensors (the eager op): TFLOP/s.
    if (cublaslt_unavailable_reason().empty()) {
      for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
        for (bool tf32 : {false, true}) {
          if (tf32 && dt != DType::f32) continue;
          set_matmul_allow_tf32(tf32);
          const int64_t m = 4096;
          const Tensor a = randn({m, m}).to(dt).cuda(), b = randn({m, m}).to(dt).cuda();
          const double t = median_ms(reps, [&] { (void)matmul(a, b); });
          std::printf("matmul %s%s 4096^3 %8.3f ms  %6.1f TFLOP/s\n", dtype_name(dt),
                      tf32 ? " (TF32)" : "", t, 2.0 * m * m * m / t / 1e9);
        }
      }
      set_matmul_allow_tf32(false);
    } else {
      std::printf("matmul: %s\n", cublaslt_unavailable_reason().c_str());
    }
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
  return 0;
}
