// Kernel IR: canonical text, verifier, analysis shared by the backends, and the
// reference interpreter. The interpreter applies the eager kernels' own scalar
// functors (runtime/src/ops/scalar_ops.h) in the dtype each op computes in, so
// its results are the eager results bit for bit (reductions: in sequential
// order, with eager's accumulator types).
#include "kiln/kernel_ir.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernel_ir_util.h"
#include "kiln/error.h"
#include "ops/scalar_ops.h"

namespace kiln::kir {

int Kernel::num_phases() const {
  int n = 0;
  for (const Reduction& r : reductions) n = std::max(n, r.phase + 1);
  return n;
}

namespace {

using detail::is_float_math;

constexpr bool is_comparison(OpId op) {
  return op == OpId::eq || op == OpId::ne || op == OpId::lt || op == OpId::le || op == OpId::gt ||
         op == OpId::ge;
}
constexpr bool is_arith(OpId op) {
  return op == OpId::add || op == OpId::sub || op == OpId::mul || op == OpId::div ||
         op == OpId::pow || op == OpId::maximum || op == OpId::minimum;
}
constexpr bool is_same_type_unary(OpId op) {
  return op == OpId::neg || op == OpId::abs || op == OpId::sign || op == OpId::relu ||
         op == OpId::copy;
}

// Number formatting that reads back exactly (%.17g of a double).
std::string number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string dense_text(const Arg& a) {
  std::string s;
  for (bool d : a.dense) s += d ? 'd' : 'b';
  return s;
}

}  // namespace

namespace detail {

int operands(const Expr& e, int out[3]) {
  if (e.kind != ExprKind::kOp) return 0;
  const int arity = op_info(e.op).arity;
  out[0] = e.a;
  out[1] = e.b;
  out[2] = e.c;
  return std::clamp(arity, 0, 3);
}

Analysis analyze(const Kernel& k) {
  Analysis an;
  const size_t n = k.exprs.size();
  an.inner.assign(n, 0);
  an.phase.assign(n, -1);
  an.num_phases = k.num_phases();
  for (size_t i = 0; i < n; ++i) {
    const Expr& e = k.exprs[i];
    if (e.kind == ExprKind::kLoad) {
      an.inner[i] = !row_arg(k, e.arg);
    } else if (e.kind == ExprKind::kReduced) {
      an.phase[i] = k.reductions[static_cast<size_t>(e.arg)].phase;
    } else {
      int ops[3];
      const int m = operands(e, ops);
      for (int j = 0; j < m; ++j) {
        const auto o = static_cast<size_t>(ops[j]);
        an.inner[i] = an.inner[i] || an.inner[o];
        an.phase[i] = std::max(an.phase[i], an.phase[o]);
      }
    }
  }
  for (const Store& s : k.stores) {
    if (!k.has_reductions() || !row_arg(k, s.arg)) {
      an.store_after.push_back(-1);
    } else {
      const int p = an.phase[static_cast<size_t>(s.expr)];
      an.store_after.push_back(p < 0 ? Analysis::kRowStart : p);
    }
  }
  return an;
}

std::vector<char> needed(const Kernel& k, const std::vector<int>& roots) {
  std::vector<char> need(k.exprs.size(), 0);
  for (int r : roots) need[static_cast<size_t>(r)] = 1;
  for (size_t i = k.exprs.size(); i-- > 0;) {
    if (!need[i]) continue;
    int ops[3];
    const int m = operands(k.exprs[i], ops);
    for (int j = 0; j < m; ++j) need[static_cast<size_t>(ops[j])] = 1;
  }
  return need;
}

std::vector<std::vector<int64_t>> arg_strides(const Kernel& k, const int64_t* sizes) {
  std::vector<std::vector<int64_t>> st;
  for (const Arg& a : k.args) {
    std::vector<int64_t> s(static_cast<size_t>(k.rank), 0);
    int64_t run = 1;
    for (int d = k.rank - 1; d >= 0; --d) {
      if (!a.dense[static_cast<size_t>(d)]) continue;
      s[static_cast<size_t>(d)] = run;
      run *= sizes[d];
    }
    st.push_back(std::move(s));
  }
  return st;
}

}  // namespace detail

namespace {

// Appends text and integers (as kiln::str prints them) without a stream:
// executors key every fused group by this text.
void cat(std::string&) {}
template <typename T, typename... R>
void cat(std::string& s, const T& x, const R&... rest) {
  if constexpr (std::is_integral_v<T>)
    s += std::to_string(x);
  else
    s += x;
  cat(s, rest...);
}

}  // namespace

std::string to_string(const Kernel& k) {
  std::string s;
  cat(s, "kernel ", k.name, " rank ", k.rank, " reassoc ", k.reassoc ? 1 : 0, "\n");
  for (size_t i = 0; i < k.args.size(); ++i) {
    const Arg& a = k.args[i];
    cat(s, "  arg", i, " ", a.is_output ? "out " : "in ", dtype_name(a.dtype), " ", dense_text(a),
        "\n");
  }
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    const Expr& e = k.exprs[i];
    cat(s, "  %", i, " = ");
    switch (e.kind) {
      case ExprKind::kLoad:
        cat(s, "load ", dtype_name(e.dtype), " arg", e.arg);
        break;
      case ExprKind::kConst:
        cat(s, "const ", dtype_name(e.dtype), " ", number(e.value));
        break;
      case ExprKind::kReduced:
        cat(s, "reduced ", dtype_name(e.dtype), " r", e.arg);
        break;
      case ExprKind::kOp: {
        cat(s, op_name(e.op), " ", dtype_name(e.dtype));
        int ops[3];
        const int m = detail::operands(e, ops);
        for (int j = 0; j < m; ++j) cat(s, j ? ", %" : " %", ops[j]);
        break;
      }
    }
    s += '\n';
  }
  for (size_t i = 0; i < k.reductions.size(); ++i) {
    const Reduction& r = k.reductions[i];
    cat(s, "  r", i, " = ", op_name(r.op), " ", dtype_name(r.dtype), " %", r.expr, " phase ",
        r.phase, "\n");
  }
  for (const Store& st : k.stores)
    cat(s, "  ", st.accumulate ? "accumulate" : "store", " arg", st.arg, " %", st.expr, "\n");
  return s;
}

