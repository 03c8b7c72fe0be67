// A binary form of graphs for on-disk caches (codegen's plan cache): exact
// (structurally_equal after a round trip, node output names kept), several
// times faster to read than the IR text, and safe on any bytes: malformed or
// truncated input raises kiln::Error, never crashes or allocates without bound.
// The bytes are host-endian and tied to the build that wrote them (ops by name,
// but attribute sets as the runtime defines them): callers key them by version.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/ir/graph.h"

namespace kiln::ir {

/// Appends little pieces (LEB128 varints, raw bytes, strings) to a byte string.
class ByteWriter {
 public:
  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  /// Unsigned LEB128.
  void uvar(uint64_t v);
  /// Zigzag-encoded signed LEB128.
  void svar(int64_t v) { uvar((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63)); }
  void f64(double v);
  void raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  /// Length-prefixed bytes.
  void str(std::string_view s);
  void sym(const SymInt& s);
  void shape(const SymShape& s);
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

/// Reads what ByteWriter wrote; every read is bounds-checked (kiln::Error
/// "[graph bytes] ..." naming the offset).
class ByteReader {
 public:
  explicit ByteReader(std::string_view in) : in_(in) {}
  uint8_t u8();
  uint64_t uvar();
  int64_t svar() {
    const uint64_t u = uvar();
    return static_cast<int64_t>(u >> 1) ^ -static_cast<int64_t>(u & 1);
  }
  double f64();
  std::string_view raw(size_t n);
  std::string_view str() { return raw(count(1)); }
  /// An element count, at most what the remaining bytes can hold at
  /// `min_bytes` each (so a corrupt count never allocates much).
  size_t count(size_t min_bytes);
  SymInt sym();
  SymShape shape();
  size_t remaining() const { return in_.size() - pos_; }
  size_t offset() const { return pos_; }
  [[noreturn]] void fail(std::string_view what) const;

 private:
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
