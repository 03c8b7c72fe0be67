// The GPU printer (gpu_printer.h): kernel IR -> CUDA C, one statement per
// expression, every value in its compute type (float for f16/bf16).
#include "kernels/cuda/gpu_printer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>
#include <span>
#include <sstream>

#include "kernels/cuda/gpu_printer_internal.h"
#include "kernels/math_expand.h"
#include "kiln/env.h"
#include "kiln/error.h"

namespace kiln::cuda {
namespace detail {

using kir::Expr;
using kir::ExprKind;
using kir::Kernel;

// The C type a value of dtype t is computed in.
const char* compute_type(DType t) {
  switch (t) {
    case DType::f32:
    case DType::f16:
    case DType::bf16:
      return "float";
    case DType::f64:
      return "double";
    case DType::i64:
      return "kiln_i64";  // the prelude's 64-bit integer (OpenCL C's long long is 128-bit)
    case DType::i32:
      return "int";
    case DType::u8:
      return "unsigned char";
    case DType::b8:
      return "bool";
  }
  return "?";
}

// The C type an element of dtype t is stored as.
const char* storage_type(DType t) {
  switch (t) {
    case DType::f16:
    case DType::bf16:
      return "unsigned short";
    case DType::b8:
      return "unsigned char";
    default:
      return compute_type(t);
  }
}

// Per-dtype suffix of the prelude's integer helpers.
const char* int_suffix(DType t) {
  switch (t) {
    case DType::i64:
      return "i64";
    case DType::i32:
      return "i32";
    case DType::u8:
      return "u8";
    default:
      return "b8";
  }
}

std::string hex_float(double v, bool single) {
  if (std::isnan(v))
    return single ? "__int_as_float(0x7fc00000)"
                  : "__longlong_as_double((kiln_i64)0x7ff8000000000000)";
  if (std::isinf(v))
    return single ? (v > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)")
                  : (v > 0 ? "__longlong_as_double((kiln_i64)0x7ff0000000000000)"
                           : "__longlong_as_double((kiln_i64)0xfff0000000000000)");
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return str("(", buf, single ? "f)" : ")");
}

// A constant in its compute type, rounded as the interpreter rounds it.
std::string constant(const Expr& e) {
  switch (e.dtype) {
    case DType::f32:
      return hex_float(static_cast<float>(e.value), true);
    case DType::f16:
      return hex_float(static_cast<float>(Half(static_cast<float>(e.value))), true);
    case DType::bf16:
      return hex_float(static_cast<float>(BFloat16(static_cast<float>(e.value))), true);
    case DType::f64:
      return hex_float(e.value, false);
    case DType::i64: {
      const auto v = static_cast<int64_t>(e.value);
      if (v == std::numeric_limits<int64_t>::min()) return "((kiln_i64)-9223372036854775807 - 1)";
      return str("((kiln_i64)", v, ")");
    }
    case DType::i32: {
      const auto v = static_cast<int32_t>(static_cast<int64_t>(e.value));
      if (v == std::numeric_limits<int32_t>::min()) return "(-2147483647 - 1)";
      return str("(", v, ")");
    }
    case DType::u8:
      return str("((unsigned char)",
                 static_cast<int>(static_cast<uint8_t>(static_cast<int64_t>(e.value))), ")");
    case DType::b8:
      return e.value != 0 ? "true" : "false";
  }
  return "?";
}

// Float math: the device libm for f32 (and f16/bf16, computed in float) and f64.
std::string float_math(OpId op, DType t, const std::string& x) {
  const char* f = t == DType::f64 ? "" : "f";
  const char* one = t == DType::f64 ? "1.0" : "1.0f";
  switch (op) {
    case OpId::exp:
      return str("exp", f, "(", x, ")");
    case OpId::log:
      return str("log", f, "(", x, ")");
    case OpId::log1p:
      return str("log1p", f, "(", x, ")");
    case OpId::sqrt:
      return str("sqrt", f, "(", x, ")");
    case OpId::rsqrt:
      return str("(", one, " / sqrt", f, "(", x, "))");
    case OpId::tanh:
      return str("tanh", f, "(", x, ")");
    case OpId::sigmoid:
      return str("(", one, " / (", one, " + exp", f, "(-", x, ")))");
    case OpId::sin:
      return str("sin", f, "(", x, ")");
    case OpId::cos:
      return str("cos", f, "(", x, ")");
    case OpId::erf:
      return str("erf", f, "(", x, ")");
    default:
      break;
  }
  KILN_ASSERT(false, "no GPU rule for ", op_name(op));
  return "";
}

bool wrapping_int(DType t) {
  return t == DType::i32 || t == DType::i64;
}
const char* unsigned_of(DType t) {
  return t == DType::i64 ? "kiln_u64" : "unsigned";
}

// Expression `op` over operands x, y, z of dtype `in`, yielding dtype `out`, in
// the compute types (before f16/bf16 rounding of the result).
std::string op_expr(OpId op, DType in, DType out, const std::string& x, const std::string& y,
                    const std::string& z) {
  const char* T = compute_type(in);
  const bool fl = is_floating(in);
  auto wrap = [&](const char* sym) {
    if (wrapping_int(in))
      return str("(", T, ")((", unsigned_of(in), ")", x, " ", sym, " (", unsigned_of(in), ")", y,
                 ")");
    return str("(", T, ")(", x, " ", sym, " ", y, ")");
  };
  switch (op) {
    case OpId::where:
      return str("(", x, " ? ", y, " : ", z, ")");
    case OpId::copy:
      return x;
    case OpId::cast:
      if (out == DType::b8) return str("(", x, " != 0)");
      return str("(", compute_type(out), ")", x);
    case OpId::neg:
      if (wrapping_int(in))
        return str("(", T, ")((", unsigned_of(in), ")0 - (", unsigned_of(in), ")", x, ")");
      return str("(", T, ")(-", x, ")");
    case OpId::abs:
      return str("(", x, " < 0 ? ", op_expr(OpId::neg, in, out, x, y, z), " : ", x, ")");
    case OpId::relu:
      return str("(", x, " > 0 ? ", x, " : (", x, " != ", x, " ? ", x, " : (", T, ")0))");
    case OpId::sign:
      return str("(", T, ")((0 < ", x, ") - (", x, " < 0))");
    case OpId::logical_not:
      return str("(!(", x, " != 0))");
    case OpId::add:
      return wrap("+");
    case OpId::sub:
      return wrap("-");
    case OpId::mul:
      return wrap("*");
    case OpId::div:
      if (fl) return str("(", x, " / ", y, ")");
      return str("kiln_div_", int_suffix(in), "(", x, ", ", y, ")");
    case OpId::pow:
      if (fl) return str(in == DType::f64 ? "pow(" : "powf(", x, ", ", y, ")");
      return str("kiln_pow_", int_suffix(in), "(", x, ", ", y, ")");
    case OpId::maximum:
    case OpId::minimum: {
      const std::string pick =
          str("(", x, op == OpId::maximum ? " > " : " < ", y, " ? ", x, " : ", y, ")");
      if (!fl) return pick;
      return str("((", x, " != ", x, " || ", y, " != ", y, ") ? (", x, " != ", x, " ? ", x, " : ",
                 y, ") : ", pick, ")");
    }
    case OpId::eq:
      return str("(", x, " == ", y, ")");
    case OpId::ne:
      return str("(", x, " != ", y, ")");
    case OpId::lt:
      return str("(", x, " < ", y, ")");
    case OpId::le:
      return str("(", x, " <= ", y, ")");
    case OpId::gt:
      return str("(", x, " > ", y, ")");
    case OpId::ge:
      return str("(", x, " >= ", y, ")");
    case OpId::logical_and:
      return str("((", x, " != 0) && (", y, " != 0))");
    case OpId::logical_or:
      return str("((", x, " != 0) || (", y, " != 0))");
    default:
      break;
  }
  KILN_CHECK(fl, "[cuda] ", op_name(op), " on ", dtype_name(in), " has no GPU rule");
  return float_math(op, in, x);
}

std::string prim_expr(const Expr& e, DType in, const std::string& x, const std::string& y,
                      const std::string& z) {
  const bool d = in == DType::f64;
  const bool i32 = in == DType::i32;
  switch (e.prim) {
    case kir::Prim::kFma:
      return str(d ? "fma(" : "fmaf(", x, ", ", y, ", ", z, ")");
    case kir::Prim::kRint:
      return str(d ? "rint(" : "rintf(", x, ")");
    case kir::Prim::kTrunc:
      return str(d ? "trunc(" : "truncf(", x, ")");
    case kir::Prim::kBitcast:
      switch (in) {
        case DType::f32:
          return str("__float_as_int(", x, ")");
        case DType::i32:
          return str("__int_as_float(", x, ")");
        case DType::f64:
          return str("(kiln_i64)__double_as_longlong(", x, ")");
        default:
          return str("__longlong_as_double(", x, ")");
      }
    case kir::Prim::kShl:  // in the unsigned type: no overflow
      return i32 ? str("(int)((unsigned)", x, " << ", y, ")")
                 : str("(kiln_i64)((kiln_u64)", x, " << ", y, ")");
    case kir::Prim::kShr:  // signed: sign-filling on both targets
      return str("(", x, " >> ", y, ")");
    case kir::Prim::kAnd:
      return str("(", x, " & ", y, ")");
    case kir::Prim::kOr:
      return str("(", x, " | ", y, ")");
    case kir::Prim::kXor:
      return str("(", x, " ^ ", y, ")");
    case kir::Prim::kTable:
      return str("kiln_table", e.arg, "[", x, "]");
  }
  KILN_ASSERT(false, "no GPU rule for primitive ", kir::prim_name(e.prim));
  return "";
}

std::string tables_for(const Kernel& k) {
  std::ostringstream os;
  std::set<int> done;
  for (const Expr& e : k.exprs) {
    if (e.kind != ExprKind::kPrim || e.prim != kir::Prim::kTable || !done.insert(e.arg).second)
      continue;
    const std::span<const int32_t> t = kir::math_table(e.arg);
    // Guarded: a program holds many kernels and defines each table once.
    os << "#ifndef KILN_TABLE" << e.arg << "\n#define KILN_TABLE" << e.arg
       << "\nKILN_CONSTANT int kiln_table" << e.arg << "[" << t.size() << "] = {";
    for (size_t i = 0; i < t.size(); ++i) {
      char buf[24];
      std::snprintf(buf, sizeof buf, "(int)0x%08xu", static_cast<uint32_t>(t[i]));
      os << (i % 6 ? ", " : (i ? ",\n  " : "\n  ")) << buf;
    }
    os << "};\n#endif\n";
  }
  return os.str();
}

// f16/bf16 results are rounded to their storage type after every op.
std::string rounded(DType t, const std::string& v) {
  if (t == DType::f16) return str("kiln_rt_f16(", v, ")");
  if (t == DType::bf16) return str("kiln_rt_bf16(", v, ")");
  return v;
}

std::string load(DType t, const std::string& p, const std::string& off) {
  const std::string e = str(p, "[", off, "]");
  if (t == DType::f16) return str("kiln_f16_to_f32(", e, ")");
  if (t == DType::bf16) return str("kiln_bf16_to_f32(", e, ")");
  if (t == DType::b8) return str("(", e, " != 0)");
  return e;
}

std::string store_value(DType t, const std::string& v) {
  if (t == DType::f16) return str("kiln_f32_to_f16(", v, ")");
  if (t == DType::bf16) return str("kiln_f32_to_bf16(", v, ")");
  if (t == DType::b8) return str("(unsigned char)(", v, " ? 1 : 0)");
  return v;
}

std::string issue_loads(const std::vector<Loaded>& values, const std::string& indent) {
  // At most 16 operands per statement (inline asm's operand limit is 30 in
  // GCC's dialect); consecutive volatile asm statements keep their order.
  constexpr size_t kPerStatement = 16;
  std::ostringstream os;
  size_t in_statement = 0;
  for (const Loaded& v : values) {
    const char* c = v.dtype == DType::f64                          ? "d"
                    : v.dtype == DType::i64                        ? "l"
                    : v.dtype == DType::i32                        ? "r"
                    : v.dtype == DType::u8 || v.dtype == DType::b8 ? nullptr
                                                                   : "f";
    if (!c) continue;
    os << (in_statement == 0 ? str(indent, "KILN_ISSUE(") : std::string(", ")) << "\"+" << c
       << "\"(" << v.name << ")";
    if (++in_statement == kPerStatement) {
      os << ");\n";
      in_statement = 0;
    }
  }
  if (in_statement) os << ");\n";
  return os.str();
}

std::string grid_loop(const std::string& count) {
  return str("  for (kiln_i64 i = (kiln_i64)blockIdx.x * blockDim.x + threadIdx.x; i < ", count,
             ";\n       i += (kiln_i64)gridDim.x * blockDim.x) {\n");
}

}  // namespace detail

using namespace detail;

namespace {

// A strided copy's element offsets od and os of item i, from its coordinates
// in 32-bit unsigned arithmetic when the count fits (a permuted [32, 8, 256,
// 64] copy ran at 560 GB/s on an H200 with 64-bit ones), else in 64 bits
// (index_loops).
std::string copy_offsets(const char* t) {
  return str("    ", t, " r = i;\n", "    kiln_i64 od = 0, os = 0;\n",
             "    for (int d = rank - 1; d >= 0; --d) {\n", "      const ", t, " c = r % (", t,
             ")g.size[d];\n", "      r /= (", t, ")g.size[d];\n",
             "      od += (kiln_i64)c * g.dst[d];\n", "      os += (kiln_i64)c * g.src[d];\n",
             "    }\n");
}

}  // namespace

std::string print_quad_copy(const std::string& symbol) {
  auto body = [&](const char* t) { return copy_offsets(t) + "    dst[od] = src[os];\n"; };
  return str("KILN_KERNEL void ", symbol,
             "(KILN_GLOBAL float4* dst, KILN_GLOBAL const float4* src, kiln_i64 n, int rank, "
             "KilnStrides g) {\n",
             index_loops("n", body), "}\n");
}

std::string print_quad_fill(const std::string& symbol) {
  return str("KILN_KERNEL void ", symbol,
             "(KILN_GLOBAL float4* dst, kiln_i64 n, unsigned w0, unsigned w1, unsigned w2, "
             "unsigned w3) {\n",
             "  float4 v;\n", "  v.x = __uint_as_float(w0);\n", "  v.y = __uint_as_float(w1);\n",
             "  v.z = __uint_as_float(w2);\n", "  v.w = __uint_as_float(w3);\n", grid_loop("n"),
             "    dst[i] = v;\n  }\n}\n");
}

std::string print_strided_copy(DType from, DType to, const std::string& symbol) {
  std::ostringstream os;
  auto body = [&](const char* t) {
    const std::string l = copy_offsets(t);
    if (from == to) return l + "    dst[od] = src[os];\n";  // the element's bits, whatever they are
    return str(l, "    const ", compute_type(from), " x = ", load(from, "src", "os"), ";\n",
               "    dst[od] = ",
               store_value(to, rounded(to, op_expr(OpId::cast, from, to, "x", "", ""))), ";\n");
  };
  os << "KILN_KERNEL void " << symbol << "(KILN_GLOBAL " << storage_type(to)
     << "* dst, KILN_GLOBAL const " << storage_type(from)
     << "* src, kiln_i64 n, int rank, KilnStrides g) {\n"
     << index_loops("n", body) << "}\n";
  return os.str();
}

bool has_column_sums(const Kernel& k) {
  for (const kir::Store& s : k.stores)
    if (s.accumulate) return true;
  return false;
}

int64_t column_warps_cap(const Kernel& k) {
  int64_t sums = 0;
  for (const kir::Store& s : k.stores) sums += s.accumulate ? 1 : 0;
  const int64_t doubles = 32768 / 8 / kColumnWarps / std::max<int64_t>(sums, 1);
  return std::max<int64_t>(32, doubles / 32 * 32);
}

namespace detail {

std::string kernel_head(const Kernel& k, const std::string& symbol, const char* count) {
  std::ostringstream os;
  os << "KILN_KERNEL void " << symbol << "(";
  for (size_t a = 0; a < k.args.size(); ++a) {
    const kir::Arg& arg = k.args[a];
    os << "KILN_GLOBAL " << (arg.is_output ? "" : "const ") << storage_type(arg.dtype) << "* p" << a
       << ", ";
  }
  os << "kiln_i64 " << count;
  for (int d = 0; d < k.rank; ++d) os << ", kiln_i64 s" << d;
  os << (has_column_sums(k) ? ", kiln_i64 parts" : "") << ") {\n";
  return os.str();
}

bool has_coordinates(const Kernel& k) {
  std::vector<char> summed(k.args.size(), 0);
  for (const kir::Store& s : k.stores)
    if (s.accumulate) summed[static_cast<size_t>(s.arg)] = 1;
  for (size_t a = 0; a < k.args.size(); ++a)
    for (bool dense : k.args[a].dense)
      if (!dense && !summed[a]) return true;
  return false;
}

LaneText lane_text(const Kernel& k, const std::string& idx, const std::string& sfx,
                   const std::string& indent, const IndexNames& names) {
  const std::string I = names.type, S = names.size;
  std::ostringstream ld, mt, st;
  std::vector<Loaded> loaded;
  std::vector<std::string> offset(k.args.size(), idx);
  std::vector<char> summed(k.args.size(), 0);  // column sums: no offset, a register
  for (const kir::Store& s : k.stores)
    if (s.accumulate) summed[static_cast<size_t>(s.arg)] = 1;
  if (has_coordinates(k)) {  // coordinates and offsets only for arguments with broadcast dims
    ld << indent << I << " r" << sfx << " = " << idx << ";\n";
    for (int d = k.rank - 1; d > 0; --d)
      ld << indent << "const " << I << " c" << d << sfx << " = r" << sfx << " % " << S << d << "; r"
         << sfx << " /= " << S << d << ";\n";
    ld << indent << "const " << I << " c0" << sfx << " = r" << sfx << ";\n";
    for (size_t a = 0; a < k.args.size(); ++a) {
      bool all_dense = true;
      for (bool dense : k.args[a].dense) all_dense &= dense;
      if (all_dense || summed[a]) continue;
      std::string o = "0";
      for (int d = 0; d < k.rank; ++d)
        if (k.args[a].dense[static_cast<size_t>(d)])
          o = o == "0" ? str("c", d, sfx) : str("(", o, ") * ", S, d, " + c", d, sfx);
      ld << indent << "const " << I << " o" << a << sfx << " = " << o << ";\n";
      offset[a] = str("o", a, sfx);
    }
  }
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    const Expr& e = k.exprs[i];
    auto v = [&](int j) { return j < 0 ? std::string() : str("e", j, sfx); };
    const std::string decl = str(indent, "const ", compute_type(e.dtype), " e", i, sfx, " = ");
    switch (e.kind) {
      case ExprKind::kLoad:  // not const: issue_loads may hold it
        ld << indent << compute_type(e.dtype) << " e" << i << sfx << " = "
           << (names.vector_lane.empty()
                   ? load(e.dtype, str("p", e.arg), offset[static_cast<size_t>(e.arg)])
                   : str("v", e.arg, names.vector_lane))
           << ";\n";
        loaded.push_back({str("e", i, sfx), e.dtype});
        break;
      case ExprKind::kConst:
        mt << decl << constant(e) << ";\n";
        break;
      case ExprKind::kOp: {
        const DType in = e.op == OpId::where ? k.exprs[static_cast<size_t>(e.b)].dtype
                                             : k.exprs[static_cast<size_t>(e.a)].dtype;
        const bool fast = names.fast_div && (*names.fast_div)[i] && e.op == OpId::div;
        mt << decl
           << (fast ? str("kiln_fdiv_fast(", v(e.a), ", ", v(e.b), ")")
                    : rounded(e.dtype, op_expr(e.op, in, e.dtype, v(e.a), v(e.b), v(e.c))))
           << ";\n";
        break;
      }
      case ExprKind::kPrim: {
        auto v = [&](int j) { return j < 0 ? std::string() : str("e", j, sfx); };
        mt << decl << prim_expr(e, k.exprs[static_cast<size_t>(e.a)].dtype, v(e.a), v(e.b), v(e.c))
           << ";\n";
        break;
      }
      case ExprKind::kReduced:
        KILN_ASSERT(false, "reductions are refused by print_kernel");
    }
  }
  for (const kir::Store& s : k.stores) {
    if (s.accumulate) {  // the thread's running f64 sum of its column (in index order)
      st << indent << "acc" << s.arg << " = acc" << s.arg << " + e" << s.expr << sfx << ";\n";
      continue;
    }
    if (!names.vector_lane.empty()) {
      st << indent << "w" << s.arg << names.vector_lane << " = e" << s.expr << sfx << ";\n";
      continue;
    }
    st << indent << "p" << s.arg << "[" << offset[static_cast<size_t>(s.arg)]
       << "] = " << store_value(k.args[static_cast<size_t>(s.arg)].dtype, str("e", s.expr, sfx))
       << ";\n";
  }
  return {ld.str(), mt.str(), st.str(), loaded};
}

std::string lanes_text(const std::vector<LaneText>& lanes, const std::string& ind) {
  std::ostringstream os;
  std::vector<Loaded> loaded;
  for (const LaneText& t : lanes) {
    os << t.loads;
    loaded.insert(loaded.end(), t.loaded.begin(), t.loaded.end());
  }
  os << issue_loads(loaded, ind);
  for (const LaneText& t : lanes) os << t.math;
  for (const LaneText& t : lanes) os << t.stores;
  return os.str();
}

}  // namespace detail