// ---- verifier ----

namespace {

#define KIR_CHECK(cond, ...) KILN_CHECK(cond, "[kir] kernel '", k.name, "': ", __VA_ARGS__)

void verify_op(const Kernel& k, size_t i, const Expr& e) {
  const OpInfo& info = op_info(e.op);
  KIR_CHECK(info.has(kElementwise), "%", i, ": ", info.name, " is not an elementwise op");
  int ops[3];
  const int m = detail::operands(e, ops);
  KIR_CHECK(m >= 1, "%", i, ": ", info.name, " has no operands");
  for (int j = 0; j < m; ++j)
    KIR_CHECK(ops[j] >= 0 && static_cast<size_t>(ops[j]) < i, "%", i, ": operand ", j, " (%",
              ops[j], ") must refer to an earlier expression");
  auto dt = [&](int j) { return k.exprs[static_cast<size_t>(ops[j])].dtype; };
  const OpId op = e.op;
  const DType r = e.dtype;
  if (op == OpId::cast) return;
  if (op == OpId::where) {
    KIR_CHECK(dt(0) == DType::b8 && dt(1) == r && dt(2) == r, "%", i,
              ": where needs (bool, T, T) -> T, got (", dt(0), ", ", dt(1), ", ", dt(2), ") -> ",
              r);
  } else if (op == OpId::logical_not) {
    KIR_CHECK(r == DType::b8, "%", i, ": logical_not yields bool, not ", r);
  } else if (is_comparison(op) || op == OpId::logical_and || op == OpId::logical_or) {
    KIR_CHECK(r == DType::b8 && dt(0) == dt(1), "%", i, ": ", info.name,
              " needs (T, T) -> bool, got (", dt(0), ", ", dt(1), ") -> ", r);
  } else if (is_arith(op)) {
    KIR_CHECK(dt(0) == r && dt(1) == r, "%", i, ": ", info.name, " needs (T, T) -> T, got (", dt(0),
              ", ", dt(1), ") -> ", r);
  } else if (is_float_math(op)) {
    KIR_CHECK(is_floating(r) && dt(0) == r, "%", i, ": ", info.name,
              " needs a floating operand of the result type, got ", dt(0), " -> ", r);
  } else {
    KIR_CHECK(is_same_type_unary(op), "%", i, ": ", info.name, " is not supported in kernels");
    KIR_CHECK(dt(0) == r, "%", i, ": ", info.name, " needs T -> T, got ", dt(0), " -> ", r);
  }
}

}  // namespace

