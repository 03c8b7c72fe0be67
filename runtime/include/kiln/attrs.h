// Attrs: the non-tensor arguments of an op (dims, keepdim, dtype, strides...),
// as an ordered list of (name, value) so the IR can print and parse them.
#pragma once

#include <cstdint>
#include <cstring>
#include <ostream>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/dims.h"
#include "kiln/dtype.h"
#include "kiln/error.h"

namespace kiln {

/// One attribute value.
using AttrValue = std::variant<int64_t, double, bool, DType, Dims>;

/// Named attributes of one op call. Names are string literals (static storage).
class Attrs {
 public:
  Attrs() = default;
  /// Adds or replaces an attribute; returns *this for chaining.
  Attrs& set(const char* name, AttrValue v) {
    for (auto& [k, val] : items_)
      if (std::strcmp(k, name) == 0) {
        val = std::move(v);
        return *this;
      }
    items_.emplace_back(name, std::move(v));
    return *this;
  }
  // Exact overloads so that no argument type silently converts to another
  // alternative (a double must never become an int64).
  Attrs& set(const char* name, int v) { return set(name, AttrValue(int64_t{v})); }
  Attrs& set(const char* name, long v) { return set(name, AttrValue(int64_t{v})); }
  Attrs& set(const char* name, long long v) {
    return set(name, AttrValue(static_cast<int64_t>(v)));
  }
  Attrs& set(const char* name, double v) { return set(name, AttrValue(v)); }
  Attrs& set(const char* name, bool v) { return set(name, AttrValue(v)); }
  Attrs& set(const char* name, DType v) { return set(name, AttrValue(v)); }
  Attrs& set(const char* name, const Dims& v) { return set(name, AttrValue(v)); }
  bool has(const char* name) const { return find(name) != nullptr; }
  int64_t i(const char* name) const { return get<int64_t>(name); }
  double f(const char* name) const { return get<double>(name); }
  bool b(const char* name) const { return get<bool>(name); }
  DType dtype(const char* name) const { return get<DType>(name); }
  const Dims& dims(const char* name) const { return get<Dims>(name); }
  const std::vector<std::pair<const char*, AttrValue>>& items() const { return items_; }
  bool empty() const { return items_.empty(); }

 private:
  const AttrValue* find(const char* name) const {
    for (auto& [k, v] : items_)
      if (std::strcmp(k, name) == 0) return &v;
    return nullptr;
  }
  template <typename T>
  const T& get(const char* name) const {
    const AttrValue* v = find(name);
    KILN_ASSERT(v != nullptr, "missing attribute ", name);
    const T* p = std::get_if<T>(v);
    KILN_ASSERT(p != nullptr, "attribute ", name, " has another type");
    return *p;
  }
  std::vector<std::pair<const char*, AttrValue>> items_;
};

std::ostream& operator<<(std::ostream& os, const AttrValue& v);
std::ostream& operator<<(std::ostream& os, const Attrs& a);

}  // namespace kiln
