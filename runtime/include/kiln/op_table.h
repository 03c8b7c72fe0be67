// The op table, derived from ops.def: OpId, traits and each primitive's rules.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kiln/attrs.h"
#include "kiln/tensor.h"

namespace kiln {

/// Identifier of a primitive, one per line of ops.def.
enum class OpId : uint16_t {
#define KILN_OP(name, family, arity, traits) name,
#include "kiln/ops.def"
#undef KILN_OP
};

/// Number of primitives.
inline constexpr int kNumOps = 0
#define KILN_OP(name, family, arity, traits) +1
#include "kiln/ops.def"
#undef KILN_OP
    ;

/// Op traits, queried by dispatch, autograd, the passes and the backends.
enum OpTrait : uint32_t {
  kElementwise = 1u << 0,
  kReduction = 1u << 1,
  kMovement = 1u << 2,
  kView = 1u << 3,     ///< eager result may alias the input's storage
  kOpaque = 1u << 4,   ///< BLAS/conv: not fused
  kFactory = 1u << 5,  ///< no tensor inputs
  kRandom = 1u << 6,
  kCommutative = 1u << 7,
  kNonDiff = 1u << 8,     ///< not differentiable: outputs never require grad
  kCollective = 1u << 9,  ///< side effects on other ranks: never folded, merged or fused
  kFloatMath = 1u << 10,  ///< computes in floating point: integer inputs give the default float
  kCostly = 1u << 11,     ///< tens of instructions per element (approximations, division)
  kCopies = 1u << 12,     ///< kernel only fills and copies into its outputs: runs on any device
  kPredicate = 1u << 13,  ///< bool result computed in the operands' promoted dtype
};

/// Shape and dtype of one op output.
struct TensorMeta {
  DType dtype = DType::f32;
  Dims shape;
};

/// What a derivative rule sees. Inputs/outputs the op did not ask to save are
/// undefined tensors; in_meta always has every input's dtype and shape.
struct VjpArgs {
  std::span<const Tensor> inputs;
  std::span<const Tensor> outputs;
  std::span<const Tensor> grads;  ///< one per output; undefined means zero
  std::span<const TensorMeta> in_meta;
  const Attrs& attrs;
  uint32_t needs_grad = ~0u;  ///< bit i: input i's gradient is used (rules may skip others)
  bool needs(size_t i) const { return i >= 32 || ((needs_grad >> i) & 1u); }
};

/// Shape/dtype rule: validates arguments (throwing kiln::Error) and fills `out`.
using InferFn = void (*)(std::span<const Tensor> in, const Attrs& attrs,
                         std::vector<TensorMeta>& out);
/// Eager CPU kernel: reads `in`, writes the preallocated `out` (view ops
/// instead assign aliases to the undefined `out` entries).
using KernelFn = void (*)(std::span<const Tensor> in, const Attrs& attrs, std::span<Tensor> out);
/// Derivative rule written with Tensor ops: one gradient per input (undefined = zero).
/// The engine sums a gradient over broadcast dims and casts it to the input dtype.
using VjpFn = void (*)(const VjpArgs& args, std::vector<Tensor>& grad_inputs);

/// Which tensors the derivative rule needs saved.
enum SaveFlags : uint8_t { kSaveNone = 0, kSaveInputs = 1, kSaveOutputs = 2 };

/// Everything kiln knows about one primitive.
struct OpInfo {
  const char* name = nullptr;
  const char* family = nullptr;
  int arity = 0;  ///< number of tensor inputs, -1 = variadic
  uint32_t traits = 0;
  InferFn infer = nullptr;
  KernelFn kernel = nullptr;
  VjpFn vjp = nullptr;  ///< null iff the op has kNonDiff
  uint8_t saves = kSaveInputs | kSaveOutputs;
  /// Inputs that gradients never flow to (index tensors, masks), as a bitmask.
  uint32_t nondiff_inputs = 0;
  /// Inputs the rule reads only for the OTHER inputs' gradients (mul's a is
  /// needed only for b's gradient): saved only when another input needs grad,
  /// so an in-place write to them is not a false "modified" error.
  uint32_t save_only_for_others = 0;

  bool has(OpTrait t) const { return (traits & t) != 0; }
  /// Input i never receives a gradient (variadic inputs past 31 always may).
  bool nondiff_input(size_t i) const { return i < 32 && ((nondiff_inputs >> i) & 1u); }
  /// Input i is saved only for the other inputs' gradients.
  bool saved_only_for_others(size_t i) const {
    return i < 32 && ((save_only_for_others >> i) & 1u);
  }
};

/// The table entry of an op.
const OpInfo& op_info(OpId id);
/// Name of an op ("add").
inline const char* op_name(OpId id) {
  return op_info(id).name;
}
/// Looks an op up by name; returns false if there is none.
bool op_from_name(const char* name, OpId& out);

}  // namespace kiln
