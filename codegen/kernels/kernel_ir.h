// Kernel IR: what one fused group becomes, and what every backend consumes (LLVM
// for the CPU; CUDA C / OpenCL C through NVRTC or the emulated device).
//
// A kernel iterates over a dense index space of rank R >= 1 whose sizes are
// passed at run time (one kernel serves every batch size). The last dim is the
// "inner" dim; the leading R-1 dims are "rows". Every argument is a contiguous
// row-major buffer whose dims are either dense or broadcast (stride 0) relative to
// the iteration space; strides are derived inside the kernel from the run-time
// sizes, so the inner stride of every load is 0 or 1 and loops vectorize.
//
// Body: SSA scalar expressions (loads, constants, op-table elementwise ops, and
// references to row reductions). A kernel without reductions is pointwise: one
// loop storing its outputs. A kernel with reductions reduces over the inner dim
// only: for each row it runs the phases in order (phase p computes the
// reductions assigned to it, reading the row, which stays in cache), then the
// final store loop; row outputs (one value per row) are stored after the phase
// that makes them. This covers softmax, log_softmax and layer_norm forward and
// backward as single kernels.
//
// Run-time ABI of a compiled kernel (KernelFn):
//   fn(begin, end, ptrs, sizes)
// - pointwise: [begin, end) is a range of the flattened index space;
// - with reductions: [begin, end) is a range of rows (product of leading dims).
// ptrs[i] is argument i's base pointer, sizes[d] the iteration size of dim d.
// bool is one byte (0/1) in memory; f16/bf16 compute in float and round after
// every op, exactly as the eager kernels do.
//
// Semantics: each op is the eager kernel's scalar rule (runtime/src/ops/
// scalar_ops.h) in the op's dtype, bit for bit, except exp, log, log1p, tanh,
// sigmoid, erf, sin, cos and pow in f32/f16/bf16: those are the branch-free
// expansions of math_expand.h (polynomials with explicit fma, <= 4 ulp from
// libm), which the interpreter and every backend evaluate alike, so compiled
// and interpreted pointwise results are equal bit for bit (f64 calls libm on
// both sides). Reductions use eager's accumulators (f32/f64 sums in double,
// f16/bf16 in float, integers in wrapping i64); max/min propagate NaN. With
// Kernel::reassoc the backend may reorder a reduction (vector partial sums, f32
// sums accumulated in float over chunks of the row: results differ by
// rounding, and a max/min over +0 and -0 may return either zero) and, in a
// kernel with reductions, divide by a row-level value through its reciprocal
// (within an ulp); without it, reductions run in index order and compiled
// results equal the interpreter's exactly. Pointwise kernels are exact either way.
// Float -> integer casts of values outside the target range are undefined (as
// in C++). Aliasing: an output may share memory with an input only exactly (same
// dtype and dense pattern; every element is loaded before it is stored);
// inputs broadcast along the inner dim are read at the start of each row.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/op_table.h"

namespace kiln::kir {

/// One kernel argument: a contiguous buffer read (input) or written (output).
struct Arg {
  DType dtype = DType::f32;
  bool is_output = false;
  /// Per iteration dim: true = dense (the buffer has this dim), false = broadcast.
  /// Row outputs of reductions are broadcast along the inner dim.
  std::vector<bool> dense;
};

enum class ExprKind : uint8_t {
  kLoad,     ///< arg `arg` at the current index
  kConst,    ///< `value` in `dtype`
  kOp,       ///< op-table elementwise op applied to operands a, b, c
  kReduced,  ///< the row's value of reduction `arg` (usable after its phase)
  kPrim,     ///< backend primitive `prim` (math expansions only) on operands a, b, c
};

/// The primitives that math expansions (math_expand.h) add to the op table's
/// elementwise ops: each is one exact IEEE or two's-complement instruction on
/// every target, so every backend computes an expansion to the same bits.
enum class Prim : uint8_t {
  kFma,      ///< a * b + c rounded once (f32, f64)
  kRint,     ///< round to the nearest integer, ties to even (f32, f64)
  kTrunc,    ///< round toward zero (f32, f64)
  kBitcast,  ///< a's bits as the result type: f32 <-> i32, f64 <-> i64
  kShl,      ///< a << b (i32, i64; b a constant in [0, bits))
  kShr,      ///< a >> b, sign-filling (i32, i64; b a constant in [0, bits))
  kAnd,      ///< bitwise a & b (i32, i64)
  kOr,       ///< bitwise a | b (i32, i64)
  kXor,      ///< bitwise a ^ b (i32, i64)
  kTable,    ///< entry a (i32, in range) of constant table `arg` (math_table())
};

/// The primitive's name in canonical text ("fma", "bitcast", ...).
const char* prim_name(Prim p);
/// Operands a primitive takes (1 to 3).
int prim_arity(Prim p);

/// One SSA scalar expression. Operands refer to earlier expressions.
struct Expr {
  ExprKind kind = ExprKind::kConst;
  DType dtype = DType::f32;  ///< result type
  OpId op = OpId::add;       ///< kOp: unary/binary/where/cast from ops.def
  Prim prim = Prim::kFma;    ///< kPrim
  int a = -1, b = -1, c = -1;
  int arg = -1;        ///< kLoad: argument index; kReduced: reduction index; kTable: table
  double value = 0.0;  ///< kConst

