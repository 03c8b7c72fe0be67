// Plans: guards, building executables from a trace, running them with
// write-back of captured state (KILN_CHECK_COMPILED / KILN_DUMP helpers: plan_debug.cpp).
#include <algorithm>
#include <unordered_set>

#include "driver/compile_internal.h"
#include "driver/partition.h"
#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/functional.h"
#include "kiln/grad_destination.h"
#include "kiln/passes/fold_constants.h"
#include "kiln/passes/fuse.h"
#include "kiln/passes/pass_manager.h"
#include "kiln/passes/remat.h"
#include "kiln/profiler.h"
#include "kiln/random.h"
#include "ops/loops.h"

namespace kiln::detail {

using ops::share_memory;  // runtime/src/ops/loops.h

void arg_memory(const std::vector<Tensor>& args, std::vector<int>& alias,
                std::vector<char>& overlap) {
  alias.assign(args.size(), -1);
  overlap.assign(args.size(), 0);
  for (size_t i = 0; i < args.size(); ++i)
    for (size_t j = 0; j < i; ++j) {
      if (args[i].is_same(args[j])) {
        if (alias[i] < 0) alias[i] = alias[j] >= 0 ? alias[j] : static_cast<int>(j);
      } else if (share_memory(args[i], args[j])) {
        overlap[i] = overlap[j] = 1;
      }
    }
}

void fill_signature(Plan& p, const std::vector<Tensor>& args, const std::vector<double>& statics,
                    const CompileOptions&) {
  p.args.clear();
  for (const Tensor& t : args)
    p.args.push_back({t.dtype(), ir::to_sym_shape(t.shape()), t.requires_grad(),
                      t.impl()->wrapped_number, t.grad().defined(), t.device()});
  arg_memory(args, p.arg_alias, p.arg_overlap);
  p.arg_shares_capture.assign(args.size(), 0);
  p.statics = statics;
  p.grad_mode = grad_mode_enabled();
}

void note_capture_sharing(Plan& p, const std::vector<Tensor>& args) {
  p.arg_shares_capture.assign(args.size(), 0);
  for (const ir::Capture& c : p.captures) {
    std::shared_ptr<TensorImpl> impl = c.tensor.lock();
    if (!impl) continue;
    const Tensor t(std::move(impl));
    for (size_t i = 0; i < args.size(); ++i)
      if (t.is_same(args[i]) || share_memory(t, args[i])) p.arg_shares_capture[i] = 1;
  }
}

std::string aliasing_conflict(const Plan& p, const std::vector<Tensor>& args) {
  // Usually no argument shares memory with anything: skip naming every write.
  bool shared = false;
  for (size_t i = 0; i < args.size(); ++i) shared |= p.arg_overlap[i] || p.arg_shares_capture[i];
  if (!shared) return "";
  // What the plan writes: arguments, captured state, and .grad tensors.
  std::vector<std::pair<Tensor, std::string>> written;
  for (const auto& o : p.outputs) {
    const size_t k = static_cast<size_t>(o.index);
    if (o.kind == ir::OutputBinding::kArgWrite) {
      written.emplace_back(args[k], str("argument ", k));
    } else if (o.kind == ir::OutputBinding::kWrite) {
      written.emplace_back(Tensor(p.captures[k].tensor.lock()), str("captured tensor ", k));
    } else if (o.kind == ir::OutputBinding::kGrad || o.kind == ir::OutputBinding::kArgGrad) {
      const Tensor owner =
          o.kind == ir::OutputBinding::kArgGrad ? args[k] : Tensor(p.captures[k].tensor.lock());
      if (owner.grad().defined()) written.emplace_back(owner.grad(), "a .grad");
    }
  }
  for (size_t i = 0; i < args.size(); ++i) {
    if (!p.arg_overlap[i] && !p.arg_shares_capture[i]) continue;
    const char* other = p.arg_overlap[i] ? "another argument" : "captured state";
    for (const auto& [w, what] : written) {
      if (w.is_same(args[i]))
        return str("argument ", i, " shares memory with ", other,
                   " and the function writes it in place");
      if (share_memory(w, args[i]))
        return str(what, " is written in place and shares memory with argument ", i);
    }
  }
  return "";
}

void take_trace(Plan& p, ir::TraceResult&& r) {
  p.inputs = std::move(r.inputs);
  p.outputs = std::move(r.outputs);
  p.captures = std::move(r.captures);
  for (auto& c : r.captured) p.cap_raw.push_back(c.get());
  p.frozen_version.assign(p.captures.size(), ~0u);
  p.hosts = std::move(r.hosts);
  p.guards = std::move(r.guards);
  p.cleared_grads = std::move(r.cleared_grads);
  p.escaped = std::move(r.escaped);
  p.uses_rng = r.uses_rng;
  p.result_is_input = std::move(r.result_is_input);
  p.num_results = 0;
  for (const auto& o : p.outputs) p.num_results += o.kind == ir::OutputBinding::kResult;
}

bool guards_pass(const Plan& p, const std::vector<Tensor>& args, const std::vector<double>& statics,
                 std::string* why, int64_t* depth) {
  int64_t stage = 0;  // how far the checks got: a later failure is a more specific miss
  auto fail = [&](auto&&... parts) {
    if (why) *why = str(parts...);
    if (depth) *depth = stage;
    return false;
  };
  if (p.args.size() != args.size())
    return fail("the number of tensor arguments changed (", p.args.size(), " -> ", args.size(),
                ")");
  std::vector<int64_t> syms(static_cast<size_t>(p.num_syms), -1);
  for (size_t i = 0; i < args.size(); ++i) {
    stage = 1 + static_cast<int64_t>(i);
    const ArgSig& s = p.args[i];
    const Tensor& t = args[i];
    if (t.dtype() != s.dtype)
      return fail("argument ", i, " dtype changed (", s.dtype, " -> ", t.dtype(), ")");
    if (t.dim() != static_cast<int64_t>(s.shape.size()))
      return fail("argument ", i, " rank changed (", s.shape.size(), " -> ", t.dim(), ")");
    for (size_t d = 0; d < s.shape.size(); ++d) {
      const ir::SymInt& x = s.shape[d];
      const int64_t n = t.size(static_cast<int64_t>(d));
      if (x.is_static()) {
        if (x.b != n)
          return fail("argument ", i, " dim ", d, " changed (", x.b, " -> ", n, ")",
                      " (mark it dynamic with CompileOptions::dynamic if it varies)");
      } else if (const int32_t k = x.as_symbol(); k >= 0 && syms[static_cast<size_t>(k)] < 0) {
        syms[static_cast<size_t>(k)] = n;
      }
    }
    if (t.requires_grad() != s.requires_grad)
      return fail("argument ", i, " requires_grad changed (", s.requires_grad, " -> ",
                  t.requires_grad(), ")");
    if (t.impl()->wrapped_number != s.wrapped_number)
      return fail("argument ", i, " is ", s.wrapped_number ? "no longer" : "now",
                  " a wrapped number");
    if (t.device() != s.device)
      return fail("argument ", i, " moved from ", s.device, " to ", t.device());
    if (s.requires_grad && t.grad().defined() != s.grad_defined)
      return fail("argument ", i, " .grad became ", s.grad_defined ? "undefined" : "defined");
  }
  if (p.num_syms > 0) {
    for (size_t i = 0; i < args.size(); ++i)
      for (size_t d = 0; d < p.args[i].shape.size(); ++d) {
        const ir::SymInt& x = p.args[i].shape[d];
        if (x.is_static()) continue;
        if (std::find(syms.begin(), syms.end(), -1) != syms.end() ||
            x.eval(syms) != args[i].size(static_cast<int64_t>(d)))
          return fail("argument ", i, " dim ", d, " is inconsistent with the other dynamic dims");
      }
    // A size the fitted polynomials do not fit (an op's shape rule fails):
    // re-trace rather than run.
    if (std::string bad; !symbolic_sizes_hold(p, syms, &bad))
      return fail("the symbolic plan does not hold at these sizes: ", bad);
  }
  stage = 1 << 20;
  {
    // Kept from call to call: a steady-state call allocates nothing here.
    thread_local std::vector<int> alias;
    thread_local std::vector<char> overlap;
    arg_memory(args, alias, overlap);
    for (size_t i = 0; i < args.size(); ++i) {
      if (alias[i] != p.arg_alias[i])
        return fail("argument ", i, p.arg_alias[i] >= 0 ? " is no longer" : " is now",
                    " the same tensor as argument ",
                    p.arg_alias[i] >= 0 ? p.arg_alias[i] : alias[i]);
      if (overlap[i] != p.arg_overlap[i])
        return fail("argument ", i, p.arg_overlap[i] ? " no longer shares" : " now shares",
                    " memory with another argument");
    }
  }
  stage = 2 << 20;
  if (statics != p.statics) return fail("a non-tensor argument changed value");
  if (grad_mode_enabled() != p.grad_mode)
    return fail("grad mode changed (", p.grad_mode, " -> ", grad_mode_enabled(), ")");
  // Arguments that share memory with captured state (usually none).
  const bool any_shares = std::find(p.arg_shares_capture.begin(), p.arg_shares_capture.end(), 1) !=
                          p.arg_shares_capture.end();
  std::vector<char> shares(any_shares ? args.size() : 0, 0);
  for (size_t k = 0; k < p.captures.size(); ++k) {
    stage = (3 << 20) + static_cast<int64_t>(k);
    const ir::Capture& c = p.captures[k];
    std::shared_ptr<TensorImpl> impl = c.tensor.lock();
    if (!impl)
      return fail("captured tensor ", k, " (", c.dtype, c.shape, ") was freed or replaced");
    Tensor t(std::move(impl));
    if (t.dtype() != c.dtype || t.shape() != c.shape)
      return fail("captured tensor ", k, " changed from ", c.dtype, c.shape, " to ", t.dtype(),
                  t.shape());
    if (t.requires_grad() != c.requires_grad)
      return fail("captured tensor ", k, " requires_grad changed");
    if (t.device() != p.device && t.dim() > 0)
      return fail("captured tensor ", k, " is on ", t.device(), ", the plan runs on ", p.device);
    if (t.grad().defined() != c.grad_defined)
      return fail("captured tensor ", k, " .grad became ",
                  c.grad_defined ? "undefined" : "defined");
    for (size_t i = 0; i < args.size(); ++i)  // sharing with arguments: arg_shares_capture
      if (t.is_same(args[i]) || share_memory(t, args[i])) {
        if (!p.arg_shares_capture[i])
          return fail("argument ", i, " now shares memory with captured tensor ", k);
        shares[i] = 1;
      }
    if (p.frozen_version[k] != ~0u && t.impl()->storage &&
        t.impl()->storage->version != p.frozen_version[k])
      return fail("frozen captured tensor ", k, " was modified in place");
  }
  for (size_t i = 0; i < shares.size(); ++i)
    if (p.arg_shares_capture[i] && !shares[i])
      return fail("argument ", i, " no longer shares memory with captured state");
  stage = 4 << 20;
  for (const auto& guard : p.guards) {
    ++stage;
    if (std::string changed = guard(); !changed.empty()) return fail(changed);
  }
  return true;
}

ExecutorOptions executor_options(const CompileOptions& opts, Device device, const char* part) {
  ExecutorOptions eo;
  eo.name = str(part, " of ", opts.name);
  eo.device = device;
  eo.fuse = opts.fuse;
  eo.kernels = opts.interpret_kernels ? KernelBackend::kInterpreter : KernelBackend::kAuto;
  eo.reassociate = opts.reassociate;
  return eo;
}

namespace {

// The outputs that replace a captured tensor or argument (new parameters and
// optimizer state), for the remat model: the executor writes them in place.
std::vector<passes::StateWrite> state_writes(const Plan& p) {
  std::vector<passes::StateWrite> w;
  for (size_t o = 0; o < p.outputs.size(); ++o) {
    const auto& b = p.outputs[o];
    const bool cap = b.kind == ir::OutputBinding::kWrite;
    if (!cap && b.kind != ir::OutputBinding::kArgWrite) continue;
    for (size_t i = 0; i < p.inputs.size(); ++i)
      if (p.inputs[i].index == b.index &&
          p.inputs[i].kind == (cap ? ir::InputBinding::kCapture : ir::InputBinding::kArg))
        w.push_back({static_cast<int>(o), static_cast<int>(i)});
  }
  return w;
}

// `p` (given for the whole or forward graph) receives the remat pass's report.
// `device`: where the graph runs, so that folded constants are placed there.
std::unique_ptr<ir::Graph> optimize(std::unique_ptr<ir::Graph> g, const CompileOptions& opts,
                                    Device device, Plan* p = nullptr) {
  profiler::Span span("compile", "passes");
  passes::FoldDeviceScope fold_device(device);
  const std::vector<std::string> names =
      opts.pipeline.empty() ? passes::standard_pipeline() : opts.pipeline;
  // The budget is judged by the schedule the executor will run: fused exactly
  // when fusion is on (opts.fuse; the fuse pass being disabled remat sees itself).
  passes::RematScope remat({.memory_budget = opts.memory_budget,
                            .writes = p ? state_writes(*p) : std::vector<passes::StateWrite>{},
                            .fused = opts.fuse,
                            .gpu = device.is_cuda()});
  passes::run_pipeline(*g, names);
  // Channel sums (BatchNorm's) as a fusible row sum and a small sum: part of
  // fusion, so whatever the pipeline.
  if (opts.fuse && !passes::pass_disabled("fuse") && !passes::pass_disabled("split_channel_sums"))
    passes::split_channel_sums(*g);
  if (opts.pipeline.empty()) {
    passes::PipelineOptions once;
    once.fixpoint = false;
    passes::run_pipeline(*g, passes::late_pipeline(), once);
  }
  if (p) {
    const passes::RematReport& r = remat.report();
    p->remat_after =
        r.peak_before > 0 ? r.peak_after : passes::predicted_peak_bytes(*g, state_writes(*p));
    p->remat_before = r.peak_before > 0 ? r.peak_before : p->remat_after;
    p->budget_met = opts.memory_budget <= 0 || p->remat_after <= opts.memory_budget;
    p->remat_log.clear();
    for (const std::string& line : r.log) p->remat_log += line + "\n";
    p->remat_log += passes::remat_summary(*g);
  }
  return g;
}

// Freeze: captured tensors the function only reads become constants.
void freeze(Plan& p, ir::Graph& g) {
  std::vector<bool> written(p.captures.size(), false);
  for (const auto& o : p.outputs)
    if (o.kind == ir::OutputBinding::kWrite) written[static_cast<size_t>(o.index)] = true;
  const auto nodes = g.nodes();
  ir::Node* first = nodes.empty() ? nullptr : nodes.front();
  for (size_t j = 0; j < p.inputs.size(); ++j) {
    if (p.inputs[j].kind != ir::InputBinding::kCapture) continue;
    const size_t k = static_cast<size_t>(p.inputs[j].index);
    if (written[k]) continue;
    Tensor t(p.captures[k].tensor.lock());
    if (!t.defined()) continue;
    ir::Node* c = g.add_constant(t.detach(), first);
    g.replace_all_uses(g.inputs()[j], c->output());
    p.frozen_version[k] = t.impl()->storage ? t.impl()->storage->version : 0;
  }
}

// The passes, the partition of a differentiable plan, and the executors.
void optimize_and_prepare(Plan& p, std::unique_ptr<ir::Graph> g, const CompileOptions& opts) {
  if (p.result_grad.empty()) {
    p.graph = std::shared_ptr<ir::Graph>(optimize(std::move(g), opts, p.device, &p));
    {
      profiler::Span span("compile", "codegen");  // fusion plan, lowering, kernels
      p.exec = std::make_unique<Executor>(p.graph, executor_options(opts, p.device, "graph"));
    }
    p.predicted_peak =
        passes::predicted_peak_bytes(*p.graph, p.exec->fusion_plan(), state_writes(p));
    p.num_fwd_outputs = p.outputs.size();
    return;
  }
  std::vector<bool> is_grad_input(g->inputs().size(), false);
  for (size_t i = 0; i < p.inputs.size(); ++i)
    is_grad_input[i] = p.inputs[i].kind == ir::InputBinding::kGradOut;
  std::vector<bool> is_bwd_output(g->outputs().size(), false);
  for (size_t o = 0; o < p.outputs.size(); ++o)
    is_bwd_output[o] = p.outputs[o].kind == ir::OutputBinding::kGradIn;
  // The joint graph's own remat (the forward saves less) runs where remat
  // would, pricing recomputation for the plan's device.
  Split sp = [&] {
    passes::RematScope pricing({.gpu = p.device.is_cuda()});
    return partition(*g, is_grad_input, is_bwd_output,
                     opts.pipeline.empty() && !passes::pass_disabled("remat"), opts.memory_budget);
  }();
  std::vector<ir::InputBinding> fwd_in;
  for (size_t i : sp.fwd_inputs) fwd_in.push_back(p.inputs[i]);
  p.bwd_grad_result.clear();
  for (size_t i : sp.grad_inputs) p.bwd_grad_result.push_back(p.inputs[i].index);
  std::vector<ir::OutputBinding> fwd_out;
  for (size_t o : sp.fwd_outputs) fwd_out.push_back(p.outputs[o]);
  p.bwd_output_diff.clear();
  for (size_t o : sp.bwd_outputs) p.bwd_output_diff.push_back(p.outputs[o].index);
  p.inputs = std::move(fwd_in);
  p.outputs = std::move(fwd_out);
  p.num_fwd_outputs = p.outputs.size();
  p.graph = std::shared_ptr<ir::Graph>(optimize(std::move(sp.fwd), opts, p.device, &p));
  p.bwd_graph = std::shared_ptr<ir::Graph>(optimize(std::move(sp.bwd), opts, p.device));
  profiler::Span span("compile", "codegen");  // fusion plans, lowering, kernels
  p.exec = std::make_unique<Executor>(p.graph, executor_options(opts, p.device));
  p.predicted_peak = passes::predicted_peak_bytes(*p.graph, p.exec->fusion_plan(), state_writes(p));
  p.bwd_exec =
      std::make_shared<Executor>(p.bwd_graph, executor_options(opts, p.device, "backward"));
}

}  // namespace

PlanSource build_executables(Plan& p, std::shared_ptr<ir::Graph> traced,
                             const CompileOptions& opts) {
  // The graphs run where the (non-scalar) arguments live, else the captures.
  p.device = Device::cpu();
  for (const ArgSig& a : p.args)
    if (!a.device.is_cpu()) p.device = a.device;
  for (size_t k = 0; k < p.captures.size() && p.device.is_cpu(); ++k)
    if (const std::shared_ptr<TensorImpl> c = p.captures[k].tensor.lock(); c && !c->device.is_cpu())
      p.device = c->device;
  const std::string key = plan_cache_key(p, *traced, opts);
  PlanSource source = PlanSource::kBuilt;
  if (!key.empty()) {
    source = load_cached_plan(p, key, opts);
    if (source == PlanSource::kDisk) {
      p.traced_graph = std::move(traced);
      return source;
    }
  }
  // A deep model's graph costs as much to copy as a pass costs to run: only a
  // trace kept elsewhere (evidence for dynamic dims) is copied.
  std::unique_ptr<ir::Graph> g =
      traced.use_count() == 1 ? std::make_unique<ir::Graph>(std::move(*traced)) : traced->clone();
  traced.reset();
  if (opts.freeze) freeze(p, *g);
  optimize_and_prepare(p, std::move(g), opts);
  if (!key.empty()) store_cached_plan(p, key);
  return source;
}

namespace {

// A symbolic tensor the traced call stored outside the function becomes a
// real one holding `value` (a copy: the value may alias an input or another
// output). Every holder sees it: the handle's impl itself changes. A traced
// history is cut: it is a leaf from now on (requires_grad kept only if it was
// a leaf already).
void make_real(const std::shared_ptr<TensorImpl>& impl, const Tensor& value) {
  if (!impl || impl->storage) return;  // gone, or made real already
  Tensor v = value.clone();
  impl->storage = v.impl()->storage;
  impl->device = v.device();
  impl->strides = v.strides();
  impl->offset = v.offset();
  impl->trace.reset();
  impl->born_while_tracing = false;  // state from now on, not a temporary of a trace
  if (impl->autograd && impl->autograd->grad_fn) {
    impl->autograd->grad_fn.reset();
    impl->autograd->requires_grad = false;
  }
  if (impl->autograd) impl->autograd->grad = Tensor();
}

}  // namespace

namespace {

Tensor capture(const Plan& p, int index) {
  return Tensor(p.captures[static_cast<size_t>(index)].tensor.lock());
}

// The tensor whose .grad (or content) an output binding targets.
Tensor binding_target(const Plan& p, const std::vector<Tensor>& args, const ir::OutputBinding& b) {
  const bool arg = b.kind == ir::OutputBinding::kArgGrad || b.kind == ir::OutputBinding::kArgWrite;
  return arg ? args[static_cast<size_t>(b.index)] : capture(p, b.index);
}

// The graph's inputs of one call: arguments, live captures, host values.
std::vector<Tensor> bind_inputs(const Plan& p, const std::vector<Tensor>& args,
                                const std::vector<double>& hv) {
  std::vector<Tensor> inputs;
  inputs.reserve(p.inputs.size());
  for (const auto& b : p.inputs) {
    switch (b.kind) {
      case ir::InputBinding::kArg:
        inputs.push_back(args[static_cast<size_t>(b.index)]);
        break;
      case ir::InputBinding::kCapture:
        inputs.push_back(capture(p, b.index));
        break;
      case ir::InputBinding::kHost:
        inputs.push_back(scalar_tensor(Scalar(hv[static_cast<size_t>(b.index)])));
        break;
      case ir::InputBinding::kGradOut:
        KILN_ASSERT(false, "gradient input in a forward graph");
        break;
    }
  }
  return inputs;
}

// Writes a gradient to .grad and fires the parameter's post-accumulate hooks.
// Without a .grad, the parameter's gradient destination (if any) becomes
// .grad, as in eager backward; values not computed there are copied in.
void write_grad(const Tensor& target, const Tensor& value) {
  NoGradGuard ng;
  Tensor cur = target.grad();
  const bool had = cur.defined();
  if (!had) cur = autograd::grad_destination(target);
  const bool fits = cur.defined() && cur.shape() == value.shape() && cur.dtype() == value.dtype();
  if (fits &&
      (had ? cur.impl()->storage != value.impl()->storage : cur.data_ptr() != value.data_ptr())) {
    cur.copy_(value);  // keeps .grad's identity (views into DDP buckets, optimizer refs)
    if (!had) target.set_grad(cur);
  } else {
    target.set_grad(value);
  }
  if (target.impl()->autograd)
    for (auto& h : target.impl()->autograd->post_accumulate_hooks) h(target);
}

// Captured state the graph rewrites (parameters, optimizer state) is the
// destination of its new value: a pointwise update is computed in place.
// A gradient with a .grad of its shape is computed into that .grad (its
// identity is kept anyway: DDP's bucket views, optimizer references); one
// without a .grad, into the parameter's gradient destination if it has one
// (kiln/grad_destination.h: DDP's bucket slice, so the weight's GEMM writes
// where the all-reduce reads and write_grad adopts it without a copy).
// Whether forward output `o` replaces state (a captured tensor, an argument).
bool is_write(const Plan& p, size_t o) {
  const auto k = p.outputs[o].kind;
  return k == ir::OutputBinding::kWrite || k == ir::OutputBinding::kArgWrite;
}

// Whether forward output `o` is a gradient (written as soon as it is ready).
bool is_grad(const Plan& p, size_t o) {
  const auto k = p.outputs[o].kind;
  return k == ir::OutputBinding::kGrad || k == ir::OutputBinding::kArgGrad;
}

// None when no output is written into state (the executor then has no
// destinations to look at).
std::vector<Tensor> output_destinations(const Plan& p, const std::vector<Tensor>& args,
                                        const std::vector<int64_t>& syms) {
  bool any = false;
  for (size_t o = 0; o < p.num_fwd_outputs && !any; ++o) any = is_write(p, o) || is_grad(p, o);
  if (!any) return {};
  std::vector<Tensor> dests(p.exec->graph().outputs().size());
  for (size_t o = 0; o < p.num_fwd_outputs && o < dests.size(); ++o) {
    const auto& b = p.outputs[o];
    if (is_write(p, o)) {
      dests[o] = binding_target(p, args, b);
    } else if (is_grad(p, o)) {
      const Tensor target = binding_target(p, args, b);
      const ir::Value* v = p.exec->graph().outputs()[o];
      Tensor cur = target.defined() ? target.grad() : Tensor();
      if (target.defined() && !cur.defined()) cur = autograd::grad_destination(target);
      if (cur.defined() && cur.dtype() == v->dtype && cur.shape() == ir::eval_shape(v->shape, syms))
        dests[o] = cur;
    }
  }
  return dests;
}

using Writes = std::vector<std::pair<Tensor, Tensor>>;  // (target, value)
using Escapes = std::vector<std::pair<std::shared_ptr<TensorImpl>, Tensor>>;

// Sorts the forward outputs into the call's results, state writes and escapes.
void collect_outputs(const Plan& p, const std::vector<Tensor>& args,
                     const std::vector<Tensor>& inputs, const std::vector<Tensor>& outs,
                     RunResult& r, Writes& writes, Escapes& escapes) {
  for (size_t o = 0; o < p.num_fwd_outputs; ++o) {
    const auto& b = p.outputs[o];
    switch (b.kind) {
      case ir::OutputBinding::kResult: {
        Tensor v = outs[o];
        // The optimizer may have reduced a result to an input (x*1 -> x): the
        // function made a new tensor, so the caller gets a copy; a detached
        // alias of an input gets an alias, the input itself is returned as is.
        const uint8_t kind = p.result_is_input[static_cast<size_t>(b.index)];
        if (kind != 1)
          for (const Tensor& in : inputs)
            if (v.is_same(in)) {
              NoGradGuard ng;
              v = kind == 2 ? v.detach() : v.clone();
              break;
            }
        r.results[static_cast<size_t>(b.index)] = v;
        break;
      }
      case ir::OutputBinding::kWrite:
      case ir::OutputBinding::kArgWrite:
        writes.emplace_back(binding_target(p, args, b), outs[o]);
        break;
      case ir::OutputBinding::kGrad:
      case ir::OutputBinding::kArgGrad:
        break;  // written by on_ready
      case ir::OutputBinding::kGradIn:
        KILN_ASSERT(false, "gradient output in a forward graph");
        break;
      case ir::OutputBinding::kEscaped:
        escapes.emplace_back(p.escaped[static_cast<size_t>(b.index)].lock(), outs[o]);
        break;
    }
  }
}

// Writes new state back, clears released .grads and makes escaped tensors real.
void apply_writes(const Plan& p, Writes& writes, Escapes& escapes) {
  NoGradGuard ng;
  // A value that aliases a write target (a returned view of a capture) is
  // copied first, so the order of the writes cannot matter.
  // A value the executor computed in place already is its target's content.
  auto in_place = [](const Tensor& target, const Tensor& value) {
    return value.impl()->storage == target.impl()->storage &&
           value.data_ptr() == target.data_ptr() && value.is_contiguous() &&
           target.is_contiguous() && value.numel() == target.numel();
  };
  std::vector<const StorageImpl*> target_storage;  // sorted, lookups only
  target_storage.reserve(writes.size());
  for (const auto& w : writes) target_storage.push_back(w.first.impl()->storage.get());
  std::sort(target_storage.begin(), target_storage.end());
  for (auto& [target, value] : writes)
    if (!in_place(target, value) && std::binary_search(target_storage.begin(), target_storage.end(),
                                                       value.impl()->storage.get()))
      value = value.clone();
  for (auto& [target, value] : writes) {
    if (in_place(target, value))
      ++target.impl()->storage->version;  // what copy_ would have recorded
    else
      target.copy_(value);
  }
  for (int k : p.cleared_grads) capture(p, k).set_grad(Tensor());
  for (auto& [impl, value] : escapes) make_real(impl, value);
}

// What the results depend on, so they require grad.
std::vector<Tensor> diff_tensors(const Plan& p, const std::vector<Tensor>& args) {
  std::vector<Tensor> diff;
  for (const DiffInput& d : p.diff_inputs)
    diff.push_back(d.is_arg ? args[static_cast<size_t>(d.index)] : capture(p, d.index));
  return diff;
}

// Results whose graph the function consumed (kiln::grad inside it) still
// require grad and raise on a later backward, as in eager.
void attach_released(const Plan& p, const std::vector<Tensor>& args, RunResult& r) {
  std::vector<Tensor> req;
  for (int ri : p.released_results) req.push_back(r.results[static_cast<size_t>(ri)]);
  BackwardFn fn = [](const std::vector<Tensor>&) -> std::vector<Tensor> {
    throw GraphReleasedError(
        "[backward] trying to backward through the graph a second time: the compiled "
        "function already ran backward (or kiln::grad) through this result without "
        "retain_graph=true");
  };
  std::vector<Tensor> attached =
      attach_function("Compiled", diff_tensors(p, args), req, std::move(fn));
  for (size_t j = 0; j < p.released_results.size(); ++j)
    r.results[static_cast<size_t>(p.released_results[j])] = attached[j];
}

// The autograd node of a compiled forward: its backward runs the plan's
// backward executor over the saved outputs.
void attach_backward(const Plan& p, const std::vector<Tensor>& args,
                     const std::vector<Tensor>& outs, const std::vector<int64_t>& syms,
                     uint64_t seed, uint64_t base, RunResult& r) {
  std::vector<Tensor> saved(outs.begin() + static_cast<std::ptrdiff_t>(p.num_fwd_outputs),
                            outs.end());
  std::vector<Tensor> diff = diff_tensors(p, args);
  std::vector<Tensor> req;
  std::vector<TensorMeta> metas;
  for (int ri : p.result_grad) {
    req.push_back(r.results[static_cast<size_t>(ri)]);
    metas.push_back({req.back().dtype(), req.back().shape()});
  }
  auto bwd = p.bwd_exec;
  auto result_grad = p.result_grad;
  auto grad_result = p.bwd_grad_result;
  auto out_diff = p.bwd_output_diff;
  const size_t ndiff = diff.size();
  BackwardFn fn = [bwd, saved, syms, seed, base, metas, result_grad, grad_result, out_diff,
                   ndiff](const std::vector<Tensor>& gouts) {
    KILN_CHECK(!grad_mode_enabled(),
               "[compile] double backward (create_graph=true) through a compiled function "
               "is not supported yet: its backward runs as one compiled region without "
               "history; differentiate the plain function (CompileOptions{.enabled = false})");
    std::vector<Tensor> ins = saved;
    for (int res : grad_result) {
      size_t j = static_cast<size_t>(std::find(result_grad.begin(), result_grad.end(), res) -
                                     result_grad.begin());
      Tensor g = j < gouts.size() ? gouts[j] : Tensor();
      if (!g.defined()) g = zeros(metas[j].shape, metas[j].dtype);
      ins.push_back(g);
    }
    RunArgs a;
    a.inputs = ins;
    a.rng_seed = seed;
    a.rng_base = base;
    a.syms = syms;
    std::vector<Tensor> o = bwd->run(a);
    std::vector<Tensor> gi(ndiff);
    for (size_t k = 0; k < o.size(); ++k) gi[static_cast<size_t>(out_diff[k])] = o[k];
    return gi;
  };
  std::vector<Tensor> attached = attach_function("Compiled", diff, req, std::move(fn));
  for (size_t j = 0; j < p.result_grad.size(); ++j)
    r.results[static_cast<size_t>(p.result_grad[j])] = attached[j];
}

}  // namespace

RunResult run_plan(Plan& p, const std::vector<Tensor>& args, std::vector<double>* hosts_out) {
  profiler::Span span("compile", "run compiled");
  std::vector<double> hv(p.hosts.size());
  {
    UntracedGuard untraced;
    for (size_t h = 0; h < p.hosts.size(); ++h) hv[h] = p.hosts[h]();
  }
  if (hosts_out) *hosts_out = hv;
  const std::vector<Tensor> inputs = bind_inputs(p, args, hv);
  const std::vector<int64_t> syms = p.exec->bind_symbols(inputs);
  uint64_t seed = 0, base = 0;
  if (p.uses_rng) {
    Generator& g = default_generator();
    seed = g.seed;
    base = g.offset;
    g.offset += static_cast<uint64_t>(p.graph->rng_advance.eval(syms));
  }
  // Each gradient is written back (and the parameter's post-accumulate-grad
  // hooks fire) as soon as the executor produces it, while the rest of the
  // graph still runs: DDP's bucket hooks overlap with the compiled backward.
  std::vector<std::pair<Tensor, Tensor>> late_grads;
  // The inputs' storages, sorted when first needed (a .grad that exists
  // while the graph runs): a model has thousands of inputs and of gradients.
  std::vector<const StorageImpl*> input_storage;
  auto is_input_storage = [&](const StorageImpl* s) {
    if (input_storage.empty()) {
      input_storage.reserve(inputs.size());
      for (const Tensor& t : inputs) input_storage.push_back(t.impl()->storage.get());
      std::sort(input_storage.begin(), input_storage.end());
    }
    return std::binary_search(input_storage.begin(), input_storage.end(), s);
  };
  auto ready = [&](size_t o, const Tensor& value) {
    if (o >= p.num_fwd_outputs || !is_grad(p, o)) return;
    const auto& b = p.outputs[o];
    Tensor target = binding_target(p, args, b);
    // A .grad that is itself a graph input (accumulation) may still be read by
    // later nodes: write it after the run.
    Tensor cur = target.grad();
    if (cur.defined() && is_input_storage(cur.impl()->storage.get())) {
      late_grads.emplace_back(target, value);
      return;
    }
    write_grad(target, value);
  };
  bool grads = false;
  for (size_t o = 0; o < p.num_fwd_outputs && !grads; ++o) grads = is_grad(p, o);
  const OutputReadyFn on_ready = std::ref(ready);  // held by reference: no allocation
  const std::vector<Tensor> dests = output_destinations(p, args, syms);  // ra.dests is a span
  RunStats st;
  RunArgs ra;
  ra.inputs = inputs;
  ra.dests = dests;
  ra.rng_seed = seed;
  ra.rng_base = base;
  ra.stats = &st;
  ra.syms = syms;
  ra.on_ready = grads ? &on_ready : nullptr;
  std::vector<Tensor> outs = p.exec->run(ra);

  RunResult r;
  r.peak_bytes = st.peak_bytes;
  r.stats = st;
  r.results.resize(p.num_results);
  Writes writes;
  Escapes escapes;
  collect_outputs(p, args, inputs, outs, r, writes, escapes);
  apply_writes(p, writes, escapes);
  for (auto& [target, value] : late_grads) write_grad(target, value);
  if (!p.released_results.empty() && grad_mode_enabled()) attach_released(p, args, r);
  if (!p.result_grad.empty() && grad_mode_enabled())
    attach_backward(p, args, outs, syms, seed, base, r);
  return r;
}

}  // namespace kiln::detail
