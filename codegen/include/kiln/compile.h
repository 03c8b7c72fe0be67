// kiln::compile: trace a C++ function over tensors into an IR graph, optimize
// it and run it through the executor, keyed by a guarded signature.
// Example:
//   auto step = kiln::compile([&](const Tensor& x, const Tensor& y) {
//     opt.zero_grad();
//     auto loss = kiln::cross_entropy(model->forward(x), y);
//     loss.backward();
//     opt.step();
//     return loss;
//   });
//   for (auto& [x, y] : loader) step(x, y);
//
// Arguments and results may be Tensors, std::vector / std::tuple / std::pair /
// std::array of them (nested), and arithmetic values (guarded by value).
// Tensors the function reaches from its enclosing scope (parameters, buffers,
// optimizer state, .grad) are captured by reference; in-place updates of them
// are written back after every run.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

/// What to do when tracing meets a value-dependent read (item(), printing).
enum class Fallback {
  kError,  ///< raise kiln::Error naming the read and its call site
  kEager,  ///< run this signature eagerly from then on, with one warning
};

/// A dimension that may change between calls without re-tracing for good:
/// tensor argument `arg` (index among the flattened tensor arguments), dim `dim`
/// (both must exist at every call: a usage error otherwise). Traces at other
/// sizes of dynamic dims become one symbolic plan, with one symbol per dynamic
/// dim that varied, once they determine every size-dependent number (reshape
/// targets, mean's 1/n, sizes computed in C++) as a polynomial in those sizes
/// with a trace to spare: a batch change alone usually takes 2 traces, batch
/// and length changed one at a time 3. Numbers that fit no such polynomial
/// keep one plan per size; a size at which the plan's shapes do not hold re-traces.
struct DynamicDim {
  int arg = 0;
  int dim = 0;
};

/// Options of compile().
struct CompileOptions {
  bool enabled = true;  ///< false: run the plain function (as KILN_EAGER=1)
  Fallback fallback = Fallback::kError;
  /// Treat captured tensors that the function does not modify as constants, so
  /// parameter-only subgraphs fold (inference). Re-traces if they are replaced.
  bool freeze = false;
  std::vector<DynamicDim> dynamic = {};  ///< dims allowed to vary (see DynamicDim)
  /// Eager calls of each new signature before it is traced. One warm-up call
  /// creates lazily allocated state (optimizer moments, momentum buffers, .grad)
  /// so the trace sees the steady state, like CUDA-graph capture's warm-up.
  int warmup = 1;
  std::string name = "compiled";           ///< used in logs and dumps
  std::vector<std::string> pipeline = {};  ///< pass names; empty = the standard pipeline
  int recompile_limit = -1;                ///< -1: KILN_RECOMPILE_LIMIT (default 8)
  /// Plans (one per guarded signature, eager ones included) kept at most; past
  /// it the least recently used plan is dropped, with one warning. -1:
  /// KILN_PLAN_LIMIT (default 64).
  int plan_limit = -1;
  /// Fuse elementwise chains, reductions and epilogues into generated kernels
  /// (passes/fuse.h); false (or KILN_DISABLE_PASSES=fuse) runs every node's eager kernel.
  bool fuse = true;
  /// Run fused kernels through the kernel IR interpreter instead of machine code
  /// (slow: for telling a code-generation bug from a fusion bug).
  bool interpret_kernels = false;
  /// Fused reductions may reorder their terms (vector lanes; f32 sums add in
  /// float within 2048-element chunks, eager in double): sums then differ from
  /// eager by rounding, a division by a loop-invariant value may multiply by its
  /// reciprocal (within an ulp), and a max/min over a row holding both +0 and -0
  /// may return either zero. false: eager's order, division and tie rule (slower).
  bool reassociate = true;
  /// Peak bytes of intermediate buffers a compiled call should fit: the remat
  /// pass recomputes values after the predicted peak instead of keeping them,
  /// cheapest per byte saved first (elementwise chains, costly math, then
  /// matmuls) and no more than the budget needs, with a warning naming the
  /// smallest peak it reached when the budget cannot be met. 0: the default
  /// policy (what costs less than it saves, when the peak drops 1%).
  /// remat runs after the standard pipeline; a custom `pipeline` runs it where it lists it.
  int64_t memory_budget = 0;
  /// Keep the optimized plan (the graphs after the passes, their fusion groups,
  /// the remat decisions) on disk next to the kernel cache (KILN_CACHE_DIR),
  /// keyed by a hash of the traced graph, these options and the kiln build: a
  /// new process tracing the same function skips the passes and fusion
  /// planning. Never used with `freeze` (the plan would hold parameter values).
  bool plan_cache = true;
};

