// Fusion: an analysis that partitions a graph's nodes into groups, each of
// which codegen lowers to one kernel (codegen/kernels/lower.cpp) over one dense
// iteration space. The graph itself is not changed. The decision rules are at
// the top of passes/src/fuse.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/ir/graph.h"

namespace kiln::passes {

struct FusionPlan;

/// Switches of plan_fusion.
struct FusionOptions {
  bool enabled = true;       ///< false: no groups (everything runs unfused)
  bool reductions = true;    ///< fuse sum/max/min over trailing dims into groups
  int max_group_nodes = 96;  ///< bound on one kernel's size (compile time)
  /// Bound on the positions between a group's first and last node (rule 10).
  int max_group_span = 384;
  bool column_sums = true;  ///< sums over every row dim join their producer's kernel
  /// Groups reading one value densely merge (rule 12); KILN_DISABLE_PASSES=fuse_siblings: off.
  bool siblings = true;
  /// A matmul's bias add whose sum a group stores runs alone, for the
  /// executor's GEMM bias epilogue (rule 13; CUDA plans set it);
  /// KILN_DISABLE_PASSES=fuse_gemm_bias: off.
  bool gemm_bias = false;
  /// A plan made before for this very graph and these switches (codegen's plan
  /// cache): plan_fusion returns a copy of it instead of planning again.
  std::shared_ptr<const FusionPlan> precomputed = nullptr;
};

/// What a group becomes.
enum class GroupKind : uint8_t {
  kPointwise,  ///< one loop over the iteration space
  kReduction,  ///< per row: reductions over the inner dim, then the stores
  kEpilogue,   ///< pointwise, reading the output of a matmul/conv (bias, activation...)
};

/// One fused group and its iteration space after coalescing: `dims[d]` lists
/// the sizes whose product is dim d's size (empty = 1). A reduction group
/// reduces its last dim. Every input/output is a contiguous buffer that is
/// dense or broadcast along each dim (the pattern vectors, one bool per dim).
struct FusionGroup {
  GroupKind kind = GroupKind::kPointwise;
  std::vector<const ir::Node*> nodes;     ///< in evaluation order
  std::vector<const ir::Value*> inputs;   ///< read from outside (dedup, first-use order)
  std::vector<const ir::Value*> outputs;  ///< used outside the group or graph outputs
  std::vector<std::vector<ir::SymInt>> dims;
  std::vector<std::vector<bool>> in_dense;   ///< per input, per dim: dense (else broadcast)
  std::vector<std::vector<bool>> out_dense;  ///< per output, per dim
  /// Sums over every row dim of a value the group computes or reads (bias
  /// gradients, rule 9): the kernel adds each element into its column. Their outputs are the
  /// last entries of `outputs`, broadcast along every row dim.
  std::vector<const ir::Node*> column_sums;
  bool reduces() const { return kind == GroupKind::kReduction; }
};

/// The groups of a graph. Nodes in no group run unfused (eager kernels).
struct FusionPlan {
  std::vector<FusionGroup> groups;
  /// Per node position (ir::Graph::position): its group, or -1.
  std::vector<int> group_of;
  /// Per group: the compiled kernel it runs (groups with one id share it),
  /// set by the executor that batches ready instances of a kernel into one
  /// launch; empty: each group runs alone (see unit_steps).
  std::vector<int> kernel;
};

/// The steps `plan` runs in, as the executor schedules it (codegen/executor/
/// executor.cpp, top) and the fused peak model (remat.h) follows: units are
/// the groups (unit gi) and the unfused nodes (unit groups.size() + position),
/// in a topological order that takes the ready unit of earliest first
/// position; with kernel ids, each step also takes the other ready instances
/// of its kernel (not recomputations, nor a kernel with column sums), and a
/// sink (an instance whose outputs are only graph outputs, no gradients, that
/// frees no computed buffer: an optimizer update) waits while other instances
/// of its kernel are not ready. Each step's units in position order.
std::vector<std::vector<size_t>> unit_steps(const ir::Graph& g, const FusionPlan& plan);

/// Partitions `g`'s nodes into fusion groups (see fuse.cpp for the rules).
/// Every group is convex and the groups form a DAG, so they can be scheduled.
FusionPlan plan_fusion(const ir::Graph& g, const FusionOptions& opts = {});

/// The plan as text, values numbered as ir::print numbers them, one line per group:
/// "group 0 reduction [4 | 8]: max %1, sub %2, ... ; in %0 ; out %5".
std::string to_string(const FusionPlan& plan, const ir::Graph& g);

/// Rewrites each f32/f64 sum over dims that end with trailing dims and also
/// reduce an earlier dim before a kept one (BatchNorm's sums over [0, 2, 3])
/// into a sum over the trailing dims, which fuses with its producer as a row
/// reduction, then a sum of that small result (passes/src/fuse_split.cpp).
/// True if it changed the graph.
bool split_channel_sums(ir::Graph& g);

/// Checks that every group is convex, that the groups form a DAG and that each
/// value is produced once; "" if so, else what is wrong (tests, KILN_VERIFY).
std::string check_plan(const FusionPlan& plan, const ir::Graph& g);

}  // namespace kiln::passes
