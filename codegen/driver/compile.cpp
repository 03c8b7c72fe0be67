// The compile() driver: guards, warm-up, tracing, the pass pipeline, plans,
// write-back of captured state, differentiable compiled regions, dynamic dims.
#include "kiln/compile.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <mutex>

#include "driver/compile_internal.h"
#include "driver/partition.h"
#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/env.h"
#include "kiln/ir/generalize.h"
#include "kiln/ir/text.h"
#include "kiln/passes/pass_manager.h"
#include "kiln/profiler.h"
#include "kiln/random.h"

namespace kiln::detail {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

bool log_topic(const std::string& topic) {
  const std::string v = str(",", env::get("KILN_LOG"), ",");
  return v.find(str(",", topic, ",")) != std::string::npos;
}

// Installs a recorder for a scope.
struct RecorderScope {
  Recorder* prev;
  explicit RecorderScope(Recorder* r) : prev(set_recorder(r)) {}
  ~RecorderScope() { set_recorder(prev); }
};

}  // namespace

struct CompiledFunction::Impl {
  CompileOptions opts;
  CompileStats stats;
  std::recursive_mutex mu;
  std::vector<std::shared_ptr<Plan>> plans;
  std::vector<std::pair<std::string, int>> warmups;  // signature key -> eager calls so far
  std::vector<std::string> escaped_keys;  // signatures whose trace stored new tensors once
  int next_plan_id = 0;
  int recompiles = 0;
  uint64_t calls = 0;  // the LRU clock of the plan limit
  bool warned_limit = false;
  bool warned_plans = false;
  bool warned_self_change = false;
  bool check = false;
  std::string dump_dir;

  std::string signature_key(const std::vector<Tensor>& args,
                            const std::vector<double>& statics) const;
  std::vector<Tensor> trace_and_run(const std::vector<Tensor>& args,
                                    const std::vector<double>& statics, std::vector<double>& spec,
                                    const Body& body);
  std::vector<Tensor> run_checked(Plan& p, const std::vector<Tensor>& args,
                                  std::vector<double>& spec, const Body& body);
  // From now on this signature runs the plain function; `why` is the warning's reason.
  // `traced`: the plan whose captures' sharing with the arguments the eager
  // signature also guards (aliasing conflicts).
  void go_eager(const std::vector<Tensor>& args, const std::vector<double>& statics,
                const std::string& why, const Plan* traced = nullptr) {
    auto p = std::make_shared<Plan>();
    fill_signature(*p, args, statics, opts);
    if (traced) {
      p->captures = traced->captures;
      p->frozen_version.assign(p->captures.size(), ~0u);
      p->arg_shares_capture = traced->arg_shares_capture;
    }
    p->eager = true;
    add_plan(p);
    std::cerr << "[kiln] warning: " << opts.name << ": " << why
              << " — running this signature eagerly from now on\n";
  }
  // Keeps at most opts.plan_limit plans: the least recently used goes first.
  void add_plan(std::shared_ptr<Plan> p) {
    p->last_used = calls;
    plans.push_back(std::move(p));
    while (plans.size() > static_cast<size_t>(std::max(1, opts.plan_limit))) {
      auto lru = std::min_element(plans.begin(), plans.end() - 1, [](const auto& a, const auto& b) {
        return a->last_used < b->last_used;
      });
      plans.erase(lru);
      ++stats.evictions;
      if (!warned_plans) {
        warned_plans = true;
        std::cerr << "[kiln] warning: " << opts.name << " reached its limit of " << opts.plan_limit
                  << " plans (KILN_PLAN_LIMIT / CompileOptions::plan_limit): the least recently "
                     "used are dropped from now on, so a signature seen again re-traces. Its "
                     "signatures keep changing; the last re-trace: "
                  << (stats.last_miss.empty() ? "(none)" : stats.last_miss) << "\n";
      }
    }
  }
  void note_run(const RunResult& r) {
    stats.last_peak_bytes = r.peak_bytes;
    stats.last_kernel_launches = r.stats.kernel_launches;
    stats.last_in_place = r.stats.in_place;
    stats.last_placed = r.stats.placed;
  }
};

