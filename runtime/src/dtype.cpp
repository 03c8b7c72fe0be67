#include "kiln/dtype.h"

#include <cmath>

namespace kiln {

namespace {
struct DTypeRow {
  const char* name;
  size_t size;
  int category;
};
// Indexed by DType.
constexpr DTypeRow kRows[kNumDTypes] = {
    {"f32", 4, 2}, {"f64", 8, 2}, {"f16", 2, 2}, {"bf16", 2, 2},
    {"i64", 8, 1}, {"i32", 4, 1}, {"u8", 1, 1},  {"bool", 1, 0},
};
int idx(DType t) {
  return static_cast<int>(t);
}
}  // namespace

size_t dtype_size(DType t) {
  return kRows[idx(t)].size;
}
const char* dtype_name(DType t) {
  return kRows[idx(t)].name;
}
bool is_floating(DType t) {
  return kRows[idx(t)].category == 2;
}
bool is_integral(DType t) {
  return kRows[idx(t)].category == 1;
}
int dtype_category(DType t) {
  return kRows[idx(t)].category;
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  using D = DType;
  int ca = dtype_category(a), cb = dtype_category(b);
  if (ca != cb) {
    // The higher category wins; within floating/integer the winner keeps its type.
    return ca > cb ? a : b;
  }
  if (ca == 2) {
    if (a == D::f64 || b == D::f64) return D::f64;
    if (a == D::f32 || b == D::f32) return D::f32;
    return D::f32;  // f16 with bf16 -> f32, as PyTorch
  }
  if (ca == 1) {
    if (a == D::i64 || b == D::i64) return D::i64;
    if (a == D::i32 || b == D::i32) return D::i32;
    return D::u8;
  }
  return D::b8;
}

// Half <-> float, round to nearest even, with inf/NaN/subnormals.
Half::Half(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mant = x & 0x007fffffu;
  int32_t exp = static_cast<int32_t>((x >> 23) & 0xff);
  uint16_t h;
  if (exp == 0xff) {
    // NaN keeps the top of its payload and is quieted, as F16C's vcvtps2ph does.
    h = static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0u));
  } else {
    int32_t e = exp - 127 + 15;
    if (e >= 0x1f) {
      h = static_cast<uint16_t>(sign | 0x7c00u);
    } else if (e <= 0) {
      if (e < -10) {
        h = static_cast<uint16_t>(sign);
      } else {
        mant |= 0x00800000u;
        uint32_t shift = static_cast<uint32_t>(14 - e);
        uint32_t hm = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (hm & 1u))) ++hm;
        h = static_cast<uint16_t>(sign | hm);
      }
    } else {
      uint32_t hm = mant >> 13;
      uint32_t rem = mant & 0x1fffu;
      uint32_t v = (static_cast<uint32_t>(e) << 10) | hm;
      if (rem > 0x1000u || (rem == 0x1000u && (hm & 1u))) ++v;  // may carry into exponent: ok
      h = static_cast<uint16_t>(sign | v);
    }
  }
  bits = h;
}

Half::operator float() const {
  uint32_t sign = (static_cast<uint32_t>(bits) & 0x8000u) << 16;
  uint32_t exp = (bits >> 10) & 0x1fu;
  uint32_t mant = bits & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    if (mant == 0) {
      out = sign;
    } else {
      float v = std::ldexp(static_cast<float>(mant), -24);
      return sign ? -v : v;
    }
  } else if (exp == 0x1f) {
    // NaN is quieted, as F16C's vcvtph2ps does.
    out = sign | 0x7f800000u | (mant << 13) | (mant ? 0x00400000u : 0u);
  } else {
    out = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(out);
}

}  // namespace kiln
