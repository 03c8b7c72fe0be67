// The tracer. Symbolic tensors carry a ValueRef (their current SSA value);
// real tensors met during the trace are either captured state (existed before
// the trace: read by reference, mutations become outputs) or temporaries of the
// traced code (wrapped numbers, tensors born while tracing: constants).
#include "kiln/ir/tracer.h"

#include <atomic>
#include <typeinfo>
#include <unordered_set>

#include "kiln/autograd.h"
#include "kiln/random.h"
#include "ptr_map.h"

namespace kiln::ir {

namespace {

using detail::PtrMap;

// The tracer-owned state of one symbolic tensor.
struct ValueRef final : TraceState {
  // The trace that made the tensor: a unique id, not the Tracer's address,
  // which a later trace may reuse while a stale symbolic tensor survives.
  uint64_t owner = 0;
  Value* value = nullptr;
  // A view's root tensor and that root's version when the view was taken: a
  // view read after its root was written in place would be stale in the IR.
  const TensorImpl* base = nullptr;
  uint64_t base_version = 0;
};

ValueRef* ref_of(const Tensor& t, uint64_t owner) {
  // The only TraceState there is; a type check without dynamic_cast's search.
  TraceState* ts = t.impl()->trace.get();
  auto* r = ts && typeid(*ts) == typeid(ValueRef) ? static_cast<ValueRef*>(ts) : nullptr;
  return (r && r->owner == owner) ? r : nullptr;
}

// "cap12": an input's or output's binding name. Thousands per deep model's
// trace, so no ostringstream (kiln::str) per name.
template <typename I>
std::string numbered(const char* prefix, I k) {
  return prefix + std::to_string(k);
}

std::string where_str(const std::source_location& loc) {
  return str(loc.file_name(), ":", loc.line(), " (", loc.function_name(), ")");
}

}  // namespace

struct Tracer::State {
  uint64_t id = 0;  // unique per trace in the process
  bool fallback = false;
  std::unique_ptr<Graph> graph = std::make_unique<Graph>();
  std::vector<InputBinding> inputs;
  // Captures.
  std::vector<std::shared_ptr<TensorImpl>> captured;
  std::vector<Capture> captures;
  std::vector<Value*> cap_input;      // the graph input of each capture
  std::vector<uint32_t> cap_version;  // storage version when captured
  std::vector<Tensor> grad_at_start;
  PtrMap<int> cap_index;
  // Current value of real tensors (captures and constants), by identity.
  PtrMap<Value*> real_value;
  std::vector<std::shared_ptr<TensorImpl>> keep_alive;  // no address reuse during the trace
  // Versions of view roots (bumped by in-place writes while tracing).
  PtrMap<uint64_t> version;
  // Host scalars and guards.
  std::vector<std::function<double()>> hosts;
  std::vector<std::function<std::string()>> guards;
  // Random generator at the start of the trace.
  uint64_t rng_offset = 0;
  uint64_t rng_seed = 0;
  bool uses_rng = false;
  int num_args = 0;
  std::vector<Tensor> arg_standins;  // symbolic stand-ins of the arguments
  std::vector<int> arg_index;        // the argument number of each stand-in
  std::vector<Value*> arg_input;     // the graph input of each stand-in
  std::vector<Tensor> arg_grad_at_start;
  bool grads_touched = false;  // a .grad was set or accumulated into while tracing
  std::vector<std::weak_ptr<TensorImpl>> created;  // every symbolic tensor made
  std::vector<OutSpec> specs;                      // record()'s output specs (reused)
  bool done = false;
};

Tracer::Tracer(bool fallback) : st_(std::make_unique<State>()) {
  static std::atomic<uint64_t> next_id{1};
  st_->id = next_id.fetch_add(1);
  st_->fallback = fallback;
  st_->rng_offset = default_generator().offset;
  st_->rng_seed = default_generator().seed;
}

Tracer::~Tracer() {
  if (!st_->done) restore();
}

Tensor Tracer::make_symbolic(Value* v, const TensorMeta& m) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = m.shape;
  impl->strides = contiguous_strides(m.shape);
  impl->dtype = m.dtype;
  impl->wrapped_number = v->wrapped_number;
  auto ref = std::make_shared<ValueRef>();
  ref->owner = st_->id;
  ref->value = v;
  impl->trace = std::move(ref);
  st_->created.push_back(impl);
  return Tensor(std::move(impl));
}

