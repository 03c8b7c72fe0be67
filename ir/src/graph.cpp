#include "kiln/ir/graph.h"

#if __has_include(<sys/mman.h>)
#include <sys/mman.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <set>
#include <sstream>
#include <unordered_map>

#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/functional.h"

namespace kiln::ir {

// ---------------- SymInt ----------------
namespace {

int mono_degree(uint64_t m) {
  int d = 0;
  for (int k = 0; k < SymInt::kMaxSyms; ++k) d += mono_exponent(m, k);
  return d;
}

// The canonical order of terms: higher degree first, then the larger exponent
// of s0, of s1, ...
bool mono_before(uint64_t x, uint64_t y) {
  const int dx = mono_degree(x), dy = mono_degree(y);
  if (dx != dy) return dx > dy;
  for (int k = 0; k < SymInt::kMaxSyms; ++k) {
    const int ex = mono_exponent(x, k), ey = mono_exponent(y, k);
    if (ex != ey) return ex > ey;
  }
  return false;
}

uint64_t mono_mul(uint64_t x, uint64_t y) {
  uint64_t r = 0;
  for (int k = 0; k < SymInt::kMaxSyms; ++k) {
    const int e = mono_exponent(x, k) + mono_exponent(y, k);
    KILN_CHECK(e <= SymInt::kMaxExponent, "[symbolic size] s", k, " to the power ", e, " (at most ",
               SymInt::kMaxExponent, ")");
    r |= mono_of(k, e);
  }
  return r;
}

// Sorts, merges equal monomials and drops zero coefficients.
void normalize(std::vector<SymTerm>& t) {
  std::sort(t.begin(), t.end(),
            [](const SymTerm& x, const SymTerm& y) { return mono_before(x.mono, y.mono); });
  size_t out = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (out > 0 && t[out - 1].mono == t[i].mono)
      t[out - 1].coef = checked_add(t[out - 1].coef, t[i].coef, "symbolic size");
    else
      t[out++] = t[i];
  }
  t.resize(out);
  std::erase_if(t, [](const SymTerm& x) { return x.coef == 0; });
}

}  // namespace

SymInt SymInt::symbolic(int32_t sym, int64_t a, int64_t b) {
  KILN_CHECK(sym >= 0 && sym < kMaxSyms, "[symbolic size] symbol s", sym, " (at most ", kMaxSyms,
             " symbols)");
  SymInt s = monomial(a, mono_of(sym, 1));
  s.b = b;
  return s;
}

SymInt SymInt::monomial(int64_t coef, uint64_t mono) {
  if (mono == 0) return SymInt(coef);
  SymInt s;
  if (coef != 0) s.terms.push_back({coef, mono});
  return s;
}

int32_t SymInt::as_symbol() const {
  if (b != 0 || terms.size() != 1 || terms[0].coef != 1) return -1;
  const uint64_t m = terms[0].mono;
  for (int k = 0; k < kMaxSyms; ++k)
    if (m == mono_of(k, 1)) return k;
  return -1;
}

int32_t SymInt::syms_used() const {
  int32_t n = 0;
  for (const SymTerm& t : terms)
    for (int k = 0; k < kMaxSyms; ++k)
      if (mono_exponent(t.mono, k) > 0) n = std::max(n, k + 1);
  return n;
}

int64_t SymInt::eval(std::span<const int64_t> syms) const {
  if (terms.empty()) return b;
  // Overflow-checked: the coefficients may come from hostile IR text.
  int64_t r = b;
  for (const SymTerm& t : terms) {
    int64_t v = t.coef;
    for (int k = 0; k < kMaxSyms; ++k) {
      const int e = mono_exponent(t.mono, k);
      if (e == 0) continue;
      KILN_ASSERT(static_cast<size_t>(k) < syms.size(), "symbol s", k, " is not bound");
      for (int i = 0; i < e; ++i) v = checked_mul(v, syms[static_cast<size_t>(k)], "symbolic size");
    }
    r = checked_add(r, v, "symbolic size");
  }
  return r;
}

