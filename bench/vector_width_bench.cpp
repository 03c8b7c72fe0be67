// Vector width of the LLVM backend's kernels: each f32 kernel compiled twice in
// one process, once with LLVM's own width choice (no loop hint: its bound is the
// register over the widest type in the loop, which sin's i64/f64 exact
// reduction halves on 256-bit hosts; erf/pow/log1p computed in double inside
// until session 8) and once with kiln's full-width hint
// (what get_kernel compiles). One thread, 16M floats, alternating rounds;
// prints each variant's median throughput and the median of paired ratios.
//
//   build/release/bench/vector_width_bench [rounds=15]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/kernel_ir.h"
#include "kernels/llvm/llvm_emit.h"
#include "kernels/llvm/llvm_jit.h"
#include "kiln/kiln.h"

using namespace kiln;
using namespace kiln::kir;

namespace {

struct K {
  Kernel k;
  int push(Expr e) {
    k.exprs.push_back(e);
    return static_cast<int>(k.exprs.size()) - 1;
  }
  int op(OpId o, int a, int b = -1) { return push(Expr::make_op(o, DType::f32, a, b)); }
  int c(double v) { return push(Expr::constant(v, DType::f32)); }
};

// y = f(x) over one dense f32 dim.
Kernel make(const std::string& name, int (*body)(K&, int)) {
  K b;
  b.k.name = name;
  b.k.rank = 1;
  b.k.args = {Arg{DType::f32, false, {true}}, Arg{DType::f32, true, {true}}};
  const int x = b.push(Expr::load(0, DType::f32));
  b.k.stores.push_back(Store{1, body(b, x)});
  verify(b.k);
  return b.k;
}

int gelu_erf(K& b, int x) {  // x * 0.5 * (1 + erf(x / sqrt 2))
  const int e = b.op(OpId::erf, b.op(OpId::mul, x, b.c(0.7071067811865476)));
  return b.op(OpId::mul, b.op(OpId::mul, x, b.c(0.5)), b.op(OpId::add, e, b.c(1.0)));
}
int erf_(K& b, int x) {
  return b.op(OpId::erf, x);
}
int pow_(K& b, int x) {
  return b.op(OpId::pow, b.op(OpId::abs, x), b.c(1.7));
}
int log1p_(K& b, int x) {
  return b.op(OpId::log1p, b.op(OpId::abs, x));
}
int sin_(K& b, int x) {
  return b.op(OpId::sin, x);
}
int exp_(K& b, int x) {
  return b.op(OpId::exp, x);
}

using Fn = void (*)(int64_t, int64_t, void* const*, const int64_t*);

double run_ms(Fn fn, void* const* ptrs, const int64_t* sizes) {
  const auto t0 = std::chrono::steady_clock::now();
  fn(0, sizes[0], ptrs, sizes);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 15;
  const jit::CpuInfo cpu = jit::host_cpu();
  std::printf("host: %s (%s), vector registers: %d bits, LLVM %s; 1 thread, 16M f32, %d rounds\n",
              cpu.cpu.c_str(),
              cpu.avx512f ? "AVX-512"
              : cpu.avx2  ? "AVX2"
                          : "SSE",
              cpu.vector_bits, jit::llvm_version().c_str(), rounds);
  std::printf("widths kiln asks for elsewhere:");
  for (const char* other : {"x86-64", "znver3", "skylake-avx512", "znver4", "znver5"})
    std::printf(" %s %d,", other, jit::named_cpu(other).vector_bits);
  std::printf(" bits\n");
  const int64_t n = int64_t{1} << 24;
  Tensor x = randn({n}), y = empty({n});
  void* ptrs[2] = {x.data_ptr(), y.data_ptr()};
  const int64_t sizes[1] = {n};
  jit::LlvmJit jit;
  std::printf("%-10s %14s %14s %10s\n", "kernel", "LLVM's width", "full width", "speedup");
  struct Case {
    const char* name;
    int (*body)(K&, int);
  };
  for (const Case& c : {Case{"gelu_erf", gelu_erf}, Case{"erf", erf_}, Case{"pow", pow_},
                        Case{"log1p", log1p_}, Case{"sin", sin_}, Case{"exp", exp_}}) {
    const Kernel k = make(c.name, c.body);
    auto compile = [&](int bits, const char* tag) {
      const std::string sym = std::string(c.name) + tag;
      return reinterpret_cast<Fn>(jit.compile(emit_llvm(k, sym, bits), sym));
    };
    Fn llvm_choice = compile(0, "_auto"), full = compile(cpu.vector_bits, "_full");
    run_ms(llvm_choice, ptrs, sizes);  // warm up both
    run_ms(full, ptrs, sizes);
    std::vector<double> a, b, ratio;
    for (int r = 0; r < rounds; ++r) {  // alternately first
      double ta, tb;
      if (r % 2) {
        ta = run_ms(llvm_choice, ptrs, sizes);
        tb = run_ms(full, ptrs, sizes);
      } else {
        tb = run_ms(full, ptrs, sizes);
        ta = run_ms(llvm_choice, ptrs, sizes);
      }
      a.push_back(ta);
      b.push_back(tb);
      ratio.push_back(ta / tb);
    }
    const double gel = static_cast<double>(n) / 1e6;
    std::printf("%-10s %9.0f M/s %9.0f M/s %9.2fx\n", c.name, gel / median(a) * 1e3,
                gel / median(b) * 1e3, median(ratio));
  }
  return 0;
}
