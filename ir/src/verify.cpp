// The IR verifier. It checks, in this order, and throws on the first failure:
// graph metadata (symbols, outputs/names), graph inputs, symbol binding,
// definitions (each value defined once, producer/index right), then per node in
// evaluation order: kind/op, arity, constants, SSA dominance of inputs, symbols
// of shapes and attributes, seed/offset of random ops and the op's dtype/shape
// rule; then use lists and graph outputs.
//
// Every message starts with "[verify] ", names the node as
// "node #<position> (%3 = add(%1, %2))" (values by Value::id()) and says which
// rule is broken. Pointers that may be stale (users of erased nodes, producers
// in other graphs) are compared by identity only, never dereferenced.
#include "kiln/ir/verify.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <exception>
#include <sstream>
#include <unordered_set>

#include "ptr_map.h"

namespace kiln::ir {
namespace {

using detail::PtrMap;

// Messages are built with kiln::str (an ostringstream), not `"lit" + string`:
// GCC 12 at -O3 gives a false -Wrestrict on the latter.

std::string vname(const Value* v) {
  return v ? str("%", v->id()) : std::string("%<null>");
}

std::string type_str(DType dt, const SymShape& s) {
  return str(dtype_name(dt), to_string(s));
}

bool valid_op(OpId op) {
  return static_cast<int>(op) < kNumOps;
}

// "%3, %4 = max_pool2d(%1)" / "%5 = constant": how a node is named in messages.
std::string describe(const Node* n) {
  std::ostringstream os;
  for (size_t i = 0; i < n->outputs.size(); ++i) os << (i ? ", " : "") << vname(n->outputs[i]);
  if (!n->outputs.empty()) os << " = ";
  if (n->is_constant()) {
    os << "constant";
    return os.str();
  }
  if (valid_op(n->op))
    os << op_name(n->op);
  else
    os << "<op " << static_cast<int>(n->op) << '>';
  os << '(';
  for (size_t i = 0; i < n->inputs.size(); ++i) os << (i ? ", " : "") << vname(n->inputs[i]);
  os << ')';
  return os.str();
}

// Sample symbol values at which symbolic nodes are checked: s_i = B + 2i, then
// B + 4 + 2i. Symbols get distinct values so that a dim recorded with the wrong
// symbol is caught; B is at least 3 and large enough that every dim or
// attribute entry increasing in its symbol is >= 1 (a graph with `s0-4` is
// only meaningful for s0 >= 5, so sampling below that would be a false alarm).
constexpr int64_t kMaxBase = int64_t{1} << 20;

class Verifier {
 public:
  explicit Verifier(const Graph& g) : g_(g), nodes_(g.nodes()) {
    pos_.reserve(nodes_.size());
    for (size_t i = 0; i < nodes_.size(); ++i) pos_.emplace(nodes_[i], static_cast<int64_t>(i));
    size_t values = g.inputs().size();
    for (const Node* n : nodes_) values += n->outputs.size();
    def_.reserve(values);
    values_.reserve(values);
    def_pos_.reserve(values);
  }

  void run(std::span<const std::vector<int64_t>> extra_points = {}) {
    check_graph_meta();
    check_inputs();
    check_definitions();
    pick_samples();
    for (const auto& pt : extra_points) {
      if (pt.size() != static_cast<size_t>(g_.num_syms))
        fail("a sample point has ", pt.size(), " symbol values, the graph has ", g_.num_syms,
             " symbols");
      samples_.push_back(pt);
    }
    for (size_t p = 0; p < nodes_.size(); ++p) check_node(p);
    check_use_lists();
    check_outputs();
  }

  // Only the op rules of the symbolic nodes, at one point (a verified graph).
  void check_rules_at(std::span<const int64_t> syms) {
    std::ostringstream at;
    at << " at";
    for (size_t i = 0; i < syms.size(); ++i) at << (i ? ", s" : " s") << i << '=' << syms[i];
    for (size_t p = 0; p < nodes_.size(); ++p) {
      const Node* n = nodes_[p];
      if (n->is_constant() || n->info().infer == nullptr || !node_is_symbolic(n)) continue;
      check_rule_at(p, syms, at.str());
    }
  }

