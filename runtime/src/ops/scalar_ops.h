// Internal: the scalar definition of every elementwise primitive, one functor
// named after its op. Eager kernels apply them in loops; the kernel IR
// interpreter (codegen/kernels/kernel_interp.cpp) applies the same functors,
// and the LLVM and GPU backends are tested against the interpreter.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace kiln::ops::scalar {

// Signed integer arithmetic wraps around (two's complement, like PyTorch)
// instead of being undefined behaviour: computed in the unsigned type.
template <typename T>
inline constexpr bool kWrapping =
    std::is_integral_v<T>&& std::is_signed_v<T> && !std::is_same_v<T, bool>;
template <typename T, typename F>
T wrapping(T a, T b, F f) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(f(static_cast<U>(a), static_cast<U>(b)));
}

#define KILN_SCALAR_UNARY(name, expr) \
  struct name {                       \
    template <typename T>             \
    T operator()(T x) const {         \
      return expr;                    \
    }                                 \
  };

struct neg {
  template <typename T>
  T operator()(T x) const {
    if constexpr (kWrapping<T>)
      return wrapping(T(0), x, [](auto a, auto b) { return a - b; });
    else
      return static_cast<T>(-x);
  }
};
struct abs {
  template <typename T>
  T operator()(T x) const {
    return x < T(0) ? neg{}(x) : x;
  }
};
// The ops with an f32 expansion (math/expansions.h: exp, log, log1p, tanh,
// sigmoid, sin, cos, erf, pow) reach these functors in f64 only: f32, f16
// and bf16 run the expansion, in the eager kernels (vec::Expanded, ops/unary.cpp
// and ops/binary.cpp) as in the kernel interpreter (has_math_expansion).
KILN_SCALAR_UNARY(exp, std::exp(x))
KILN_SCALAR_UNARY(log, std::log(x))
KILN_SCALAR_UNARY(log1p, std::log1p(x))
KILN_SCALAR_UNARY(sqrt, std::sqrt(x))
KILN_SCALAR_UNARY(rsqrt, T(1) / std::sqrt(x))
KILN_SCALAR_UNARY(tanh, std::tanh(x))
KILN_SCALAR_UNARY(sigmoid, T(1) / (T(1) + std::exp(-x)))
KILN_SCALAR_UNARY(relu, x > T(0) ? x : (x != x ? x : T(0)))
KILN_SCALAR_UNARY(sin, std::sin(x))
KILN_SCALAR_UNARY(cos, std::cos(x))
KILN_SCALAR_UNARY(erf, std::erf(x))
KILN_SCALAR_UNARY(sign, static_cast<T>((T(0) < x) - (x < T(0))))
#undef KILN_SCALAR_UNARY

struct logical_not {
  template <typename T>
  bool operator()(T x) const {
    return !(x != T(0));
  }
};

#define KILN_SCALAR_BINARY(name, R, expr) \
  struct name {                           \
    template <typename T>                 \
    R operator()(T a, T b) const {        \
      return expr;                        \
    }                                     \
  };

#define KILN_SCALAR_WRAPPING(name, op)                                \
  struct name {                                                       \
    template <typename T>                                             \
    T operator()(T a, T b) const {                                    \
      if constexpr (kWrapping<T>)                                     \
        return wrapping(a, b, [](auto x, auto y) { return x op y; }); \
      else                                                            \
        return static_cast<T>(a op b);                                \
    }                                                                 \
  };
KILN_SCALAR_WRAPPING(add, +)
KILN_SCALAR_WRAPPING(sub, -)
KILN_SCALAR_WRAPPING(mul, *)
#undef KILN_SCALAR_WRAPPING
KILN_SCALAR_BINARY(maximum, T, (a != a || b != b) ? (a != a ? a : b) : (a > b ? a : b))
KILN_SCALAR_BINARY(minimum, T, (a != a || b != b) ? (a != a ? a : b) : (a < b ? a : b))
KILN_SCALAR_BINARY(eq, bool, a == b)
KILN_SCALAR_BINARY(ne, bool, a != b)
KILN_SCALAR_BINARY(lt, bool, a < b)
KILN_SCALAR_BINARY(le, bool, a <= b)
KILN_SCALAR_BINARY(gt, bool, a > b)
KILN_SCALAR_BINARY(ge, bool, a >= b)
KILN_SCALAR_BINARY(logical_and, bool, (a != T(0)) && (b != T(0)))
KILN_SCALAR_BINARY(logical_or, bool, (a != T(0)) || (b != T(0)))
#undef KILN_SCALAR_BINARY

/// True division for floats; for integers (only reached internally) floor division.
struct div {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      return a / b;
    } else if constexpr (std::is_same_v<T, bool>) {
      return a && b;  // unreachable through dispatch (bool / bool computes in float)
    } else {
      if (b == 0) return 0;  // integer division by zero: defined as 0, never a trap
      // x / -1 overflows (and traps) for the most negative integer: it is -x, wrapped.
      if constexpr (std::is_signed_v<T>)
        if (b == T(-1)) return neg{}(a);
      T q = a / b;
      if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
      return q;
    }
  }
};

struct pow {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      return std::pow(a, b);
    } else if constexpr (std::is_same_v<T, bool>) {
      return a || !b;  // unreachable through dispatch (rejected for bool)
    } else {
      if (b < 0) return a == 1 ? 1 : (a == static_cast<T>(-1) ? (b % 2 ? -1 : 1) : 0);
      // Products wrap around (like PyTorch) in an unsigned type at least as wide
      // as unsigned int: narrower types would promote to (signed) int and overflow.
      using W =
          std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
      W r = 1, base = static_cast<W>(a);
      for (auto e = b; e > 0; e >>= 1) {
        if (e & 1) r = static_cast<W>(r * base);
        base = static_cast<W>(base * base);
      }
      return static_cast<T>(r);
    }
  }
};

}  // namespace kiln::ops::scalar
