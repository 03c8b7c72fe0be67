// Constant folding: evaluates a node at compile time with the eager kernels and
// replaces it by constant node(s).
//
// Rules (and why):
// - Inputs: every input must be a constant node without symbolic value
//   (sym_attrs; its data is only a placeholder for a value known at each call)
//   or a `full` node that could itself be evaluated. Graph inputs are never
//   constant: parameters and host scalars are re-read at every call.
// - The node must have no sym_attrs and static output shapes: its value would
//   depend on the call's symbol bindings.
// - Random nodes (kRandom) are never folded: the contract says each call
//   draws anew (their offset is relative to a per-call generator base).
// - Factories without inputs fold (arange), except `full` on its own: a full
//   is already as cheap as a constant and may be huge (zeros of a whole
//   activation), so folding it only costs memory. A `full` still counts as a
//   constant input of its users; it is evaluated for them and left to dce.
// - Outputs larger than kMaxFoldElements in total are not folded, and a `full`
//   is evaluated as an input only up to that size, to bound compile-time
//   memory and the size of the graph's constants.
// - The pass runs with no Recorder installed (or kernels and the copies made by
//   add_constant would be traced instead of computed) and under NoGradGuard
//   (no tape); the caller's state is restored on exit.
// - An exception from the op's rule or kernel means "do not fold": the node
//   stays and the executor reports the error when (and if) the node runs, as
//   eager would.
// - A result whose dtype or shape disagrees with the node's outputs is not
//   folded either (verify reports such graphs; folding must not hide them).
// The constant keeps the output's wrapped-number flag, which dtype promotion
// in its users depends on.
//
// Devices: the IR records none; the plan picks its device from the arguments
// after the trace. At run time every op's output lives on that device (the
// executor makes factories there and moves dispatched results there), while a
// constant holds its tensor where that tensor is: a non-scalar one where the
// graph runs (captured tensors are checked to be there, frozen ones become
// such constants). A fold must not move a value (a CPU constant for arange(T)
// fed index_select with a CUDA table: "expected all tensors on one device"),
// so each result is placed on the graph's device:
// - the one a FoldDeviceScope names (the compile driver knows it), else
// - the device of a non-scalar constant input (which lives there), else
// - unknown (a factory, or fulls and scalars only): a 0-d result that is no
//   graph output stays a host scalar (valid input on every device; fuse
//   inlines such constants); a result whose elements are all equal becomes a
//   `full` (a factory: made where the graph runs, an immediate in kernels);
//   other results are not folded.
#include "kiln/passes/fold_constants.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <unordered_map>

#include "kiln/autograd.h"
#include "kiln/dispatch.h"

namespace kiln::passes {
namespace {

// Largest number of output elements a fold may produce (4 MiB of f32).
constexpr int64_t kMaxFoldElements = int64_t{1} << 20;

// Installs no recorder and no tape for the lifetime of the scope.
class EagerScope {
 public:
  EagerScope() : prev_(set_recorder(nullptr)) {}
  ~EagerScope() { set_recorder(prev_); }
  EagerScope(const EagerScope&) = delete;
  EagerScope& operator=(const EagerScope&) = delete;

 private:
  Recorder* prev_;
  NoGradGuard no_grad_;
};

int64_t total_elements(const ir::Node* n) {
  int64_t total = 0;
  for (const ir::Value* o : n->outputs) {
    int64_t k = 1;
    for (const ir::SymInt& s : o->shape)
      if (__builtin_mul_overflow(k, s.b, &k)) return INT64_MAX;
    if (__builtin_add_overflow(total, k, &total)) return INT64_MAX;
  }
  return total;
}

bool static_outputs(const ir::Node* n) {
  return std::all_of(n->outputs.begin(), n->outputs.end(),
                     [](const ir::Value* o) { return ir::is_static(o->shape); });
}

// Runs n's op on `inputs`; returns false if the op threw or the result does not
// match n's outputs.
bool evaluate(const ir::Node* n, const std::vector<Tensor>& inputs, std::vector<Tensor>& out) {
  try {
    out = dispatch(n->op, inputs, n->attrs);
  } catch (const std::exception&) {
    return false;  // kiln::Error, InternalError or bad_alloc: the executor will report it
  }
  if (out.size() != n->outputs.size()) return false;
  for (size_t i = 0; i < out.size(); ++i) {
    const ir::Value* o = n->outputs[i];
    if (out[i].dtype() != o->dtype || ir::to_sym_shape(out[i].shape()) != o->shape) return false;
  }
  return true;
}

// Values of the constant-like producers seen so far.
class ConstantValues {
 public:
  /// The value of v if it is known at compile time (null otherwise).
  const Tensor* get(const ir::Value* v) {
    const ir::Node* p = v->producer;
    if (p == nullptr || !p->sym_attrs.empty()) return nullptr;
    if (p->is_constant()) return &p->constant;
    if (!p->is_op(OpId::full) || !static_outputs(p) || total_elements(p) > kMaxFoldElements)
      return nullptr;
    auto it = fulls_.find(p);
    if (it == fulls_.end()) {
      std::vector<Tensor> out;
      if (!evaluate(p, {}, out)) out = {Tensor()};
      it = fulls_.emplace(p, out[0]).first;
    }
    return it->second.defined() ? &it->second : nullptr;
  }

