// Kernel IR: canonical text, verifier and the analysis shared by the backends
// and the interpreter (kernel_interp.cpp).
#include "kernels/kernel_ir.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "kernels/kernel_ir_util.h"
#include "kernels/math_expand.h"
#include "kiln/error.h"

namespace kiln::kir {

const char* prim_name(Prim p) {
  switch (p) {
    case Prim::kFma:
      return "fma";
    case Prim::kRint:
      return "rint";
    case Prim::kTrunc:
      return "trunc";
    case Prim::kBitcast:
      return "bitcast";
    case Prim::kShl:
      return "shl";
    case Prim::kShr:
      return "shr";
    case Prim::kAnd:
      return "and";
    case Prim::kOr:
      return "or";
    case Prim::kXor:
      return "xor";
    case Prim::kTable:
      return "table";
  }
  return "?";
}

int prim_arity(Prim p) {
  switch (p) {
    case Prim::kFma:
      return 3;
    case Prim::kShl:
    case Prim::kShr:
    case Prim::kAnd:
    case Prim::kOr:
    case Prim::kXor:
      return 2;
    default:
      return 1;
  }
}

int Kernel::num_phases() const {
  int n = 0;
  for (const Reduction& r : reductions) n = std::max(n, r.phase + 1);
  return n;
}

namespace {

using detail::is_float_math;

constexpr bool is_arith(OpId op) {
  return op == OpId::add || op == OpId::sub || op == OpId::mul || op == OpId::div ||
         op == OpId::pow || op == OpId::maximum || op == OpId::minimum;
}
// The unary ops of the table that keep their operand's dtype (not kFloatMath,
// not logical_not's bool), and copy.
bool is_same_type_unary(OpId op) {
  const OpInfo& info = op_info(op);
  return op == OpId::copy || (std::strcmp(info.family, "unary") == 0 && !info.has(kFloatMath) &&
                              op != OpId::logical_not);
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
  if (e.kind != ExprKind::kOp && e.kind != ExprKind::kPrim) return 0;
  const int arity = e.kind == ExprKind::kPrim ? prim_arity(e.prim) : op_info(e.op).arity;
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
      case ExprKind::kOp:
      case ExprKind::kPrim: {
        cat(s, e.kind == ExprKind::kOp ? op_name(e.op) : prim_name(e.prim), " ",
            dtype_name(e.dtype));
        if (e.kind == ExprKind::kPrim && e.prim == Prim::kTable) cat(s, " t", e.arg);
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
  } else if (info.has(kPredicate)) {  // the binary ones (logical_not above)
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

// Primitives (kernel_ir.h): float ops on f32/f64, bit ops on i32/i64.
void verify_prim(const Kernel& k, size_t i, const Expr& e) {
  int ops[3];
  const int m = detail::operands(e, ops);
  for (int j = 0; j < m; ++j)
    KIR_CHECK(ops[j] >= 0 && static_cast<size_t>(ops[j]) < i, "%", i, ": operand ", j, " (%",
              ops[j], ") must refer to an earlier expression");
  auto dt = [&](int j) { return k.exprs[static_cast<size_t>(ops[j])].dtype; };
  const DType r = e.dtype;
  const bool fp = r == DType::f32 || r == DType::f64, in = r == DType::i32 || r == DType::i64;
  const char* name = prim_name(e.prim);
  switch (e.prim) {
    case Prim::kFma:
    case Prim::kRint:
    case Prim::kTrunc:
      KIR_CHECK(fp, "%", i, ": ", name, " yields f32 or f64, not ", r);
      break;
    case Prim::kBitcast: {
      const DType a = dt(0);
      const bool ok = (a == DType::f32 && r == DType::i32) ||
                      (a == DType::i32 && r == DType::f32) ||
                      (a == DType::f64 && r == DType::i64) || (a == DType::i64 && r == DType::f64);
      KIR_CHECK(ok, "%", i, ": bitcast from ", a, " to ", r);
      return;
    }
    case Prim::kShl:
    case Prim::kShr: {
      KIR_CHECK(in, "%", i, ": ", name, " yields i32 or i64, not ", r);
      const Expr& n = k.exprs[static_cast<size_t>(ops[1])];
      const double bits = r == DType::i32 ? 32 : 64;
      KIR_CHECK(n.kind == ExprKind::kConst && n.value >= 0 && n.value < bits, "%", i, ": ", name,
                " needs a constant shift in [0, ", bits, ")");
      break;
    }
    case Prim::kAnd:
    case Prim::kOr:
    case Prim::kXor:
      KIR_CHECK(in, "%", i, ": ", name, " yields i32 or i64, not ", r);
      break;
    case Prim::kTable:
      KIR_CHECK(r == DType::i32 && dt(0) == DType::i32, "%", i, ": table needs i32 -> i32");
      KIR_CHECK(e.arg >= 0 && e.arg < kNumMathTables, "%", i, ": no table t", e.arg);
      return;
  }
  for (int j = 0; j < m; ++j)
    KIR_CHECK(dt(j) == r, "%", i, ": ", name, " operand ", j, " is ", dt(j), ", the result ", r);
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
      case ExprKind::kPrim:
        verify_prim(k, i, e);
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

}  // namespace kiln::kir
