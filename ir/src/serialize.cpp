// The binary graph form. Layout (varints are LEB128, signed ones zigzag):
//   num_syms, rng_advance (sym)
//   op names used (count, strings): nodes refer to ops by their index here,
//     so the bytes do not depend on OpId numbering
//   attribute names used (count, strings), likewise
//   inputs: count, then per input dtype, shape, wrapped flag, name
//   nodes: count, then per node kind, [op index], input value numbers,
//     attrs (name index, tag, value), sym_attrs, [constant: dtype, dims,
//     raw element bytes], outputs (dtype, shape, wrapped flag, name)
//   graph outputs: count, then value number and name each
// Values are numbered as numbered_values() lists them. Every count is bounded
// by the bytes left, every reference checked, so bad bytes fail cleanly.
#include "kiln/ir/serialize.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "kiln/functional.h"

namespace kiln::ir {

// ---- ByteWriter / ByteReader ----

void ByteWriter::grow(size_t n) {
  out_.resize(std::max(len_ + n, 2 * out_.size() + 64));
}

void ByteWriter::reserve(size_t n) {
  if (out_.size() - len_ < n) out_.resize(len_ + n);
}

void ByteReader::fail(std::string_view what) const {
  throw Error(
      kiln::str("[graph bytes] ", std::string(what), " at byte ", pos_, " of ", in_.size()));
}

uint64_t ByteReader::uvar_long() {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    if (shift > 63) fail("varint too long");
    const uint8_t b = u8();
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
}

double ByteReader::f64() {
  double v = 0;
  std::memcpy(&v, raw(sizeof v).data(), sizeof v);
  return v;
}

std::string_view ByteReader::raw(size_t n) {
  if (n > remaining()) fail("truncated");
  std::string_view s = in_.substr(pos_, n);
  pos_ += n;
  return s;
}

SymInt ByteReader::sym_terms() {
  SymInt s;
  const size_t n = count(2);
  if (n > 0) {
    s.terms.resize(n);
    for (SymTerm& t : s.terms) {
      t.coef = svar();
      t.mono = uvar();
      if (t.coef == 0 || t.mono == 0) fail("non-canonical symbolic size");
    }
  }
  s.b = svar();
  return s;
}

SymShape ByteReader::shape() {
  SymShape s(count(1));
  for (SymInt& d : s) d = sym();
  return s;
}

namespace {

constexpr uint8_t kTagInt = 0, kTagDouble = 1, kTagBool = 2, kTagDType = 3, kTagDims = 4;

DType read_dtype(ByteReader& r) {
  const uint8_t d = r.u8();
  if (d >= kNumDTypes) r.fail("bad dtype");
  return static_cast<DType>(d);
}

// Interns strings into a table written before the records that index it.
struct NameTable {
  std::vector<std::string_view> names;
  std::unordered_map<std::string_view, uint32_t> index;
  // Attribute names are interned pointers (a few distinct ones per graph), so
  // a pointer seen before skips hashing its string; two pointers to equal
  // strings still share one entry through `index`.
  std::unordered_map<const void*, uint32_t> by_ptr;
  uint32_t of(std::string_view s) {
    auto [it, fresh] = index.emplace(s, static_cast<uint32_t>(names.size()));
    if (fresh) names.push_back(s);
    return it->second;
  }
  uint32_t of_interned(const char* s) {
    if (!s) return of("");
    auto it = by_ptr.find(s);
    if (it != by_ptr.end()) return it->second;
    const uint32_t k = of(s);
    by_ptr.emplace(s, k);
    return k;
  }
};

void write_attrs(ByteWriter& w, const Attrs& a, NameTable& attr_names) {
  w.uvar(a.items().size());
  for (const auto& [key, val] : a.items()) {
    w.uvar(attr_names.of_interned(key));
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, int64_t>) {
            w.u8(kTagInt);
            w.svar(x);
          } else if constexpr (std::is_same_v<T, double>) {
            w.u8(kTagDouble);
            w.f64(x);
          } else if constexpr (std::is_same_v<T, bool>) {
            w.u8(kTagBool);
            w.u8(x ? 1 : 0);
          } else if constexpr (std::is_same_v<T, DType>) {
            w.u8(kTagDType);
            w.u8(static_cast<uint8_t>(x));
          } else {
            static_assert(std::is_same_v<T, Dims>, "new AttrValue alternative: serialize it");
            w.u8(kTagDims);
            w.uvar(x.size());
            for (int64_t d : x) w.svar(d);
          }
        },
        val);
  }
}