 private:
  // Keyed by pointer for lookup only; never iterated.
  std::unordered_map<const ir::Node*, Tensor> fulls_;
};

bool foldable(const ir::Node* n) {
  if (n->is_constant() || n->is_op(OpId::full)) return false;
  if (n->info().has(kRandom) || n->info().has(kCollective) || !n->sym_attrs.empty())
    return false;  // collectives talk to other ranks: never evaluated at compile time
  return static_outputs(n) && total_elements(n) <= kMaxFoldElements;
}

// Places a folded result `t` on the device of the value `old` it replaces,
// `where` (the graph's, if known); false where that device is unknown or the
// result cannot move there (see the rules).
bool place(const ir::Graph& g, const ir::Value* old, std::optional<Device> where, Tensor& t) {
  if (t.dim() == 0 && t.device().is_cpu() && !g.is_output(old)) return true;  // a host scalar
  if (!where) return false;
  if (t.device() == *where) return true;
  if (!t.device().is_cpu()) return false;
  t = t.to(*where);
  return true;
}

// A `full` node before n with t's value if every element of t has the same
// bits that a full of its first value makes (NaNs excluded); else null.
ir::Value* uniform_full(ir::Graph& g, ir::Node* n, const Tensor& t) {
  if (t.numel() == 0) return nullptr;
  const Tensor c = t.cpu().contiguous();  // a result on a device read through the host
  const auto* data = static_cast<const unsigned char*>(c.data_ptr());
  const size_t size = dtype_size(t.dtype());
  for (int64_t i = 1; i < t.numel(); ++i)
    if (std::memcmp(data, data + static_cast<size_t>(i) * size, size) != 0) return nullptr;
  const Tensor first = c.reshape({-1}).slice(0, 0, 1).reshape({});
  const double v = first.item<double>();
  if (std::isnan(v)) return nullptr;
  Attrs at;
  at.set("shape", t.shape()).set("value", AttrValue(v));
  if (!is_floating(t.dtype())) at.set("ivalue", AttrValue(first.item<int64_t>()));
  at.set("dtype", t.dtype());
  const Tensor made = dispatch(OpId::full, {}, at)[0];
  if (std::memcmp(made.data_ptr(), data, size) != 0) return nullptr;  // not exact as a full
  return g.add_op(OpId::full, {}, std::move(at), {{t.dtype(), ir::to_sym_shape(t.shape())}}, n)
      ->output();
}

// The device of n's first non-scalar constant input (where the graph runs).
std::optional<Device> implied_device(const ir::Node* n) {
  for (const ir::Value* v : n->inputs)
    if (v->producer->is_constant() && v->producer->constant.dim() > 0)
      return v->producer->constant.device();
  return std::nullopt;
}

thread_local FoldDeviceScope* current_scope = nullptr;

}  // namespace

FoldDeviceScope::FoldDeviceScope(Device device) : device_(device), outer_(current_scope) {
  current_scope = this;
}
FoldDeviceScope::~FoldDeviceScope() {
  current_scope = outer_;
}
std::optional<Device> FoldDeviceScope::current() {
  return current_scope ? std::optional<Device>(current_scope->device_) : std::nullopt;
}

bool fold_constants(ir::Graph& g) {
  // Over the whole pass: add_constant copies tensors with ops too.
  EagerScope scope;
  bool changed = false;
  ConstantValues known;
  const std::optional<Device> dev = FoldDeviceScope::current();
  for (ir::Node* n : g.nodes()) {
    if (!foldable(n)) continue;
    std::vector<Tensor> inputs;
    for (const ir::Value* v : n->inputs) {
      const Tensor* t = known.get(v);
      if (t == nullptr) break;
      inputs.push_back(*t);
    }
    if (inputs.size() != n->inputs.size()) continue;
    std::vector<Tensor> out;
    if (!evaluate(n, inputs, out)) continue;
    const std::optional<Device> where = dev ? dev : implied_device(n);
    bool placed = true;
    for (size_t i = 0; i < out.size() && placed; ++i)
      placed = place(g, n->outputs[i], where, out[i]);
    if (!placed) {
      // The graph's device is unknown: a uniform single result still folds as a `full`.
      ir::Value* f = out.size() == 1 ? uniform_full(g, n, out[0]) : nullptr;
      if (f == nullptr) continue;
      f->wrapped_number = n->output()->wrapped_number;
      f->name = n->output()->name;
      g.replace_all_uses(n->output(), f);
      g.erase(n);
      changed = true;
      continue;
    }
    for (size_t i = 0; i < out.size(); ++i) {
      ir::Value* old = n->outputs[i];
      // add_constant copies the data, so a view result (reshape of a constant)
      // does not keep the input's storage alive.
      ir::Node* c = g.add_constant(out[i], n);
      c->constant.impl()->wrapped_number = old->wrapped_number;
      c->output()->wrapped_number = old->wrapped_number;
      c->output()->name = old->name;
      g.replace_all_uses(old, c->output());
    }
    g.erase(n);
    changed = true;
  }
  return changed;
}

}  // namespace kiln::passes
