// The autograd tape and engine. Op nodes call their primitive's derivative
// rule (written in Tensor ops, so running it with grad mode on builds a new
// graph: that is create_graph / double backward).
#include "kiln/autograd.h"
#include "kiln/profiler.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <queue>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "autograd_internal.h"
#include "kiln/dispatch.h"
#include "kiln/functional.h"
#include "kiln/grad_destination.h"
#include "kiln/random.h"
#include "ops/loops.h"

namespace kiln {
namespace {

thread_local bool t_grad_mode = true;
// Callbacks queued during the innermost backward running on this thread.
thread_local std::vector<std::function<void()>>* t_callbacks = nullptr;
std::atomic<uint64_t> g_sequence{0};

std::string released_msg() {
  return "[backward] trying to backward through the graph a second time (or to use saved "
         "tensors after they were freed); pass retain_graph=true to the first backward";
}

/// The node of one primitive call.
class OpNode final : public Node {
 public:
  OpNode(OpId op, const Attrs& attrs) : op_(op), attrs_(attrs) {}

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const OpInfo& info = op_info(op_);
    if (released_) throw GraphReleasedError(released_msg());
    std::vector<Tensor> in(saved_in_.size()), out(saved_out_.size());
    auto self = shared_from_this();
    // Gradient destinations are offered to the rule's kernels only, not to a
    // checkpoint's recomputed forward (its results outlive this call).
    auto* pending = std::exchange(autograd::t_pending_destinations, nullptr);
    for (size_t i = 0; i < saved_in_.size(); ++i)
      if (saved_in_[i].defined()) in[i] = saved_in_[i].unpack(self, info.name);
    for (size_t i = 0; i < saved_out_.size(); ++i)
      if (saved_out_[i].defined()) out[i] = saved_out_[i].unpack(self, info.name);
    std::vector<Tensor> gi(in_meta_.size());
    uint32_t needs = 0;
    for (size_t i = 0; i < next_edges.size() && i < 32; ++i)
      if (next_edges[i].valid()) needs |= 1u << i;
    VjpArgs args{in, out, grads, in_meta_, attrs_, needs};
    autograd::t_pending_destinations = pending;
    info.vjp(args, gi);
    autograd::t_pending_destinations = nullptr;
    KILN_ASSERT(gi.size() == in_meta_.size(), info.name, " rule returned ", gi.size(), " grads");
    for (size_t i = 0; i < gi.size(); ++i) {
      if (!gi[i].defined()) continue;
      if (!(gi[i].shape() == in_meta_[i].shape)) gi[i] = sum_to(gi[i], in_meta_[i].shape);
      if (gi[i].dtype() != in_meta_[i].dtype) gi[i] = cast(gi[i], in_meta_[i].dtype);
    }
    return gi;
  }
  std::string name() const override {
    std::string n = op_info(op_).name;
    if (!n.empty()) n[0] = static_cast<char>(std::toupper(n[0]));
    return n + "Backward";
  }
  void release() override {
    for (auto& s : saved_in_) s.reset();
    for (auto& s : saved_out_) s.reset();
    released_ = true;
  }
  bool released() const override { return released_; }

