// Common subexpression elimination.
//
// Nodes are visited in evaluation order; each gets a canonical key (a byte
// string) and is merged into the first earlier node with the same key: its
// outputs' uses move to that node's outputs and it is erased. Because inputs
// are rewritten before their users are visited, whole duplicated chains merge
// in one run. The key holds:
// - ops: the op, the attributes sorted by name (doubles by bit pattern, so two
//   NaN attrs with the same payload merge and 0.0 / -0.0 stay apart), the
//   symbolic attributes, the input value ids (sorted for kCommutative binary
//   ops: add(a, b) == add(b, a), except floating maximum/minimum, see
//   commutes_exactly) and the output dtypes/shapes/wrapped flags;
// - constants: dtype, shape, wrapped flag, symbolic value and the raw bytes,
//   only up to kMaxConstantElements so hashing stays cheap (large constants
//   are parameters folded in, rarely duplicated).
// Random nodes (kRandom) are never merged: the contract says each one is its
// own draw, even if its seed and offset match another's.
// Only hash-map lookups by key decide what merges; the representative is
// always the earliest node, so the result never depends on pointer values.
#include "kiln/passes/cse.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

namespace kiln::passes {
namespace {

// Constants with more elements than this are not merged.
constexpr int64_t kMaxConstantElements = 4096;

// Appends the bytes of a trivially copyable value.
template <typename T>
void put(std::string& key, const T& v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  key.append(buf, sizeof(T));
}

void put_str(std::string& key, const char* s) {
  key.append(s);
  key.push_back('\0');
}

void put_symint(std::string& key, const ir::SymInt& s) {
  // SymInts are canonical polynomials: equal ones have equal terms.
  put(key, s.terms.size());
  for (const ir::SymTerm& t : s.terms) {
    put(key, t.coef);
    put(key, t.mono);
  }
  put(key, s.b);
}

using AttrItems = std::vector<const std::pair<const char*, AttrValue>*>;

// `items` is scratch (reused across nodes).
void put_attrs(std::string& key, const Attrs& attrs, AttrItems& items) {
  items.clear();
  for (const auto& item : attrs.items()) items.push_back(&item);
  if (items.size() > 1)
    std::sort(items.begin(), items.end(),
              [](auto* a, auto* b) { return std::strcmp(a->first, b->first) < 0; });
  put(key, items.size());
  for (const auto* item : items) {
    put_str(key, item->first);
    const AttrValue& v = item->second;
    put(key, static_cast<uint8_t>(v.index()));
    if (const int64_t* i = std::get_if<int64_t>(&v)) {
      put(key, *i);
    } else if (const double* d = std::get_if<double>(&v)) {
      put(key, std::bit_cast<uint64_t>(*d));  // bit pattern: NaN == NaN, 0.0 != -0.0
    } else if (const bool* b = std::get_if<bool>(&v)) {
      put(key, static_cast<uint8_t>(*b));
    } else if (const DType* t = std::get_if<DType>(&v)) {
      put(key, static_cast<uint8_t>(*t));
    } else {
      const Dims& dims = std::get<Dims>(v);
      put(key, dims.size());
      for (int64_t x : dims) put(key, x);
    }
  }
}

void put_sym_attrs(std::string& key, const std::vector<ir::SymAttr>& sym_attrs) {
  put(key, sym_attrs.size());
  for (const ir::SymAttr& s : sym_attrs) {
    put_str(key, s.name);
    put(key, s.index);
    put_symint(key, s.expr);
    put(key, static_cast<uint8_t>(s.reciprocal));
  }
}

void put_value_meta(std::string& key, const ir::Value* v) {
  put(key, static_cast<uint8_t>(v->dtype));
  put(key, static_cast<uint8_t>(v->wrapped_number));
  put(key, v->shape.size());
  for (const ir::SymInt& s : v->shape) put_symint(key, s);
}

// True if swapping n's two operands gives the same bits. maximum and minimum
// are kCommutative but return the second operand on ties (the eager kernel is
// a > b ? a : b), so maximum(-0.0, +0.0) is +0.0 and maximum(+0.0, -0.0) is
// -0.0: for floating results their operand order is part of the key.
bool commutes_exactly(const ir::Node* n) {
  if (!n->info().has(kCommutative) || n->inputs.size() != 2) return false;
  if (n->is_op(OpId::maximum) || n->is_op(OpId::minimum)) return !is_floating(n->output()->dtype);
  return true;
}

// Scratch buffers of make_key, reused across nodes.
struct KeyScratch {
  AttrItems items;
  std::vector<int> ids;
};

// The canonical key of `n`, or false if `n` must not be merged.
bool make_key(const ir::Node* n, std::string& key, KeyScratch& scratch) {
  key.clear();
  if (n->is_constant()) {
    const Tensor& t = n->constant;
    if (!t.defined() || t.numel() > kMaxConstantElements) return false;
    key.push_back('C');
    put_value_meta(key, n->output());
    put_attrs(key, n->attrs, scratch.items);
    put_sym_attrs(key, n->sym_attrs);
    Tensor c = t.contiguous();
    put(key, static_cast<uint8_t>(c.dtype()));  // the data's own dtype, in case it differs
    key.append(static_cast<const char*>(c.data_ptr()),
               static_cast<size_t>(c.numel()) * c.element_size());
    return true;
  }
  const OpInfo& info = n->info();
  if (info.has(kRandom) || info.has(kCollective)) return false;  // each call is its own
  key.push_back('O');
  put(key, static_cast<uint16_t>(n->op));
  put_attrs(key, n->attrs, scratch.items);
  put_sym_attrs(key, n->sym_attrs);
  std::vector<int>& ids = scratch.ids;
  ids.clear();
  for (const ir::Value* v : n->inputs) ids.push_back(v->id());
  if (commutes_exactly(n)) std::sort(ids.begin(), ids.end());
  put(key, ids.size());
  for (int id : ids) put(key, id);
  put(key, n->outputs.size());
  for (const ir::Value* o : n->outputs) put_value_meta(key, o);
  return true;
}

// Copies of the keys in large chunks: one allocation per chunk, not per node,
// and views into a chunk stay valid as more are added.
class KeyArena {
 public:
  std::string_view store(std::string_view k) {
    if (k.size() > room_) {
      const size_t size = std::max(kChunk, k.size());
      chunks_.push_back(std::make_unique<char[]>(size));
      at_ = chunks_.back().get();
      room_ = size;
    }
    std::memcpy(at_, k.data(), k.size());
    std::string_view v(at_, k.size());
    at_ += k.size();
    room_ -= k.size();
    return v;
  }

 private:
  static constexpr size_t kChunk = size_t{1} << 16;
  std::vector<std::unique_ptr<char[]>> chunks_;
  char* at_ = nullptr;
  size_t room_ = 0;
};

}  // namespace

bool cse(ir::Graph& g) {
  bool changed = false;
  KeyArena arena;
  std::unordered_map<std::string_view, ir::Node*> seen;  // keys live in the arena
  seen.reserve(g.num_nodes());
  std::string key;
  KeyScratch scratch;
  for (ir::Node* n : g.nodes()) {
    if (!make_key(n, key, scratch)) continue;
    auto it = seen.find(std::string_view(key));
    if (it == seen.end()) {
      seen.emplace(arena.store(key), n);
      continue;
    }
    ir::Node* rep = it->second;
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      ir::Value* from = n->outputs[i];
      ir::Value* to = rep->outputs[i];
      if (to->name.empty()) to->name = from->name;
      g.replace_all_uses(from, to);
    }
    g.erase(n);
    changed = true;
  }
  return changed;
}

}  // namespace kiln::passes