CompiledFunction::CompiledFunction(CompileOptions opts) : impl_(std::make_unique<Impl>()) {
  impl_->opts = std::move(opts);
  if (impl_->opts.recompile_limit < 0)
    impl_->opts.recompile_limit = static_cast<int>(env::get_int("KILN_RECOMPILE_LIMIT", 8));
  if (impl_->opts.plan_limit < 0)
    impl_->opts.plan_limit = static_cast<int>(env::get_int("KILN_PLAN_LIMIT", 64));
  KILN_CHECK(impl_->opts.plan_limit >= 1, "[compile] ", impl_->opts.name,
             ": plan_limit must be at least 1, got ", impl_->opts.plan_limit);
  impl_->check = env::get_flag("KILN_CHECK_COMPILED", false);
  impl_->dump_dir = env::get("KILN_DUMP");
}

CompiledFunction::~CompiledFunction() = default;

bool CompiledFunction::has_plan(const std::vector<Tensor>& args,
                                const std::vector<double>& statics) {
  std::lock_guard<std::recursive_mutex> lock(impl_->mu);
  for (auto& p : impl_->plans)
    if (!p->eager && guards_pass(*p, args, statics, nullptr)) return true;
  return false;
}

const CompileStats& CompiledFunction::stats() const {
  return impl_->stats;
}
const CompileOptions& CompiledFunction::options() const {
  return impl_->opts;
}

void CompiledFunction::reset() {
  std::lock_guard<std::recursive_mutex> lock(impl_->mu);
  impl_->plans.clear();
}

std::string CompiledFunction::last_graph_text() const {
  std::lock_guard<std::recursive_mutex> lock(impl_->mu);
  if (impl_->plans.empty() || !impl_->plans.back()->graph) return "";
  return ir::print(*impl_->plans.back()->graph);
}

std::string CompiledFunction::Impl::signature_key(const std::vector<Tensor>& args,
                                                  const std::vector<double>& statics) const {
  std::string k;
  for (size_t i = 0; i < args.size(); ++i) {
    k += str(args[i].dtype(), "[");
    for (int64_t d = 0; d < args[i].dim(); ++d) {
      bool dyn = false;
      for (const DynamicDim& dd : opts.dynamic)
        dyn = dyn || (dd.arg == static_cast<int>(i) && dd.dim == d);
      k += dyn ? std::string("?,") : str(args[i].size(d), ",");
    }
    k += args[i].requires_grad() ? "]g;" : "];";
  }
  for (double s : statics) k += str(s, ";");
  k += grad_mode_enabled() ? "G" : "N";
  std::vector<int> alias;  // arguments passed twice or overlapping: another signature
  std::vector<char> overlap;
  arg_memory(args, alias, overlap);
  for (size_t i = 0; i < args.size(); ++i)
    if (alias[i] >= 0 || overlap[i]) k += str("|", i, "=", alias[i], overlap[i] ? "o" : "");
  return k;
}

