// The GEMM epilogue rule (gemm_epilogue.h).
#include "executor/gemm_epilogue.h"

#include <algorithm>

namespace kiln::detail {

std::optional<GemmEpilogueMatch> match_gemm_epilogue(const passes::FusionGroup& grp,
                                                     const ir::Graph& g) {
  if (grp.kind != passes::GroupKind::kEpilogue || !grp.column_sums.empty() ||
      grp.outputs.size() != 1 || grp.nodes.empty() || grp.nodes.size() > 2)
    return std::nullopt;
  const ir::Node* add = grp.nodes[0];
  const ir::Node* relu = grp.nodes.size() == 2 ? grp.nodes[1] : nullptr;
  if (!add->is_op(OpId::add) || add->inputs.size() != 2) return std::nullopt;
  if (relu && (!relu->is_op(OpId::relu) || relu->inputs[0] != add->output())) return std::nullopt;
  if (grp.outputs[0] != (relu ? relu : add)->output()) return std::nullopt;
  const auto& outs = g.outputs();
  for (int k = 0; k < 2; ++k) {
    const ir::Value* prod = add->inputs[static_cast<size_t>(k)];
    const ir::Value* bias = add->inputs[static_cast<size_t>(1 - k)];
    const ir::Node* mm = prod->producer;
    if (!mm || !mm->is_op(OpId::matmul) || prod->users.size() != 1 ||
        std::find(outs.begin(), outs.end(), prod) != outs.end())
      continue;
    const DType dt = prod->dtype;
    if (!(dt == DType::f32 || dt == DType::f64 || dt == DType::f16 || dt == DType::bf16) ||
        bias->dtype != dt || add->output()->dtype != dt || bias->shape.size() != 1 ||
        prod->shape.empty() || add->output()->shape != prod->shape)
      continue;
    if (!(bias->shape[0] == prod->shape.back() || bias->shape[0] == ir::SymInt(1))) continue;
    return GemmEpilogueMatch{mm, bias, relu != nullptr};
  }
  return std::nullopt;
}

}  // namespace kiln::detail