bool device_math_uses_libm() {
  static const bool libm = env::get_flag("KILN_CUDA_LIBM", false);
  return libm;
}

int row_held() {
  static const int held = [] {
    // The registry's parser: "8x" or "abc" is an error, not 8 or 0.
    const long h = env::get_int("KILN_CUDA_ROW_HELD", kDefaultRowHeld);
    KILN_CHECK(h >= 0 && h <= 64, "KILN_CUDA_ROW_HELD=", h, ": expected 0 to 64");
    return static_cast<int>(h);
  }();
  return held;
}

int held_of(const Kernel& k) {
  return k.has_reductions() && k.reassoc && !has_column_sums(k) ? row_held() : 0;
}

std::string print_held_twin(const Kernel& k, const std::string& symbol, int held) {
  KILN_CHECK(held_of(k) > 0, "[cuda] kernel '", k.name, "' has no held twin");
  KILN_CHECK(held >= 0 && held <= held_of(k), "[cuda] kernel '", k.name, "': a held twin of ", held,
             " per thread, not between 1 and ", held_of(k));
  return detail::print_row_variant(k, symbol, detail::kRowUnroll, held > 0 ? held : held_of(k),
                                   device_math_uses_libm(), detail::default_row_loops());
}

namespace {

std::atomic<int64_t> g_narrow_index_limit{2147483647};

// The grid-stride loop of a pointwise kernel over `count` elements with index
// type and size names `names`: `per` elements a stride apart per iteration
// (each thread has `per` independent, coalesced loads in flight; one 4-byte
// load per thread leaves an H200 at ~45% of its bandwidth), then the
// remainder. The loop starts at element `first` + the thread's index.
std::string pointwise_loop(const Kernel& k, const IndexNames& names, const std::string& count,
                           const std::string& ind, int per, const std::string& first = "") {
  const std::string I = names.type;
  std::ostringstream os;
  os << ind << "const " << I << " stride = (" << I << ")" << names.blocks << " * blockDim.x;\n"
     << ind << I << " i = " << first << "(" << I << ")" << names.block
     << " * blockDim.x + threadIdx.x;\n";
  const std::string body = ind + "  ";
  if (per > 1) {
    std::vector<LaneText> lanes;
    for (int l = 0; l < per; ++l)
      lanes.push_back(lane_text(k, l == 0 ? std::string("i") : str("(i + ", l, " * stride)"),
                                str("_", l), body, names));
    os << ind << "for (; i + " << per - 1 << " * stride < " << count << "; i += " << per
       << " * stride) {\n"
       << lanes_text(lanes, body) << ind << "}\n";
  }
  const LaneText tail = lane_text(k, "i", "", body, names);
  os << ind << "for (; i < " << count << "; i += stride) {\n"
     << tail.loads << tail.math << tail.stores << ind << "}\n";
  return os.str();
}

// Whether a kernel can take float4 loads and stores: every argument dense
// f32 (no coordinates, no column sums).
bool vectorizable(const Kernel& k) {
  for (const kir::Arg& a : k.args) {
    if (a.dtype != DType::f32) return false;
    for (bool dense : a.dense)
      if (!dense) return false;
  }
  return !has_column_sums(k);
}

// One step of `groups` float4s a stride apart (stride in float4s; q the
// first): the loads into v<arg>_<g>, the lanes as components, the stores
// from w<arg>_<g>.
std::string vector_step(const Kernel& k, const IndexNames& names, int groups,
                        const std::string& ind) {
  std::vector<char> loaded(k.args.size(), 0), stored(k.args.size(), 0);
  for (const Expr& e : k.exprs)
    if (e.kind == ExprKind::kLoad) loaded[static_cast<size_t>(e.arg)] = 1;
  for (const kir::Store& s : k.stores) stored[static_cast<size_t>(s.arg)] = 1;
  std::ostringstream os;
  auto at = [](int g) { return g == 0 ? std::string("q") : str("(q + ", g, " * stride)"); };
  for (int g = 0; g < groups; ++g)
    for (size_t a = 0; a < k.args.size(); ++a)
      if (loaded[a])
        os << ind << "const float4 v" << a << "_" << g << " = ((KILN_GLOBAL const float4*)p" << a
           << ")[" << at(g) << "];\n";
  for (int g = 0; g < groups; ++g)
    for (size_t a = 0; a < k.args.size(); ++a)
      if (stored[a]) os << ind << "float4 w" << a << "_" << g << ";\n";
  std::vector<LaneText> lanes;
  for (int g = 0; g < groups; ++g)
    for (int c = 0; c < 4; ++c) {
      IndexNames vn = names;
      vn.vector_lane = str("_", g, ".", "xyzw"[c]);
      lanes.push_back(lane_text(k, "", str("_", g, "_", c), ind, vn));
    }
  os << lanes_text(lanes, ind);
  for (int g = 0; g < groups; ++g)
    for (size_t a = 0; a < k.args.size(); ++a)
      if (stored[a])
        os << ind << "((KILN_GLOBAL float4*)p" << a << ")[" << at(g) << "] = w" << a << "_" << g
           << ";\n";
  return os.str();
}

// A vectorizable kernel's loops over `count` elements: where every pointer is
// 16-byte aligned, float4 steps (per / 4 a stride apart, then single ones),
// and the last count % 4 elements one per thread; else pointwise_loop.
std::string vector_loops(const Kernel& k, const IndexNames& names, const std::string& count,
                         const std::string& ind, int per) {
  const std::string I = names.type, in = ind + "  ", body = ind + "    ";
  const int groups = std::max(1, per / 4);
  std::ostringstream os;
  os << ind << "if (((0";
  for (size_t a = 0; a < k.args.size(); ++a) os << " | (kiln_u64)p" << a;
  os << ") & 15) == 0) {\n"
     << in << "const " << I << " n4 = " << count << " / 4;\n"
     << in << "const " << I << " stride = (" << I << ")" << names.blocks << " * blockDim.x;\n"
     << in << I << " q = (" << I << ")" << names.block << " * blockDim.x + threadIdx.x;\n";
  if (groups > 1)
    os << in << "for (; q + " << groups - 1 << " * stride < n4; q += " << groups << " * stride) {\n"
       << vector_step(k, names, groups, body) << in << "}\n";
  os << in << "for (; q < n4; q += stride) {\n"
     << vector_step(k, names, 1, body) << in << "}\n"
     << in << "{\n"
     << pointwise_loop(k, names, count, body, 1, "n4 * 4 + ") << in << "}\n"
     << ind << "} else {\n"
     << pointwise_loop(k, names, count, in, per) << ind << "}\n";
  return os.str();
}

// The loops of a pointwise kernel without column sums over n elements, with
// index names `names` (kiln_i64 / unsigned).
std::string pointwise_loops(const Kernel& k, const IndexNames& names, const std::string& count,
                            const std::string& ind, const PointwiseOptions& o) {
  if (o.vector && vectorizable(k)) return vector_loops(k, names, count, ind, o.per_thread);
  return pointwise_loop(k, names, count, ind, o.per_thread);
}

}  // namespace