std::vector<Tensor> CompiledFunction::call(const std::vector<Tensor>& args,
                                           const std::vector<double>& statics,
                                           std::vector<double>& out_spec, const Body& body) {
  Impl& m = *impl_;
  check_dynamic_options(m.opts, args);  // a usage error whether compiled or not
  // Disabled, or called inside another trace (then it simply inlines into it).
  if (!m.opts.enabled || env::get_flag("KILN_EAGER", false) || current_recorder() != nullptr) {
    ++m.stats.eager_calls;
    return body(args, out_spec);
  }
  std::lock_guard<std::recursive_mutex> lock(m.mu);
  ++m.calls;
  for (auto& p : m.plans) {
    if (!guards_pass(*p, args, statics, nullptr)) continue;
    p->last_used = m.calls;
    if (p->eager) {
      ++m.stats.eager_calls;
      return body(args, out_spec);
    }
    ++m.stats.compiled_calls;
    if (m.check) return m.run_checked(*p, args, out_spec, body);
    RunResult r = run_plan(*p, args, nullptr);
    m.note_run(r);
    out_spec = p->out_spec;
    return std::move(r.results);
  }
  // A miss: warm up this signature eagerly first, then trace it.
  const std::string key = m.signature_key(args, statics);
  int* count = nullptr;
  for (auto& [k, c] : m.warmups)
    if (k == key) count = &c;
  if (!count) {
    // Bounded like the plans: a function whose signatures never repeat keeps no history.
    if (m.warmups.size() >= 4 * static_cast<size_t>(m.opts.plan_limit))
      m.warmups.erase(m.warmups.begin());
    m.warmups.emplace_back(key, 0);
    count = &m.warmups.back().second;
  }
  if (*count < m.opts.warmup) {
    ++*count;
    ++m.stats.eager_calls;
    return body(args, out_spec);
  }
  if (!m.plans.empty()) {
    std::string why;
    int64_t deepest = -1;
    for (const auto& p : m.plans) {  // the most specific miss over the plans
      std::string w;
      int64_t depth = 0;
      guards_pass(*p, args, statics, &w, &depth);
      if (depth > deepest) {
        deepest = depth;
        why = w;
      }
    }
    m.stats.last_miss = why;
    ++m.recompiles;
    if (log_topic("recompiles"))
      std::cerr << "[kiln] recompiling " << m.opts.name << " (recompile " << m.recompiles
                << "): " << why << "\n";
    if (m.recompiles >= m.opts.recompile_limit && !m.warned_limit) {
      m.warned_limit = true;
      std::cerr << "[kiln] WARNING: " << m.opts.name << " has been re-traced " << m.recompiles
                << " times (KILN_RECOMPILE_LIMIT=" << m.opts.recompile_limit
                << "); the last failed guard: " << why
                << ". Mark changing dims dynamic (CompileOptions::dynamic) or keep captured "
                   "tensors and flags stable. It keeps compiling; set KILN_LOG=recompiles to "
                   "see every re-trace.\n";
    }
  }
  return m.trace_and_run(args, statics, out_spec, body);
}

namespace {

// The backward of a forward-only function's differentiable results, traced
// too, so the compiled region is one node of the eager autograd tape.
struct TracedBackward {
  std::vector<Tensor> grads;
  std::vector<DiffInput> diff_inputs;
  std::vector<int> result_grad;       // results that get a gradient input
  std::vector<int> released_results;  // results whose graph the function consumed
};

TracedBackward trace_backward(ir::Tracer& tr, const Plan& plan, const std::vector<Tensor>& sym_args,
                              const std::vector<Tensor>& results) {
  TracedBackward b;
  bool needs_bwd = false;
  for (const Tensor& r : results) needs_bwd = needs_bwd || r.requires_grad();
  if (!needs_bwd || tr.grads_changed()) return b;
  tr.note_results(results);  // a returned captured tensor is a differentiable input too
  std::vector<Tensor> wrt;
  for (size_t i = 0; i < sym_args.size(); ++i)
    if (sym_args[i].requires_grad() && plan.arg_alias[i] < 0) {
      b.diff_inputs.push_back({true, static_cast<int>(i)});
      wrt.push_back(sym_args[i]);
    }
  const auto& caps = tr.captured();
  for (size_t k = 0; k < caps.size(); ++k) {
    Tensor c(caps[k]);
    if (c.requires_grad()) {
      b.diff_inputs.push_back({false, static_cast<int>(k)});
      wrt.push_back(c);
    }
  }
  if (wrt.empty()) return b;
  std::vector<Tensor> outs;
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].requires_grad()) continue;
    b.result_grad.push_back(static_cast<int>(i));
    outs.push_back(results[i]);
  }
  if (graph_released(outs)) {
    // The function consumed its results' graph itself (kiln::grad or backward
    // without retain_graph): as in eager, they still require grad and a
    // backward through them raises.
    b.released_results = std::move(b.result_grad);
    b.result_grad.clear();
    return b;
  }
  std::vector<Tensor> gouts;
  for (size_t j = 0; j < outs.size(); ++j)
    gouts.push_back(tr.add_grad_output(outs[j], b.result_grad[j]));
  GradOptions go;
  go.allow_unused = true;
  b.grads = kiln::grad(outs, wrt, gouts, go);
  return b;
}

}  // namespace