SymInt SymInt::operator+(const SymInt& o) const {
  SymInt r;
  r.b = checked_add(b, o.b, "symbolic size");
  if (terms.empty() && o.terms.empty()) return r;
  r.terms = terms;
  r.terms.insert(r.terms.end(), o.terms.begin(), o.terms.end());
  normalize(r.terms);
  return r;
}

SymInt SymInt::operator-(const SymInt& o) const {
  return *this + o * SymInt(-1);
}

SymInt SymInt::operator*(const SymInt& o) const {
  SymInt r;
  r.b = checked_mul(b, o.b, "symbolic size");
  if (terms.empty() && o.terms.empty()) return r;
  for (const SymTerm& x : terms) {
    if (o.b != 0) r.terms.push_back({checked_mul(x.coef, o.b, "symbolic size"), x.mono});
    for (const SymTerm& y : o.terms)
      r.terms.push_back({checked_mul(x.coef, y.coef, "symbolic size"), mono_mul(x.mono, y.mono)});
  }
  if (b != 0)
    for (const SymTerm& y : o.terms)
      r.terms.push_back({checked_mul(b, y.coef, "symbolic size"), y.mono});
  normalize(r.terms);
  return r;
}

std::string to_string(const SymInt& s) {
  if (s.is_static()) return std::to_string(s.b);
  std::string r;
  for (size_t i = 0; i < s.terms.size(); ++i) {
    const SymTerm& t = s.terms[i];
    // The first term carries its sign in its coefficient ("-1*s0"); later ones
    // are joined by '+' or '-' ("s0*s1-s1").
    const uint64_t mag =
        t.coef < 0 ? 0 - static_cast<uint64_t>(t.coef) : static_cast<uint64_t>(t.coef);
    if (i == 0) {
      if (t.coef != 1) r += std::to_string(t.coef) + "*";
    } else {
      r += t.coef < 0 ? '-' : '+';
      if (mag != 1) r += std::to_string(mag) + "*";
    }
    bool first = true;
    for (int k = 0; k < SymInt::kMaxSyms; ++k) {
      const int e = mono_exponent(t.mono, k);
      if (e == 0) continue;
      if (!first) r += '*';
      first = false;
      r += 's';
      r += std::to_string(k);
      if (e > 1) r += '^' + std::to_string(e);
    }
  }
  if (s.b > 0) r += '+';
  if (s.b != 0) r += std::to_string(s.b);  // a negative b brings its own '-'
  return r;
}

std::string to_string(const SymShape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ", ";
    r += to_string(s[i]);
  }
  r += ']';
  return r;
}

SymShape to_sym_shape(const Dims& d) {
  SymShape s;
  s.reserve(d.size());
  for (int64_t v : d) s.emplace_back(v);
  return s;
}

Dims eval_shape(const SymShape& s, std::span<const int64_t> syms) {
  // Executors evaluate shapes per step and per call: static dims need no call.
  Dims d;
  for (const SymInt& x : s) d.push_back(x.is_static() ? x.b : x.eval(syms));
  return d;
}

bool is_static(const SymShape& s) {
  return std::all_of(s.begin(), s.end(), [](const SymInt& x) { return x.is_static(); });
}

bool SymAttr::operator==(const SymAttr& o) const {
  return std::strcmp(name, o.name) == 0 && index == o.index && expr == o.expr &&
         reciprocal == o.reciprocal;
}

const char* intern_attr_name(std::string_view name) {
  static std::mutex mu;
  static std::set<std::string, std::less<>> names;
  std::lock_guard<std::mutex> lock(mu);
  auto it = names.find(name);
  if (it == names.end()) it = names.emplace(name).first;
  return it->c_str();
}