Tensor Tracer::add_arg(const Tensor& real, int index) {
  KILN_CHECK(real.defined(), "[compile] argument ", index, " is an undefined tensor");
  Value* v =
      st_->graph->add_input(real.dtype(), to_sym_shape(real.shape()), numbered("arg", index));
  v->wrapped_number = real.impl()->wrapped_number;  // promotes like a C++ number
  st_->inputs.push_back({InputBinding::kArg, index});
  Tensor t = make_symbolic(v, {real.dtype(), real.shape()});
  if (real.requires_grad() && real.is_leaf()) {
    t.requires_grad_(true);
    // backward() inside the function accumulates into the argument's .grad:
    // the stand-in starts from the real .grad (read as captured state).
    if (real.grad().defined()) t.set_grad(real.grad());
  } else if (real.requires_grad()) {
    t.requires_grad_(true);
  }
  st_->arg_standins.push_back(t);
  st_->arg_index.push_back(index);
  st_->arg_input.push_back(v);
  st_->arg_grad_at_start.push_back(t.grad());
  ++st_->num_args;
  return t;
}

int Tracer::capture(const Tensor& t) {
  if (const int* k = st_->cap_index.find(t.impl())) return *k;
  const int k = static_cast<int>(st_->captured.size());
  st_->captured.push_back(t.impl_ptr());
  Capture c;
  c.tensor = t.impl_ptr();
  c.dtype = t.dtype();
  c.shape = t.shape();
  c.requires_grad = t.requires_grad();
  c.grad_defined = t.grad().defined();
  st_->captures.push_back(c);
  st_->grad_at_start.push_back(t.grad());
  st_->cap_version.push_back(t.impl()->storage ? t.impl()->storage->version : 0);
  Value* v = st_->graph->add_input(t.dtype(), to_sym_shape(t.shape()), numbered("cap", k));
  st_->inputs.push_back({InputBinding::kCapture, k});
  st_->cap_input.push_back(v);
  st_->cap_index[t.impl()] = k;
  st_->real_value[t.impl()] = v;
  return k;
}

Value* Tracer::value_of(const Tensor& t, const char* op, size_t slot) {
  if (t.is_symbolic()) {
    ValueRef* r = ref_of(t, st_->id);
    KILN_CHECK(r != nullptr, "[", op, "] input ", slot,
               " is a symbolic tensor from another trace: a traced value escaped its compiled "
               "function without being made real (one it also returned, or one from a trace "
               "that failed); store a clone of a returned tensor instead");
    if (r->base) {
      const uint64_t* v = st_->version.find(r->base);
      KILN_CHECK(v == nullptr || *v == r->base_version, "[", op, "] input ", slot,
                 " is a view of a tensor that was modified in place after the view was "
                 "taken; compiled functions do not support reading such views (take the view "
                 "after the write, or use an out-of-place op)");
    }
    return r->value;
  }
  if (Value* const* v = st_->real_value.find(t.impl())) return *v;
  if (t.impl()->wrapped_number || t.impl()->born_while_tracing) {
    // A temporary of the traced code (a C++ number, a small table it built).
    Node* c = st_->graph->add_constant(t);
    st_->keep_alive.push_back(t.impl_ptr());
    st_->real_value[t.impl()] = c->output();
    return c->output();
  }
  capture(t);
  return st_->real_value.at(t.impl());
}