/// Counters of a compiled function (tests and benchmarks read them).
struct CompileStats {
  int traces = 0;               ///< successful traces (each builds one plan)
  int eager_calls = 0;          ///< calls run eagerly (warm-up, disabled, fallback)
  int compiled_calls = 0;       ///< calls served by a plan
  int generalized = 0;          ///< plans turned symbolic in a dynamic dim
  int evictions = 0;            ///< plans dropped by the plan limit (least recently used)
  double trace_ms = 0;          ///< total time spent tracing
  double passes_ms = 0;         ///< total time in the pass pipeline and kernel compiles
  int64_t last_peak_bytes = 0;  ///< executor peak memory of the last compiled call (measured)
  /// The last plan's predicted peak: its executor schedule under the model of
  /// passes/remat.h (in-place reuse and placement lower the measured one).
  int64_t predicted_peak_bytes = 0;
  std::string last_miss;             ///< the guard that failed at the last re-trace
  size_t graph_nodes = 0;            ///< nodes of the last optimized graph
  int check_mismatches = 0;          ///< KILN_CHECK_COMPILED calls that differed from eager
  std::string last_check_report;     ///< what the last such mismatch was
  int fused_kernels = 0;             ///< fused kernels in the last plan (forward + backward)
  int64_t last_kernel_launches = 0;  ///< kernel launches of the last compiled call
  int64_t last_in_place = 0;         ///< kernel outputs written over a dying input, last call
  int64_t last_placed =
      0;  ///< matmul outputs written into a later cat's/reshape's buffer, last call
  int plan_cache_hits = 0;  ///< plans loaded from the disk plan cache (CompileOptions::plan_cache)
  /// Disk plan cache entries found but ignored (truncated, corrupt, another
  /// key's, unreadable): each was recomputed and rewritten; KILN_LOG=plan_cache says why.
  int plan_cache_rejected = 0;
};

namespace detail {

// ---- flattening arguments and results ----
template <typename T>
struct is_vector : std::false_type {};
template <typename T, typename A>
struct is_vector<std::vector<T, A>> : std::true_type {};
template <typename T>
struct is_tuple_like : std::false_type {};
template <typename... T>
struct is_tuple_like<std::tuple<T...>> : std::true_type {};
template <typename A, typename B>
struct is_tuple_like<std::pair<A, B>> : std::true_type {};
template <typename T, size_t N>
struct is_tuple_like<std::array<T, N>> : std::true_type {};

template <typename T>
void flatten(const T& x, std::vector<Tensor>& ts, std::vector<double>& statics) {
  using U = std::decay_t<T>;
  if constexpr (std::is_same_v<U, Tensor>) {
    ts.push_back(x);
  } else if constexpr (std::is_arithmetic_v<U>) {
    statics.push_back(static_cast<double>(x));
  } else if constexpr (is_vector<U>::value) {
    statics.push_back(static_cast<double>(x.size()));
    for (const auto& e : x) flatten(e, ts, statics);
  } else if constexpr (is_tuple_like<U>::value) {
    std::apply([&](const auto&... e) { (flatten(e, ts, statics), ...); }, x);
  } else {
    static_assert(!sizeof(U*),
                  "kiln::compile: arguments and results must be Tensors, "
                  "arithmetic values, or vectors/tuples/pairs/arrays of them");
  }
}

// Same structure as x, tensors taken in order from `it`.
template <typename T>
std::decay_t<T> rebuild(const T& x, const Tensor*& it) {
  using U = std::decay_t<T>;
  if constexpr (std::is_same_v<U, Tensor>) {
    return *it++;
  } else if constexpr (std::is_arithmetic_v<U>) {
    return x;
  } else if constexpr (is_vector<U>::value) {
    U r;
    r.reserve(x.size());
    for (const auto& e : x) r.push_back(rebuild(e, it));
    return r;
  } else {
    return std::apply([&](const auto&... e) { return U{rebuild(e, it)...}; }, x);
  }
}

template <typename R, size_t... I>
R unflatten_tuple(const std::vector<Tensor>& ts, size_t& ti, const std::vector<double>& spec,
                  size_t& si, std::index_sequence<I...>);

// Results: vector sizes and arithmetic values go into `spec`.
template <typename R>
R unflatten(const std::vector<Tensor>& ts, size_t& ti, const std::vector<double>& spec,
            size_t& si) {
  if constexpr (std::is_same_v<R, Tensor>) {
    return ts.at(ti++);
  } else if constexpr (std::is_arithmetic_v<R>) {
    return static_cast<R>(spec.at(si++));
  } else if constexpr (is_vector<R>::value) {
    R r;
    const size_t n = static_cast<size_t>(spec.at(si++));
    for (size_t i = 0; i < n; ++i) r.push_back(unflatten<typename R::value_type>(ts, ti, spec, si));
    return r;
  } else {
    return unflatten_tuple<R>(ts, ti, spec, si, std::make_index_sequence<std::tuple_size_v<R>>{});
  }
}
template <typename R, size_t... I>
R unflatten_tuple(const std::vector<Tensor>& ts, size_t& ti, const std::vector<double>& spec,
                  size_t& si, std::index_sequence<I...>) {
  // Braced init evaluates left to right.
  return R{unflatten<std::tuple_element_t<I, R>>(ts, ti, spec, si)...};
}

/// The type-erased core of a compiled function.
class CompiledFunction {
 public:
  /// body(flat tensor args) runs the user's function and returns its flattened
  /// results; `out_spec` receives the result structure (vector sizes, numbers).
  using Body = std::function<std::vector<Tensor>(const std::vector<Tensor>&, std::vector<double>&)>;
  explicit CompiledFunction(CompileOptions opts);
  ~CompiledFunction();
  /// Runs one call: eagerly, from a plan, or by tracing a new plan.
  std::vector<Tensor> call(const std::vector<Tensor>& args, const std::vector<double>& statics,
                           std::vector<double>& out_spec, const Body& body);
  /// True if a plan's guards accept these arguments (nothing runs).
  bool has_plan(const std::vector<Tensor>& args, const std::vector<double>& statics);
  const CompileStats& stats() const;
  const CompileOptions& options() const;
  /// Drops every plan (the next call re-traces).
  void reset();
  /// The optimized graph of the most recent plan as IR text ("" if none).
  std::string last_graph_text() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace detail

/// A compiled function: call it like the original.
template <typename F>
class Compiled {
 public:
  Compiled(F fn, CompileOptions opts)
      : fn_(std::move(fn)), core_(std::make_shared<detail::CompiledFunction>(std::move(opts))) {}