  OpId op_;
  Attrs attrs_;
  std::vector<SavedTensor> saved_in_, saved_out_;
  std::vector<TensorMeta> in_meta_;
  bool released_ = false;
};

/// The sink of a leaf: accumulates into .grad and runs the leaf's hooks.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {
    num_outputs = 1;
    sequence_nr = UINT64_MAX;  // run as soon as ready
  }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    Tensor g = grads.empty() ? Tensor() : grads[0];
    if (!g.defined()) return {};
    Tensor leaf(leaf_);
    if (Recorder* r = current_recorder()) r->on_grad_change(leaf);
    AutogradMeta& m = leaf_->autograd_meta();
    for (size_t i = 0; i < m.leaf_hooks.size(); ++i) {
      Tensor r = m.leaf_hooks[i](g);
      if (!r.defined()) continue;
      // As PyTorch: a hook may change the value, not what the gradient is.
      KILN_CHECK(r.shape() == g.shape() && r.dtype() == g.dtype(), "[backward] tensor hook ", i,
                 " of a leaf of shape ", leaf.shape(), " (", leaf.dtype(),
                 ") returned a gradient of shape ", r.shape(), " (", r.dtype(), "), expected ",
                 g.shape(), " (", g.dtype(), ")");
      g = r;
    }
    if (!m.grad.defined() && accumulate_into_destination(leaf, g)) {
      // .grad is now the leaf's destination buffer
    } else if (!m.grad.defined()) {
      bool steal = !grad_mode_enabled() && g.is_contiguous() && g.impl_ptr().use_count() <= 2 &&
                   g.impl()->storage && g.impl()->storage.use_count() == 1 &&
                   g.dtype() == leaf.dtype();
      if (grad_mode_enabled())
        m.grad = g;
      else
        m.grad = steal ? g.detach() : g.detach().clone();
    } else if (current_recorder()) {
      // While tracing, a new value rather than add_: the plan then writes the
      // sum back as a gradient and fires the post-accumulate hooks (DDP
      // reduces it), where an in-place write of .grad would fire none. The
      // clone, as for a first gradient: elide_copies drops it or, for a
      // weight's gradient (a permute of a matmul), computes the gradient
      // untransposed, which the add would otherwise read through a strided
      // copy (1024 x 1024: cache-set conflicts, ~5 ms per step).
      m.grad = m.grad + g.clone();
    } else if (grad_mode_enabled()) {
      m.grad = m.grad + g;
    } else {
      m.grad.add_(g.detach());
    }
    // While tracing, the gradient is symbolic: a compiled run fires the plain
    // hooks when it writes the real gradient back (as soon as it is computed);
    // traceable hooks run now and their ops become part of the graph.
    if (!current_recorder())
      for (auto& h : m.post_accumulate_hooks) h(leaf);
    for (size_t i = 0; i < m.traceable_post_accumulate_hooks.size(); ++i)
      m.traceable_post_accumulate_hooks[i](leaf);
    return {};
  }
  std::string name() const override { return "AccumulateGrad"; }
  std::shared_ptr<TensorImpl> leaf_;

 private:
  // A first gradient with a destination (kiln/grad_destination.h): adopted if
  // its kernel wrote it there, else copied there. False: no destination applies.
  static bool accumulate_into_destination(const Tensor& leaf, Tensor g) {
    if (grad_mode_enabled() || current_recorder() || !autograd::any_grad_destination())
      return false;
    Tensor dst = autograd::find_grad_destination(*leaf.impl());
    if (!dst.defined()) return false;
    KILN_CHECK(g.dtype() == dst.dtype() && g.device() == dst.device() && g.shape() == dst.shape(),
               "[backward] the gradient of a leaf with a gradient destination (", dst.dtype(), " ",
               dst.shape(), " on ", dst.device(), ") is ", g.dtype(), " ", g.shape(), " on ",
               g.device());
    const bool same_storage = g.impl()->storage == dst.impl()->storage;
    if (same_storage && g.offset() == dst.offset() && g.strides() == dst.strides()) {
      autograd::count_grad_destination(true);
    } else {
      // Memory that merely overlaps the destination (a claim the engine could
      // not match exactly) is read before it is overwritten.
      Tensor src = same_storage ? g.detach().clone() : g.detach();
      dst.copy_(src);
      autograd::count_grad_destination(false);
    }
    leaf.impl()->autograd_meta().grad = dst;
    return true;
  }
};

/// A node whose backward is a user/closure function (checkpoint, compiled regions).
class FunctionNode final : public Node {
 public:
  FunctionNode(std::string name, BackwardFn fn, std::vector<TensorMeta> in_meta)
      : name_(std::move(name)), fn_(std::move(fn)), in_meta_(std::move(in_meta)) {}
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    if (!fn_) throw GraphReleasedError(released_msg());
    auto gi = fn_(grads);
    KILN_CHECK(gi.size() == in_meta_.size(), "[", name_, "] backward returned ", gi.size(),
               " gradients for ", in_meta_.size(), " inputs");
    for (size_t i = 0; i < gi.size(); ++i) {
      if (!gi[i].defined()) continue;
      KILN_CHECK(gi[i].shape() == in_meta_[i].shape, "[", name_, "] gradient ", i, " has shape ",
                 gi[i].shape(), ", expected ", in_meta_[i].shape);
    }
    return gi;
  }
  std::string name() const override { return name_; }
  void release() override { fn_ = nullptr; }
  bool released() const override { return !fn_; }

 private:
  std::string name_;
  BackwardFn fn_;
  std::vector<TensorMeta> in_meta_;
};