std::vector<Tensor> Tracer::record(OpId op, std::span<const Tensor> inputs, const Attrs& attrs,
                                   const std::vector<TensorMeta>& out) {
  const OpInfo& info = op_info(op);
  std::vector<Value*> ins;
  ins.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) ins.push_back(value_of(inputs[i], info.name, i));
  Attrs at = attrs;
  if (info.has(kRandom)) {
    const uint64_t seed = static_cast<uint64_t>(attrs.i("seed"));
    const uint64_t offset = static_cast<uint64_t>(attrs.i("offset"));
    if (seed == st_->rng_seed && offset >= st_->rng_offset && offset < default_generator().offset) {
      // Drawn from the default generator: offsets become relative to the base
      // drawn at each call; the seed is the generator's at each call (0 in the IR).
      st_->uses_rng = true;
      at.set("seed", AttrValue(int64_t{0}))
          .set("offset", AttrValue(static_cast<int64_t>(offset - st_->rng_offset)));
    } else {
      at.set("fixed_seed", true);  // an explicit (seed, offset): the same numbers every call
    }
  }
  // Recomputation of a checkpoint region in the traced backward: marked, so
  // CSE keeps it apart from the forward's identical nodes (which would undo it).
  if (const uint64_t r = autograd::recompute_region())
    at.set("recompute", AttrValue(static_cast<int64_t>(r)));
  std::vector<OutSpec>& specs = st_->specs;
  specs.clear();
  for (const TensorMeta& m : out) specs.push_back({m.dtype, to_sym_shape(m.shape)});
  Node* n = st_->graph->add_op_specs(op, std::move(ins), std::move(at), specs);
  std::vector<Tensor> res;
  res.reserve(out.size());
  for (size_t i = 0; i < out.size(); ++i) res.push_back(make_symbolic(n->outputs[i], out[i]));
  if (info.has(kView) && !inputs.empty()) {
    // The view's root: the input's root if it is itself a view, else the input.
    const Tensor& src = inputs[0];
    const TensorImpl* root = src.impl();
    if (ValueRef* r = src.is_symbolic() ? ref_of(src, st_->id) : nullptr; r && r->base)
      root = r->base;
    if (root == src.impl()) st_->keep_alive.push_back(src.impl_ptr());
    for (Tensor& o : res) {
      auto* r = static_cast<ValueRef*>(o.impl()->trace.get());
      r->base = root;
      r->base_version = st_->version[root];
    }
  }
  return res;
}

void Tracer::on_value_read(const char* what, const std::source_location& where) {
  std::string msg =
      str("[trace] ", what, "() reads the value of a traced tensor at ", where_str(where),
          ". A compiled function cannot depend on tensor values: move the read "
          "out of the compiled function, express it with tensor ops (where, "
          "clamp, ...), or compile with {.fallback = kiln::Fallback::kEager} to "
          "run this signature eagerly");
  if (st_->fallback) throw TraceFallback(msg);
  throw Error(msg);
}

void Tracer::on_inplace(const Tensor& target, const Tensor& value) {
  Value* v = value_of(value, "in-place write", 1);
  if (v->dtype != target.dtype()) {
    Attrs a;
    a.set("dtype", target.dtype());
    v = st_->graph->add_op(OpId::cast, {v}, a, {{target.dtype(), v->shape}})->output();
  }
  st_->version[target.impl()]++;
  if (target.is_symbolic()) {
    ValueRef* r = ref_of(target, st_->id);
    KILN_CHECK(r != nullptr, "[in-place write] the target is a symbolic tensor from another trace");
    KILN_CHECK(r->base == nullptr,
               "[in-place write] writing in place into a view (reshape, "
               "slice, transpose, expand result) is not supported while tracing; use an "
               "out-of-place op");
    auto ref = std::make_shared<ValueRef>();
    ref->owner = st_->id;
    ref->value = v;
    target.impl()->trace = std::move(ref);
    return;
  }
  // A real tensor: captured state (written back after each run) or a temporary.
  if (!(target.impl()->wrapped_number || target.impl()->born_while_tracing))
    capture(target);
  else
    st_->keep_alive.push_back(target.impl_ptr());
  st_->real_value[target.impl()] = v;
}