int64_t narrow_index_limit() {
  return g_narrow_index_limit.load();
}

void set_narrow_index_limit(int64_t limit) {
  g_narrow_index_limit.store(limit);
}

std::string detail::print_row_variant(const Kernel& kernel, const std::string& symbol,
                                      int max_unroll, int held, bool libm, const RowLoops& loops) {
  // Transcendentals as kiln's expansions (the CPU's bits), unless libm.
  const Kernel k = libm ? kernel : kir::expand_math(kernel);
  kir::verify(k);
  KILN_CHECK(k.has_reductions(), "[cuda] kernel '", k.name, "' has no row reductions");
  return tables_for(k) + detail::print_row_kernel(k, symbol, max_unroll, held, loops);
}

PointwiseOptions detail::default_pointwise() {
  // float4 steps and the division without its slow path: on an H200
  // (2026-11-27, cuda_probe 16M) printed GELU ran at 94% of cuMemcpyDtoD
  // with both against 78% with neither (float4 alone 89%, fast division
  // alone 81%); the fast division equalled div.rn on every f32 of tanh's range.
  PointwiseOptions o;
  o.libm = device_math_uses_libm();
  o.vector = true;
  o.fast_division = true;
  return o;
}

std::string detail::print_pointwise_variant(const Kernel& kernel, const std::string& symbol,
                                            const PointwiseOptions& o) {
  KILN_ASSERT(o.per_thread >= 1, "pointwise kernel with ", o.per_thread, " elements per thread");
  // Transcendentals as kiln's expansions (the CPU's bits), unless libm.
  std::vector<char> normal_div;
  const Kernel k = o.libm ? kernel : kir::expand_math(kernel, &normal_div);
  kir::verify(k);
  if (has_column_sums(k)) return tables_for(k) + detail::print_column_kernel(k, symbol);
  // No __restrict__: an output may alias an input exactly (kernel_ir.h); each
  // element is loaded before it is stored, by the same thread.
  return tables_for(k) + kernel_head(k, symbol, "n") + pointwise_body(k, normal_div, o) + "}\n";
}

