// The executor: runs an ir::Graph. This is the interpreter backend — each node
// runs its eager kernel — with the bookkeeping every backend shares: symbol
// binding, random-offset rebasing, freeing each buffer after its last use, peak
// memory, and callbacks as soon as a chosen output exists.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "kiln/ir/graph.h"

namespace kiln {

/// Figures of one run.
struct RunStats {
  int64_t peak_bytes = 0;  ///< most bytes of intermediate/output buffers alive at once
  int64_t nodes_run = 0;
};

/// Called with (graph output index, value) as soon as that output is computed.
using OutputReadyFn = std::function<void(size_t, const Tensor&)>;

/// Arguments of one run.
struct RunArgs {
  std::span<const Tensor> inputs;  ///< one real tensor per graph input
  uint64_t rng_seed = 0;           ///< generator seed for random nodes
  uint64_t rng_base = 0;           ///< generator offset their relative offsets start at
  /// Symbol values; empty = bind them from the inputs' shapes.
  std::span<const int64_t> syms;
  const OutputReadyFn* on_ready = nullptr;
  RunStats* stats = nullptr;
};

/// A prepared graph (last uses and symbol bindings precomputed). Thread-compatible:
/// run() is const and may be called from several threads at once.
class Executor {
 public:
  explicit Executor(std::shared_ptr<const ir::Graph> graph);
  /// Runs the graph. Inputs must match the graph's dtypes and (evaluated) shapes;
  /// a mismatch raises kiln::Error naming the input.
  std::vector<Tensor> run(const RunArgs& args) const;
  /// Symbol values implied by the inputs' shapes (empty for static graphs).
  std::vector<int64_t> bind_symbols(std::span<const Tensor> inputs) const;
  const ir::Graph& graph() const { return *graph_; }
  /// Graph node (position) that produces output i, or -1 for inputs.
  int producer_of_output(size_t i) const;

 private:
  struct Step;
  std::shared_ptr<const ir::Graph> graph_;
  std::vector<Step> steps_;
  std::vector<std::pair<int, int>> sym_source_;  // symbol -> (input, dim)
  std::vector<int> output_slots_;
  std::vector<std::vector<size_t>> outputs_at_step_;  // step -> graph outputs made there
  int num_slots_ = 0;

 public:
  ~Executor();
  Executor(Executor&&) noexcept;
};

}  // namespace kiln