Tensor Tracer::on_detach(const Tensor& t) {
  // A detached temporary stays a constant; detached state (w.detach() of a
  // parameter) reads the state's current value at every call.
  if (t.impl()->wrapped_number || t.impl()->born_while_tracing) return {};
  Value* v = value_of(t, "detach", 0);
  return make_symbolic(v, {t.dtype(), t.shape()});
}

void Tracer::on_grad_change(const Tensor& t) {
  st_->grads_touched = true;
  // Capturing now records the .grad from before the change (restored after the
  // trace, guarded at every call).
  if (!t.is_symbolic() && !t.impl()->wrapped_number && !t.impl()->born_while_tracing) capture(t);
}

Tensor Tracer::host_scalar(const std::function<double()>& fn) {
  // Not called now: every run (the first included) calls the host scalars in
  // trace order, so an abandoned trace leaves host state untouched.
  const int h = static_cast<int>(st_->hosts.size());
  st_->hosts.push_back(fn);
  Value* v = st_->graph->add_input(DType::f64, {}, numbered("host", h));
  v->wrapped_number = true;
  st_->inputs.push_back({InputBinding::kHost, h});
  return make_symbolic(v, {DType::f64, {}});
}

void Tracer::add_guard(std::function<std::string()> check) {
  st_->guards.push_back(std::move(check));
}

void Tracer::host_action(const std::function<void()>& fn) {
  // Deferred like host_scalar (no graph input): every run, the first included,
  // calls it in trace order, so an abandoned trace leaves host state untouched.
  st_->hosts.push_back([fn] {
    fn();
    return 0.0;
  });
}

void Tracer::restore() {
  for (size_t k = 0; k < st_->captured.size(); ++k) {
    Tensor t(st_->captured[k]);
    if (!t.grad().is_same(st_->grad_at_start[k])) t.set_grad(st_->grad_at_start[k]);
    if (t.impl()->storage) t.impl()->storage->version = st_->cap_version[k];
  }
  default_generator().offset = st_->rng_offset;
  st_->done = true;
}

void Tracer::abort() {
  if (!st_->done) restore();
}

void Tracer::note_results(const std::vector<Tensor>& results) {
  for (size_t i = 0; i < results.size(); ++i)
    if (results[i].defined()) value_of(results[i], "return", i);
}

Tensor Tracer::add_grad_output(const Tensor& result, int index) {
  Value* v =
      st_->graph->add_input(result.dtype(), to_sym_shape(result.shape()), numbered("gout", index));
  st_->inputs.push_back({InputBinding::kGradOut, index});
  return make_symbolic(v, {result.dtype(), result.shape()});
}

bool Tracer::grads_changed() const {
  // Also true when the traced code accumulated into a .grad in place (after
  // zeroing it with zero_()): the .grad tensor is the same, its value is not.
  if (st_->grads_touched) return true;
  for (size_t k = 0; k < st_->captured.size(); ++k)
    if (!Tensor(st_->captured[k]).grad().is_same(st_->grad_at_start[k])) return true;
  return false;
}

const std::vector<std::shared_ptr<TensorImpl>>& Tracer::captured() const {
  return st_->captured;
}

