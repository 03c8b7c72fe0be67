// Internal: LLVM IR text for kernel IR's scalar ops — one rule per op and
// dtype class, following the eager kernels (runtime/src/ops/scalar_ops.h). The
// loop emitter (llvm_emit.cpp) derives from IrText and adds loops and memory.
#pragma once

#include <map>
#include <set>
#include <string>

#include "kernels/kernel_ir.h"

namespace kiln::kir::detail {

/// Floating dtypes compute with fp instructions.
inline bool is_f(DType t) {
  return is_floating(t);
}
/// Signed integer dtypes (sdiv, icmp slt, sext).
inline bool is_signed_int(DType t) {
  return t == DType::i64 || t == DType::i32;
}
/// Register type of a dtype: f16/bf16 compute in float, bool is i1.
std::string ir_type(DType t);
/// In-memory element type (bool is i8, f16 half, bf16 i16).
std::string ir_mem_type(DType t);
/// The exact literal of constant `v` in dtype t (rounded to t).
std::string ir_literal(DType t, double v);

/// A function body written as LLVM IR text: fresh names, instructions, and the
/// declarations and helper functions they need.
class IrText {
 public:
  /// `op` on operand values of dtype `t` (the first operand's), giving dtype `r`.
  std::string scalar_op(OpId op, DType t, DType r, std::string a, std::string b,
                        const std::string& c);
  /// Converts a value like the eager cast (copy_into).
  std::string convert(DType from, DType to, const std::string& v);
  /// Rounds a float register to f16/bf16 precision (eager stores every op's result).
  std::string round(DType t, const std::string& v);
  /// Primitive `e` (kernel_ir.h) on operand values of dtype `in`.
  std::string prim(const Expr& e, DType in, const std::string& a, const std::string& b,
                   const std::string& c);
  /// `op` on operands of dtype t through its math expansion (math_expand.h), inline.
  std::string expansion(OpId op, DType t, const std::string& a, const std::string& b);

 protected:
  std::string tmp() { return "%t" + std::to_string(next_++); }
  std::string label(const char* what) { return what + std::to_string(next_++); }
  void line(const std::string& s) { body_ += "  " + s + "\n"; }
  std::string emit(const std::string& rhs);
  std::string sel(const std::string& c, const std::string& t, const std::string& a,
                  const std::string& b);
  void declare(const std::string& d) { decls_.insert(d); }
  std::string call1(const std::string& t, const std::string& fn, const std::string& x);
  std::string call2(const std::string& t, const std::string& fn, const std::string& x,
                    const std::string& y);
  std::string float_math(OpId op, DType t, const std::string& x);

  std::string body_;
  std::set<std::string> decls_;                 ///< "declare ..." lines
  std::map<std::string, std::string> helpers_;  ///< internal functions and tables by name
  bool arcp_ = false;  ///< float divisions may use a reciprocal (Kernel::reassoc)

 private:
  int next_ = 0;
};

}  // namespace kiln::kir::detail
