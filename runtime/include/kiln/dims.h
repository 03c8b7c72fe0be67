// Dims: a small vector of int64 with inline storage, used for shapes and
// strides so that creating a tensor of rank <= 6 allocates no heap memory.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <ostream>
#include <span>
#include <vector>

#include "kiln/error.h"

namespace kiln {

/// Small vector of int64_t (shape, strides, dim lists) with 6 inline slots.
class Dims {
 public:
  static constexpr size_t kInline = 6;
  using value_type = int64_t;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;

  Dims() = default;
  Dims(std::initializer_list<int64_t> l) { assign(l.begin(), l.end()); }
  explicit Dims(size_t n, int64_t v = 0) { resize(n, v); }
  Dims(const std::vector<int64_t>& v) { assign(v.data(), v.data() + v.size()); }  // NOLINT
  Dims(std::span<const int64_t> v) { assign(v.data(), v.data() + v.size()); }     // NOLINT
  template <typename It>
  Dims(It b, It e) {
    for (; b != e; ++b) push_back(static_cast<int64_t>(*b));
  }
  Dims(const Dims& o) { assign(o.begin(), o.end()); }
  Dims(Dims&& o) noexcept { steal(std::move(o)); }
  Dims& operator=(const Dims& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  Dims& operator=(Dims&& o) noexcept {
    if (this != &o) {
      release();
      steal(std::move(o));
    }
    return *this;
  }
  ~Dims() { release(); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t* data() { return ptr(); }
  const int64_t* data() const { return ptr(); }
  int64_t* begin() { return ptr(); }
  int64_t* end() { return ptr() + size_; }
  const int64_t* begin() const { return ptr(); }
  const int64_t* end() const { return ptr() + size_; }
  int64_t& operator[](size_t i) { return ptr()[i]; }
  int64_t operator[](size_t i) const { return ptr()[i]; }
  int64_t& back() { return ptr()[size_ - 1]; }
  int64_t back() const { return ptr()[size_ - 1]; }
  void clear() { size_ = 0; }

  void push_back(int64_t v) {
    if (size_ == cap_) grow(cap_ * 2);
    ptr()[size_++] = v;
  }
  void resize(size_t n, int64_t v = 0) {
    if (n > cap_) grow(n);
    for (size_t i = size_; i < n; ++i) ptr()[i] = v;
    size_ = n;
  }
  void insert(size_t pos, int64_t v) {
    push_back(0);
    std::memmove(ptr() + pos + 1, ptr() + pos, (size_ - 1 - pos) * sizeof(int64_t));
    ptr()[pos] = v;
  }
  void erase(size_t pos) {
    std::memmove(ptr() + pos, ptr() + pos + 1, (size_ - 1 - pos) * sizeof(int64_t));
    --size_;
  }
  std::vector<int64_t> vec() const { return {begin(), end()}; }
  operator std::span<const int64_t>() const { return {data(), size_}; }  // NOLINT

  friend bool operator==(const Dims& a, const Dims& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }

 private:
  int64_t* ptr() { return heap_ ? heap_ : inline_; }
  const int64_t* ptr() const { return heap_ ? heap_ : inline_; }
  void assign(const int64_t* b, const int64_t* e) {
    size_t n = static_cast<size_t>(e - b);
    if (n > cap_) grow(n);
    std::copy(b, e, ptr());
    size_ = n;
  }
  // Out of line on purpose: inlined, GCC's -Wstringop-overflow misreads it.
  [[gnu::noinline]] void grow(size_t n) {
    if (n < 2 * kInline) n = 2 * kInline;
    int64_t* p = new int64_t[n];
    for (size_t i = 0; i < size_; ++i) p[i] = ptr()[i];
    delete[] heap_;
    heap_ = p;
    cap_ = n;
  }
  void release() {
    delete[] heap_;
    heap_ = nullptr;
    cap_ = kInline;
    size_ = 0;
  }
  void steal(Dims&& o) {
    if (o.heap_) {
      heap_ = o.heap_;
      cap_ = o.cap_;
      size_ = o.size_;
      o.heap_ = nullptr;
      o.cap_ = kInline;
      o.size_ = 0;
    } else {
      std::copy(o.begin(), o.end(), inline_);
      size_ = o.size_;
      o.size_ = 0;
    }
  }

  int64_t inline_[kInline];
  int64_t* heap_ = nullptr;
  size_t size_ = 0;
  size_t cap_ = kInline;
};

inline std::ostream& operator<<(std::ostream& os, const Dims& d) {
  os << '[';
  for (size_t i = 0; i < d.size(); ++i) os << (i ? ", " : "") << d[i];
  return os << ']';
}

/// The most elements a shape may address: with zero-size dims counted as 1, the
/// product of its dims is at most 2^60, so its element count, contiguous strides
/// and byte count in any dtype (at most 8 bytes) never overflow int64.
inline constexpr int64_t kMaxNumel = int64_t{1} << 60;

/// a + b for sizes and offsets; kiln::Error naming `op` if it overflows int64.
inline int64_t checked_add(int64_t a, int64_t b, const char* op) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    throw_error(str("[", op, "] size arithmetic overflows: ", a, " + ", b));
  return r;
}

/// a * b for sizes and offsets; kiln::Error naming `op` if it overflows int64.
inline int64_t checked_mul(int64_t a, int64_t b, const char* op) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    throw_error(str("[", op, "] size arithmetic overflows: ", a, " * ", b));
  return r;
}

/// Shape `shape` is one kiln can address (no negative dim, kMaxNumel); else
/// kiln::Error "[op] <what> ...". Every shape an op produces passes here.
void check_shape(const Dims& shape, const char* op, const char* what = "shape");

/// Number of elements of a shape (1 for a scalar). For shapes that passed
/// check_shape (every tensor's); compute user-given shapes with check_shape first.
inline int64_t numel_of(const Dims& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

/// Row-major (C-contiguous) strides for a shape.
inline Dims contiguous_strides(const Dims& shape) {
  Dims st(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    st[i] = acc;
    acc *= std::max<int64_t>(shape[i], 1);
  }
  return st;
}

}  // namespace kiln
