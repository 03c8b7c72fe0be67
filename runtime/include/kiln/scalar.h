// Scalar: a number passed where a tensor could be (x + 1.5, full(shape, 3)).
#pragma once

#include <cstdint>
#include <ostream>
#include <type_traits>

#include "kiln/dtype.h"

namespace kiln {

/// A bool, integer or floating number. Tensors made from it are "wrapped
/// numbers" that, like Python scalars in PyTorch, do not widen tensor dtypes.
class Scalar {
 public:
  Scalar() = default;
  template <typename T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  Scalar(T v) {  // NOLINT: implicit, like a number
    if constexpr (std::is_same_v<T, bool>) {
      kind_ = DType::b8;
      i_ = v;
    } else if constexpr (std::is_integral_v<T>) {
      kind_ = DType::i64;
      i_ = static_cast<int64_t>(v);
    } else {
      kind_ = DType::f64;
      d_ = static_cast<double>(v);
    }
  }
  Scalar(Half v) : Scalar(static_cast<float>(v)) {}      // NOLINT
  Scalar(BFloat16 v) : Scalar(static_cast<float>(v)) {}  // NOLINT

  /// f64, i64 or b8: the kind of number held.
  DType kind() const { return kind_; }
  bool is_floating() const { return kind_ == DType::f64; }
  double to_double() const { return kind_ == DType::f64 ? d_ : static_cast<double>(i_); }
  int64_t to_int() const { return kind_ == DType::f64 ? static_cast<int64_t>(d_) : i_; }
  template <typename T>
  T to() const {
    if constexpr (std::is_same_v<T, bool>)
      return kind_ == DType::f64 ? d_ != 0 : i_ != 0;
    else if constexpr (std::is_integral_v<T>)
      return static_cast<T>(to_int());
    else
      return static_cast<T>(to_double());
  }

 private:
  DType kind_ = DType::i64;
  int64_t i_ = 0;
  double d_ = 0;
};

inline std::ostream& operator<<(std::ostream& os, const Scalar& s) {
  if (s.kind() == DType::f64) return os << s.to_double();
  if (s.kind() == DType::b8) return os << (s.to_int() ? "true" : "false");
  return os << s.to_int();
}

}  // namespace kiln