std::shared_ptr<Node> grad_accumulator(const Tensor& t) {
  AutogradMeta& m = t.impl()->autograd_meta();
  auto acc = m.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    m.grad_accumulator = acc;
  }
  return acc;
}

// Gives `out` (a fresh result) the autograd edge (node, nr).
void set_history(Tensor& out, const std::shared_ptr<Node>& node, uint32_t nr) {
  AutogradMeta& m = out.impl()->autograd_meta();
  m.grad_fn = node;
  m.output_nr = nr;
}

}  // namespace

bool grad_mode_enabled() {
  return t_grad_mode;
}

namespace autograd {
bool in_backward() {
  return t_callbacks != nullptr;
}
void queue_callback(std::function<void()> cb) {
  KILN_CHECK(t_callbacks != nullptr,
             "[queue_callback] can only be called while a backward pass is running");
  t_callbacks->push_back(std::move(cb));
}
}  // namespace autograd
void set_grad_mode(bool enabled) {
  t_grad_mode = enabled;
}

// ---------------- SavedTensor ----------------
SavedTensor::SavedTensor(const Tensor& t, bool is_output) : is_output_(is_output) {
  version_ = t.version();
  if (is_output) {
    if (auto* m = t.impl()->autograd.get()) {
      grad_fn_ = m->grad_fn;
      output_nr_ = m->output_nr;
    }
  }
  frame_ = autograd::checkpoint_save(t, is_output, slot_);
  if (frame_) return;  // dropped: its checkpoint region recomputes it
  // Inputs are held strongly: they precede this node, so no cycle.
  data_ = is_output ? t.detach() : t;
}

Tensor SavedTensor::unpack(const std::shared_ptr<Node>& owner, const char* op) const {
  (void)owner;
  if (released_) throw GraphReleasedError(released_msg());
  Tensor data = data_;
  if (frame_) {
    data = autograd::checkpoint_unpack(*frame_, slot_, op);
  } else if (data_.version() != version_) {
    throw Error(str("[", op,
                    "] a tensor saved for backward was modified by an in-place "
                    "operation: it is at version ",
                    data_.version(), ", expected version ", version_));
  }
  if (!is_output_) return data;
  auto fn = grad_fn_.lock();
  if (!fn) return data;
  Tensor t = data.detach();
  set_history(t, fn, output_nr_);
  return t;
}

namespace autograd {

Edge gradient_edge(const Tensor& t) {
  auto* m = t.impl()->autograd.get();
  if (m && m->grad_fn) return {m->grad_fn, m->output_nr};
  if (m && m->requires_grad) return {grad_accumulator(t), 0};
  return {};
}

void record_op(OpId op, std::span<const Tensor> inputs, const Attrs& attrs,
               std::span<Tensor> outputs) {
  const OpInfo& info = op_info(op);
  bool any_float = false;
  for (const Tensor& o : outputs) any_float = any_float || is_floating(o.dtype());
  if (!any_float) return;  // integer results carry no gradient
  auto node = std::make_shared<OpNode>(op, attrs);
  node->sequence_nr = g_sequence.fetch_add(1);
  node->num_outputs = static_cast<uint32_t>(outputs.size());
  node->next_edges.resize(inputs.size());
  node->in_meta_.resize(inputs.size());
  node->saved_in_.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    node->in_meta_[i] = {inputs[i].dtype(), inputs[i].shape()};
    if (!info.nondiff_input(i)) node->next_edges[i] = gradient_edge(inputs[i]);
  }
  if (info.saves & kSaveInputs) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (info.saved_only_for_others(i)) {
        bool other = false;
        for (size_t j = 0; j < inputs.size(); ++j)
          if (j != i && node->next_edges[j].valid()) other = true;
        if (!other) continue;
      }
      node->saved_in_[i] = SavedTensor(inputs[i], false);
    }
  }
  for (size_t i = 0; i < outputs.size(); ++i)
    if (is_floating(outputs[i].dtype())) set_history(outputs[i], node, static_cast<uint32_t>(i));
  if (info.saves & kSaveOutputs) {
    node->saved_out_.resize(outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i) node->saved_out_[i] = SavedTensor(outputs[i], true);
    // SavedTensor of an integer output (e.g. max_pool2d's indices) has no history: fine.
  }
}

