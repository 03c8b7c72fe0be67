// A binary form of graphs for on-disk caches (codegen's plan cache): exact
// (structurally_equal after a round trip, node output names kept), several
// times faster to read than the IR text, and safe on any bytes: malformed or
// truncated input raises kiln::Error, never crashes or allocates without bound.
// The bytes are host-endian and tied to the build that wrote them (ops by name,
// but attribute sets as the runtime defines them): callers key them by version.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/ir/graph.h"

namespace kiln::ir {

/// Appends little pieces (LEB128 varints, raw bytes, strings) to a byte string.
/// Everything is inline on a buffer grown ahead (a deep graph writes a few
/// hundred thousand small pieces: per-piece calls were most of write_graph).
class ByteWriter {
 public:
  void u8(uint8_t v) { *room(1) = static_cast<char>(v); }
  /// Unsigned LEB128.
  void uvar(uint64_t v) {
    char* p = room(10);
    char* q = p;
    for (; v >= 0x80; v >>= 7) *q++ = static_cast<char>((v & 0x7f) | 0x80);
    *q++ = static_cast<char>(v);
    len_ -= 10 - static_cast<size_t>(q - p);
  }
  /// Zigzag-encoded signed LEB128.
  void svar(int64_t v) { uvar((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63)); }
  void f64(double v) { raw(&v, sizeof v); }
  void raw(const void* p, size_t n) {
    if (n) std::memcpy(room(n), p, n);
  }
  /// Length-prefixed bytes.
  void str(std::string_view s) {
    uvar(s.size());
    raw(s.data(), s.size());
  }
  /// A size: its term count, terms, constant.
  void sym(const SymInt& s) {
    uvar(s.terms.size());
    for (const SymTerm& t : s.terms) {
      svar(t.coef);
      uvar(t.mono);
    }
    svar(s.b);
  }
  void shape(const SymShape& s) {
    uvar(s.size());
    for (const SymInt& d : s) sym(d);
  }
  /// Makes room for `n` more bytes without growing again.
  void reserve(size_t n);
  /// The bytes written so far (a reference valid until the next write).
  std::string& bytes() {
    out_.resize(len_);
    return out_;
  }

 private:
  // `n` writable bytes at the end (counted as written; uvar gives back what
  // it does not use). out_'s size is the buffer, len_ the bytes written.
  char* room(size_t n) {
    if (out_.size() - len_ < n) grow(n);
    char* p = out_.data() + len_;
    len_ += n;
    return p;
  }
  void grow(size_t n);
  std::string out_;
  size_t len_ = 0;
};

/// Reads what ByteWriter wrote; every read is bounds-checked (kiln::Error
/// "[graph bytes] ..." naming the offset).
class ByteReader {
 public:
  explicit ByteReader(std::string_view in) : in_(in) {}
  uint8_t u8() {
    if (pos_ >= in_.size()) fail("truncated");
    return static_cast<uint8_t>(in_[pos_++]);
  }
  uint64_t uvar() {
    if (pos_ < in_.size() && !(in_[pos_] & 0x80)) return static_cast<uint8_t>(in_[pos_++]);
    return uvar_long();
  }
  int64_t svar() {
    const uint64_t u = uvar();
    return static_cast<int64_t>(u >> 1) ^ -static_cast<int64_t>(u & 1);
  }
  double f64();
  std::string_view raw(size_t n);
  std::string_view str() { return raw(count(1)); }
  /// An element count, at most what the remaining bytes can hold at
  /// `min_bytes` each (so a corrupt count never allocates much).
  size_t count(size_t min_bytes) {
    const uint64_t n = uvar();
    if (n > remaining() / (min_bytes ? min_bytes : 1)) fail("count past the end");
    return static_cast<size_t>(n);
  }
  SymInt sym() {
    if (pos_ < in_.size() && in_[pos_] == 0) {  // a static size (no terms)
      ++pos_;
      return SymInt(svar());
    }
    return sym_terms();
  }
  SymShape shape();
  size_t remaining() const { return in_.size() - pos_; }
  size_t offset() const { return pos_; }
  [[noreturn]] void fail(std::string_view what) const;

 private:
  uint64_t uvar_long();
  SymInt sym_terms();
  std::string_view in_;
  size_t pos_ = 0;
};

/// Appends `g` to `w`.
void write_graph(ByteWriter& w, const Graph& g);
/// Reads a graph written by write_graph (kiln::Error on malformed bytes; the
/// graph is not verified: run ir::verify before trusting its shapes).
std::unique_ptr<Graph> read_graph(ByteReader& r);
/// The graph's values in write_graph's numbering: inputs, then every node's
/// outputs in evaluation order (other records refer to values by this number).
std::vector<const Value*> numbered_values(const Graph& g);

}  // namespace kiln::ir
