// Internal: facts about a verified kernel that the interpreter and every
// backend need in the same form (which expressions vary along the inner dim,
// which reductions they read, where each store goes).
#pragma once

#include <vector>

#include "kernels/kernel_ir.h"

namespace kiln::kir::detail {

/// Ops that compute in floating point only (the kFloatMath trait of ops.def;
/// the LLVM backend emits the transcendentals through math_expand.h).
constexpr bool is_float_math(OpId op) {
  switch (op) {
#define KILN_OP(name, family, arity, traits) \
  case OpId::name:                           \
    return ((traits)&kFloatMath) != 0;
#include "kiln/ops.def"
#undef KILN_OP
  }
  return false;
}

/// Where the value of each expression and each store lives.
struct Analysis {
  /// Per expr: it depends on a load that varies along the inner dim (else it is
  /// the same for the whole row: "row-level").
  std::vector<char> inner;
  /// Per expr: the highest phase among the reductions it reads (-1: none).
  std::vector<int> phase;
  /// Per store: -1 = elementwise (final loop); p >= 0 = row store made after
  /// phase p's loop; kRowStart = row store that needs no reduction.
  std::vector<int> store_after;
  static constexpr int kRowStart = -2;
  int num_phases = 0;
};

/// True if argument `arg` is broadcast along the inner dim (one value per row).
inline bool row_arg(const Kernel& k, int arg) {
  return !k.args[static_cast<size_t>(arg)].dense[static_cast<size_t>(k.rank - 1)];
}

/// Operands of expression `e` (arity of its op; none for loads/consts/reduced).
int operands(const Expr& e, int out[3]);

/// Analyzes a verified kernel.
Analysis analyze(const Kernel& k);

/// Marks the expressions `roots` depend on (including the roots).
std::vector<char> needed(const Kernel& k, const std::vector<int>& roots);

/// Per arg and dim: element strides derived from the sizes (0 = broadcast).
std::vector<std::vector<int64_t>> arg_strides(const Kernel& k, const int64_t* sizes);

}  // namespace kiln::kir::detail
