// Internal: lowering one fusion group (passes/fuse.h) to kernel IR, with the
// binding the executor needs (which graph value each kernel argument is, how
// to compute the run-time sizes, which outputs may overwrite an input).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "kernels/kernel_ir.h"
#include "kiln/passes/fuse.h"

namespace kiln::detail {

/// A fusion group as a kernel.
struct LoweredGroup {
  kir::Kernel kernel;
  /// The graph value of each kernel argument: the group's inputs, then its outputs.
  std::vector<const ir::Value*> args;
  size_t num_inputs = 0;
  /// Per kernel dim: the sizes whose product is its run-time size.
  std::vector<std::vector<ir::SymInt>> dims;
  /// Per output (k-th output = arg num_inputs + k): input args it may be written
  /// over in place (pointwise kernels only; same dtype, dense everywhere, and
  /// read by the stored value, so each element is loaded before it is stored).
  std::vector<std::vector<int>> in_place;
  /// Per output: 1 if it is a column sum, whose kernel argument holds f64
  /// partials (one row per launch block) the executor adds up into the value.
  std::vector<char> column_sum;
};

/// Lowers `g`. Every node's scalar semantics follow its eager kernel: operands
/// are cast to the dtype the op computes in, then the op applies. `reassociate`
/// lets reductions run in vector lanes (kir::Kernel::reassoc).
LoweredGroup lower(const passes::FusionGroup& g, bool reassociate);

/// The kernel's run-time sizes for the given symbol values.
std::vector<int64_t> kernel_sizes(const LoweredGroup& lg, std::span<const int64_t> syms);

}  // namespace kiln::detail
