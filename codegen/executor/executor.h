// The executor: runs an ir::Graph as a schedule of steps. A step is one node
// run by its eager kernel, or (with fusion) one or more fused kernels — several
// independent launches of the same kernel become one multi-tensor launch.
// Every step shares the bookkeeping: symbol binding, random-offset rebasing,
// freeing each buffer after its last use, in-place reuse of dying buffers by
// pointwise kernels, matmuls computed straight into a later cat's or reshape's
// buffer (placement.h), peak memory, and callbacks as soon as an output exists.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "executor/device_graph.h"
#include "executor/slot.h"
#include "kiln/compile.h"
#include "kiln/ir/graph.h"
#include "kiln/passes/fuse.h"

namespace kiln {

namespace detail {
struct Placement;
}
struct PeakReport;

/// Figures of one run.
struct RunStats {
  /// Most bytes of intermediate/output buffers alive at once (not the inputs';
  /// an output written into a destination counts its own bytes).
  int64_t peak_bytes = 0;
  int64_t nodes_run = 0;        ///< graph nodes computed (a fused kernel counts its nodes)
  int64_t kernels_run = 0;      ///< fused kernel instances run
  int64_t kernel_launches = 0;  ///< thread-pool launches of fused kernels (batched ones count once)
  int64_t in_place = 0;         ///< kernel outputs written over a dying input buffer
  int64_t placed = 0;           ///< matmul outputs written into a later cat's/reshape's buffer
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
  /// Optional, one per graph output: a tensor the output will be copied into
  /// after the run (captured state). When that tensor is also a graph input
  /// whose last reader is the pointwise kernel computing the output, the kernel
  /// writes straight into it (an optimizer update in place); the returned
  /// output then shares the destination's storage.
  std::span<const Tensor> dests;
};

/// How fused kernels run (see kernels/kernel_cache.h).
enum class KernelBackend : uint8_t {
  kAuto,         ///< machine code from the LLVM JIT when kiln has it, else the interpreter
  kInterpreter,  ///< always the kernel IR interpreter (slow; tests, debugging)
};

/// How an Executor runs its graph.
struct ExecutorOptions {
  bool fuse = false;  ///< run fusion groups as generated kernels (compile() turns it on)
  passes::FusionOptions fusion = {};
  KernelBackend kernels = KernelBackend::kAuto;  ///< how fused kernels run
  bool in_place = true;     ///< pointwise kernels may overwrite a dying input of their size
  bool horizontal = true;   ///< batch independent launches of one kernel into one launch
  bool reassociate = true;  ///< see CompileOptions::reassociate
  /// On a device (CUDA), a matmul whose output only a bias add (+ relu) group
  /// reads runs as one GEMM with that epilogue (executor/gemm_epilogue.h).
  bool gemm_epilogues = true;
  /// Where the graph runs: every input lives there (CPU scalars excepted);
  /// fused kernels come from that device's backend (CUDA: printed, NVRTC).
  Device device = Device::cpu();
  /// What the graph is, in profiler peak reports ("forward of step").
  std::string name = "graph";
  /// false: the graph is known valid (a plan cache entry whose checksum
  /// matched, written from a verified graph): skip ir::verify unless KILN_VERIFY=1.
  bool verify = true;
  /// Optional, from a plan cache entry: Executor::kernel_ids() of an executor
  /// of this graph and fusion plan. Only each kernel's first group is then
  /// lowered; the others take its kernel with their own arguments and sizes
  /// (their ops, dtypes and layouts are checked; under KILN_VERIFY=1 every
  /// group is lowered and compared). A mismatch raises kiln::Error.
  std::shared_ptr<const std::vector<size_t>> kernel_ids = nullptr;
};

/// A prepared graph (schedule, kernels, last uses and symbol bindings
/// precomputed). Thread-compatible: run() is const and may be called from
/// several threads at once.
class Executor {
 public:
  explicit Executor(std::shared_ptr<const ir::Graph> graph, ExecutorOptions opts = {});
  /// Runs the graph. Inputs must match the graph's dtypes and (evaluated) shapes;
  /// a mismatch raises kiln::Error naming the input.
  std::vector<Tensor> run(const RunArgs& args) const;
  /// Symbol values implied by the inputs' shapes (empty for static graphs).
  std::vector<int64_t> bind_symbols(std::span<const Tensor> inputs) const;
  const ir::Graph& graph() const { return *graph_; }
  /// Graph node (position) that produces output i, or -1 for inputs.
  int producer_of_output(size_t i) const;
  /// The fusion plan the schedule runs (no groups without fusion).
  const passes::FusionPlan& fusion_plan() const { return plan_; }
  /// Number of fused kernels (group instances) in the schedule.
  size_t num_kernels() const;
  /// Per fusion group, the number of its compiled kernel, numbered by first
  /// use: groups with one number lower to the same kernel.
  std::vector<size_t> kernel_ids() const;
  /// Number of steps; a batch of launches of one kernel is one step.
  size_t num_steps() const;
  /// The schedule as text: one line per step ("kernel fused_exp_sum ... [groups 0, 3]").
  std::string schedule_text() const;
  /// The kernel IR of every fused kernel, in group order (kir::to_string).
  std::string kernels_text() const;

