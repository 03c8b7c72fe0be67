// Attrs: the non-tensor arguments of an op (dims, keepdim, dtype, strides...),
// as an ordered list of (name, value) so the IR can print and parse them.
#pragma once

#include <cstdint>
#include <cstring>
#include <ostream>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/dims.h"
#include "kiln/dtype.h"
#include "kiln/error.h"

namespace kiln {

/// One attribute value.
using AttrValue = std::variant<int64_t, double, bool, DType, Dims>;

/// A missing or mistyped attribute. A user error: IR text and direct dispatch()
/// calls can cause it (the IR parser reports it with line and column).
class AttrError : public Error {
 public:
  using Error::Error;
};

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
  // How messages name an alternative ("attribute 'dims' is an integer, expected a list").
  template <typename T>
  static const char* kind() {
    if constexpr (std::is_same_v<T, int64_t>)
      return "an integer";
    else if constexpr (std::is_same_v<T, double>)
      return "a float";
    else if constexpr (std::is_same_v<T, bool>)
      return "a bool";
    else if constexpr (std::is_same_v<T, DType>)
      return "a dtype";
    else
      return "a list";
  }
  template <typename T>
  const T& get(const char* name) const {
    const AttrValue* v = find(name);
    if (v == nullptr) throw AttrError(str("missing attribute '", name, "'"));
    const T* p = std::get_if<T>(v);
    if (p == nullptr)
      throw AttrError(
          str("attribute '", name, "' is ",
              std::visit([](const auto& x) { return kind<std::decay_t<decltype(x)>>(); }, *v),
              ", expected ", kind<T>()));
    return *p;
  }
  std::vector<std::pair<const char*, AttrValue>> items_;
};

std::ostream& operator<<(std::ostream& os, const AttrValue& v);
std::ostream& operator<<(std::ostream& os, const Attrs& a);

}  // namespace kiln