Attrs read_attrs(ByteReader& r, const std::vector<const char*>& attr_names) {
  Attrs a;
  const size_t n = r.count(2);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t k = r.uvar();
    if (k >= attr_names.size()) r.fail("bad attribute name index");
    const char* name = attr_names[k];
    if (a.has(name)) r.fail("duplicate attribute");
    switch (r.u8()) {
      case kTagInt:
        a.set(name, AttrValue(r.svar()));
        break;
      case kTagDouble:
        a.set(name, AttrValue(r.f64()));
        break;
      case kTagBool:
        a.set(name, AttrValue(r.u8() != 0));
        break;
      case kTagDType:
        a.set(name, AttrValue(read_dtype(r)));
        break;
      case kTagDims: {
        Dims d(r.count(1));
        for (int64_t& x : d) x = r.svar();
        a.set(name, AttrValue(std::move(d)));
        break;
      }
      default:
        r.fail("bad attribute tag");
    }
  }
  return a;
}

void write_constant(ByteWriter& w, const Tensor& t) {
  KILN_CHECK(t.defined() && !t.is_symbolic(), "[graph bytes] a constant node without data");
  const Tensor c = t.cpu().contiguous();  // a device constant's bytes through the host
  w.u8(static_cast<uint8_t>(t.dtype()));
  w.uvar(t.shape().size());
  for (int64_t d : t.shape()) w.uvar(static_cast<uint64_t>(d));
  w.u8(t.impl()->wrapped_number ? 1 : 0);
  w.raw(c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size());
}

Tensor read_constant(ByteReader& r) {
  const DType dt = read_dtype(r);
  Dims shape(r.count(1));
  uint64_t bytes = dtype_size(dt);
  for (int64_t& d : shape) {
    const uint64_t n = r.uvar();
    // Bounded by the bytes left before multiplying (no overflow, no huge allocation).
    if (n > r.remaining() || (n > 0 && bytes > r.remaining() / n)) r.fail("constant too large");
    bytes *= n;
    d = static_cast<int64_t>(n);
  }
  const bool wrapped = r.u8() != 0;
  std::string_view data = r.raw(static_cast<size_t>(bytes));
  Tensor t = kiln::empty(shape, dt);
  if (!data.empty()) std::memcpy(t.data_ptr(), data.data(), data.size());
  t.impl()->wrapped_number = wrapped;
  return t;
}

}  // namespace

std::vector<const Value*> numbered_values(const Graph& g) {
  std::vector<const Value*> out(g.inputs().begin(), g.inputs().end());
  for (const Node* n : g.nodes()) out.insert(out.end(), n->outputs.begin(), n->outputs.end());
  return out;
}

void write_graph(ByteWriter& out, const Graph& g) {
  // One walk over the nodes (a deep model's graph is cache-miss bound): the
  // records go to `w`, the name tables they index are written before them.
  const std::vector<Node*> nodes = g.nodes();
  std::vector<int64_t> num(static_cast<size_t>(g.value_id_bound()), -1);  // by Value::id
  int64_t next = 0;
  NameTable ops, attr_names;
  std::vector<int32_t> op_index(static_cast<size_t>(kNumOps), -1);  // OpId -> ops entry
  ByteWriter w;
  w.reserve(64 * nodes.size() + 256);
  auto ref = [&](const Value* v) {
    const size_t id = static_cast<size_t>(v->id());
    const int64_t k = id < num.size() ? num[id] : -1;
    KILN_CHECK(k >= 0, "[graph bytes] a node reads a value defined after it or outside the graph");
    w.uvar(static_cast<uint64_t>(k));
  };
  auto meta = [&](const Value* v) {
    w.u8(static_cast<uint8_t>(v->dtype));
    w.shape(v->shape);
    w.u8(v->wrapped_number ? 1 : 0);
    w.str(v->name);
    num[static_cast<size_t>(v->id())] = next++;
  };
  w.uvar(g.inputs().size());
  for (const Value* v : g.inputs()) meta(v);
  w.uvar(nodes.size());
  for (const Node* n : nodes) {
    w.u8(static_cast<uint8_t>(n->kind));
    if (!n->is_constant()) {
      KILN_CHECK(static_cast<int>(n->op) < kNumOps, "[graph bytes] a node with a bad op");
      int32_t& k = op_index[static_cast<size_t>(n->op)];
      if (k < 0) k = static_cast<int32_t>(ops.of(op_name(n->op)));
      w.uvar(static_cast<uint64_t>(k));
    }
    w.uvar(n->inputs.size());
    for (const Value* v : n->inputs) ref(v);
    write_attrs(w, n->attrs, attr_names);
    w.uvar(n->sym_attrs.size());
    for (const SymAttr& s : n->sym_attrs) {
      w.uvar(attr_names.of_interned(s.name));
      w.svar(s.index);
      w.sym(s.expr);
      w.u8(s.reciprocal ? 1 : 0);
    }
    if (n->is_constant()) write_constant(w, n->constant);
    w.uvar(n->outputs.size());
    for (const Value* v : n->outputs) meta(v);
  }
  w.uvar(g.outputs().size());
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    ref(g.outputs()[i]);
    w.str(i < g.output_names().size() ? g.output_names()[i] : "");
    w.u8(static_cast<uint8_t>(g.output_roles()[i]));
  }
  out.svar(g.num_syms);
  out.sym(g.rng_advance);
  for (const NameTable* t : {&ops, &attr_names}) {
    out.uvar(t->names.size());
    for (std::string_view s : t->names) out.str(s);
  }
  out.raw(w.bytes().data(), w.bytes().size());
}