  /// A load of argument `arg` as `t`.
  static Expr load(int arg, DType t) {
    Expr e;
    e.kind = ExprKind::kLoad;
    e.dtype = t;
    e.arg = arg;
    return e;
  }
  /// The constant `v` in `t`.
  static Expr constant(double v, DType t) {
    Expr e;
    e.kind = ExprKind::kConst;
    e.dtype = t;
    e.value = v;
    return e;
  }
  /// Op `op` with result type `t` over earlier expressions a, b, c.
  static Expr make_op(OpId op, DType t, int a, int b = -1, int c = -1) {
    Expr e;
    e.kind = ExprKind::kOp;
    e.op = op;
    e.dtype = t;
    e.a = a;
    e.b = b;
    e.c = c;
    return e;
  }
  /// Primitive `p` with result type `t` over earlier expressions a, b, c.
  static Expr make_prim(Prim p, DType t, int a, int b = -1, int c = -1) {
    Expr e = make_op(OpId::add, t, a, b, c);
    e.kind = ExprKind::kPrim;
    e.prim = p;
    return e;
  }
};

/// A reduction over the inner dim of one expression.
struct Reduction {
  OpId op = OpId::sum;  ///< sum, max or min
  int expr = -1;        ///< expression reduced
  int phase = 0;        ///< loop it runs in; may only use reductions of earlier phases
  DType dtype = DType::f32;
};

/// A store of expression `expr` into output argument `arg`. Elementwise stores
/// run in the final loop; row stores (the arg is broadcast along the inner dim)
/// run once per row after the reductions they need. An accumulating store is a
/// column sum (a bias gradient): `arg` is f64, broadcast along every row dim and
/// dense along the inner dim, and each element of the launch's range adds its
/// f64 value to its column, in index order. The caller gives each launch its
/// own zeroed buffer and adds the launches' buffers in a fixed order.
struct Store {
  int arg = -1;
  int expr = -1;
  bool accumulate = false;
};

/// A loop-nest kernel.
struct Kernel {
  std::string name;  ///< symbol prefix (the backend appends the hash)
  int rank = 1;      ///< iteration dims (>= 1)
  std::vector<Arg> args;
  std::vector<Expr> exprs;
  std::vector<Reduction> reductions;
  std::vector<Store> stores;
  /// Reductions may be reassociated (vectorized partial sums) and divisions in
  /// kernels with reductions use reciprocals — documented tolerance: results
  /// may differ from eager's order by rounding.
  bool reassoc = true;

  int num_phases() const;
  bool has_reductions() const { return !reductions.empty(); }
};

/// Canonical text (stable across runs; the kernel cache hashes it).
std::string to_string(const Kernel& k);
/// Checks the invariants above (dtype rules of each op, operand order, phases,
/// one store per output, row stores of row-level values); a kiln::Error
/// "[kir] kernel '<name>': ..." naming the bad entry.
void verify(const Kernel& k);

/// Signature of a compiled kernel (see the ABI above).
using KernelFn = void (*)(int64_t begin, int64_t end, void* const* ptrs, const int64_t* sizes);

/// Runs `k` with the reference interpreter (slow; tests and the fallback when no
/// JIT is available). Same ABI as a compiled kernel.
void interpret(const Kernel& k, int64_t begin, int64_t end, void* const* ptrs,
               const int64_t* sizes);

/// The number of work items of one launch: elements for pointwise kernels, rows
/// for kernels with reductions.
int64_t work_items(const Kernel& k, const int64_t* sizes);

}  // namespace kiln::kir