void verify(const Kernel& k) {
  KIR_CHECK(k.rank >= 1, "rank must be >= 1, got ", k.rank);
  const auto rank = static_cast<size_t>(k.rank);
  std::vector<char> accumulated(k.args.size(), 0);
  for (const Store& s : k.stores)
    if (s.accumulate && s.arg >= 0 && static_cast<size_t>(s.arg) < k.args.size())
      accumulated[static_cast<size_t>(s.arg)] = 1;
  for (size_t i = 0; i < k.args.size(); ++i) {
    const Arg& a = k.args[i];
    KIR_CHECK(a.dense.size() == rank, "arg", i, " has ", a.dense.size(), " dims, the kernel ",
              rank);
    if (a.is_output && accumulated[i]) {
      KIR_CHECK(a.dtype == DType::f64 && a.dense.back(), "column-sum arg", i,
                " must be f64 and dense along the inner dim");
      for (size_t d = 0; d + 1 < rank; ++d)
        KIR_CHECK(!a.dense[d], "column-sum arg", i, " is dense along row dim ", d);
    } else if (a.is_output) {
      for (size_t d = 0; d + 1 < rank; ++d)
        KIR_CHECK(a.dense[d], "output arg", i, " is broadcast along dim ", d);
    }
  }
  const size_t n = k.exprs.size();
  for (size_t i = 0; i < n; ++i) {
    const Expr& e = k.exprs[i];
    switch (e.kind) {
      case ExprKind::kLoad:
        KIR_CHECK(e.arg >= 0 && static_cast<size_t>(e.arg) < k.args.size(), "%", i, ": load of arg",
                  e.arg, " out of range");
        KIR_CHECK(!k.args[static_cast<size_t>(e.arg)].is_output, "%", i, ": load of output arg",
                  e.arg);
        KIR_CHECK(k.args[static_cast<size_t>(e.arg)].dtype == e.dtype, "%", i, ": load as ",
                  e.dtype, " of a ", k.args[static_cast<size_t>(e.arg)].dtype, " arg");
        break;
      case ExprKind::kConst:
        if (!is_floating(e.dtype)) {
          KIR_CHECK(std::isfinite(e.value) && std::trunc(e.value) == e.value, "%", i,
                    ": integer constant ", e.value, " is not an integer");
          if (e.dtype == DType::b8)
            KIR_CHECK(e.value == 0 || e.value == 1, "%", i, ": bool constant ", e.value);
          if (e.dtype == DType::u8)
            KIR_CHECK(e.value >= 0 && e.value <= 255, "%", i, ": u8 constant ", e.value);
          if (e.dtype == DType::i32)
            KIR_CHECK(std::fabs(e.value) <= 2147483648.0, "%", i, ": i32 constant ", e.value);
          if (e.dtype == DType::i64)
            KIR_CHECK(std::fabs(e.value) <= 9223372036854775807.0, "%", i, ": i64 constant ",
                      e.value);
        }
        break;
      case ExprKind::kReduced:
        KIR_CHECK(e.arg >= 0 && static_cast<size_t>(e.arg) < k.reductions.size(), "%", i,
                  ": reduction r", e.arg, " out of range");
        KIR_CHECK(k.reductions[static_cast<size_t>(e.arg)].dtype == e.dtype, "%", i,
                  ": reduced value typed ", e.dtype, ", the reduction is ",
                  k.reductions[static_cast<size_t>(e.arg)].dtype);
        break;
      case ExprKind::kOp:
        verify_op(k, i, e);
        break;
    }
  }
  const detail::Analysis an = detail::analyze(k);
  for (size_t i = 0; i < k.reductions.size(); ++i) {
    const Reduction& r = k.reductions[i];
    KIR_CHECK(r.op == OpId::sum || r.op == OpId::max || r.op == OpId::min, "r", i, ": ",
              op_name(r.op), " is not a kernel reduction (sum, max, min)");
    KIR_CHECK(r.expr >= 0 && static_cast<size_t>(r.expr) < n, "r", i, ": expression %", r.expr,
              " out of range");
    KIR_CHECK(r.phase >= 0, "r", i, ": phase ", r.phase);
    const DType x = k.exprs[static_cast<size_t>(r.expr)].dtype;
    const bool ok = r.dtype == x || (r.op == OpId::sum && !is_floating(x) && r.dtype == DType::i64);
    KIR_CHECK(ok, "r", i, ": ", op_name(r.op), " of ", x, " cannot yield ", r.dtype);
    KIR_CHECK(an.phase[static_cast<size_t>(r.expr)] < r.phase, "r", i, " (phase ", r.phase,
              ") reads a reduction of phase ", an.phase[static_cast<size_t>(r.expr)]);
  }
  std::vector<int> stored(k.args.size(), 0);
  for (size_t i = 0; i < k.stores.size(); ++i) {
    const Store& s = k.stores[i];
    KIR_CHECK(s.arg >= 0 && static_cast<size_t>(s.arg) < k.args.size() &&
                  k.args[static_cast<size_t>(s.arg)].is_output,
              "store ", i, ": arg", s.arg, " is not an output");
    KIR_CHECK(s.expr >= 0 && static_cast<size_t>(s.expr) < n, "store ", i, ": expression %", s.expr,
              " out of range");
    const Arg& a = k.args[static_cast<size_t>(s.arg)];
    KIR_CHECK(k.exprs[static_cast<size_t>(s.expr)].dtype == a.dtype, "store ", i, ": a ",
              k.exprs[static_cast<size_t>(s.expr)].dtype, " value into a ", a.dtype, " arg");
    if (!s.accumulate && detail::row_arg(k, s.arg)) {
      KIR_CHECK(k.has_reductions(), "store ", i, ": pointwise kernels cannot store to arg", s.arg,
                ", which is broadcast along the inner dim");
      KIR_CHECK(!an.inner[static_cast<size_t>(s.expr)], "store ", i, ": row output arg", s.arg,
                " gets %", s.expr, ", which varies along the inner dim");
    }
    ++stored[static_cast<size_t>(s.arg)];
  }
  for (size_t i = 0; i < k.args.size(); ++i)
    if (k.args[i].is_output)
      KIR_CHECK(stored[i] == 1, "output arg", i, " is stored ", stored[i], " times (must be once)");
}

