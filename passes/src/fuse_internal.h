// What fuse.cpp shares with fuse_columns.cpp (rule 9) and fuse_gemm_bias.cpp
// (rule 13): node and shape helpers, the column sums' attachment to the
// groups of a plan, and the bias adds' split from theirs.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "kiln/passes/fuse.h"

namespace kiln::passes::detail {

/// A size statically 1.
bool is_unit(const ir::SymInt& s);
bool half_precision(DType t);
/// The non-size-1 dims of a shape, in order.
std::vector<ir::SymInt> non_unit(const ir::SymShape& s);
/// sum, max or min.
bool is_value_reduction(const ir::Node& n);
/// The reduced dims of a reduction node (attribute `dims`, empty = all), normalized.
std::vector<int64_t> reduced_dims(const ir::Node& n);
bool keepdim(const ir::Node& n);

/// Rule 9's test and attach on one group: sum node n over a value grp
/// computes or reads densely over its whole space becomes a column sum of grp
/// (its dims split where the rows end, if needed); false (grp unchanged) if not.
bool attach_sum(FusionGroup& grp, const ir::Node* n);
/// A sum rule 9 may attach: floating (not f16/bf16), in its input's dtype.
bool column_sum_candidate(const ir::Node* n);

/// Rule 9 for one unfused sum node n of g: true if it joined its producer's
/// group or (9b) a group that reads the summed value. `output_flag` marks the
/// graph outputs by value id.
bool attach_column_sum(const ir::Graph& g, const std::vector<char>& output_flag, FusionPlan& plan,
                       const ir::Node* n);

/// Rule 13 over the planner's groups (node lists in order): a group that
/// begins with a matmul's bias add (the GEMM bias epilogue's form) whose sum
/// it stores (a graph output, or read outside the group) gives the add its
/// own group, when both parts are `valid` groups: the GEMM then writes the
/// sum, and the rest reads it, instead of the GEMM writing the product and
/// the kernel reading it back and writing the sum.
void split_gemm_biases(const std::vector<char>& output_flag,
                       std::vector<std::vector<const ir::Node*>>& groups,
                       const std::function<bool(const std::vector<const ir::Node*>&)>& valid);

}  // namespace kiln::passes::detail