// ---------------- Node ----------------
Attrs Node::eval_attrs(std::span<const int64_t> syms) const {
  if (sym_attrs.empty()) return attrs;
  Attrs out = attrs;
  for (const SymAttr& s : sym_attrs) {
    int64_t v = s.expr.eval(syms);
    if (s.index >= 0) {
      Dims d = out.dims(s.name);
      KILN_ASSERT(static_cast<size_t>(s.index) < d.size(), "symbolic entry out of range");
      d[static_cast<size_t>(s.index)] = v;
      out.set(s.name, d);
    } else if (s.reciprocal) {
      out.set(s.name, 1.0 / static_cast<double>(v));
    } else {
      const bool is_double = std::holds_alternative<double>([&] {
        for (auto& [k, val] : attrs.items())
          if (std::strcmp(k, s.name) == 0) return val;
        return AttrValue(int64_t{0});
      }());
      if (is_double)
        out.set(s.name, static_cast<double>(v));
      else
        out.set(s.name, AttrValue(v));
    }
  }
  return out;
}

// ---------------- Graph storage ----------------
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

// Storage for an arena block. A block of 2 MiB or more is aligned to 2 MiB and
// offered huge pages (Linux, transparent huge pages in "madvise" mode): a warm
// start builds two 30k-node graphs in fresh memory, where one fault per 4 KiB
// page was half of Graph::add_op's time (sampled; huge pages halve it).
void* alloc_block(size_t bytes) {
  if (bytes < kHugePage) return ::operator new(bytes);
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, rounded);
  if (p == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  madvise(p, rounded, MADV_HUGEPAGE);  // a hint: failure only costs the huge pages
#endif
  return p;
}

void free_block(void* p, size_t bytes) {
  if (bytes < kHugePage)
    ::operator delete(p);
  else
    std::free(p);
}

// Pointer-stable slots for T in blocks that double in size (a graph of n
// objects costs O(log n) allocations). Slots are raw memory: the owner
// constructs and destroys the objects in them.
template <typename T>
class SlotArena {
  static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);

 public:
  SlotArena() = default;
  SlotArena(const SlotArena&) = delete;
  SlotArena& operator=(const SlotArena&) = delete;
  ~SlotArena() {
    for (const Block& b : blocks_) free_block(b.slots, b.cap * sizeof(T));
  }
  // A fresh slot (the blocks' slots are handed out in order).
  T* alloc() {
    if (blocks_.empty() || blocks_.back().used == blocks_.back().cap) grow(0);
    Block& b = blocks_.back();
    return b.slots + b.used++;
  }
  // Room for `more` slots in the current block or one new block.
  void reserve(size_t more) {
    if (more == 0) return;
    if (!blocks_.empty() && blocks_.back().cap - blocks_.back().used >= more) return;
    grow(more);
  }
  // Calls f(T*) for every slot handed out, in order.
  template <typename F>
  void for_each(F&& f) const {
    for (const Block& b : blocks_)
      for (size_t i = 0; i < b.used; ++i) f(b.slots + i);
  }

 private:
  struct Block {
    T* slots = nullptr;
    size_t used = 0, cap = 0;
  };
  void grow(size_t at_least) {
    // Doubling up to blocks of ~4 MiB: a deep model's graph (30k nodes) fills
    // a few large blocks, which take huge pages (see alloc_block).
    const size_t last = blocks_.empty() ? 0 : blocks_.back().cap;
    const size_t max_cap = (size_t{4} << 20) / sizeof(T);
    const size_t cap = std::max({at_least, std::min(2 * last, max_cap), size_t{16}});
    blocks_.reserve(blocks_.size() + 1);  // no leak if this throws
    blocks_.push_back({static_cast<T*>(alloc_block(cap * sizeof(T))), 0, cap});
  }
  std::vector<Block> blocks_;
};

}  // namespace
struct Graph::Storage {
  SlotArena<Value> values;        // every Value ever created (never destroyed before the graph)
  SlotArena<Node> nodes;          // live nodes and the slots of erased ones
  std::vector<Node*> free_nodes;  // slots of erased nodes, reused by add_op
  Node* head = nullptr;           // the evaluation order: an intrusive list
  Node* tail = nullptr;
  // The order as a vector (what nodes() returns) and Node::pos_, valid unless
  // stale: rebuilt by one walk of the list after inserts before nodes or erases.
  std::vector<Node*> order;
  bool order_stale = false;

  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    for (Node* n = head; n != nullptr;) {
      Node* next = n->next_;
      n->~Node();
      n = next;
    }
    values.for_each([](Value* v) { v->~Value(); });
  }
  Node* new_node() {
    if (free_nodes.empty()) return new (nodes.alloc()) Node();
    Node* slot = free_nodes.back();
    free_nodes.pop_back();
    unpoison(slot);
    return new (slot) Node();
  }
  // An erased node's slot: its data goes now, the slot waits for a later add_op.
  void free_node(Node* n) {
    n->~Node();
    poison(n);
    free_nodes.push_back(n);
  }

 private:
  // Under AddressSanitizer a free slot is poisoned, so a pass that reads a node
  // it erased still fails as the use after free it was when nodes were heap
  // objects.
  static void poison([[maybe_unused]] Node* n) {
#if defined(__SANITIZE_ADDRESS__)
    ASAN_POISON_MEMORY_REGION(n, sizeof(Node));
#endif
  }
  static void unpoison([[maybe_unused]] Node* n) {
#if defined(__SANITIZE_ADDRESS__)
    ASAN_UNPOISON_MEMORY_REGION(n, sizeof(Node));
#endif
  }
};