 private:
  template <typename... A>
  [[noreturn]] static void fail(const A&... a) {
    throw_error(str("[verify] ", a...));
  }
  template <typename... A>
  [[noreturn]] void fail_node(size_t p, const A&... a) const {
    const Node* n = nodes_[p];
    if (n->line > 0)
      fail("line ", n->line, ", column ", n->column, ": node #", p, " (", describe(n), "): ", a...);
    fail("node #", p, " (", describe(n), "): ", a...);
  }

  // ---- graph level ----
  void check_graph_meta() {
    if (g_.num_syms < 0) fail("num_syms is negative (", g_.num_syms, ")");
    if (g_.num_syms > SymInt::kMaxSyms)
      fail("num_syms is ", g_.num_syms, " (at most ", SymInt::kMaxSyms, ")");
    if (g_.outputs().size() != g_.output_names().size())
      fail("graph has ", g_.outputs().size(), " outputs but ", g_.output_names().size(),
           " output names");
    if (!sym_ok(g_.rng_advance))
      fail("rng_advance ", to_string(g_.rng_advance),
           " uses an unknown symbol (num_syms=", g_.num_syms, ")");
  }

  bool sym_ok(const SymInt& s) const { return s.syms_used() <= g_.num_syms; }

  // Returns an empty string if all dims are fine, else what is wrong.
  std::string shape_problem(const SymShape& s) const {
    for (size_t d = 0; d < s.size(); ++d) {
      if (!sym_ok(s[d]))
        return str("dim ", d, " (", to_string(s[d]),
                   ") uses an unknown symbol (num_syms=", g_.num_syms, ")");
      if (s[d].is_static() && s[d].b < 0) return str("dim ", d, " is negative (", s[d].b, ")");
    }
    return {};
  }

  void check_inputs() {
    const auto& ins = g_.inputs();
    for (size_t i = 0; i < ins.size(); ++i) {
      const Value* v = ins[i];
      if (v == nullptr) fail("graph input ", i, " is null");
      auto where = [&] { return str("graph input ", i, " ", vname(v), " \"", v->name, "\""); };
      if (v->producer != nullptr) fail(where(), " has a producer node");
      if (v->index != static_cast<int>(i)) fail(where(), " records index ", v->index);
      if (!define(v, -1)) fail(where(), " is listed twice among the inputs");
      std::string bad = shape_problem(v->shape);
      if (!bad.empty()) fail(where(), " ", type_str(v->dtype, v->shape), ": ", bad);
      if (v->wrapped_number && !v->shape.empty())
        fail(where(), " ", type_str(v->dtype, v->shape),
             " is marked as a wrapped number, which is 0-d");
    }
    // A symbol is bound at run time from the first input dim that is exactly it.
    for (int s = 0; s < g_.num_syms; ++s) {
      bool bound = false;
      for (const Value* v : ins)
        for (const SymInt& d : v->shape) bound |= d.as_symbol() == s;
      if (!bound) fail("symbol s", s, " is unbound: no graph input has a dim that is exactly s", s);
    }
  }

  // Each value is defined once (graph input or one node output), with the
  // right producer and index.
  void check_definitions() {
    for (size_t p = 0; p < nodes_.size(); ++p) {
      const Node* n = nodes_[p];
      for (size_t k = 0; k < n->outputs.size(); ++k) {
        const Value* o = n->outputs[k];
        if (o == nullptr) fail_node(p, "output ", k, " is null");
        if (!define(o, static_cast<int64_t>(p))) {
          const int64_t at = def_pos_[static_cast<size_t>(*def_.find(o))];
          if (at < 0)
            fail_node(p, "output ", k, " ", vname(o), " is defined twice (also a graph input)");
          fail_node(p, "output ", k, " ", vname(o), " is defined twice (also by node #", at, ")");
        }
        if (o->producer != n) {
          if (const int64_t* q = pos_.find(o->producer))
            fail_node(p, "output ", k, " ", vname(o), " records another producer (node #", *q, ")");
          fail_node(p, "output ", k, " ", vname(o), " records another producer",
                    o->producer ? " (not in this graph)" : " (none)");
        }
        if (o->index != static_cast<int>(k))
          fail_node(p, "output ", k, " ", vname(o), " records output index ", o->index);
      }
    }
  }

