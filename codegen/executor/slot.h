// Internal: the executor's typed indices. A Slot numbers one value's buffer in
// a run (graph inputs first, in input order, then each node's outputs);
// SlotVec<T> is a vector indexed only by Slot. A slot then cannot be mixed up
// with a step, group, kernel-argument or graph-output index, and no use of
// one needs a cast. Both compile to a plain int32_t and std::vector<T>.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace kiln::detail {

/// A value's buffer in one run of an executor.
enum class Slot : int32_t {};

/// No slot.
inline constexpr Slot kNoSlot{-1};

/// The slot's position (a vector index, or printing).
constexpr size_t pos(Slot s) {
  return static_cast<size_t>(s);
}

/// The slot at position `i`.
constexpr Slot slot_at(size_t i) {
  return Slot{static_cast<int32_t>(i)};
}

/// The slots [0, n) in order, for range-for.
class SlotRange {
 public:
  class Iter {
   public:
    explicit constexpr Iter(int32_t i) : i_(i) {}
    constexpr Slot operator*() const { return Slot{i_}; }
    constexpr Iter& operator++() {
      ++i_;
      return *this;
    }
    constexpr bool operator!=(const Iter& o) const { return i_ != o.i_; }

   private:
    int32_t i_;
  };
  explicit constexpr SlotRange(Slot n) : n_(static_cast<int32_t>(n)) {}
  constexpr Iter begin() const { return Iter(0); }
  constexpr Iter end() const { return Iter(n_); }

 private:
  int32_t n_;
};

/// A std::vector<T> indexed by Slot; its size is a Slot count.
template <class T>
class SlotVec {
 public:
  SlotVec() = default;
  /// `n` copies of `fill`.
  explicit SlotVec(Slot n, const T& fill = T()) : v_(pos(n), fill) {}
  /// Replaces the contents with `n` copies of `fill`.
  void assign(Slot n, const T& fill) { v_.assign(pos(n), fill); }
  /// Grows or shrinks to `n` elements, new ones `fill`.
  void resize(Slot n, const T& fill = T()) { v_.resize(pos(n), fill); }
  /// Appends `x`; returns its slot.
  Slot push_back(T x) {
    v_.push_back(std::move(x));
    return slot_at(v_.size() - 1);
  }
  decltype(auto) operator[](Slot s) { return v_[pos(s)]; }
  decltype(auto) operator[](Slot s) const { return v_[pos(s)]; }
  /// The number of slots.
  Slot size() const { return slot_at(v_.size()); }
  bool empty() const { return v_.empty(); }
  /// Every slot, in order.
  SlotRange slots() const { return SlotRange(size()); }
  /// The elements, in slot order.
  auto begin() { return v_.begin(); }
  auto end() { return v_.end(); }
  auto begin() const { return v_.begin(); }
  auto end() const { return v_.end(); }

 private:
  std::vector<T> v_;
};

}  // namespace kiln::detail