Graph::Graph() : store_(std::make_unique<Storage>()) {}
Graph::~Graph() = default;
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&&) noexcept = default;

void Graph::reserve(size_t nodes, size_t values) {
  store_->nodes.reserve(nodes);
  store_->values.reserve(values);
}

// ---------------- Graph ----------------
Value* Graph::new_value(DType dtype, SymShape shape) {
  Value* v = new (store_->values.alloc()) Value();
  v->dtype = dtype;
  v->shape = std::move(shape);
  v->id_ = next_value_id_++;
  return v;
}

Value* Graph::add_input(DType dtype, SymShape shape, std::string name) {
  Value* v = new_value(dtype, std::move(shape));
  v->index = static_cast<int>(inputs_.size());
  v->name = std::move(name);
  inputs_.push_back(v);
  return v;
}

Node* Graph::add_op(OpId op, std::vector<Value*> inputs, Attrs attrs, std::vector<OutSpec> outs,
                    Node* before) {
  return add_op_specs(op, std::move(inputs), std::move(attrs), outs, before);
}

Node* Graph::add_op_specs(OpId op, std::vector<Value*> inputs, Attrs attrs, std::span<OutSpec> outs,
                          Node* before) {
  Storage& st = *store_;
  KILN_ASSERT(before == nullptr || before->owner_ == &st, "node is not in this graph");
  for (Value* in : inputs) KILN_ASSERT(in != nullptr, "null input to ", op_name(op));
  Node* n = st.new_node();
  n->kind = NodeKind::kOp;
  n->op = op;
  n->id_ = next_node_id_++;
  n->attrs = std::move(attrs);
  n->inputs = std::move(inputs);
  for (Value* in : n->inputs) in->users.push_back(n);
  n->outputs.reserve(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    Value* v = new_value(outs[i].dtype, std::move(outs[i].shape));
    v->producer = n;
    v->index = static_cast<int>(i);
    n->outputs.push_back(v);
  }
  n->owner_ = &st;
  if (before == nullptr) {
    n->pos_ = num_nodes_;  // appending keeps every other position
    n->prev_ = st.tail;
    (st.tail ? st.tail->next_ : st.head) = n;
    st.tail = n;
    if (!st.order_stale) st.order.push_back(n);
  } else {
    n->prev_ = before->prev_;
    n->next_ = before;
    (before->prev_ ? before->prev_->next_ : st.head) = n;
    before->prev_ = n;
    st.order_stale = true;
  }
  ++num_nodes_;
  return n;
}