namespace {
// An in-place op computes its result out of place, and that node may have saved
// self as an input (mul_ needs the old self for the other operand's gradient).
// Writing the result into self would make that save stale (backward would fail
// its version check) and, as self's history then leads to the node, make self
// and its node hold each other. As PyTorch does for in-place ops, the node
// keeps a copy of the old value instead (a clone, so double backward still
// reaches self's old history). Saves inside a checkpoint region hold no data.
void save_original_self(const Tensor& self, const Tensor& result, const char* op) {
  auto* node = dynamic_cast<OpNode*>(result.grad_fn().get());
  if (node == nullptr || !self.impl()->storage || in_checkpoint_region()) return;
  Tensor original;
  for (SavedTensor& s : node->saved_in_) {
    if (!s.defined()) continue;
    const Tensor saved = s.unpack(nullptr, op);
    if (saved.impl()->storage != self.impl()->storage) continue;
    if (saved.impl() != self.impl()) {  // a view of self (y.mul_(y.t())): its old values
      s = SavedTensor(saved.clone(), false);
      continue;
    }
    if (!original.defined()) original = self.clone();
    s = SavedTensor(original, false);
  }
}
}  // namespace

void commit_inplace(Tensor& self, const Tensor& result, const char* op) {
  if (grad_mode_enabled() && self.is_leaf() && self.requires_grad()) {
    throw Error(str("[", op,
                    "] a leaf tensor that requires grad is used in an in-place "
                    "operation; wrap it in NoGradGuard or use an out-of-place op"));
  }
  KILN_CHECK(result.shape() == self.shape(), "[", op, "] the result of shape ", result.shape(),
             " cannot be written in place into a tensor of shape ", self.shape());
  if (!self.is_symbolic())  // an expanded view: one element would take several results
    for (size_t d = 0; d < self.shape().size(); ++d)
      KILN_CHECK(self.shape()[d] <= 1 || self.strides()[d] != 0, "[", op,
                 "] unsupported operation: more than one element of the written-to tensor "
                 "(shape ",
                 self.shape(), ", strides ", self.strides(),
                 ") refers to a single "
                 "memory location; clone() it before writing in place");
  if (self.is_symbolic() || result.is_symbolic()) {
    Recorder* rec = current_recorder();
    KILN_CHECK(rec != nullptr, "[", op, "] in-place write with a symbolic tensor outside tracing");
    rec->on_inplace(self, result);
  } else {
    if (grad_mode_enabled() && result.requires_grad()) save_original_self(self, result, op);
    NoGradGuard ng;
    Tensor src = result.dtype() == self.dtype() ? result : cast(result, self.dtype());
    ops::copy_into(self, src);
  }
  if (self.impl()->storage) ++self.impl()->storage->version;
  bool track = grad_mode_enabled() && result.requires_grad();
  if (track) {
    KILN_CHECK(is_floating(self.dtype()), "[", op,
               "] cannot write a result that requires grad "
               "into a tensor of dtype ",
               self.dtype());
    AutogradMeta& m = self.impl()->autograd_meta();
    m.grad_fn = result.grad_fn();
    m.output_nr = result.impl()->autograd ? result.impl()->autograd->output_nr : 0;
    if (!m.grad_fn) m.requires_grad = true;  // result was a leaf (e.g. copy_ of a leaf)
  } else if (self.impl()->autograd && self.impl()->autograd->grad_fn) {
    self.impl()->autograd->grad_fn = nullptr;  // overwritten by a value without history
  }
}

}  // namespace autograd