#undef KIR_CHECK

int64_t work_items(const Kernel& k, const int64_t* sizes) {
  int64_t n = 1;
  const int dims = k.has_reductions() ? k.rank - 1 : k.rank;
  for (int d = 0; d < dims; ++d) n *= sizes[d];
  return n;
}

// ---- reference interpreter ----

namespace {

namespace s = ops::scalar;

// One scalar: floating values (already rounded to their dtype) in f, the rest in i.
struct Val {
  double f = 0;
  int64_t i = 0;
};

template <typename T>
inline constexpr bool kFloatLike =
    std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
template <typename T>
using compute_t =
    std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;

template <typename T>
T get(const Val& v) {
  if constexpr (kFloatLike<T>)
    return T(static_cast<compute_t<T>>(v.f));
  else if constexpr (std::is_same_v<T, bool>)
    return v.i != 0;
  else
    return static_cast<T>(v.i);
}
template <typename T>
Val put(T x) {
  Val r;
  if constexpr (kFloatLike<T>)
    r.f = static_cast<double>(static_cast<compute_t<T>>(x));
  else
    r.i = static_cast<int64_t>(x);
  return r;
}

Val constant(DType t, double v) {
  return visit_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kFloatLike<T>)
      return put<T>(T(static_cast<compute_t<T>>(v)));
    else if constexpr (std::is_same_v<T, bool>)
      return put<T>(v != 0);
    else
      return put<T>(static_cast<T>(static_cast<int64_t>(v)));
  });
}

// cast: D(compute_t<S>(x)), bool = (x != 0), as the eager copy kernel does.
Val cast_val(DType from, DType to, const Val& x) {
  return visit_dtype(from, [&](auto st) {
    using S = decltype(st);
    const compute_t<S> v = static_cast<compute_t<S>>(get<S>(x));
    return visit_dtype(to, [&](auto dt) {
      using D = decltype(dt);
      if constexpr (std::is_same_v<D, bool>)
        return put<D>(v != 0);
      else
        return put<D>(static_cast<D>(v));
    });
  });
}