Node* Graph::add_op_inferred(OpId op, std::vector<Value*> inputs, Attrs attrs, Node* before) {
  // Run the op's rule on data-less stand-ins of the inputs.
  std::vector<Tensor> fake;
  for (Value* v : inputs) {
    KILN_CHECK(is_static(v->shape), "[", op_name(op), "] cannot infer outputs of symbolic shapes");
    auto impl = std::make_shared<TensorImpl>();
    impl->dtype = v->dtype;
    impl->shape = eval_shape(v->shape, {});
    impl->strides = contiguous_strides(impl->shape);
    fake.emplace_back(std::move(impl));
  }
  std::vector<TensorMeta> metas;
  op_info(op).infer(fake, attrs, metas);
  std::vector<OutSpec> outs;
  for (auto& m : metas) outs.push_back({m.dtype, to_sym_shape(m.shape)});
  return add_op(op, std::move(inputs), std::move(attrs), std::move(outs), before);
}

Node* Graph::add_constant(const Tensor& t, Node* before) {
  KILN_CHECK(t.defined() && !t.is_symbolic(), "[constant] needs a tensor with data");
  // The copy is the graph's own data: never traced, never differentiated.
  UntracedGuard untraced;
  NoGradGuard no_grad;
  Tensor c;
  if (t.device().is_cpu() && t.is_contiguous()) {
    // A byte copy: a trace records thousands of constants (the C++ numbers
    // of an optimizer step), and a clone is a dispatched op.
    c = kiln::empty(t.shape(), t.dtype());
    if (t.numel() > 0)
      std::memcpy(c.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size());
  } else {
    c = t.contiguous();
    if (c.is_same(t)) c = t.clone();
  }
  Node* n = add_op(OpId::full, {}, {}, {{c.dtype(), to_sym_shape(c.shape())}}, before);
  n->kind = NodeKind::kConstant;
  c.impl()->wrapped_number = t.impl()->wrapped_number;
  n->constant = c;
  n->outputs[0]->wrapped_number = c.impl()->wrapped_number;
  return n;
}

void Graph::add_output(Value* v, std::string name, OutputRole role) {
  KILN_ASSERT(v != nullptr, "null graph output");
  ++v->output_uses_;
  outputs_.push_back(v);
  output_names_.push_back(std::move(name));
  output_roles_.push_back(role);
}

void Graph::set_output(size_t i, Value* v) {
  KILN_ASSERT(i < outputs_.size(), "output index out of range");
  KILN_ASSERT(v != nullptr, "null graph output");
  --outputs_[i]->output_uses_;
  ++v->output_uses_;
  outputs_[i] = v;
}

namespace {

// Removes one use of v by n. Searched from the back: passes erase nodes soon
// after their uses were added, or in reverse order (dce), so a value read by
// thousands of nodes (a learning rate) is not scanned from its first reader.
// Both entries of a node that reads v twice are n, so which one goes does not
// change the list.
void remove_use(Value* v, const Node* n) {
  auto it = std::find(v->users.rbegin(), v->users.rend(), n);
  KILN_ASSERT(it != v->users.rend(), "use list out of sync");
  v->users.erase(std::next(it).base());
}

}  // namespace

void Graph::replace_all_uses(Value* from, Value* to) {
  if (from == to) return;
  for (Node* u : from->users) {
    for (Value*& in : u->inputs)
      if (in == from) {
        in = to;
        to->users.push_back(u);
      }
  }
  // A node using `from` twice is listed twice: its first visit rewires both
  // slots (adding `to` once per slot), the second finds nothing left to do.
  from->users.clear();
  if (from->output_uses_ == 0) return;  // no scan of thousands of outputs per call
  for (Value*& o : outputs_)
    if (o == from) o = to;
  to->output_uses_ += from->output_uses_;
  from->output_uses_ = 0;
}

void Graph::set_input(Node* n, size_t i, Value* v) {
  KILN_ASSERT(i < n->inputs.size(), "input index out of range");
  remove_use(n->inputs[i], n);
  n->inputs[i] = v;
  v->users.push_back(n);
}