// ---------------- engine ----------------
namespace {

struct GraphTask {
  bool create_graph = false;
  bool accumulate = true;  // false for kiln::grad: capture instead
  // Captures: (node, slot) -> index into results.
  std::map<std::pair<Node*, uint32_t>, size_t> captures;
  std::vector<Tensor> results;
  std::unordered_set<Node*> needed;  // when capturing: nodes on a path to a capture
};

void add_to(Tensor& slot, const Tensor& g) {
  if (!g.defined()) return;
  if (!slot.defined())
    slot = g;
  else
    slot = slot + g;
}

void run_graph(const std::vector<Edge>& roots, const std::vector<Tensor>& root_grads,
               bool retain_graph, GraphTask& task);

// The gradient destinations node n's rule may compute into: output slot i
// reaches a leaf that has a destination and no .grad yet through view nodes
// only, each (and the leaf) fed by this path alone, so nothing else is summed
// into or written over the claimed memory before the leaf adopts it.
std::vector<autograd::PendingDestination> pending_destinations(
    const Node& n, const std::unordered_map<Node*, int>& deps) {
  std::vector<autograd::PendingDestination> found;
  const auto only_this_path = [&](Node* t) {
    auto it = deps.find(t);
    return it != deps.end() && it->second == 1;
  };
  for (size_t i = 0; i < n.next_edges.size(); ++i) {
    Node* t = n.next_edges[i].node.get();
    for (int hop = 0; t && hop < 4 && only_this_path(t); ++hop) {
      if (auto* acc = dynamic_cast<AccumulateGrad*>(t)) {
        const AutogradMeta& m = acc->leaf_->autograd_meta();
        if (m.grad.defined() || !m.leaf_hooks.empty()) break;
        if (Tensor dst = autograd::find_grad_destination(*acc->leaf_); dst.defined())
          found.push_back({dst, i, false});
        break;
      }
      auto* op = dynamic_cast<OpNode*>(t);
      if (!op || !op_info(op->op_).has(kView) || !t->pre_hooks.empty() || !t->retained.empty())
        break;
      Node* next = nullptr;
      int valid = 0;
      for (const Edge& e : t->next_edges)
        if (e.valid()) next = e.node.get(), ++valid;
      t = valid == 1 ? next : nullptr;
    }
  }
  return found;
}

// Whether t's elements all lie inside `region` (a contiguous tensor).
bool lies_within(const Tensor& t, const Tensor& region) {
  if (t.impl()->storage != region.impl()->storage) return false;
  int64_t lo = t.offset(), hi = t.offset();
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.shape()[static_cast<size_t>(d)] == 0) return true;
    const int64_t span =
        (t.shape()[static_cast<size_t>(d)] - 1) * t.strides()[static_cast<size_t>(d)];
    (span < 0 ? lo : hi) += span;
  }
  return lo >= region.offset() && hi < region.offset() + region.numel();
}

// After a rule ran with destinations: a gradient that landed in a claimed
// destination but is not bound for it (another output of the rule took the
// memory) moves out, since the leaf's gradient will be written there.
void release_claims(std::vector<Tensor>& out,
                    const std::vector<autograd::PendingDestination>& pending) {
  for (size_t j = 0; j < out.size(); ++j) {
    if (!out[j].defined() || !out[j].impl()->storage) continue;
    bool in_claimed = false, bound = false;
    for (const auto& p : pending) {
      if (!p.claimed || out[j].impl()->storage != p.dst.impl()->storage) continue;
      in_claimed = true;
      bound = bound || (p.slot == j && lies_within(out[j], p.dst));
    }
    if (in_claimed && !bound) out[j] = out[j].clone();
  }
}

// Runs the graph, then the callbacks queued during it (dropped if it throws).
void run_engine(const std::vector<Edge>& roots, const std::vector<Tensor>& root_grads,
                bool retain_graph, GraphTask& task) {
  std::vector<std::function<void()>> callbacks;
  struct Scope {
    std::vector<std::function<void()>>* prev;
    ~Scope() { t_callbacks = prev; }
  } scope{t_callbacks};
  t_callbacks = &callbacks;
  run_graph(roots, root_grads, retain_graph, task);
  for (size_t i = 0; i < callbacks.size(); ++i) {
    auto cb = std::move(callbacks[i]);  // cb may queue more (callbacks can grow)
    cb();
  }
}

