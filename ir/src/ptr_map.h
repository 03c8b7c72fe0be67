// Internal: a map keyed by pointers (compared, never dereferenced: a key may
// be stale), open addressing with linear probing in one array, no erase. For
// the IR's hot lookups over thousands of nodes, values or tensors, where
// std::unordered_map costs an allocation per entry and a cache miss per lookup
// (the verifier's positions, the tracer's captures and versions).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "kiln/error.h"

namespace kiln::ir::detail {

template <class V>
class PtrMap {
 public:
  /// Room for n entries in all without growing.
  void reserve(size_t n) {
    if (2 * n > slots_.size()) rehash(std::bit_ceil(std::max<size_t>(2 * n, 16)));
  }
  /// The value of k, or null.
  V* find(const void* k) {
    if (size_ == 0) return nullptr;
    Slot& s = slot_of(k);
    return s.first ? &s.second : nullptr;
  }
  const V* find(const void* k) const { return const_cast<PtrMap*>(this)->find(k); }
  bool contains(const void* k) const { return find(k) != nullptr; }
  /// Inserts (k, v) unless k is present; the stored value and whether it is new.
  std::pair<V*, bool> emplace(const void* k, V v) {
    KILN_ASSERT(k != nullptr, "PtrMap: a null key");
    if (2 * (size_ + 1) > slots_.size()) rehash(slots_.empty() ? 16 : 2 * slots_.size());
    Slot& s = slot_of(k);
    if (s.first) return {&s.second, false};
    s = {k, std::move(v)};
    ++size_;
    return {&s.second, true};
  }
  /// The value of k, value-initialized if new.
  V& operator[](const void* k) { return *emplace(k, V()).first; }
  /// The value of k, which must be present.
  V& at(const void* k) {
    V* v = find(k);
    KILN_ASSERT(v != nullptr, "PtrMap: a key missing from its map");
    return *v;
  }

 private:
  using Slot = std::pair<const void*, V>;
  Slot& slot_of(const void* k) {
    // Fibonacci hashing: the product's high bits mix every address bit.
    size_t i =
        static_cast<size_t>((reinterpret_cast<uintptr_t>(k) * 0x9E3779B97F4A7C15ull) >> shift_);
    while (slots_[i].first && slots_[i].first != k) i = (i + 1) & (slots_.size() - 1);
    return slots_[i];
  }
  void rehash(size_t cap) {
    std::vector<Slot> old(cap);
    old.swap(slots_);
    shift_ = 64 - std::countr_zero(cap);
    size_ = 0;
    for (Slot& s : old)
      if (s.first) emplace(s.first, std::move(s.second));
  }
  std::vector<Slot> slots_;
  size_t size_ = 0;
  int shift_ = 64;
};

}  // namespace kiln::ir::detail