void Graph::erase(Node* n) {
  Storage& st = *store_;
  KILN_ASSERT(n->owner_ == &st, "node is not in this graph");
  for (Value* o : n->outputs)
    KILN_ASSERT(num_uses(o) == 0, "erasing a node whose output %", o->id(), " is still used");
  for (Value* in : n->inputs) remove_use(in, n);
  for (Value* o : n->outputs) o->producer = nullptr;
  // Erasing the last node keeps every other position.
  if (n->next_ != nullptr)
    st.order_stale = true;
  else if (!st.order_stale)
    st.order.pop_back();
  (n->prev_ ? n->prev_->next_ : st.head) = n->next_;
  (n->next_ ? n->next_->prev_ : st.tail) = n->prev_;
  --num_nodes_;
  st.free_node(n);
}

void Graph::erase_input(size_t i) {
  KILN_ASSERT(i < inputs_.size(), "input index out of range");
  KILN_ASSERT(num_uses(inputs_[i]) == 0, "erasing a used graph input");
  inputs_.erase(inputs_.begin() + static_cast<std::ptrdiff_t>(i));
  for (size_t k = 0; k < inputs_.size(); ++k) inputs_[k]->index = static_cast<int>(k);
}

bool Graph::is_output(const Value* v) const {
  return v->output_uses_ > 0;
}

size_t Graph::num_uses(const Value* v) const {
  return v->users.size() + static_cast<size_t>(v->output_uses_);
}

std::vector<Node*> Graph::nodes() const {
  if (store_->order_stale) refresh_order();
  return store_->order;
}

void Graph::refresh_order() const {
  Storage& st = *store_;
  st.order.clear();
  st.order.reserve(num_nodes_);
  for (Node* n = st.head; n != nullptr; n = n->next_) {
    n->pos_ = st.order.size();
    st.order.push_back(n);
  }
  st.order_stale = false;
}

size_t Graph::position(const Node* n) const {
  KILN_ASSERT(n->owner_ == store_.get(), "node is not in this graph");
  if (store_->order_stale) refresh_order();
  return n->pos_;
}

std::unique_ptr<Graph> Graph::clone() const {
  auto g = std::make_unique<Graph>();
  g->num_syms = num_syms;
  g->rng_advance = rng_advance;
  g->reserve(num_nodes_, static_cast<size_t>(next_value_id_));
  // Original -> copy by value id (ids are dense, below next_value_id_): no
  // hashing per use. The original is kept to catch a value of another graph.
  std::vector<std::pair<const Value*, Value*>> map(static_cast<size_t>(next_value_id_));
  auto mapped = [&](const Value* v) {
    const auto id = static_cast<size_t>(v->id());
    KILN_ASSERT(id < map.size() && map[id].first == v, "clone: %", v->id(),
                " is not defined in this graph before its use");
    return map[id].second;
  };
  for (Value* in : inputs_) {
    Value* m = g->add_input(in->dtype, in->shape, in->name);
    m->wrapped_number = in->wrapped_number;
    map[static_cast<size_t>(in->id())] = {in, m};
  }
  for (const Node* n = store_->head; n != nullptr; n = n->next_) {
    std::vector<Value*> ins;
    ins.reserve(n->inputs.size());
    for (Value* v : n->inputs) ins.push_back(mapped(v));
    std::vector<OutSpec> outs;
    for (Value* o : n->outputs) outs.push_back({o->dtype, o->shape});
    Node* m = g->add_op(n->op, std::move(ins), n->attrs, std::move(outs));
    m->kind = n->kind;
    m->sym_attrs = n->sym_attrs;
    m->constant = n->constant;
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      m->outputs[i]->name = n->outputs[i]->name;
      m->outputs[i]->wrapped_number = n->outputs[i]->wrapped_number;
      map[static_cast<size_t>(n->outputs[i]->id())] = {n->outputs[i], m->outputs[i]};
    }
  }
  for (size_t i = 0; i < outputs_.size(); ++i)
    g->add_output(mapped(outputs_[i]), output_names_[i], output_roles_[i]);
  return g;
}

