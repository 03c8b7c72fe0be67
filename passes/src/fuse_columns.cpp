// Fusion rule 9 (fuse.cpp, top): column sums (bias and layer-norm weight
// gradients) attached to the group that computes or reads the summed value.
#include <algorithm>

#include "fuse_internal.h"

namespace kiln::passes::detail {
namespace {

using ir::Node;
using ir::SymInt;
using ir::Value;

// The graph's positions and outputs, as the planner's context has them.
struct Ctx {
  const ir::Graph& g;
  const std::vector<char>& output_flag;
  int at(const Node* n) const { return static_cast<int>(g.position(n)); }
  bool is_output(const Value* v) const { return output_flag[static_cast<size_t>(v->id())] != 0; }
};

}  // namespace

bool attach_sum(FusionGroup& grp, const Node* n) {
  const Value* v = n->inputs[0];
  const auto out = std::find(grp.outputs.begin(), grp.outputs.end(), v);
  const bool produced = out != grp.outputs.end();
  const auto in = std::find(grp.inputs.begin(), grp.inputs.end(), v);
  if (!produced && in == grp.inputs.end()) return false;
  const std::vector<bool>& dense =
      produced ? grp.out_dense[static_cast<size_t>(out - grp.outputs.begin())]
               : grp.in_dense[static_cast<size_t>(in - grp.inputs.begin())];
  for (bool d : dense)
    if (!d) return false;
  // v's buffer is the iteration space: its non-unit dims are the groups' sizes in order.
  std::vector<SymInt> flat;
  for (const auto& d : grp.dims) flat.insert(flat.end(), d.begin(), d.end());
  if (non_unit(v->shape) != flat) return false;
  // The sum reduces a leading run of those dims and keeps the rest.
  const std::vector<int64_t> ds = reduced_dims(*n);
  size_t p = 0, seen = 0;
  for (int64_t k = 0; k < v->rank(); ++k) {
    if (is_unit(v->shape[static_cast<size_t>(k)])) continue;
    if (std::binary_search(ds.begin(), ds.end(), k)) {
      if (p != seen) return false;
      ++p;
    }
    ++seen;
  }
  if (p == 0 || p == flat.size()) return false;
  size_t d = 0, acc = 0;
  while (acc + grp.dims[d].size() <= p) acc += grp.dims[d++].size();
  // The kept dims must end up as the one inner dim (a split adds a dim before it).
  if (d + 1 != grp.dims.size()) return false;
  if (acc < p) {
    // The rows end inside kernel dim d: split it (pointwise groups only; a row
    // kernel's inner dim is what its reductions reduce; the sums already
    // there keep every dim but the last as rows).
    if (grp.reduces() || !grp.column_sums.empty()) return false;
    const auto cut = static_cast<std::ptrdiff_t>(p - acc);
    std::vector<SymInt> tail(grp.dims[d].begin() + cut, grp.dims[d].end());
    grp.dims[d].resize(static_cast<size_t>(cut));
    grp.dims.insert(grp.dims.begin() + static_cast<std::ptrdiff_t>(d) + 1, std::move(tail));
    for (auto* pats : {&grp.in_dense, &grp.out_dense})
      for (auto& pat : *pats)
        pat.insert(pat.begin() + static_cast<std::ptrdiff_t>(d) + 1, bool(pat[d]));
  }
  grp.column_sums.push_back(n);
  grp.outputs.push_back(n->output());
  std::vector<bool> pat(grp.dims.size(), false);
  pat.back() = true;
  grp.out_dense.push_back(std::move(pat));
  return true;
}

namespace {

// Rule 9's test and attach: sum node n over v joins group gi, which computes
// v (an output) or reads it (an input), densely over its whole space.
bool attach_to(const Ctx& ctx, FusionPlan& plan, const Node* n, int gi) {
  FusionGroup& grp = plan.groups[static_cast<size_t>(gi)];
  if (!attach_sum(grp, n)) return false;
  plan.group_of[static_cast<size_t>(ctx.at(n))] = gi;
  const Value* v = n->inputs[0];
  if (std::find(grp.inputs.begin(), grp.inputs.end(), v) != grp.inputs.end()) return true;
  // Stored only if something else still reads it.
  bool read = ctx.is_output(v);
  for (const Node* u : v->users) read = read || plan.group_of[static_cast<size_t>(ctx.at(u))] != gi;
  if (!read) {
    const auto k = static_cast<size_t>(std::find(grp.outputs.begin(), grp.outputs.end(), v) -
                                       grp.outputs.begin());
    grp.outputs.erase(grp.outputs.begin() + static_cast<std::ptrdiff_t>(k));
    grp.out_dense.erase(grp.out_dense.begin() + static_cast<std::ptrdiff_t>(k));
  }
  return true;
}

// True if a path leads from n's output into group gi (through unfused nodes
// and whole groups): n joining gi would then make the groups cyclic (rule 5).
bool leads_into(const Ctx& ctx, const FusionPlan& plan, const Node* n, int gi) {
  std::vector<char> seen_node(plan.group_of.size(), 0), seen_group(plan.groups.size(), 0);
  std::vector<const Value*> stack;
  auto push = [&](const auto& values) {
    for (const Value* v : values) stack.push_back(v);
  };
  push(n->outputs);
  while (!stack.empty()) {
    const Value* v = stack.back();
    stack.pop_back();
    for (const Node* u : v->users) {
      const auto at = static_cast<size_t>(ctx.at(u));
      const int gu = plan.group_of[at];
      if (gu == gi) return true;
      if (gu < 0) {
        if (!seen_node[at]++) push(u->outputs);
      } else if (!seen_group[static_cast<size_t>(gu)]++) {
        push(plan.groups[static_cast<size_t>(gu)].outputs);
      }
    }
  }
  return false;
}

// Rule 9 for one unfused sum node; true if it joined its producer's group or
// (9b) a group that reads the summed value.
}  // namespace

bool column_sum_candidate(const Node* n) {
  const Value* v = n->inputs[0];
  return n->is_op(OpId::sum) && is_floating(v->dtype) && !half_precision(v->dtype) &&
         n->output()->dtype == v->dtype;
}

bool attach_column_sum(const ir::Graph& g, const std::vector<char>& output_flag, FusionPlan& plan,
                       const Node* n) {
  const Ctx ctx{g, output_flag};
  const Value* v = n->inputs[0];
  if (!column_sum_candidate(n)) return false;
  const int gp = v->producer ? plan.group_of[static_cast<size_t>(ctx.at(v->producer))] : -1;
  if (gp >= 0 && attach_to(ctx, plan, n, gp)) return true;
  // 9b: else (v comes from a matmul: a layer-norm bias gradient is the sum of
  // the matmul's dX that the norm's backward reads) the sum joins a reader,
  // which loads every element anyway, instead of reading v once more alone.
  // Preferred: a kernel that has column sums already (its launch form does
  // not change), then one without reductions (a row kernel with column sums
  // gives up the GPU's warp rows), then the earliest. Not a recomputation
  // (rule 11 keeps those out of other kernels).
  if (n->attrs.has("recompute")) return false;
  std::vector<int> readers;
  for (const Node* u : v->users) {
    const int gu = plan.group_of[static_cast<size_t>(ctx.at(u))];
    if (gu >= 0 && std::find(readers.begin(), readers.end(), gu) == readers.end())
      readers.push_back(gu);
  }
  auto rank = [&](int gi) {
    const FusionGroup& grp = plan.groups[static_cast<size_t>(gi)];
    return grp.column_sums.empty() ? (grp.reduces() ? 2 : 1) : 0;
  };
  std::stable_sort(readers.begin(), readers.end(), [&](int a, int b) { return rank(a) < rank(b); });
  for (int gi : readers)
    if (!leads_into(ctx, plan, n, gi) && attach_to(ctx, plan, n, gi)) return true;
  return false;
}

}  // namespace kiln::passes::detail