  void pick_samples() {
    if (g_.num_syms == 0) {  // nothing symbolic to sample for (need() below skips every entry)
      samples_.assign(2, {});
      return;
    }
    int64_t base = 3;
    auto need = [&](const SymInt& s) {
      if (s.is_static() || !sym_ok(s)) return;
      if (s.terms.size() == 1 && s.terms[0].mono == mono_of(s.syms_used() - 1, 1)) {
        const int64_t a = s.terms[0].coef;
        if (a <= 0) return;
        // Smallest v with a*v + b >= 1, i.e. ceil((1 - b) / a), without overflow.
        if (s.b < -kMaxBase) {
          base = kMaxBase;
          return;
        }
        const int64_t num = 1 - s.b;
        const int64_t v = num <= 0 ? 0 : (num - 1) / a + 1;
        base = std::max(base, std::min(v, kMaxBase));
        return;
      }
      // A polynomial that grows with every symbol (s0*s1-6): the smallest base
      // at which it is >= 1, by bisection. Others are not sampled for.
      for (const SymTerm& t : s.terms)
        if (t.coef <= 0) return;
      auto ok = [&](int64_t b) {
        std::vector<int64_t> pt;
        for (int i = 0; i < g_.num_syms; ++i) pt.push_back(b + 2 * i);
        try {
          return s.eval(pt) >= 1;
        } catch (const Error&) {
          return true;  // overflows: large
        }
      };
      if (ok(base)) return;
      int64_t lo = base, hi = kMaxBase;  // !ok(lo)
      if (!ok(hi)) {
        base = kMaxBase;
        return;
      }
      while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        (ok(mid) ? hi : lo) = mid;
      }
      base = hi;
    };
    for (const Value* v : g_.inputs())
      for (const SymInt& d : v->shape) need(d);
    for (const Node* n : nodes_) {
      for (const Value* o : n->outputs)
        for (const SymInt& d : o->shape) need(d);
      for (const SymAttr& a : n->sym_attrs) need(a.expr);
    }
    for (int off : {0, 4}) {
      std::vector<int64_t> s;
      for (int i = 0; i < g_.num_syms; ++i) s.push_back(base + off + 2 * i);
      samples_.push_back(std::move(s));
    }
  }

  // ---- nodes ----
  void check_node(size_t p) {
    const Node* n = nodes_[p];
    if (n->kind != NodeKind::kOp && n->kind != NodeKind::kConstant)
      fail_node(p, "unknown node kind ", static_cast<int>(n->kind));
    if (!n->is_constant() && !valid_op(n->op)) fail_node(p, "unknown op id");
    if (n->is_constant()) {
      check_constant(p);
    } else {
      const int arity = n->info().arity;
      if (arity >= 0 && n->inputs.size() != static_cast<size_t>(arity))
        fail_node(p, "arity: ", op_name(n->op), " takes ", arity, " inputs, node has ",
                  n->inputs.size());
    }
    for (size_t k = 0; k < n->inputs.size(); ++k) check_use(p, k);
    check_symbols(p);
    if (n->is_constant()) return;
    if (n->info().has(kRandom)) {
      for (const char* a : {"seed", "offset"}) {
        bool ok = false;
        for (const auto& [key, val] : n->attrs.items())
          ok |= std::strcmp(key, a) == 0 && std::holds_alternative<int64_t>(val);
        if (!ok) fail_node(p, "random op lacks an int64 '", a, "' attribute");
      }
    }
    check_rule(p);
  }

