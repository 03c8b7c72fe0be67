// The kFloatMath trait of ops.def is the one rule for which unary ops compute
// in floating point: the eager dtype rule gives an integer input the default
// float exactly for those ops, and the kernel verifier takes them on floating
// operands only; every unary and binary op of the table has an interpreter rule.
#include <gtest/gtest.h>

#include <cstring>

#include "codegen/kernel_test_util.h"
#include "kernels/kernel_ir_util.h"
#include "kiln/error.h"

namespace kiln::kir {
namespace {

using testing::Builder;

bool unary(OpId op) {
  return std::strcmp(op_info(op).family, "unary") == 0;
}

TEST(OpTraits, FloatMathDecidesTheDtypeOfIntegerInputs) {
  int seen = 0;
  for (int i = 0; i < kNumOps; ++i) {
    const auto op = static_cast<OpId>(i);
    if (!unary(op) || op == OpId::logical_not) continue;
    ++seen;
    const bool fm = op_info(op).has(kFloatMath);
    EXPECT_EQ(detail::is_float_math(op), fm) << op_name(op);
    const Tensor y = dispatch1(op, {arange(0, 4, 1, DType::i32)});
    EXPECT_EQ(is_floating(y.dtype()), fm) << op_name(op) << " of an i32 tensor gives " << y.dtype();
    Builder b(1, str("traits_", op_name(op)));
    const int x = b.load(b.in(DType::i32, {true}));
    b.store(b.out(DType::i32, {true}), b.op(op, DType::i32, x));
    if (fm)
      EXPECT_THROW(verify(b.k), Error) << op_name(op) << " accepted an i32 operand";
    else
      EXPECT_NO_THROW(verify(b.k)) << op_name(op);
  }
  EXPECT_GE(seen, 14);
  // Not unary ops: no trait.
  EXPECT_FALSE(op_info(OpId::add).has(kFloatMath));
  EXPECT_FALSE(op_info(OpId::logical_not).has(kFloatMath));
}

// kCostly (what rematerialization keeps saved by default) covers every
// kFloatMath op and the divisions; kCopies ops have kernels that any device
// runtime runs as they are.
TEST(OpTraits, CostlyAndCopiesTraits) {
  for (int i = 0; i < kNumOps; ++i) {
    const auto op = static_cast<OpId>(i);
    const OpInfo& info = op_info(op);
    if (info.has(kFloatMath)) {
      EXPECT_TRUE(info.has(kCostly)) << op_name(op);
    }
    if (info.has(kCostly)) {
      EXPECT_TRUE(info.has(kElementwise)) << op_name(op);
    }
    if (info.has(kCopies)) {
      EXPECT_TRUE(info.kernel != nullptr) << op_name(op);
    }
  }
  EXPECT_TRUE(op_info(OpId::div).has(kCostly));
  EXPECT_TRUE(op_info(OpId::pow).has(kCostly));
  EXPECT_FALSE(op_info(OpId::mul).has(kCostly));
  EXPECT_TRUE(op_info(OpId::pad).has(kCopies));
  EXPECT_TRUE(op_info(OpId::cat).has(kCopies));
  EXPECT_FALSE(op_info(OpId::gather).has(kCopies));
}

// The interpreter's per-op cases come from the table: every unary and binary
// op (where/cast included) runs in a kernel of a dtype it accepts.
TEST(OpTraits, InterpreterHasEveryElementwiseOp) {
  for (int i = 0; i < kNumOps; ++i) {
    const auto op = static_cast<OpId>(i);
    const OpInfo& info = op_info(op);
    if (std::strcmp(info.family, "unary") != 0 && std::strcmp(info.family, "binary") != 0) continue;
    const DType f = DType::f32;
    Builder b(1, str("interp_", op_name(op)));
    const int x = b.load(b.in(f, {true}));
    int r;
    if (op == OpId::where) {
      r = b.op(op, f, b.op(OpId::gt, DType::b8, x, x), x, x);
    } else if (op == OpId::cast) {
      r = b.op(op, DType::f64, x);
    } else if (info.arity == 1) {
      r = b.op(op, op == OpId::logical_not ? DType::b8 : f, x);
    } else {
      const bool to_bool = op >= OpId::eq && op <= OpId::logical_or;
      r = b.op(op, to_bool ? DType::b8 : f, x, x);
    }
    b.store(b.out(b.k.exprs[static_cast<size_t>(r)].dtype, {true}), r);
    std::vector<int64_t> sizes{3};
    std::mt19937 rng(1);
    auto bufs = testing::make_buffers(b.k, sizes, rng, [](DType, std::mt19937&) { return 0.5; });
    auto p = testing::pointers(bufs);
    EXPECT_NO_THROW(interpret(b.k, 0, 3, p.data(), sizes.data())) << op_name(op);
  }
}

}  // namespace
}  // namespace kiln::kir
