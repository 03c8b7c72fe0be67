// Kernels covering every elementwise op of the op table at every dtype the
// kernel IR accepts for it, for the GPU printer's tests: out = op(a, b[, c])
// over a rank-2 space where b is broadcast along the inner dim and c along the
// rows, so every kernel also exercises the broadcast index arithmetic.
#pragma once

#include <string>
#include <vector>

#include "codegen/kernel_test_util.h"
#include "kernels/kernel_ir_util.h"

namespace kiln::cuda::testing {

struct OpKernel {
  kir::Kernel k;
  OpId op;
  DType in, out;
};

/// Whether op computes float math (its GPU result is compared within ulps).
inline bool float_math(OpId op) {
  return kir::detail::is_float_math(op);
}

inline std::vector<OpKernel> op_kernels() {
  const std::vector<DType> dtypes = {DType::f32, DType::f64, DType::f16, DType::bf16,
                                     DType::i64, DType::i32, DType::u8,  DType::b8};
  std::vector<OpKernel> out;
  auto try_add = [&](kir::Kernel k, OpId op, DType in, DType r) {
    try {
      kir::verify(k);
    } catch (const Error&) {
      return;  // not a combination the kernel IR accepts
    }
    out.push_back({std::move(k), op, in, r});
  };
  for (int id = 0; id < kNumOps; ++id) {
    const OpId op = static_cast<OpId>(id);
    const OpInfo& info = op_info(op);
    if (!info.has(kElementwise) || op == OpId::copy) continue;
    for (DType in : dtypes) {
      std::vector<DType> results;
      if (op == OpId::cast)
        results = dtypes;
      else if (op == OpId::logical_not || op == OpId::eq || op == OpId::ne || op == OpId::lt ||
               op == OpId::le || op == OpId::gt || op == OpId::ge || op == OpId::logical_and ||
               op == OpId::logical_or)
        results = {DType::b8};
      else
        results = {in};
      for (DType r : results) {
        kir::testing::Builder b(
            2, std::string(info.name) + "_" + dtype_name(in) + "_" + dtype_name(r));
        b.k.reassoc = false;
        const int a = b.load(b.in(in, {true, true}));
        int e;
        if (op == OpId::where) {
          const int c = b.load(b.in(DType::b8, {false, true}));
          const int y = b.load(b.in(in, {true, false}));
          e = b.op(op, in, c, a, y);
        } else if (info.arity == 2 && op != OpId::cast) {
          const int y = b.load(b.in(in, {true, false}));
          e = b.op(op, r, a, y);
        } else {
          e = b.op(op, r, a);
        }
        b.store(b.out(r, {true, true}), e);
        try_add(std::move(b.k), op, in, r);
      }
    }
  }
  return out;
}

}  // namespace kiln::cuda::testing