void run_graph(const std::vector<Edge>& roots, const std::vector<Tensor>& root_grads,
               bool retain_graph, GraphTask& task) {
  // Dependencies: how many edges lead into each node.
  std::unordered_map<Node*, int> deps;
  std::unordered_map<Node*, std::shared_ptr<Node>> keep;
  std::vector<Node*> stack;
  for (const Edge& e : roots) {
    if (!e.valid()) continue;
    if (!keep.count(e.node.get())) {
      keep[e.node.get()] = e.node;
      stack.push_back(e.node.get());
    }
  }
  std::vector<Node*> order;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    order.push_back(n);
    for (const Edge& e : n->next_edges) {
      if (!e.valid()) continue;
      ++deps[e.node.get()];
      if (!keep.count(e.node.get())) {
        keep[e.node.get()] = e.node;
        stack.push_back(e.node.get());
      }
    }
  }
  if (!task.accumulate) {
    // A node is needed if it is a capture target or leads to one.
    std::unordered_map<Node*, bool> memo;
    std::function<bool(Node*)> visit = [&](Node* n) -> bool {
      auto it = memo.find(n);
      if (it != memo.end()) return it->second;
      memo[n] = false;
      bool need = false;
      for (auto& [k, idx] : task.captures)
        if (k.first == n) need = true;
      for (const Edge& e : n->next_edges)
        if (e.valid() && visit(e.node.get())) need = true;
      memo[n] = need;
      return need;
    };
    for (Node* n : order)
      if (visit(n)) task.needed.insert(n);
  }

  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  auto cmp = [](Node* a, Node* b) { return a->sequence_nr < b->sequence_nr; };
  std::priority_queue<Node*, std::vector<Node*>, decltype(cmp)> ready(cmp);
  for (size_t i = 0; i < roots.size(); ++i) {
    const Edge& e = roots[i];
    if (!e.valid()) continue;
    auto& buf = buffers[e.node.get()];
    buf.resize(e.node->num_outputs);
    add_to(buf[e.input_nr], root_grads[i]);
  }
  for (auto& [n, _] : keep)
    if (deps[n] == 0) ready.push(n);

  GradModeGuard mode(task.create_graph);
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    std::vector<Tensor> grads = std::move(buffers[n]);
    buffers.erase(n);
    grads.resize(n->num_outputs);
    for (auto& [slot, hook] : n->pre_hooks) {
      if (!grads[slot].defined()) continue;
      Tensor r = hook(grads[slot]);
      if (r.defined()) grads[slot] = r;
    }
    for (auto& [slot, weak] : n->retained) {
      if (auto impl = weak.lock(); impl && grads[slot].defined()) {
        AutogradMeta& m = impl->autograd_meta();
        Tensor g = task.create_graph ? grads[slot] : grads[slot].detach();
        m.grad = m.grad.defined() ? m.grad + g : g;
      }
    }
    bool run = true;
    if (!task.accumulate) {
      for (uint32_t s = 0; s < n->num_outputs; ++s) {
        auto it = task.captures.find({n, s});
        if (it != task.captures.end()) add_to(task.results[it->second], grads[s]);
      }
      run = task.needed.count(n) && !dynamic_cast<AccumulateGrad*>(n);
      // A capture target runs only if it also leads to another capture.
      if (run) {
        bool leads = false;
        for (const Edge& e : n->next_edges)
          if (e.valid() && task.needed.count(e.node.get())) leads = true;
        run = leads;
      }
    }
    bool any = std::any_of(grads.begin(), grads.end(), [](const Tensor& t) { return t.defined(); });
    std::vector<Tensor> out;
    if (run && any) {
      std::vector<autograd::PendingDestination> pending;
      if (task.accumulate && !task.create_graph && autograd::any_grad_destination() &&
          !current_recorder())
        pending = pending_destinations(*n, deps);
      struct Offer {  // the destinations, for this node's rule only
        explicit Offer(std::vector<autograd::PendingDestination>* p)
            : prev(std::exchange(autograd::t_pending_destinations, p)) {}
        ~Offer() { autograd::t_pending_destinations = prev; }
        std::vector<autograd::PendingDestination>* prev;
      } offer(pending.empty() ? nullptr : &pending);
      if (profiler::enabled()) [[unlikely]] {
        profiler::Span span("autograd", n->name());
        out = n->apply(std::move(grads));
      } else {
        out = n->apply(std::move(grads));
      }
      if (!pending.empty()) release_claims(out, pending);
    }
    if (!retain_graph) n->release();
    for (size_t i = 0; i < n->next_edges.size(); ++i) {
      const Edge& e = n->next_edges[i];
      if (!e.valid()) continue;
      if (i < out.size() && out[i].defined()) {
        auto& buf = buffers[e.node.get()];
        buf.resize(e.node->num_outputs);
        add_to(buf[e.input_nr], out[i]);
      }
      if (--deps[e.node.get()] == 0) ready.push(e.node.get());
    }
  }
}