  void check_constant(size_t p) {
    const Node* n = nodes_[p];
    if (!n->inputs.empty()) fail_node(p, "constant has inputs");
    if (n->outputs.size() != 1) fail_node(p, "constant must have exactly one output");
    const Tensor& t = n->constant;
    if (!t.defined()) fail_node(p, "constant has no tensor");
    if (t.is_symbolic()) fail_node(p, "constant's tensor has no data");
    if (!t.is_contiguous())
      fail_node(p, str("constant's tensor is not contiguous (shape ", t.shape(), ", strides ",
                       t.strides(), ")"));
    const Value* o = n->outputs[0];
    if (!is_static(o->shape) || o->dtype != t.dtype() || eval_shape(o->shape, {}) != t.shape())
      fail_node(p, "constant's tensor is ", dtype_name(t.dtype()), t.shape(), " but its value ",
                vname(o), " is ", type_str(o->dtype, o->shape));
    if (o->wrapped_number != t.impl()->wrapped_number)
      fail_node(p, "constant's tensor and value ", vname(o), " disagree on wrapped_number");
    for (const SymAttr& a : n->sym_attrs)
      if (a.name == nullptr || std::strcmp(a.name, "value") != 0 || a.index != -1)
        fail_node(p, "a constant's symbolic entry must be the scalar 'value'");
  }

  // Why a value that no input or node of this graph defines is dangling.
  std::string why_undefined(const Value* v) const {
    if (v->producer == nullptr)
      return "it has no producer (its node was erased) and is not an input of this graph";
    if (const int64_t* q = pos_.find(v->producer))
      return str("its producer node #", *q, " does not list it as an output");
    return "its producer is not a node of this graph (erased, or another graph's node)";
  }

  // Input k of node p: defined in this graph, before p (SSA dominance).
  void check_use(size_t p, size_t k) {
    const Value* v = nodes_[p]->inputs[k];
    if (v == nullptr) fail_node(p, "input ", k, " is null");
    const int64_t* ord = def_.find(v);
    if (ord == nullptr)
      fail_node(p, "input ", k, " ", vname(v), " is not defined in this graph: ", why_undefined(v));
    const int64_t at = def_pos_[static_cast<size_t>(*ord)];
    if (at >= static_cast<int64_t>(p))
      fail_node(p, "input ", k, " ", vname(v),
                " is used before its definition (SSA dominance): ", "it is defined by node #", at);
    uses_.emplace_back(static_cast<int32_t>(*ord), static_cast<int32_t>(p));
  }

  void check_symbols(size_t p) {
    const Node* n = nodes_[p];
    for (size_t k = 0; k < n->outputs.size(); ++k) {
      const Value* o = n->outputs[k];
      std::string bad = shape_problem(o->shape);
      if (!bad.empty())
        fail_node(p, "output ", k, " ", vname(o), " ", type_str(o->dtype, o->shape), ": ", bad);
      if (o->wrapped_number && !o->shape.empty())
        fail_node(p, "output ", k, " ", vname(o), " ", type_str(o->dtype, o->shape),
                  " is marked as a wrapped number, which is 0-d");
    }
    for (const SymAttr& a : n->sym_attrs) {
      if (a.name == nullptr) fail_node(p, "symbolic attribute entry without a name");
      if (!sym_ok(a.expr))
        fail_node(p, "symbolic attribute ", a.name, " = ", to_string(a.expr),
                  " uses an unknown symbol (num_syms=", g_.num_syms, ")");
      if (a.index < -1) fail_node(p, "symbolic attribute ", a.name, " has a negative index");
      if (a.index >= 0 && !n->is_constant()) {
        bool ok = false;
        for (const auto& [key, val] : n->attrs.items())
          if (std::strcmp(key, a.name) == 0)
            if (const Dims* d = std::get_if<Dims>(&val))
              ok = static_cast<size_t>(a.index) < d->size();
        if (!ok)
          fail_node(p, "symbolic attribute ", a.name, "[", a.index,
                    "] does not name an element of a Dims attribute");
      }
    }
  }

  bool node_is_symbolic(const Node* n) const {
    if (!n->sym_attrs.empty()) return true;
    for (const Value* v : n->inputs)
      if (!is_static(v->shape)) return true;
    for (const Value* v : n->outputs)
      if (!is_static(v->shape)) return true;
    return false;
  }

