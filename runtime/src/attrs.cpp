#include "kiln/attrs.h"

namespace kiln {

std::ostream& operator<<(std::ostream& os, const AttrValue& v) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>)
          os << (x ? "true" : "false");
        else
          os << x;
      },
      v);
  return os;
}

std::ostream& operator<<(std::ostream& os, const Attrs& a) {
  os << '{';
  bool first = true;
  for (const auto& [k, v] : a.items()) {
    os << (first ? "" : ", ") << k << '=' << v;
    first = false;
  }
  return os << '}';
}

}  // namespace kiln