std::vector<Tensor> default_root_grads(const std::vector<Tensor>& outputs,
                                       const std::vector<Tensor>& grad_outputs, const char* op) {
  KILN_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), "[", op, "] got ",
             grad_outputs.size(), " gradients for ", outputs.size(), " outputs");
  std::vector<Tensor> g(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& o = outputs[i];
    KILN_CHECK(o.defined(), "[", op, "] output ", i, " is undefined");
    KILN_CHECK(o.requires_grad(), "[", op, "] element ", i,
               " of tensors does not require grad "
               "and does not have a grad_fn");
    if (!grad_outputs.empty() && grad_outputs[i].defined()) {
      KILN_CHECK(grad_outputs[i].shape() == o.shape(), "[", op, "] gradient ", i, " has shape ",
                 grad_outputs[i].shape(), " but the output has shape ", o.shape());
      g[i] = grad_outputs[i];
    } else {
      KILN_CHECK(o.numel() == 1, "[", op,
                 "] grad can be implicitly created only for scalar "
                 "outputs; output ",
                 i, " has shape ", o.shape(), " (pass a gradient)");
      g[i] = ones_like(o);
    }
  }
  return g;
}

}  // namespace

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
              bool retain_graph, bool create_graph) {
  auto g = default_root_grads(outputs, grad_outputs, "backward");
  std::vector<Edge> roots;
  for (const Tensor& o : outputs) roots.push_back(autograd::gradient_edge(o));
  GraphTask task;
  task.create_graph = create_graph;
  run_engine(roots, g, retain_graph || create_graph, task);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, GradOptions opts) {
  auto g = default_root_grads(outputs, grad_outputs, "grad");
  GraphTask task;
  task.create_graph = opts.create_graph;
  task.accumulate = false;
  task.results.resize(inputs.size());
  // The edges are kept for the whole call: a leaf holds its AccumulateGrad node
  // weakly, and a node that died here would be re-created under another address
  // (a leaf that is both an output and an input would then be "unused").
  std::vector<Edge> input_edges;
  for (size_t i = 0; i < inputs.size(); ++i) {
    KILN_CHECK(inputs[i].defined() && inputs[i].requires_grad(), "[grad] input ", i,
               " does not require grad");
    input_edges.push_back(autograd::gradient_edge(inputs[i]));
    task.captures[{input_edges.back().node.get(), input_edges.back().input_nr}] = i;
  }
  std::vector<Edge> roots;
  for (const Tensor& o : outputs) roots.push_back(autograd::gradient_edge(o));
  run_engine(roots, g, opts.retain_graph || opts.create_graph, task);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!task.results[i].defined()) {
      KILN_CHECK(opts.allow_unused, "[grad] input ", i, " (shape ", inputs[i].shape(),
                 ") was not used to compute the outputs; pass allow_unused=true");
    } else if (!opts.create_graph) {
      task.results[i] = task.results[i].detach();
    }
  }
  return task.results;
}

bool graph_released(const std::vector<Tensor>& outputs) {
  std::vector<Node*> stack;
  std::unordered_set<Node*> seen;
  for (const Tensor& t : outputs)
    if (t.defined() && t.grad_fn()) stack.push_back(t.grad_fn().get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    if (n->released()) return true;
    for (const Edge& e : n->next_edges)
      if (e.node) stack.push_back(e.node.get());
  }
  return false;
}

std::vector<Tensor> attach_function(const std::string& name, const std::vector<Tensor>& inputs,
                                    const std::vector<Tensor>& outputs, BackwardFn backward_fn) {
  bool any = false;
  for (const Tensor& t : inputs) any = any || (t.defined() && t.requires_grad());
  std::vector<Tensor> outs;
  outs.reserve(outputs.size());
  for (const Tensor& o : outputs) outs.push_back(o.defined() ? o.detach() : o);
  if (!any || !grad_mode_enabled()) return outs;
  std::vector<TensorMeta> meta;
  for (const Tensor& t : inputs) meta.push_back({t.dtype(), t.shape()});
  auto node = std::make_shared<FunctionNode>(name, std::move(backward_fn), std::move(meta));
  node->sequence_nr = g_sequence.fetch_add(1);
  node->num_outputs = static_cast<uint32_t>(outputs.size());
  for (const Tensor& t : inputs)
    node->next_edges.push_back(t.defined() ? autograd::gradient_edge(t) : Edge{});
  for (size_t i = 0; i < outs.size(); ++i)
    if (outs[i].defined() && is_floating(outs[i].dtype()))
      set_history(outs[i], node, static_cast<uint32_t>(i));
  return outs;
}

}  // namespace kiln