std::unique_ptr<Graph> read_graph(ByteReader& r) {
  auto g = std::make_unique<Graph>();
  const int64_t num_syms = r.svar();
  if (num_syms < 0 || num_syms > SymInt::kMaxSyms) r.fail("bad symbol count");
  g->num_syms = static_cast<int>(num_syms);
  g->rng_advance = r.sym();
  std::vector<OpId> ops(r.count(1));
  for (OpId& op : ops) {
    const std::string name(r.str());
    if (!op_from_name(name.c_str(), op)) r.fail(str("unknown op '", name, "'"));
  }
  std::vector<const char*> attr_names(r.count(1));
  for (const char*& a : attr_names) a = intern_attr_name(r.str());
  std::vector<Value*> values;
  const size_t ninputs = r.count(4);
  values.reserve(ninputs);
  for (size_t i = 0; i < ninputs; ++i) {
    const DType dt = read_dtype(r);
    SymShape shape = r.shape();
    const bool wrapped = r.u8() != 0;
    Value* v = g->add_input(dt, std::move(shape), std::string(r.str()));
    v->wrapped_number = wrapped;
    values.push_back(v);
  }
  auto value = [&]() {
    const uint64_t k = r.uvar();
    if (k >= values.size()) r.fail("reference to an undefined value");
    return values[k];
  };
  const size_t nnodes = r.count(4);
  values.reserve(ninputs + nnodes + nnodes / 4);
  g->reserve(nnodes, nnodes + nnodes / 4);  // one block each (most nodes have one output)
  // Per output of the node being read (reused: no vectors per node).
  std::vector<OutSpec> outs;
  std::vector<uint8_t> wrapped;
  std::vector<std::string_view> names;
  for (size_t i = 0; i < nnodes; ++i) {
    const uint8_t kind = r.u8();
    if (kind > static_cast<uint8_t>(NodeKind::kConstant)) r.fail("bad node kind");
    OpId op = OpId::full;
    if (kind == static_cast<uint8_t>(NodeKind::kOp)) {
      const uint64_t k = r.uvar();
      if (k >= ops.size()) r.fail("bad op index");
      op = ops[k];
    }
    std::vector<Value*> ins(r.count(1));
    for (Value*& v : ins) v = value();
    Attrs attrs = read_attrs(r, attr_names);
    std::vector<SymAttr> sym_attrs(r.count(4));
    for (SymAttr& s : sym_attrs) {
      const uint64_t k = r.uvar();
      if (k >= attr_names.size()) r.fail("bad attribute name index");
      s.name = attr_names[k];
      const int64_t index = r.svar();
      if (index < -1 || index > INT32_MAX) r.fail("bad symbolic attribute index");
      s.index = static_cast<int32_t>(index);
      s.expr = r.sym();
      s.reciprocal = r.u8() != 0;
    }
    Tensor constant;
    if (kind == static_cast<uint8_t>(NodeKind::kConstant)) {
      constant = read_constant(r);
      if (!ins.empty()) r.fail("a constant with inputs");
    }
    const size_t nout = r.count(4);
    outs.resize(nout);
    wrapped.resize(nout);
    names.resize(nout);
    for (size_t o = 0; o < nout; ++o) {
      outs[o].dtype = read_dtype(r);
      outs[o].shape = r.shape();
      wrapped[o] = r.u8();
      names[o] = r.str();
    }
    Node* n = g->add_op_specs(op, std::move(ins), std::move(attrs), outs);
    n->sym_attrs = std::move(sym_attrs);
    if (kind == static_cast<uint8_t>(NodeKind::kConstant)) {
      if (nout != 1) r.fail("a constant without exactly one output");
      n->kind = NodeKind::kConstant;
      n->constant = std::move(constant);
    }
    for (size_t o = 0; o < nout; ++o) {
      n->outputs[o]->wrapped_number = wrapped[o] != 0;
      if (!names[o].empty()) n->outputs[o]->name = std::string(names[o]);
      values.push_back(n->outputs[o]);
    }
  }
  const size_t nout = r.count(2);
  for (size_t i = 0; i < nout; ++i) {
    Value* v = value();
    std::string name(r.str());
    const uint8_t role = r.u8();
    KILN_CHECK(role <= static_cast<uint8_t>(OutputRole::kGradient), "[read_graph] output ", i,
               " has an unknown role ", int(role));
    g->add_output(v, std::move(name), static_cast<OutputRole>(role));
  }
  return g;
}

}  // namespace kiln::ir
