// Structural hash. The graph is serialised into a canonical stream of 64-bit
// words covering exactly what structurally_equal compares (inputs' dtype,
// shape, wrapped flag and name; per node kind, op, wiring, attrs, sym_attrs,
// constant bytes and output metadata; graph outputs and names; num_syms and
// rng_advance), and the words are absorbed by a fixed mixer. Values are
// numbered by position (inputs first, then node outputs in order), ops by name
// (not by OpId, which shifts when ops.def changes), so the result depends on
// neither pointers, process nor run. Equal graphs hash equal: doubles are
// hashed with all NaNs as one pattern and -0.0 as 0.0, matching the `==` that
// structurally_equal uses; SymInts canonicalise static values like
// SymInt::operator==. Node output names are not hashed (equality ignores them).
#include "kiln/ir/hash.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>
#include <unordered_map>
#include <variant>

namespace kiln::ir {
namespace {

// MurmurHash3's 64-bit finaliser: a bijection with full avalanche.
constexpr uint64_t fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

class Hasher {
 public:
  // Each step is a bijection of the word for a fixed state, so two streams
  // differing in one word differ in the state right after it.
  void word(uint64_t w) {
    h_ = fmix64((h_ ^ w) + 0x9e3779b97f4a7c15ULL);
    ++n_;
  }
  void i64(int64_t v) { word(static_cast<uint64_t>(v)); }
  void f64(double d) {
    if (std::isnan(d)) d = std::numeric_limits<double>::quiet_NaN();
    if (d == 0.0) d = 0.0;  // -0.0 == 0.0 in structurally_equal
    word(std::bit_cast<uint64_t>(d));
  }
  // Length-prefixed bytes, packed little-endian 8 to a word (independent of
  // the host's byte order for the packing itself).
  void bytes(const void* data, size_t n) {
    word(n);
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; i += 8) {
      uint64_t w = 0;
      for (size_t k = 0; k < 8 && i + k < n; ++k) w |= uint64_t{p[i + k]} << (8 * k);
      word(w);
    }
  }
  void str(std::string_view s) { bytes(s.data(), s.size()); }
  void sym(const SymInt& s) {
    if (s.is_static()) {
      word(0);
      i64(s.b);
    } else {
      word(1);
      word(s.terms.size());
      for (const SymTerm& t : s.terms) {
        i64(t.coef);
        word(t.mono);
      }
      i64(s.b);
    }
  }
  void shape(const SymShape& s) {
    word(s.size());
    for (const SymInt& d : s) sym(d);
  }
  uint64_t finish() const { return fmix64(h_ ^ fmix64(n_)); }

 private:
  uint64_t h_ = 0x6b696c6e2e697231ULL;  // "kiln.ir1": bump to change every hash on purpose
  uint64_t n_ = 0;
};

void hash_attrs(Hasher& h, const Attrs& a) {
  h.word(a.items().size());
  for (const auto& [key, val] : a.items()) {
    h.str(key);
    // A fixed tag per alternative (not variant::index, which follows declaration order).
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, double>) {
            h.word('f');
            h.f64(x);
          } else if constexpr (std::is_same_v<T, Dims>) {
            h.word('d');
            h.word(x.size());
            for (int64_t d : x) h.i64(d);
          } else if constexpr (std::is_same_v<T, DType>) {
            h.word('t');
            h.str(dtype_name(x));
          } else if constexpr (std::is_same_v<T, bool>) {
            h.word('b');
            h.word(x ? 1 : 0);
          } else {
            static_assert(std::is_same_v<T, int64_t>, "new AttrValue alternative: hash it");
            h.word('i');
            h.i64(x);
          }
        },
        val);
  }
}

void hash_constant(Hasher& h, const Tensor& t) {
  if (!t.defined() || t.is_symbolic()) {
    h.word(~uint64_t{0});  // broken constant: still hashable
    return;
  }
  h.str(dtype_name(t.dtype()));
  h.word(t.shape().size());
  for (int64_t d : t.shape()) h.i64(d);
  Tensor c = t.cpu().contiguous();  // a device constant's bytes through the host
  h.bytes(c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size());
}

}  // namespace

uint64_t structural_hash(const Graph& g) {
  Hasher h;
  std::unordered_map<const Value*, uint64_t> num;  // lookup only: never iterated
  auto value_ref = [&](const Value* v) {
    auto it = num.find(v);
    h.word(it == num.end() ? ~uint64_t{0} : it->second);  // undefined: a sentinel
  };
  auto meta = [&](const Value* v) {
    h.str(dtype_name(v->dtype));
    h.shape(v->shape);
    h.word(v->wrapped_number ? 1 : 0);
  };
  h.i64(g.num_syms);
  h.sym(g.rng_advance);
  h.word(g.inputs().size());
  for (const Value* v : g.inputs()) {
    num.emplace(v, num.size());
    meta(v);
    h.str(v->name);
  }
  const std::vector<Node*> nodes = g.nodes();
  h.word(nodes.size());
  for (const Node* n : nodes) {
    h.word(static_cast<uint64_t>(n->kind));
    if (!n->is_constant()) h.str(static_cast<int>(n->op) < kNumOps ? op_name(n->op) : "<bad op>");
    h.word(n->inputs.size());
    for (const Value* v : n->inputs) value_ref(v);
    hash_attrs(h, n->attrs);
    h.word(n->sym_attrs.size());
    for (const SymAttr& s : n->sym_attrs) {
      h.str(s.name ? s.name : "");
      h.i64(s.index);
      h.sym(s.expr);
      h.word(s.reciprocal ? 1 : 0);
    }
    if (n->is_constant()) hash_constant(h, n->constant);
    h.word(n->outputs.size());
    for (const Value* o : n->outputs) {
      num.emplace(o, num.size());
      meta(o);
    }
  }
  h.word(g.outputs().size());
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    value_ref(g.outputs()[i]);
    h.str(i < g.output_names().size() ? g.output_names()[i] : "");
    h.word(static_cast<uint64_t>(g.output_roles()[i]));
  }
  return h.finish();
}

}  // namespace kiln::ir