std::vector<Tensor> CompiledFunction::Impl::trace_and_run(const std::vector<Tensor>& args,
                                                          const std::vector<double>& statics,
                                                          std::vector<double>& spec,
                                                          const Body& body) {
  profiler::Span span("compile", "compile " + opts.name);  // trace, passes, codegen, first run
  const int64_t trace_start = profiler::now_ns();
  auto t0 = std::chrono::steady_clock::now();
  auto plan = std::make_shared<Plan>();
  fill_signature(*plan, args, statics, opts);
  ir::Tracer tr(opts.fallback == Fallback::kEager);
  std::vector<Tensor> sym_args;
  for (size_t i = 0; i < args.size(); ++i) {
    // The same tensor passed twice is one stand-in: writes through one argument
    // are seen through the other, as in eager.
    const int same = plan->arg_alias[i];
    sym_args.push_back(same >= 0 ? sym_args[static_cast<size_t>(same)]
                                 : tr.add_arg(args[i], static_cast<int>(i)));
  }
  std::vector<Tensor> results;
  std::vector<double> out_spec;
  TracedBackward bwd;
  const bool grad_mode = grad_mode_enabled();
  try {
    RecorderScope scope(&tr);
    results = body(sym_args, out_spec);
    if (grad_mode) bwd = trace_backward(tr, *plan, sym_args, results);
  } catch (const ir::TraceFallback& e) {
    tr.abort();
    go_eager(args, statics, e.what());
    ++stats.eager_calls;
    return body(args, spec);
  } catch (...) {
    tr.abort();
    throw;
  }
  ir::TraceResult res = tr.finish(results, bwd.grads);
  profiler::record_span("compile", "trace", trace_start, profiler::now_ns());
  stats.trace_ms += ms_since(t0);
  ++stats.traces;

  plan->id = next_plan_id++;
  plan->out_spec = out_spec;
  plan->diff_inputs = std::move(bwd.diff_inputs);
  plan->result_grad = std::move(bwd.result_grad);
  plan->released_results = std::move(bwd.released_results);
  std::shared_ptr<ir::Graph> raw(std::move(res.graph));  // the trace's own graph: no copy
  take_trace(*plan, std::move(res));
  // Host state the traced code depends on (a guarded module flag, optimizer
  // structure) that the function itself changed: replays run no host code but
  // host_action's, so every call would miss the guard and re-trace.
  for (const auto& guard : plan->guards)
    if (const std::string changed = guard(); !changed.empty() && !warned_self_change) {
      warned_self_change = true;
      std::cerr << "[kiln] warning: " << opts.name << ": the function changes host state it "
                << "depends on while it runs (" << changed << "); compiled calls do not re-run "
                << "host code, so every call re-traces. Make that change outside the compiled "
                   "function.\n";
    }
  note_capture_sharing(*plan, args);
  if (const std::string why = aliasing_conflict(*plan, args); !why.empty()) {
    go_eager(args, statics, why, plan.get());
    ++stats.eager_calls;
    return body(args, spec);
  }

  // Dynamic dims: traces at other sizes of dynamic dims generalize, once they
  // determine every size-dependent number, into one symbolic plan.
  std::shared_ptr<ir::Graph> graph = std::move(raw);
  if (!opts.dynamic.empty() && plan->escaped.empty()) {
    DynamicResult d = generalize_plans(*plan, graph, args, plans, opts);
    graph = d.graph;
    if (d.generalized) {
      ++stats.generalized;
    } else if (!d.why.empty() && log_topic("recompiles")) {
      std::cerr << "[kiln] " << opts.name << ": no symbolic plan: " << d.why << "\n";
    }
  }
  dump(dump_dir, opts.name, plan->id, "traced", *graph);
  auto t1 = std::chrono::steady_clock::now();
  const PlanSource source = build_executables(*plan, std::move(graph), opts);
  stats.plan_cache_hits += source == PlanSource::kDisk;
  stats.plan_cache_rejected += source == PlanSource::kRejected;
  stats.passes_ms += ms_since(t1);
  stats.graph_nodes = plan->graph->num_nodes();
  stats.fused_kernels = static_cast<int>(plan->exec->num_kernels() +
                                         (plan->bwd_exec ? plan->bwd_exec->num_kernels() : 0));
  stats.predicted_peak_bytes = plan->predicted_peak;
  if (!plan->budget_met)
    std::cerr << "[kiln] warning: " << opts.name << ": memory_budget " << opts.memory_budget
              << " bytes cannot be met: the smallest predicted peak rematerialization reached is "
              << plan->remat_after << " bytes (" << plan->remat_before << " without it)\n";
  dump(dump_dir, opts.name, plan->id, "optimized", *plan->graph);
  dump_kernels(dump_dir, opts.name, plan->id, "optimized", *plan->exec);
  dump_remat(dump_dir, opts.name, *plan);
  if (plan->bwd_graph) {
    dump(dump_dir, opts.name, plan->id, "backward", *plan->bwd_graph);
    dump_kernels(dump_dir, opts.name, plan->id, "backward", *plan->bwd_exec);
  }
  if (!plan->escaped.empty()) {
    // The call stored tensors it made (state created on a first step, which
    // warmup = 0 traces): a replay would not make them again. This run makes
    // them real; the next call traces again, now with the state in place. A
    // function that stores new tensors on every call cannot be replayed: its
    // second such trace turns the signature eager.
    const std::string key = signature_key(args, statics);
    const bool again =
        std::find(escaped_keys.begin(), escaped_keys.end(), key) != escaped_keys.end();
    if (again) {
      go_eager(
          args, statics,
          str("every traced call stores new tensors outside the function (", plan->escaped.size(),
              " this time: state created per call, or a traced value kept in a member)"));
    } else {
      escaped_keys.push_back(key);
    }
    ++stats.compiled_calls;
    RunResult r = run_plan(*plan, args, nullptr);
    note_run(r);
    spec = plan->out_spec;
    return std::move(r.results);
  }
  add_plan(plan);
  ++stats.compiled_calls;
  if (check) return run_checked(*plan, args, spec, body);
  RunResult r = run_plan(*plan, args, nullptr);
  note_run(r);
  spec = plan->out_spec;
  return std::move(r.results);
}

std::vector<Tensor> CompiledFunction::Impl::run_checked(Plan& p, const std::vector<Tensor>& args,
                                                        std::vector<double>& spec,
                                                        const Body& body) {
  // Snapshot the captured state, run compiled, restore, run eager with the
  // same host numbers and random offsets, compare everything, keep eager's state.
  Snapshot before = snapshot(p, args);
  const uint64_t rng = default_generator().offset;
  std::vector<double> hosts;
  RunResult c = run_plan(p, args, &hosts);
  Snapshot after_c = snapshot(p, args);
  restore(p, args, before);
  default_generator().offset = rng;
  std::vector<Tensor> e;
  {
    HostScalarReplay replay(hosts);
    e = body(args, spec);
  }
  Snapshot after_e = snapshot(p, args);
  std::string report = compare_runs(p, c.results, e, after_c, after_e, args);
  if (!report.empty()) {
    ++stats.check_mismatches;
    stats.last_check_report = report;
    std::cerr << "[kiln] KILN_CHECK_COMPILED: " << opts.name << ": " << report << "\n";
  }
  return e;
}

}  // namespace kiln::detail
