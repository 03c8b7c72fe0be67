// Element types, their C++ representations and PyTorch's promotion rules.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <ostream>

namespace kiln {

/// Element type of a tensor. Order matters only for the tables in dtype.cpp.
enum class DType : uint8_t { f32, f64, f16, bf16, i64, i32, u8, b8 };
inline constexpr int kNumDTypes = 8;

/// IEEE half precision, stored as bits; arithmetic goes through float.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f);           // NOLINT: implicit like a builtin float type
  operator float() const;  // NOLINT
};

/// bfloat16 (upper half of an f32), round-to-nearest-even on conversion.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) {  // NOLINT
    uint32_t u = std::bit_cast<uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      bits = static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
    } else {
      u += 0x7fffu + ((u >> 16) & 1u);
      bits = static_cast<uint16_t>(u >> 16);
    }
  }
  operator float() const {
    return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
  }  // NOLINT
};

/// Size in bytes of one element.
size_t dtype_size(DType t);
/// Short name as printed and parsed ("f32", "i64", "bool", ...).
const char* dtype_name(DType t);
/// True for f32, f64, f16, bf16.
bool is_floating(DType t);
/// True for i64, i32, u8 (not bool).
bool is_integral(DType t);
/// PyTorch's promote_types: the smallest type both values fit in.
DType promote_types(DType a, DType b);
/// Category for promotion: 0 bool, 1 integer, 2 floating.
int dtype_category(DType t);
/// The default floating type (f32), used for wrapped float scalars and int->float ops.
inline constexpr DType kDefaultFloat = DType::f32;

inline std::ostream& operator<<(std::ostream& os, DType t) {
  return os << dtype_name(t);
}

/// Maps a C++ element type to its DType.
template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct dtype_of<Half> {
  static constexpr DType value = DType::f16;
};
template <>
struct dtype_of<BFloat16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::i64;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct dtype_of<uint8_t> {
  static constexpr DType value = DType::u8;
};
template <>
struct dtype_of<bool> {
  static constexpr DType value = DType::b8;
};
template <typename T>
inline constexpr DType dtype_v = dtype_of<T>::value;

/// Calls f(T{}) with T the C++ type of dt (all eight types).
template <typename F>
decltype(auto) visit_dtype(DType dt, F&& f) {
  switch (dt) {
    case DType::f32:
      return f(float{});
    case DType::f64:
      return f(double{});
    case DType::f16:
      return f(Half{});
    case DType::bf16:
      return f(BFloat16{});
    case DType::i64:
      return f(int64_t{});
    case DType::i32:
      return f(int32_t{});
    case DType::u8:
      return f(uint8_t{});
    case DType::b8:
      return f(bool{});
  }
  return f(float{});
}

}  // namespace kiln