 private:
  struct Step;
  struct Group;
  struct Destinations;
  class Run;          // one call of run() (executor_run.cpp)
  class SlotByValue;  // executor_schedule.cpp
  void build_schedule();
  // build_schedule's steps (executor_schedule.cpp).
  SlotByValue assign_slots();
  size_t compile_kernels(const SlotByValue& slot_of);
  std::vector<Group> lower_groups(size_t& num_kernels) const;
  std::vector<std::vector<size_t>> order_units() const;
  void make_steps(const std::vector<std::vector<size_t>>& order, const SlotByValue& slot_of);
  void fold_gemm_epilogues(const SlotByValue& slot_of);
  void plan_last_uses(const SlotByValue& slot_of);
  void precompute_static_shapes(const SlotByValue& slot_of);
  Destinations destinations(const RunArgs& args) const;
  void lend_to_collective_inputs(Destinations& r) const;  // part of destinations()
  // Fills `r` with the buffers alive after `step` (a new peak of `bytes`).
  void note_peak(PeakReport& r, size_t step, const detail::SlotVec<Tensor>& slots, int64_t bytes,
                 const std::function<bool(const Tensor&)>& counts) const;
  std::shared_ptr<const ir::Graph> graph_;
  ExecutorOptions opts_;
  passes::FusionPlan plan_;
  std::vector<Group> groups_;
  std::vector<Step> steps_;
  std::vector<size_t> collective_waits_;         // the steps running a collective_wait
  std::vector<detail::Placement> placements_;    // see placement.h
  std::vector<std::pair<int, int>> sym_source_;  // symbol -> (input, dim)
  std::vector<detail::Slot> output_slots_;       // graph output -> its slot
  std::vector<int> output_producer_;             // graph output -> producing node's position, or -1
  std::vector<std::vector<size_t>> outputs_at_step_;      // step -> graph outputs made there
  detail::SlotVec<bool> is_input_slot_;                   // graph inputs are slots [0, inputs)
  detail::SlotVec<std::vector<size_t>> outputs_of_slot_;  // slot -> graph outputs it is
  // Graph input (by its slot) -> last step reading an unfused view of it.
  detail::SlotVec<int> input_alias_until_;
  detail::SlotVec<Dims> static_shape_;    // slot -> its value's shape, for a graph without symbols
  detail::SlotVec<int> dying_input_at_;   // slot -> the step listing it in dying_inputs, or -1
  detail::SlotVec<int> overwritable_at_;  // slot -> the step listing it in overwritable, or -1
  detail::Slot num_slots_{0};
  mutable detail::DeviceGraphSlot device_graph_;  // a captured device graph (device_graph.h)

 public:
  ~Executor();
  Executor(Executor&&) noexcept;
};

}  // namespace kiln
