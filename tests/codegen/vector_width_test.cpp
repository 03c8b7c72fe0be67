// Every pointwise and row kernel runs at the full vector width of the CPU it
// is compiled for: f32 loops fill the register with floats even where a loop
// also holds wider types (sin/cos's exact reduction of huge arguments in
// i64/f64; before session 8 pow, erf and log1p computed in double too; a
// column sum's f64 accumulator: until session 18), which
// LLVM's own width bound would halve on 256-bit hosts (znver3). Checked for several x86-64
// CPUs on any host (their code is compiled, not run).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "codegen/kernel_test_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/llvm/llvm_jit.h"

namespace kiln::kir {
namespace {

using testing::Builder;

#define SKIP_WITHOUT_LLVM() \
  if (!jit::available()) GTEST_SKIP() << "built without LLVM 19 (kernels are interpreted)"

// y = op(x + c) + salt over [rows, cols], in dtype t.
Kernel pointwise(OpId op, DType t) {
  Builder b(2, str("width_", op_name(op), "_", dtype_name(t)));
  int x = b.load(b.in(t, {true, true})), c = b.load(b.in(t, {false, true}));
  int y = op_info(op).arity == 2 ? b.op(op, t, x, c) : b.op(op, t, b.op(OpId::add, t, x, c));
  b.store(b.out(t, {true, true}), b.op(OpId::add, t, y, b.cnst(t, 0.25)));
  return b.k;
}

// softmax over rows: a max phase, a reassociated sum phase and the store loop.
Kernel softmax_rows() {
  Builder b(2, "width_softmax");
  const auto f = DType::f32;
  int xa = b.in(f, {true, true}), oa = b.out(f, {true, true});
  int x = b.load(xa);
  int mx = b.reduce(OpId::max, x, 0, f);
  int e = b.op(OpId::exp, f, b.op(OpId::sub, f, x, mx));
  int s = b.reduce(OpId::sum, e, 1, f);
  b.store(oa, b.op(OpId::mul, f, e, b.op(OpId::div, f, b.cnst(f, 1), s)));
  return b.k;
}

// GELU's backward with its bias gradient: f32 erf and exp, stored, and the
// column sum of the result in an f64 accumulator.
Kernel column_sum_of_f32_math() {
  Builder b(2, "width_column_sum");
  const auto f = DType::f32;
  int x = b.load(b.in(f, {true, true})), g = b.load(b.in(f, {true, true}));
  int d = b.op(OpId::mul, f, g, b.op(OpId::add, f, b.op(OpId::erf, f, x), b.op(OpId::exp, f, x)));
  b.store(b.out(f, {true, true}), d);
  b.accumulate(b.out(DType::f64, {false, true}), b.op(OpId::cast, DType::f64, d));
  return b.k;
}

struct Case {
  Kernel k;
  std::string vec;  // the full-width vector type its loops must use
};

std::vector<Case> cases(int vector_bits) {
  const std::string f32 = str("<", vector_bits / 32, " x float>");
  std::vector<Case> out;
  for (OpId op : {OpId::add, OpId::exp, OpId::tanh, OpId::erf, OpId::pow, OpId::sin, OpId::log1p})
    out.push_back({pointwise(op, DType::f32), f32});
  out.push_back({pointwise(OpId::erf, DType::bf16), f32});  // computes in float
  out.push_back({pointwise(OpId::mul, DType::f64), str("<", vector_bits / 64, " x double>")});
  out.push_back({softmax_rows(), f32});
  out.push_back({column_sum_of_f32_math(), f32});
  return out;
}

TEST(VectorWidth, EveryX86CpuGetsItsFullWidth) {
  SKIP_WITHOUT_LLVM();
  if (jit::host_cpu().triple.find("x86_64") == std::string::npos)
    GTEST_SKIP() << "x86-64 CPUs only";
  // The widths the cost model reports for known CPUs (x86-64: SSE2 only).
  EXPECT_EQ(jit::named_cpu("x86-64").vector_bits, 128);
  EXPECT_EQ(jit::named_cpu("haswell").vector_bits, 256);
  EXPECT_EQ(jit::named_cpu("znver3").vector_bits, 256);
  EXPECT_GE(jit::named_cpu("znver4").vector_bits, 256);
  // Every AVX-512 CPU gets 512 bits, Intel's server cores too (LLVM tunes them
  // down to 256; the eager loops use 512 there).
  EXPECT_EQ(jit::named_cpu("skylake-avx512").vector_bits, 512);
  EXPECT_EQ(jit::named_cpu("sapphirerapids").vector_bits, 512);
  EXPECT_FALSE(jit::named_cpu("znver3").avx512f);
  EXPECT_TRUE(jit::named_cpu("znver4").avx512f);
  EXPECT_THROW(jit::named_cpu("no-such-cpu"), Error);
  for (const char* cpu : {"x86-64", "znver3", "skylake-avx512", "znver4"}) {
    const int bits = jit::named_cpu(cpu).vector_bits;
    for (const Case& c : cases(bits)) {
      const std::string ir = optimized_ir_for_cpu(c.k, cpu);
      EXPECT_NE(ir.find(c.vec), std::string::npos)
          << c.k.name << " on " << cpu << " does not use " << c.vec;
    }
  }
}

// The backend keeps the width the loops ask for: on the Intel server cores LLVM
// tunes to 256 bits, a 16-lane loop is not split into two ymm halves (the
// kernels' "prefer-vector-width"); a 256-bit CPU never sees zmm.
TEST(VectorWidth, AvxCpusUseTheirRegistersInMachineCode) {
  SKIP_WITHOUT_LLVM();
  if (jit::host_cpu().triple.find("x86_64") == std::string::npos)
    GTEST_SKIP() << "x86-64 CPUs only";
  const Kernel k = pointwise(OpId::erf, DType::f32);
  for (const char* cpu : {"skylake-avx512", "sapphirerapids", "znver4"}) {
    const std::string s = assembly_for_cpu(k, cpu);
    EXPECT_NE(s.find("%zmm"), std::string::npos) << cpu << ": erf without zmm registers";
  }
  const std::string s = assembly_for_cpu(k, "znver3");
  EXPECT_NE(s.find("%ymm"), std::string::npos);
  EXPECT_EQ(s.find("%zmm"), std::string::npos);
}

// A JIT for another CPU writes object files but never runs code.
TEST(VectorWidth, ForeignCpuJitOnlyWritesObjects) {
  SKIP_WITHOUT_LLVM();
  jit::LlvmJit foreign("znver4");
  const std::string ir = "define void @f() {\nentry:\n  ret void\n}\n";
  EXPECT_FALSE(foreign.compile_to_object(ir).empty());
  EXPECT_THROW(foreign.compile(ir, "f"), Error);
  EXPECT_THROW(foreign.load_object(foreign.compile_to_object(ir), "f"), Error);
}

// The host's width is consistent with its features (its kernels are checked
// through the kernel cache by KernelCache.DumpsShowVectorizedCode).
TEST(VectorWidth, HostWidthMatchesItsFeatures) {
  SKIP_WITHOUT_LLVM();
  const jit::CpuInfo host = jit::host_cpu();
  EXPECT_GE(host.vector_bits, 128);
  if (host.avx2) {
    EXPECT_GE(host.vector_bits, 256);
  }
  if (!host.avx512f) {
    EXPECT_LE(host.vector_bits, 256);
  }
}

}  // namespace
}  // namespace kiln::kir