  template <typename... Args>
  auto operator()(const Args&... args) {
    using R = std::invoke_result_t<F&, const Args&...>;
    std::vector<Tensor> flat;
    std::vector<double> statics;
    (detail::flatten(args, flat, statics), ...);
    auto args_tuple = std::forward_as_tuple(args...);
    detail::CompiledFunction::Body body = [&](const std::vector<Tensor>& ts,
                                              std::vector<double>& spec) {
      const Tensor* it = ts.data();
      // Braced initialization evaluates left to right (a function call's arguments do not).
      auto rebuilt = std::apply(
          [&](const auto&... a) {
            return std::tuple<std::decay_t<decltype(a)>...>{detail::rebuild(a, it)...};
          },
          args_tuple);
      std::vector<Tensor> out;
      if constexpr (std::is_void_v<R>) {
        std::apply(fn_, rebuilt);
      } else {
        R r = std::apply(fn_, rebuilt);
        detail::flatten(r, out, spec);
      }
      return out;
    };
    std::vector<double> spec;
    std::vector<Tensor> outs = core_->call(flat, statics, spec, body);
    if constexpr (!std::is_void_v<R>) {
      size_t ti = 0, si = 0;
      return detail::unflatten<std::decay_t<R>>(outs, ti, spec, si);
    }
  }

  /// True if a call with these arguments would run an existing plan (checks the
  /// guards only; nothing runs). Benchmarks use it to time the guard check.
  template <typename... Args>
  bool has_plan(const Args&... args) {
    std::vector<Tensor> flat;
    std::vector<double> statics;
    (detail::flatten(args, flat, statics), ...);
    return core_->has_plan(flat, statics);
  }

  /// Counters (traces, compiled calls, compile time...).
  const CompileStats& stats() const { return core_->stats(); }
  /// Drops every plan.
  void reset() { core_->reset(); }
  /// The optimized graph of the most recent plan as IR text.
  std::string graph_text() const { return core_->last_graph_text(); }

 private:
  F fn_;
  std::shared_ptr<detail::CompiledFunction> core_;
};

/// Compiles `fn` (see the top of this header).
template <typename F>
Compiled<std::decay_t<F>> compile(F&& fn, CompileOptions opts = {}) {
  return Compiled<std::decay_t<F>>(std::forward<F>(fn), std::move(opts));
}

}  // namespace kiln
