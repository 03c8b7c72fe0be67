// Internal: the transcendental functions of kernels, written once as kernel-IR
// expansions (op-table elementwise ops plus the primitives of kir::Prim, with
// explicit fma), which the interpreter and every backend evaluate alike: the
// same polynomials and range reductions give the same bits on every target.
// The functions are the templates of runtime/src/math/expansions.h, which the
// eager kernels instantiate too (eager and compiled results are equal).
//
// Expanded: exp, log, log1p, tanh, sigmoid, erf, sin, cos (unary) and pow in
// f32, and in f16/bf16 as their f32 expansion between two casts (they compute
// in float and round once, as the eager kernels do). Not expanded: f64 (libm
// on the CPU; gradcheck precision, not a hot path) and sqrt/rsqrt (correctly
// rounded instructions). Every expansion is branch-free (selects only), so the
// loops that run it vectorize; error <= 4 ulp from libm, IEEE/C99 behaviour at
// ±0, ±inf, NaN and subnormals (tests/codegen/math_expand_test.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/kernel_ir.h"

namespace kiln::kir {

/// True if `op` on operands of dtype `t` is computed by its expansion.
bool has_math_expansion(OpId op, DType t);

/// The expansion of `op` on operands of dtype `t` (has_math_expansion): a list
/// of expressions in which exprs[i], i < arity, are kLoad of "arg" i standing
/// for operand i; the others follow kernel IR rules (operands refer to earlier
/// entries); the last one is the result, of dtype `t`. Built once, immutable.
const std::vector<Expr>& math_expansion(OpId op, DType t);

/// Whether entry i of math_expansion(op, t) is a division whose operands and
/// quotient stay normal and far from the exponent range's ends (the builder's
/// div_normal: tanh's 2 / (e^(2|x|) + 1)): a GPU's correctly rounded division
/// needs no slow path there. One flag per entry.
const std::vector<char>& normal_divisions(OpId op, DType t);

/// `k` with every expandable op replaced by its expansion spliced in place
/// (same args, reductions and stores; expression indices renumbered). The
/// result verifies and computes what `k` does, bit for bit; backends without
/// their own rule for an op (the GPU printer) print this kernel instead. With
/// `normal_div`, (*normal_div)[i] says whether expression i of the result is
/// such a division (normal_divisions).
Kernel expand_math(const Kernel& k, std::vector<char>* normal_div = nullptr);

/// Constant table `id` read by Prim::kTable (0: bits of 2/pi for sin/cos).
std::span<const int32_t> math_table(int id);
/// Number of constant tables.
inline constexpr int kNumMathTables = 1;

}  // namespace kiln::kir