// Eager's integer pow (scalar_ops.h) with the products computed unsigned: the
// same wrapped results without signed-overflow UB.
template <typename T>
T wrapping_pow(T a, T b) {
  if (b < 0) return a == 1 ? 1 : (a == static_cast<T>(-1) ? (b % 2 ? -1 : 1) : 0);
  using U = std::make_unsigned_t<T>;
  U r = 1, base = static_cast<U>(a);
  for (T e = b; e > 0; e >>= 1) {
    if (e & 1) r = static_cast<U>(r * base);
    base = static_cast<U>(base * base);
  }
  return static_cast<T>(r);
}

Val apply(OpId op, DType in, DType out, const Val& a, const Val& b, const Val& c) {
  if (op == OpId::where) return a.i ? b : c;
  if (op == OpId::cast) return cast_val(in, out, a);
  if (op == OpId::copy) return a;
  return visit_dtype(in, [&](auto tag) -> Val {
    using T = decltype(tag);
    using C = compute_t<T>;
    const C x = static_cast<C>(get<T>(a)), y = static_cast<C>(get<T>(b));
    // clang-format off
    switch (op) {
#define KIR_UNARY(name) case OpId::name: return put<T>(static_cast<T>(s::name{}(x)));
      KIR_UNARY(neg) KIR_UNARY(abs) KIR_UNARY(exp) KIR_UNARY(log) KIR_UNARY(log1p)
      KIR_UNARY(sqrt) KIR_UNARY(rsqrt) KIR_UNARY(tanh) KIR_UNARY(sigmoid) KIR_UNARY(relu)
      KIR_UNARY(sin) KIR_UNARY(cos) KIR_UNARY(erf) KIR_UNARY(sign)
#undef KIR_UNARY
#define KIR_BINARY(name) case OpId::name: return put<T>(static_cast<T>(s::name{}(x, y)));
      KIR_BINARY(add) KIR_BINARY(sub) KIR_BINARY(mul) KIR_BINARY(maximum) KIR_BINARY(minimum)
#undef KIR_BINARY
#define KIR_BOOL(name) case OpId::name: return put<bool>(s::name{}(x, y));
      KIR_BOOL(eq) KIR_BOOL(ne) KIR_BOOL(lt) KIR_BOOL(le) KIR_BOOL(gt) KIR_BOOL(ge)
      KIR_BOOL(logical_and) KIR_BOOL(logical_or)
#undef KIR_BOOL
      case OpId::logical_not: return put<bool>(s::logical_not{}(x));
      // clang-format on
      case OpId::pow:
        if constexpr (std::is_integral_v<C> && std::is_signed_v<C>)
          return put<T>(wrapping_pow(x, y));
        else
          return put<T>(static_cast<T>(s::pow{}(x, y)));
      case OpId::div:
        // x / -1 overflows (and traps) for the most negative integer: it is -x, wrapped.
        if constexpr (std::is_integral_v<C> && std::is_signed_v<C>)
          if (y == C(-1)) return put<T>(s::neg{}(x));
        return put<T>(static_cast<T>(s::div{}(x, y)));
      default:
        break;
    }
    KILN_ASSERT(false, "kernel op ", op_name(op), " has no interpreter rule");
    return Val{};
  });
}

Val read(DType t, const void* base, int64_t off) {
  return visit_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      return put<bool>(static_cast<const uint8_t*>(base)[off] != 0);
    } else {
      T v;
      std::memcpy(&v, static_cast<const char*>(base) + off * static_cast<int64_t>(sizeof(T)),
                  sizeof(T));
      return put<T>(v);
    }
  });
}

void write(DType t, void* base, int64_t off, const Val& x) {
  visit_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      static_cast<uint8_t*>(base)[off] = x.i != 0 ? 1 : 0;
    } else {
      const T v = get<T>(x);
      std::memcpy(static_cast<char*>(base) + off * static_cast<int64_t>(sizeof(T)), &v, sizeof(T));
    }
  });
}