  // Re-runs the op's rule on data-less stand-ins: once for static nodes, at
  // both sample points for symbolic ones.
  void check_rule(size_t p) {
    const Node* n = nodes_[p];
    if (n->info().infer == nullptr) return;
    if (!node_is_symbolic(n)) {
      // The rule's verdict depends only on the key's contents, and a deep model
      // repeats a few hundred of them thousands of times: each is checked once.
      rule_key(n, key_);
      if (passed_.count(key_)) return;
      check_rule_at(p, {}, "");
      passed_.insert(key_);
      return;
    }
    for (const auto& s : samples_) {
      std::ostringstream at;
      at << " at";
      for (size_t i = 0; i < s.size(); ++i) at << (i ? ", s" : " s") << i << '=' << s[i];
      check_rule_at(p, s, at.str());
    }
  }

  // A static node's op, attributes and input/output dtypes, shapes and
  // wrapped flags, as bytes (equal keys: the same check).
  static void rule_key(const Node* n, std::string& k) {
    k.clear();
    auto put = [&k](auto v) { k.append(reinterpret_cast<const char*>(&v), sizeof v); };
    put(static_cast<uint16_t>(n->op));
    put(n->attrs.items().size());
    for (const auto& [name, val] : n->attrs.items()) {
      k.append(name);
      k.push_back('\0');
      put(static_cast<uint8_t>(val.index()));
      if (const int64_t* i = std::get_if<int64_t>(&val)) {
        put(*i);
      } else if (const double* d = std::get_if<double>(&val)) {
        put(std::bit_cast<uint64_t>(*d));
      } else if (const bool* b = std::get_if<bool>(&val)) {
        put(static_cast<uint8_t>(*b));
      } else if (const DType* t = std::get_if<DType>(&val)) {
        put(static_cast<uint8_t>(*t));
      } else {
        const Dims& dims = std::get<Dims>(val);
        put(dims.size());
        for (int64_t x : dims) put(x);
      }
    }
    for (const auto* list : {&n->inputs, &n->outputs}) {
      put(list->size());
      for (const Value* v : *list) {
        put(static_cast<uint8_t>(v->dtype));
        put(static_cast<uint8_t>(v->wrapped_number));
        put(v->shape.size());
        for (const SymInt& d : v->shape) put(d.b);  // static: the value
      }
    }
  }

  void check_rule_at(size_t p, std::span<const int64_t> syms, const std::string& at) {
    const Node* n = nodes_[p];
    std::vector<Tensor> fake;
    for (size_t k = 0; k < n->inputs.size(); ++k) {
      const Value* v = n->inputs[k];
      auto impl = std::make_shared<TensorImpl>();
      impl->dtype = v->dtype;
      try {  // sizes of hostile IR text may be negative, too large, or overflow
        impl->shape = eval_shape(v->shape, syms);
        check_shape(impl->shape, "verify", "shape");
      } catch (const Error& e) {
        fail_node(p, "input ", k, " ", vname(v), " ", type_str(v->dtype, v->shape),
                  " is not a valid shape", at, ": ", e.what());
      }
      impl->strides = contiguous_strides(impl->shape);
      impl->wrapped_number = v->wrapped_number;
      fake.emplace_back(std::move(impl));
    }
    const Attrs attrs = n->eval_attrs(syms);
    std::vector<TensorMeta> metas;
    try {
      n->info().infer(fake, attrs, metas);
    } catch (const Error& e) {
      fail_node(p, "the op's dtype/shape rule rejects the node", at, ": ", e.what());
    } catch (const std::exception& e) {
      // Rules assert on attributes they take for granted (missing, other type).
      fail_node(p, "the op's dtype/shape rule rejects the node (missing or mistyped attribute?)",
                at, ": ", e.what());
    }
    if (metas.size() != n->outputs.size())
      fail_node(p, "the op's rule gives ", metas.size(), " outputs, node has ", n->outputs.size());
    for (size_t k = 0; k < metas.size(); ++k) {
      const Value* o = n->outputs[k];
      if (o->dtype != metas[k].dtype)
        fail_node(p, "output ", k, " ", vname(o), " has dtype ", dtype_name(o->dtype),
                  " but the op's rule gives ", dtype_name(metas[k].dtype), at);
      const Dims got = eval_shape(o->shape, syms);
      if (got != metas[k].shape)
        fail_node(p, "output ", k, " ", vname(o), " has shape ", to_string(o->shape),
                  is_static(o->shape) ? std::string() : str(" = ", got),
                  " but the op's rule gives ", metas[k].shape, at);
    }
  }