std::string detail::pointwise_body(const Kernel& k, const std::vector<char>& normal_div,
                                   const PointwiseOptions& o, const char* block,
                                   const char* blocks) {
  auto names = [&](const char* type, const char* size) {
    IndexNames n;
    n.type = type;
    n.size = size;
    n.block = block;
    n.blocks = blocks;
    if (o.fast_division && !normal_div.empty()) n.fast_div = &normal_div;
    return n;
  };
  // Kernels without coordinates (every argument dense) gain less (no
  // division) for the cost of compiling a second loop: 64-bit only unless
  // narrow_dense, as are kernels printed while the test hook says never.
  if (narrow_index_limit() < 0 || !(has_coordinates(k) || o.narrow_dense))
    return pointwise_loops(k, names("kiln_i64", "s"), "n", "  ", o);
  // Else 32-bit indices (unsigned: no 64-bit division for coordinates) where
  // every offset fits, picked at each launch by n (each argument's offsets
  // are below n; the launch's grid, at most 2^16 blocks of 256, keeps
  // i + per_thread stride below 2^32); 64-bit ones otherwise.
  std::ostringstream os;
  os << "  if (n <= " << narrow_index_limit() << ") {\n"
     << "    const unsigned n32 = (unsigned)n";
  for (int d = 1; d < k.rank; ++d) os << ", z" << d << " = (unsigned)s" << d;
  os << ";\n"
     << pointwise_loops(k, names("unsigned", "z"), "n32", "    ", o) << "  } else {\n"
     << pointwise_loops(k, names("kiln_i64", "s"), "n", "    ", o) << "  }\n";
  return os.str();
}

detail::RowLoops detail::default_row_loops() {
  // Quad (float4) loops: on an H200 (2026-11-27, cuda_probe 16M, CUDA-event
  // medians) softmax rows of 1024/4096 went from 65%/64% to 72%/73% of
  // cuMemcpyDtoD and layer_norm from 85%/79% to 96%/89%, with the
  // interpreter's bits; hoisting the row values was slower on rows of 4096
  // (69% alone, 77% with quads). The one place to switch: the goldens' row
  // kernels change with it.
  return {.quads = true, .hoist = false};
}

std::string print_kernel(const Kernel& kernel, const std::string& symbol) {
  if (kernel.has_reductions())
    return detail::print_row_variant(kernel, symbol, detail::kRowUnroll, 0, device_math_uses_libm(),
                                     detail::default_row_loops());
  return detail::print_pointwise_variant(kernel, symbol, detail::default_pointwise());
}

}  // namespace kiln::cuda