// ---------------- structural equality ----------------
namespace {

bool same_attrs(const Attrs& a, const Attrs& b) {
  if (a.items().size() != b.items().size()) return false;
  for (size_t i = 0; i < a.items().size(); ++i) {
    const auto& [ka, va] = a.items()[i];
    const auto& [kb, vb] = b.items()[i];
    if (std::strcmp(ka, kb) != 0) return false;
    if (va.index() != vb.index()) return false;
    if (const double* da = std::get_if<double>(&va)) {
      double db = std::get<double>(vb);
      // NaN attrs compare equal to NaN (bitwise-same meaning).
      if (!(*da == db || (*da != *da && db != db))) return false;
    } else if (!(va == vb)) {
      return false;
    }
  }
  return true;
}

bool same_constant(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  // Device constants' bytes through the host.
  Tensor ca = a.cpu().contiguous(), cb = b.cpu().contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(),
                     static_cast<size_t>(ca.numel()) * ca.element_size()) == 0;
}

}  // namespace

bool structurally_equal(const Graph& a, const Graph& b, std::string* why) {
  auto fail = [&](const std::string& msg) {
    if (why) *why = msg;
    return false;
  };
  if (a.num_syms != b.num_syms) return fail("different number of symbols");
  if (!(a.rng_advance == b.rng_advance)) return fail("different rng_advance");
  if (a.inputs().size() != b.inputs().size()) return fail("different number of inputs");
  std::unordered_map<const Value*, const Value*> map;  // a -> b
  auto same_meta = [](const Value* x, const Value* y) {
    return x->dtype == y->dtype && x->shape == y->shape && x->wrapped_number == y->wrapped_number;
  };
  for (size_t i = 0; i < a.inputs().size(); ++i) {
    const Value* x = a.inputs()[i];
    const Value* y = b.inputs()[i];
    if (!same_meta(x, y) || x->name != y->name) return fail(str("input ", i, " differs"));
    map[x] = y;
  }
  auto na = a.nodes();
  auto nb = b.nodes();
  if (na.size() != nb.size()) return fail("different number of nodes");
  for (size_t i = 0; i < na.size(); ++i) {
    const Node* x = na[i];
    const Node* y = nb[i];
    std::string where = str("node ", i);
    if (x->kind != y->kind) return fail(where + ": kind differs");
    if (!x->is_constant() && x->op != y->op) return fail(where + ": op differs");
    if (x->inputs.size() != y->inputs.size() || x->outputs.size() != y->outputs.size())
      return fail(where + ": arity differs");
    for (size_t k = 0; k < x->inputs.size(); ++k) {
      auto it = map.find(x->inputs[k]);
      if (it == map.end() || it->second != y->inputs[k])
        return fail(str(where, ": input ", k, " differs"));
    }
    if (!same_attrs(x->attrs, y->attrs)) return fail(where + ": attributes differ");
    if (x->sym_attrs != y->sym_attrs) return fail(where + ": symbolic attributes differ");
    if (x->is_constant() && !same_constant(x->constant, y->constant))
      return fail(where + ": constant data differs");
    for (size_t k = 0; k < x->outputs.size(); ++k) {
      if (!same_meta(x->outputs[k], y->outputs[k]))
        return fail(str(where, ": output ", k, " dtype/shape differs"));
      map[x->outputs[k]] = y->outputs[k];
    }
  }
  if (a.outputs().size() != b.outputs().size()) return fail("different number of outputs");
  for (size_t i = 0; i < a.outputs().size(); ++i) {
    if (map.at(a.outputs()[i]) != b.outputs()[i] || a.output_names()[i] != b.output_names()[i] ||
        a.output_roles()[i] != b.output_roles()[i])
      return fail(str("output ", i, " differs"));
  }
  return true;
}

}  // namespace kiln::ir
