// Fusion rule 13 (fuse.cpp, top): a matmul's bias add whose sum is stored
// anyway leaves its group for the GEMM's bias epilogue.
#include <algorithm>

#include "fuse_internal.h"

namespace kiln::passes::detail {
namespace {

using ir::Node;
using ir::Value;

// n is add(p, bias) of a matmul's product p that nothing else reads (nor a
// graph output) and a 1-D bias of p's dtype over its last dim (or of 1):
// what the executor's GEMM bias epilogue computes (executor/gemm_epilogue.h).
bool gemm_bias_add(const Node& n, const std::vector<char>& output_flag) {
  if (!n.is_op(OpId::add) || n.inputs.size() != 2) return false;
  for (int k = 0; k < 2; ++k) {
    const Value* p = n.inputs[static_cast<size_t>(k)];
    const Value* bias = n.inputs[static_cast<size_t>(1 - k)];
    if (!p->producer || !p->producer->is_op(OpId::matmul) || p->users.size() != 1 ||
        output_flag[static_cast<size_t>(p->id())] || p->shape.empty())
      continue;
    if (bias->dtype != p->dtype || n.output()->dtype != p->dtype || bias->shape.size() != 1 ||
        n.output()->shape != p->shape)
      continue;
    if (bias->shape[0] == p->shape.back() || bias->shape[0] == ir::SymInt(1)) return true;
  }
  return false;
}

}  // namespace

void split_gemm_biases(const std::vector<char>& output_flag,
                       std::vector<std::vector<const Node*>>& groups,
                       const std::function<bool(const std::vector<const Node*>&)>& valid) {
  const size_t count = groups.size();
  for (size_t gi = 0; gi < count; ++gi) {
    std::vector<const Node*>& nodes = groups[gi];
    if (nodes.size() < 2 || !gemm_bias_add(*nodes.front(), output_flag)) continue;
    const Node* add = nodes.front();
    const Value* sum = add->output();
    const bool stored = output_flag[static_cast<size_t>(sum->id())] ||
                        std::any_of(sum->users.begin(), sum->users.end(), [&](const Node* u) {
                          return std::find(nodes.begin() + 1, nodes.end(), u) == nodes.end();
                        });
    if (!stored) continue;  // the sum lives in the kernel only: folding it saves nothing
    std::vector<const Node*> rest(nodes.begin() + 1, nodes.end());
    if (!valid(rest) || !valid({add})) continue;
    nodes = std::move(rest);
    groups.push_back({add});
  }
}

}  // namespace kiln::passes::detail
