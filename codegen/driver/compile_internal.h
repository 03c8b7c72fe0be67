// Plans of compiled functions and the steps of the compile() driver
// (internal to codegen/).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "executor/executor.h"
#include "kiln/compile.h"
#include "kiln/ir/generalize.h"
#include "kiln/ir/tracer.h"

namespace kiln::detail {

/// A tensor argument's guarded signature.
struct ArgSig {
  DType dtype = DType::f32;
  ir::SymShape shape;  ///< symbolic dims accept any size consistent with the others
  bool requires_grad = false;
  bool wrapped_number = false;  ///< promotes like a C++ number
  bool grad_defined = false;    ///< its .grad was defined (backward inside accumulates)
  Device device;                ///< where it lives (a plan runs on one device)
};

/// A concrete trace kept to generalize dynamic dims from (see Plan::evidence).
struct DynTrace {
  std::shared_ptr<const ir::Graph> raw;
  std::vector<int64_t> sizes;  ///< the size of each CompileOptions::dynamic entry
  uint64_t structure = 0;      ///< hash of the op sequence
};

/// A differentiable input of a compiled forward: an argument or a capture.
struct DiffInput {
  bool is_arg = true;
  int index = 0;
};

/// One compiled signature.
struct Plan {
  int id = 0;
  uint64_t last_used = 0;  ///< the call count when it last served a call (plan limit's LRU)
  // ---- guards ----
  std::vector<ArgSig> args;
  std::vector<double> statics;
  bool grad_mode = true;
  /// Memory shared between arguments: alias[i] = j < i when arguments i and j
  /// are the same tensor (traced as one stand-in), else -1; overlap[i] when
  /// argument i shares memory with another argument without being it.
  std::vector<int> arg_alias;
  std::vector<char> arg_overlap;
  /// Per argument: it shares memory with a captured tensor (set after the trace).
  std::vector<char> arg_shares_capture;
  int num_syms = 0;
  /// Where the graphs run: the arguments' device, else the captured tensors'.
  Device device;
  bool eager = false;  ///< fallback: this signature runs the plain function
  // ---- bindings from the trace ----
  std::vector<ir::InputBinding> inputs;    ///< of the forward graph
  std::vector<ir::OutputBinding> outputs;  ///< of the forward graph (without saved values)
  std::vector<ir::Capture> captures;
  std::vector<TensorImpl*> cap_raw;      ///< valid while the weak_ptr is alive
  std::vector<uint32_t> frozen_version;  ///< freeze: storage version of each capture (or ~0)
  std::vector<std::function<double()>> hosts;
  std::vector<std::function<std::string()>> guards;  ///< "" while each holds
  std::vector<int> cleared_grads;
  std::vector<std::weak_ptr<TensorImpl>> escaped;  ///< see ir::TraceResult::escaped
  bool uses_rng = false;
  std::vector<double> out_spec;
  size_t num_results = 0;
  std::vector<uint8_t> result_is_input;  ///< see ir::TraceResult::result_is_input
  // ---- graphs and executables ----
  std::shared_ptr<ir::Graph> graph;  ///< optimized forward (or whole) graph
  /// The trace a plan loaded from the disk plan cache was found by: freed with
  /// the plan, not on the first call (a deep model's graph takes ~30 ms to free).
  std::shared_ptr<const ir::Graph> traced_graph;
  std::unique_ptr<Executor> exec;
  int64_t predicted_peak = 0;  ///< of `exec`'s schedule (passes/remat.h)
  int64_t remat_before = 0;    ///< the remat pass's node-order model, before / after it ran
  int64_t remat_after = 0;
  bool budget_met = true;  ///< CompileOptions::memory_budget was reached
  std::string remat_log;   ///< the remat pass's decisions (KILN_DUMP)
  // ---- differentiable compiled forward ----
  std::vector<DiffInput> diff_inputs;
  std::vector<int> result_grad;  ///< results that take a gradient
  /// Results that require grad although the function already ran backward
  /// through them: a backward through them raises, as in eager.
  std::vector<int> released_results;
  std::shared_ptr<ir::Graph> bwd_graph;
  std::shared_ptr<Executor> bwd_exec;
  size_t num_fwd_outputs = 0;        ///< forward outputs before the saved values
  std::vector<int> bwd_output_diff;  ///< backward output k -> diff input number
  std::vector<int> bwd_grad_result;  ///< backward gradient input k -> result number
  // ---- dynamic dims ----
  std::vector<DynTrace> evidence;             ///< this plan's traces (newest first)
  std::shared_ptr<const ir::Graph> symbolic;  ///< the generalized graph of a symbolic plan
  /// Symbol values at which `symbolic`'s shape rules held / failed (and why): a cache.
  mutable std::vector<std::vector<int64_t>> sizes_ok;
  mutable std::vector<std::pair<std::vector<int64_t>, std::string>> sizes_bad;
};

/// What one run produced.
struct RunResult {
  std::vector<Tensor> results;
  int64_t peak_bytes = 0;
  RunStats stats;  ///< of the forward (or whole) graph's executor
};

/// Captured state (data and .grad) at one point, for KILN_CHECK_COMPILED.
struct Snapshot {
  std::vector<Tensor> data;
  std::vector<Tensor> grads;
  std::vector<Tensor> args;  ///< arguments the plan writes (kArgWrite), by output order
};

/// Memory relations between the arguments (see Plan::arg_alias, arg_overlap).
void arg_memory(const std::vector<Tensor>& args, std::vector<int>& alias,
                std::vector<char>& overlap);
/// Fills the argument/static/grad-mode part of a plan's signature.
void fill_signature(Plan& p, const std::vector<Tensor>& args, const std::vector<double>& statics,
                    const CompileOptions& opts);
/// Moves the trace's bindings into the plan.
void take_trace(Plan& p, ir::TraceResult&& r);
/// Records which arguments share memory with captured tensors (after take_trace).
void note_capture_sharing(Plan& p, const std::vector<Tensor>& args);
/// "" if the traced plan may run compiled, else why not: it writes a tensor
/// that shares memory with an argument it is not (two overlapping views passed
/// as arguments, or an argument that is also captured state). Such aliasing is
/// what eager sees through; the traced graph would treat them as independent.
std::string aliasing_conflict(const Plan& p, const std::vector<Tensor>& args);
/// True if every guard of `p` holds for this call; else `why` (if given) names
/// the failed one and `depth` how far the checks got (the deepest miss over
/// several plans is the most specific reason: "the train flag changed" of a
/// plan whose shapes match, not "dim 0 changed" of one whose do not).
bool guards_pass(const Plan& p, const std::vector<Tensor>& args, const std::vector<double>& statics,
                 std::string* why, int64_t* depth = nullptr);
// ---- dynamic dims (dynamic.cpp) ----
/// Throws a usage error if CompileOptions::dynamic names an argument or dim
/// that this call does not have.
void check_dynamic_options(const CompileOptions& opts, const std::vector<Tensor>& args);
/// True if `b` is `a` traced at other sizes of dynamic dims (of arguments the
/// graph reads) only: the same guards otherwise, the same captured tensors.
bool same_but_dynamic(const Plan& a, const Plan& b, const CompileOptions& opts);
/// Takes the argument guards' symbolic dims from the generalized graph's inputs.
void make_args_symbolic(Plan& p, const ir::Graph& g);
/// What generalize_plans made of a new trace.
struct DynamicResult {
  std::shared_ptr<ir::Graph> graph;  ///< the graph to build the plan from
  bool generalized = false;          ///< graph is symbolic
  std::string why;                   ///< why not (empty if there was nothing to do)
};
/// A new trace `raw` of plan `p` (not yet in `plans`) with the traces of the
/// plans it differs from only in dynamic dims: their symbolic graph when the
/// traces determine it (p's guards made symbolic, the plans it covers removed
/// from `plans`), else `raw`. p keeps the traces for the next attempt.
DynamicResult generalize_plans(Plan& p, const std::shared_ptr<ir::Graph>& raw,
                               const std::vector<Tensor>& args,
                               std::vector<std::shared_ptr<Plan>>& plans,
                               const CompileOptions& opts);
/// True if a symbolic plan's shape rules hold at these symbol values (checked
/// once per size tuple); else `why` says which rule fails.
bool symbolic_sizes_hold(const Plan& p, const std::vector<int64_t>& syms, std::string* why);
/// Where the plan's graphs come from (build_executables).
enum class PlanSource : uint8_t {
  kBuilt,     ///< passes and fusion planning ran (and the disk plan cache was filled)
  kDisk,      ///< loaded from the disk plan cache
  kRejected,  ///< a disk entry was ignored (logged), then built and rewritten
};
/// Freezes, partitions (differentiable plans), optimizes and prepares
/// executors, or loads all that from the disk plan cache (plan_cache.cpp).
/// `traced` is optimized in place when nothing else holds it, else copied.
PlanSource build_executables(Plan& p, std::shared_ptr<ir::Graph> traced,
                             const CompileOptions& opts);
/// The executor options of one of a plan's graphs (`part`: its name in reports).
ExecutorOptions executor_options(const CompileOptions& opts, Device device,
                                 const char* part = "forward");
// ---- the disk plan cache (plan_cache.cpp) ----
/// The key of `p`'s optimized plan: an XXH3-128 (hex) of the traced graph's
/// binary form, its input/output bindings, the options that shape the plan,
/// the device and the kiln build; "" when the cache does not apply (disabled,
/// freeze, KILN_CACHE_DIR=off). Called before the passes, on the traced graph.
std::string plan_cache_key(const Plan& p, const ir::Graph& traced, const CompileOptions& opts);
/// Fills p's graphs, bindings, remat report and executors from the entry for
/// `key`: kDisk on success, kBuilt when there is none, kRejected when one was
/// found but is unusable (nothing of p changed then).
PlanSource load_cached_plan(Plan& p, const std::string& key, const CompileOptions& opts);
/// Writes p's optimized plan under `key` (failures are logged, never raised).
void store_cached_plan(const Plan& p, const std::string& key);
/// Tests: keys as if built by another kiln build `id` ("" = this build).
void set_plan_cache_build_for_testing(const std::string& id);
/// Tests: rewrites the kernel numbers stored with each new entry (a wrong or
/// stale entry whose checksum matches); empty = store them as they are.
void set_plan_cache_kernel_ids_for_testing(std::function<void(std::vector<size_t>&)> hook);
/// Entries the plan cache keeps in its directory; past it the least recently
/// used (oldest modification time; a hit refreshes it) are removed.
inline constexpr size_t kPlanCacheEntries = 256;
/// Runs a plan for one call: host numbers, generator, executor, write-backs, and
/// the autograd node of a differentiable plan. `hosts_out` receives the host numbers.
RunResult run_plan(Plan& p, const std::vector<Tensor>& args, std::vector<double>* hosts_out);
Snapshot snapshot(const Plan& p, const std::vector<Tensor>& args);
void restore(const Plan& p, const std::vector<Tensor>& args, const Snapshot& s);
/// "" if compiled and eager agree within tolerance, else the first difference:
/// which result or captured tensor (by module path when a module holds it),
/// the node computing it, the largest absolute and relative errors. Floats
/// compare within a tolerance scaled by each tensor's (or the arguments')
/// magnitude and by the largest reduction the graph performs (rounding grows
/// with the terms summed).
std::string compare_runs(const Plan& p, const std::vector<Tensor>& compiled,
                         const std::vector<Tensor>& eager, const Snapshot& after_compiled,
                         const Snapshot& after_eager, const std::vector<Tensor>& args);
/// Writes <dir>/<name>.<plan>.<stage>.kir and .dot (nothing if dir is empty).
void dump(const std::string& dir, const std::string& name, int plan, const char* stage,
          const ir::Graph& g);
/// Writes <dir>/<name>.<plan>.remat.txt: predicted peaks, and what the remat pass
/// saves and recomputes (nothing if dir is empty).
void dump_remat(const std::string& dir, const std::string& name, const Plan& p);
/// Writes <dir>/<name>.<plan>.<stage>.fusion.txt: the executor's fusion groups,
/// schedule and kernel IR (nothing if dir is empty).
void dump_kernels(const std::string& dir, const std::string& name, int plan, const char* stage,
                  const Executor& ex);

}  // namespace kiln::detail