TraceResult Tracer::finish(const std::vector<Tensor>& results, const std::vector<Tensor>& grads) {
  KILN_ASSERT(!st_->done, "Tracer::finish called twice");
  Graph& g = *st_->graph;
  TraceResult r;
  std::vector<OutputBinding> outs;
  for (size_t i = 0; i < results.size(); ++i) {
    KILN_CHECK(results[i].defined(),
               "[compile] the compiled function returned an undefined "
               "tensor as result ",
               i);
    Value* v = value_of(results[i], "return", i);
    g.add_output(v, numbered("out", i));
    outs.push_back({OutputBinding::kResult, static_cast<int>(i)});
    uint8_t kind = 0;
    if (v->producer == nullptr) {
      bool itself = st_->cap_index.contains(results[i].impl());
      for (const Tensor& a : st_->arg_standins) itself = itself || a.is_same(results[i]);
      kind = itself ? 1 : 2;
    }
    r.result_is_input.push_back(kind);
  }
  // Arguments the function updated in place (y = x; y.add_(1)): written back
  // like captured state, as eager would have changed the caller's tensor.
  for (size_t i = 0; i < st_->arg_standins.size(); ++i) {
    const ValueRef* ref = ref_of(st_->arg_standins[i], st_->id);
    if (ref == nullptr || ref->value == st_->arg_input[i]) continue;
    g.add_output(ref->value, numbered("write:arg", st_->arg_index[i]));
    outs.push_back({OutputBinding::kArgWrite, st_->arg_index[i]});
  }
  // backward() inside the function: the arguments' .grad.
  for (size_t i = 0; i < st_->arg_standins.size(); ++i) {
    Tensor now = st_->arg_standins[i].grad();
    if (!now.defined() || now.is_same(st_->arg_grad_at_start[i])) continue;
    g.add_output(value_of(now, "grad", i), numbered("grad:arg", st_->arg_index[i]),
                 OutputRole::kGradient);
    outs.push_back({OutputBinding::kArgGrad, st_->arg_index[i]});
  }
  for (size_t j = 0; j < grads.size(); ++j) {
    if (!grads[j].defined()) continue;
    g.add_output(value_of(grads[j], "grad", j), numbered("gin", j));
    outs.push_back({OutputBinding::kGradIn, static_cast<int>(j)});
  }
  // Mutated captures, then .grad changes. Walking by index also covers
  // captures added while handling these (a .grad that was itself captured).
  for (size_t k = 0; k < st_->captured.size(); ++k) {
    Value* now = st_->real_value.at(st_->captured[k].get());
    if (now != st_->cap_input[k]) {
      g.add_output(now, numbered("write:cap", k));
      outs.push_back({OutputBinding::kWrite, static_cast<int>(k)});
    }
  }
  const size_t ncap = st_->captured.size();
  for (size_t k = 0; k < ncap; ++k) {
    Tensor t(st_->captured[k]);
    Tensor now = t.grad();
    if (now.is_same(st_->grad_at_start[k])) continue;
    if (!now.defined()) {
      r.cleared_grads.push_back(static_cast<int>(k));
      continue;
    }
    g.add_output(value_of(now, "grad", k), numbered("grad:cap", k), OutputRole::kGradient);
    outs.push_back({OutputBinding::kGrad, static_cast<int>(k)});
  }
  const uint64_t advance = default_generator().offset - st_->rng_offset;
  g.rng_advance = SymInt(static_cast<int64_t>(advance));
  restore();
  // Symbolic tensors still held outside the trace once the .grad fields are
  // restored and the view roots kept for the trace's address checks are let
  // go: not results, stand-ins or gradients, so state the call stored.
  st_->keep_alive.clear();
  std::unordered_set<const TensorImpl*> known;
  for (const Tensor& t : results) known.insert(t.impl());
  for (const Tensor& t : grads)
    if (t.defined()) known.insert(t.impl());
  for (const Tensor& t : st_->arg_standins) {
    known.insert(t.impl());
    if (t.grad().defined()) known.insert(t.grad().impl());
  }
  for (const auto& w : st_->created) {
    if (w.expired()) continue;  // most are: a load, not lock()'s atomic exchange
    std::shared_ptr<TensorImpl> impl = w.lock();
    if (!impl || known.count(impl.get())) continue;
    const ValueRef* ref = ref_of(Tensor(impl), st_->id);
    if (ref == nullptr || ref->value->producer == nullptr) continue;  // an input stand-in
    g.add_output(ref->value, numbered("escaped", r.escaped.size()));
    outs.push_back({OutputBinding::kEscaped, static_cast<int>(r.escaped.size())});
    r.escaped.push_back(impl);
  }
  r.graph = std::move(st_->graph);
  r.inputs = std::move(st_->inputs);
  r.outputs = std::move(outs);
  r.captured = std::move(st_->captured);
  r.captures = std::move(st_->captures);
  r.hosts = std::move(st_->hosts);
  r.guards = std::move(st_->guards);
  r.uses_rng = st_->uses_rng || advance > 0;
  st_->created.clear();
  return r;
}

}  // namespace kiln::ir
