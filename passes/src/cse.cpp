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

#include "cse_key.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

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

// `items` is scratch (reused across nodes); an attribute named `skip` is left out.
void put_attrs(std::string& key, const Attrs& attrs, AttrItems& items, const char* skip = nullptr) {
  items.clear();
  for (const auto& item : attrs.items())
    if (!skip || std::strcmp(item.first, skip) != 0) items.push_back(&item);
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

}  // namespace

bool make_key(const ir::Node* n, std::string& key, KeyScratch& scratch, const KeyOptions& opt) {
  key.clear();
  if (n->is_constant()) {
    const Tensor& t = n->constant;
    if (!t.defined() || t.numel() > kMaxConstantElements) return false;
    key.push_back('C');
    put_value_meta(key, n->output());
    put_attrs(key, n->attrs, scratch.items);
    put_sym_attrs(key, n->sym_attrs);
    Tensor c = t.cpu().contiguous();            // a device constant's bytes through the host
    put(key, static_cast<uint8_t>(c.dtype()));  // the data's own dtype, in case it differs
    key.append(static_cast<const char*>(c.data_ptr()),
               static_cast<size_t>(c.numel()) * c.element_size());
    return true;
  }
  const OpInfo& info = n->info();
  if (info.has(kRandom) || info.has(kCollective)) return false;  // each call is its own
  key.push_back('O');
  put(key, static_cast<uint16_t>(n->op));
  put_attrs(key, n->attrs, scratch.items, opt.skip_attr);
  put_sym_attrs(key, n->sym_attrs);
  std::vector<int>& ids = scratch.ids;
  ids.clear();
  for (const ir::Value* v : n->inputs) ids.push_back((opt.input ? opt.input(v) : v)->id());
  if (commutes_exactly(n)) std::sort(ids.begin(), ids.end());
  put(key, ids.size());
  for (int id : ids) put(key, id);
  put(key, n->outputs.size());
  for (const ir::Value* o : n->outputs) put_value_meta(key, o);
  return true;
}

namespace {

// Keys -> the first node with that key, in one open-addressing table; the key
// bytes live in one buffer, addressed by offset. A node-based hash map made a
// deep model's 30k keys cost an allocation and a cache miss each, and the
// allocations interleaved with the pass's frees (std::unordered_map, keys in
// 64 KB chunks: glibc consolidates its free lists before each large request).
class KeyTable {
 public:
  explicit KeyTable(size_t expected) {
    size_t cap = 64;
    while (cap < 2 * expected) cap *= 2;
    slots_.assign(cap, Slot{});
  }
  // The node stored under `key`; if none, stores `n` under it and returns null.
  ir::Node* find_or_add(std::string_view key, ir::Node* n) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    const uint64_t h = std::hash<std::string_view>{}(key);
    Slot& s = probe(h, key);
    if (s.node) return s.node;
    s = {h, bytes_.size(), key.size(), n};
    bytes_.append(key);
    ++size_;
    return nullptr;
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    size_t offset = 0, size = 0;
    ir::Node* node = nullptr;  // null: empty
  };
  Slot& probe(uint64_t h, std::string_view key) {
    const size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      Slot& s = slots_[i];
      if (!s.node || (s.hash == h && std::string_view(bytes_).substr(s.offset, s.size) == key))
        return s;
    }
  }
  void grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    const size_t mask = slots_.size() - 1;
    for (const Slot& s : old) {
      if (!s.node) continue;
      size_t i = s.hash & mask;
      while (slots_[i].node) i = (i + 1) & mask;
      slots_[i] = s;
    }
  }
  std::vector<Slot> slots_;
  std::string bytes_;
  size_t size_ = 0;
};

}  // namespace

bool cse(ir::Graph& g) {
  bool changed = false;
  KeyTable seen(g.num_nodes());
  std::string key;
  KeyScratch scratch;
  for (ir::Node* n : g.nodes()) {
    if (!make_key(n, key, scratch)) continue;
    ir::Node* rep = seen.find_or_add(key, n);
    if (rep == nullptr) continue;
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