// A reduction's accumulator: eager's accumulator type and step (reduce.cpp).
struct Acc {
  Val v;
  void init(OpId op, DType t) {
    if (op == OpId::sum) {
      v = Val{};
      return;
    }
    v = visit_dtype(t, [&](auto tag) {
      using T = decltype(tag);
      using C = compute_t<T>;
      if constexpr (std::is_floating_point_v<C>)
        return put<T>(T(op == OpId::max ? -std::numeric_limits<C>::infinity()
                                        : std::numeric_limits<C>::infinity()));
      else
        return put<T>(op == OpId::max ? std::numeric_limits<C>::lowest()
                                      : std::numeric_limits<C>::max());
    });
  }
  void step(OpId op, DType t, const Val& x) {
    if (op == OpId::sum) {
      if (t == DType::f32 || t == DType::f64) {
        v.f += x.f;  // double accumulator
      } else if (t == DType::f16 || t == DType::bf16) {
        v.f = static_cast<double>(static_cast<float>(v.f) + static_cast<float>(x.f));
      } else {
        v.i = static_cast<int64_t>(static_cast<uint64_t>(v.i) + static_cast<uint64_t>(x.i));
      }
      return;
    }
    v = visit_dtype(t, [&](auto tag) {
      using T = decltype(tag);
      using C = compute_t<T>;
      const C a = static_cast<C>(get<T>(v)), b = static_cast<C>(get<T>(x));
      const bool nan = b != b;  // NaN is sticky
      const bool take = op == OpId::max ? (b > a) || nan : (b < a) || nan;
      return take ? x : v;
    });
  }
  Val finish(OpId op, DType t) const {
    if (op != OpId::sum) return v;
    return visit_dtype(t, [&](auto tag) {  // the i64 sum of narrower ints wraps
      using T = decltype(tag);
      if constexpr (kFloatLike<T>)
        return put<T>(T(static_cast<compute_t<T>>(v.f)));
      else
        return put<T>(static_cast<T>(v.i));
    });
  }
};

class Interpreter {
 public:
  Interpreter(const Kernel& k, void* const* ptrs, const int64_t* sizes)
      : k_(k),
        ptrs_(ptrs),
        sizes_(sizes),
        an_(detail::analyze(k)),
        strides_(detail::arg_strides(k, sizes)),
        v_(k.exprs.size()),
        red_(k.reductions.size()),
        rowoff_(k.args.size()),
        idx_(static_cast<size_t>(k.rank), 0) {}

  void run(int64_t begin, int64_t end) {
    if (begin >= end) return;
    if (k_.has_reductions())
      run_rows(begin, end);
    else
      run_pointwise(begin, end);
  }

 private:
  // Sets idx_ (leading dims) to row `row` and updates the row offsets.
  void seek_row(int64_t row) {
    for (int d = k_.rank - 2; d >= 0; --d) {
      const int64_t s = sizes_[d];
      idx_[static_cast<size_t>(d)] = d == 0 ? row : row % s;
      if (d > 0) row /= s;
    }
    for (size_t a = 0; a < k_.args.size(); ++a) {
      int64_t off = 0;
      for (int d = 0; d + 1 < k_.rank; ++d)
        off += idx_[static_cast<size_t>(d)] * strides_[a][static_cast<size_t>(d)];
      rowoff_[a] = off;
    }
  }

  int64_t offset(int arg, int64_t j) const {
    const auto a = static_cast<size_t>(arg);
    return rowoff_[a] + j * strides_[a][static_cast<size_t>(k_.rank - 1)];
  }

  void eval(const std::vector<char>& need, int64_t j) {
    for (size_t i = 0; i < k_.exprs.size(); ++i) {
      if (!need[i]) continue;
      const Expr& e = k_.exprs[i];
      switch (e.kind) {
        case ExprKind::kLoad:
          v_[i] = read(e.dtype, ptrs_[e.arg], offset(e.arg, j));
          break;
        case ExprKind::kConst:
          v_[i] = constant(e.dtype, e.value);
          break;
        case ExprKind::kReduced:
          v_[i] = red_[static_cast<size_t>(e.arg)];
          break;
        case ExprKind::kOp: {
          int ops[3] = {0, 0, 0};
          const int m = detail::operands(e, ops);
          const Val none;
          const Val& a = v_[static_cast<size_t>(ops[0])];
          const Val& b = m > 1 ? v_[static_cast<size_t>(ops[1])] : none;
          const Val& c = m > 2 ? v_[static_cast<size_t>(ops[2])] : none;
          v_[i] = apply(e.op, k_.exprs[static_cast<size_t>(ops[0])].dtype, e.dtype, a, b, c);
          break;
        }
      }
    }
  }

  void store(const Store& st, int64_t j) {
    const DType t = k_.args[static_cast<size_t>(st.arg)].dtype;
    const int64_t off = offset(st.arg, j);
    if (st.accumulate) {  // f64 (verified): the column's sum so far plus this value
      write(t, ptrs_[st.arg], off,
            put<double>(get<double>(read(t, ptrs_[st.arg], off)) +
                        get<double>(v_[static_cast<size_t>(st.expr)])));
      return;
    }
    write(t, ptrs_[st.arg], off, v_[static_cast<size_t>(st.expr)]);
  }