  // ---- use lists ----
  // Value::users must list each reading node once per use, and nothing else.
  void check_use_lists() {
    // The readers of each value, bucketed by its definition ordinal (a
    // counting sort of the uses check_use recorded in node order, so each
    // bucket is ascending): linear, no search per value.
    std::vector<size_t> start(values_.size() + 1, 0);
    for (const auto& [ord, p] : uses_) ++start[static_cast<size_t>(ord) + 1];
    for (size_t i = 0; i < values_.size(); ++i) start[i + 1] += start[i];
    std::vector<size_t> readers(uses_.size());
    {
      std::vector<size_t> fill(start.begin(), start.end() - 1);
      for (const auto& [ord, p] : uses_)
        readers[fill[static_cast<size_t>(ord)]++] = static_cast<size_t>(p);
    }
    std::vector<size_t> actual;
    for (size_t ord = 0; ord < values_.size(); ++ord) {
      const Value* v = values_[ord];
      const int64_t def = def_pos_[ord];
      auto where = [&] {
        if (def < 0) return str("graph input ", v->index);
        const size_t p = static_cast<size_t>(def);
        return str("node #", p, " (", describe(nodes_[p]), ") output");
      };
      actual.clear();
      for (const Node* u : v->users) {
        const int64_t* at = pos_.find(u);
        if (at == nullptr)
          fail("use list of ", where(), " ", vname(v),
               " lists a node that is not in the graph (erased?)");
        actual.push_back(static_cast<size_t>(*at));
      }
      std::sort(actual.begin(), actual.end());
      const std::span<const size_t> expect(readers.data() + start[ord],
                                           start[ord + 1] - start[ord]);
      if (std::equal(actual.begin(), actual.end(), expect.begin(), expect.end())) continue;
      auto list = [](std::span<const size_t> ps) {
        std::ostringstream os;
        os << '[';
        for (size_t i = 0; i < ps.size(); ++i) os << (i ? ", #" : "#") << ps[i];
        os << ']';
        return os.str();
      };
      fail("use list of ", where(), " ", vname(v), " is out of sync: it lists nodes ", list(actual),
           " but the value is read by nodes ", list(expect));
    }
  }

  void check_outputs() {
    for (size_t i = 0; i < g_.outputs().size(); ++i) {
      const Value* v = g_.outputs()[i];
      if (v == nullptr) fail("graph output ", i, " \"", g_.output_names()[i], "\" is null");
      if (!def_.find(v))
        fail("graph output ", i, " \"", g_.output_names()[i], "\" ", vname(v),
             " is not defined in this graph: ", why_undefined(v));
    }
  }

  const Graph& g_;
  std::vector<Node*> nodes_;
  PtrMap<int64_t> pos_;  // node -> position
  // Values in definition order (graph inputs, then node outputs): the ordinal
  // def_ maps a value to, its defining position (-1 = input), its uses.
  PtrMap<int64_t> def_;
  std::vector<const Value*> values_;
  std::vector<int64_t> def_pos_;
  std::vector<std::pair<int32_t, int32_t>> uses_;  // (ordinal, reader position)

  // Records v as defined at position `pos`; false if it was defined already.
  bool define(const Value* v, int64_t pos) {
    if (!def_.emplace(v, static_cast<int64_t>(values_.size())).second) return false;
    values_.push_back(v);
    def_pos_.push_back(pos);
    return true;
  }
  std::vector<std::vector<int64_t>> samples_;
  std::unordered_set<std::string> passed_;  // rule_key of static nodes that passed
  std::string key_;
};

}  // namespace

void verify(const Graph& g) {
  Verifier(g).run();
}

void verify(const Graph& g, std::span<const std::vector<int64_t>> extra_points) {
  Verifier(g).run(extra_points);
}

std::string check_sizes_at(const Graph& g, std::span<const int64_t> syms) {
  KILN_CHECK(syms.size() == static_cast<size_t>(g.num_syms), "[verify] ", syms.size(),
             " symbol values for a graph with ", g.num_syms, " symbols");
  try {
    Verifier(g).check_rules_at(syms);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace kiln::ir