  void run_pointwise(int64_t begin, int64_t end) {
    const int64_t inner = sizes_[k_.rank - 1];
    std::vector<int> roots;
    for (const Store& st : k_.stores) roots.push_back(st.expr);
    const std::vector<char> need = detail::needed(k_, roots);
    int64_t flat = begin;
    int64_t j = begin % inner;
    seek_row(begin / inner);
    for (; flat < end; ++flat) {
      if (j == inner) {
        j = 0;
        seek_row(flat / inner);
      }
      eval(need, j);
      for (const Store& st : k_.stores) store(st, j);
      ++j;
    }
  }

  void row_stores(int after) {
    std::vector<int> roots;
    for (size_t i = 0; i < k_.stores.size(); ++i)
      if (an_.store_after[i] == after) roots.push_back(k_.stores[i].expr);
    if (roots.empty()) return;
    eval(detail::needed(k_, roots), 0);
    for (size_t i = 0; i < k_.stores.size(); ++i)
      if (an_.store_after[i] == after) store(k_.stores[i], 0);
  }

  void run_rows(int64_t begin, int64_t end) {
    const int64_t inner = sizes_[k_.rank - 1];
    std::vector<std::vector<char>> phase_need;
    for (int p = 0; p < an_.num_phases; ++p) {
      std::vector<int> roots;
      for (const Reduction& r : k_.reductions)
        if (r.phase == p) roots.push_back(r.expr);
      phase_need.push_back(detail::needed(k_, roots));
    }
    std::vector<int> final_roots;
    for (size_t i = 0; i < k_.stores.size(); ++i)
      if (an_.store_after[i] == -1) final_roots.push_back(k_.stores[i].expr);
    const std::vector<char> final_need = detail::needed(k_, final_roots);
    std::vector<Acc> acc(k_.reductions.size());
    for (int64_t row = begin; row < end; ++row) {
      seek_row(row);
      row_stores(detail::Analysis::kRowStart);
      for (int p = 0; p < an_.num_phases; ++p) {
        for (size_t r = 0; r < k_.reductions.size(); ++r)
          if (k_.reductions[r].phase == p) acc[r].init(k_.reductions[r].op, k_.reductions[r].dtype);
        for (int64_t j = 0; j < inner; ++j) {
          eval(phase_need[static_cast<size_t>(p)], j);
          for (size_t r = 0; r < k_.reductions.size(); ++r) {
            const Reduction& red = k_.reductions[r];
            if (red.phase != p) continue;
            const Expr& x = k_.exprs[static_cast<size_t>(red.expr)];
            Val xv = v_[static_cast<size_t>(red.expr)];
            if (red.dtype != x.dtype) xv = cast_val(x.dtype, red.dtype, xv);
            acc[r].step(red.op, red.dtype, xv);
          }
        }
        for (size_t r = 0; r < k_.reductions.size(); ++r)
          if (k_.reductions[r].phase == p)
            red_[r] = acc[r].finish(k_.reductions[r].op, k_.reductions[r].dtype);
        row_stores(p);
      }
      if (!final_roots.empty()) {
        for (int64_t j = 0; j < inner; ++j) {
          eval(final_need, j);
          for (size_t i = 0; i < k_.stores.size(); ++i)
            if (an_.store_after[i] == -1) store(k_.stores[i], j);
        }
      }
    }
  }

  const Kernel& k_;
  void* const* ptrs_;
  const int64_t* sizes_;
  detail::Analysis an_;
  std::vector<std::vector<int64_t>> strides_;
  std::vector<Val> v_, red_;
  std::vector<int64_t> rowoff_;
  std::vector<int64_t> idx_;
};

}  // namespace

void interpret(const Kernel& k, int64_t begin, int64_t end, void* const* ptrs,
               const int64_t* sizes) {
  if (begin >= end) return;
  // No work items; an empty inner dim still gives reductions their identity.
  const int dims = k.has_reductions() ? k.rank - 1 : k.rank;
  for (int d = 0; d < dims; ++d)
    if (sizes[d] <= 0) return;
  Interpreter(k, ptrs, sizes).run(begin, end);
}

}  // namespace kiln::kir
