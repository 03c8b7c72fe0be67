// Scalar op rules of the LLVM backend (see llvm_emit_ops.h): each rule matches
// the eager functor of runtime/src/ops/scalar_ops.h for the dtype class (float,
// signed int, u8, bool). No fast-math flags: results are bit-exact. The f32
// (and f16/bf16) transcendentals are their math expansions (math_expand.h),
// emitted inline: branch-free, so the loops around them vectorize, and equal to
// the interpreter's results bit for bit.
#include "kernels/llvm/llvm_emit_ops.h"

#include <array>
#include <bit>
#include <cstdio>

#include "kernels/kernel_ir_util.h"
#include "kernels/math_expand.h"
#include "kiln/error.h"

namespace kiln::kir::detail {

namespace {

// Register type of a value of dtype t (f16/bf16 compute in float, bool is i1).
std::string ty(DType t) {
  switch (t) {
    case DType::f32:
    case DType::f16:
    case DType::bf16:
      return "float";
    case DType::f64:
      return "double";
    case DType::i64:
      return "i64";
    case DType::i32:
      return "i32";
    case DType::u8:
      return "i8";
    case DType::b8:
      return "i1";
  }
  return "float";
}
// Type of an element in memory.
std::string mem_ty(DType t) {
  switch (t) {
    case DType::f16:
      return "half";
    case DType::bf16:
      return "i16";
    case DType::b8:
      return "i8";
    default:
      return ty(t);
  }
}
int bits(DType t) {
  switch (t) {
    case DType::i64:
      return 64;
    case DType::i32:
      return 32;
    case DType::u8:
      return 8;
    case DType::b8:
      return 1;
    default:
      return 0;
  }
}

// An exact LLVM literal of a float or double value (hex of the double).
std::string fp_literal(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%016llX",
                static_cast<unsigned long long>(std::bit_cast<uint64_t>(v)));
  return buf;
}

// The literal of constant `v` in dtype t (rounded to t like the interpreter).
std::string literal(DType t, double v) {
  switch (t) {
    case DType::f32:
      return fp_literal(static_cast<float>(v));
    case DType::f64:
      return fp_literal(v);
    case DType::f16:
      return fp_literal(static_cast<float>(Half(static_cast<float>(v))));
    case DType::bf16:
      return fp_literal(static_cast<float>(BFloat16(static_cast<float>(v))));
    case DType::b8:
      return v != 0 ? "true" : "false";
    case DType::u8:
      return std::to_string(static_cast<int8_t>(static_cast<uint8_t>(v)));
    case DType::i32:
      return std::to_string(static_cast<int32_t>(static_cast<int64_t>(v)));
    case DType::i64:
      return std::to_string(static_cast<int64_t>(v));
  }
  return "0";
}

// Integer power by squaring (eager's rule: negative exponents give 0 except for
// bases 1 and -1), as an internal function: the loop needs blocks.
std::string powi_helper(const std::string& name, const std::string& t, bool is_signed) {
  std::string s = "define internal " + t + " @" + name + "(" + t + " %a, " + t +
                  " %b) #1 {\n"
                  "entry:\n";
  if (is_signed) {
    s += "  %neg = icmp slt " + t +
         " %b, 0\n"
         "  br i1 %neg, label %negexp, label %loop\n"
         "negexp:\n"
         "  %one = icmp eq " +
         t +
         " %a, 1\n"
         "  %mone = icmp eq " +
         t +
         " %a, -1\n"
         "  %bit = and " +
         t +
         " %b, 1\n"
         "  %odd = icmp ne " +
         t +
         " %bit, 0\n"
         "  %pm = select i1 %odd, " +
         t + " -1, " + t +
         " 1\n"
         "  %r0 = select i1 %mone, " +
         t + " %pm, " + t +
         " 0\n"
         "  %r1 = select i1 %one, " +
         t + " 1, " + t +
         " %r0\n"
         "  ret " +
         t + " %r1\n";
  } else {
    s += "  br label %loop\n";
  }
  s += "loop:\n"
       "  %r = phi " +
       t +
       " [ 1, %entry ], [ %r2, %body ]\n"
       "  %base = phi " +
       t +
       " [ %a, %entry ], [ %base2, %body ]\n"
       "  %e = phi " +
       t +
       " [ %b, %entry ], [ %e2, %body ]\n"
       "  %done = icmp eq " +
       t +
       " %e, 0\n"
       "  br i1 %done, label %exit, label %body\n"
       "body:\n"
       "  %low = and " +
       t +
       " %e, 1\n"
       "  %take = icmp ne " +
       t +
       " %low, 0\n"
       "  %rm = mul " +
       t +
       " %r, %base\n"
       "  %r2 = select i1 %take, " +
       t + " %rm, " + t +
       " %r\n"
       "  %base2 = mul " +
       t +
       " %base, %base\n"
       "  %e2 = lshr " +
       t +
       " %e, 1\n"
       "  br label %loop\n"
       "exit:\n"
       "  ret " +
       t +
       " %r\n"
       "}\n";
  return s;
}

}  // namespace

std::string ir_type(DType t) {
  return ty(t);
}
std::string ir_mem_type(DType t) {
  return mem_ty(t);
}
std::string ir_literal(DType t, double v) {
  return literal(t, v);
}

std::string IrText::emit(const std::string& rhs) {
  std::string t = tmp();
  line(t + " = " + rhs);
  return t;
}

std::string IrText::sel(const std::string& c, const std::string& t, const std::string& a,
                        const std::string& b) {
  return emit(str("select i1 ", c, ", ", t, " ", a, ", ", t, " ", b));
}

std::string IrText::call1(const std::string& t, const std::string& fn, const std::string& x) {
  declare(str("declare ", t, " @", fn, "(", t, ")"));
  return emit(str("call ", t, " @", fn, "(", t, " ", x, ")"));
}

std::string IrText::call2(const std::string& t, const std::string& fn, const std::string& x,
                          const std::string& y) {
  declare(str("declare ", t, " @", fn, "(", t, ", ", t, ")"));
  return emit(str("call ", t, " @", fn, "(", t, " ", x, ", ", t, " ", y, ")"));
}

std::string IrText::prim(const Expr& e, DType in, const std::string& a, const std::string& b,
                         const std::string& c) {
  const std::string t = ty(in), sfx = in == DType::f64 ? "f64" : "f32";
  switch (e.prim) {
    case Prim::kFma:
      declare(str("declare ", t, " @llvm.fma.", sfx, "(", t, ", ", t, ", ", t, ")"));
      return emit(str("call ", t, " @llvm.fma.", sfx, "(", t, " ", a, ", ", t, " ", b, ", ", t, " ",
                      c, ")"));
    case Prim::kRint:
      return call1(t, str("llvm.rint.", sfx), a);
    case Prim::kTrunc:
      return call1(t, str("llvm.trunc.", sfx), a);
    case Prim::kBitcast:
      return emit(str("bitcast ", t, " ", a, " to ", ty(e.dtype)));
    case Prim::kShl:
      return emit(str("shl ", t, " ", a, ", ", b));
    case Prim::kShr:
      return emit(str("ashr ", t, " ", a, ", ", b));
    case Prim::kAnd:
      return emit(str("and ", t, " ", a, ", ", b));
    case Prim::kOr:
      return emit(str("or ", t, " ", a, ", ", b));
    case Prim::kXor:
      return emit(str("xor ", t, " ", a, ", ", b));
    case Prim::kTable: {
      const std::span<const int32_t> tab = math_table(e.arg);
      const std::string g = str("@kiln_table", e.arg), arr = str("[", tab.size(), " x i32]");
      if (!helpers_.count(g)) {
        std::string def = str(g, " = internal unnamed_addr constant ", arr, " [");
        for (size_t i = 0; i < tab.size(); ++i) def += str(i ? ", i32 " : "i32 ", tab[i]);
        helpers_[g] = def + "]";
      }
      const std::string i64 = emit(str("sext i32 ", a, " to i64"));
      const std::string p =
          emit(str("getelementptr inbounds ", arr, ", ptr ", g, ", i64 0, i64 ", i64));
      return emit(str("load i32, ptr ", p));
    }
  }
  KILN_ASSERT(false, "no LLVM rule for primitive ", prim_name(e.prim));
  return "";
}

// The expansion's expressions in order (no fast-math: `arcp` off, so each
// division is the interpreter's); operands 0 and 1 are a and b.
std::string IrText::expansion(OpId op, DType t, const std::string& a, const std::string& b) {
  const std::vector<Expr>& f = math_expansion(op, t);
  std::vector<std::string> v(f.size());
  const bool arcp = arcp_;
  arcp_ = false;
  for (size_t j = 0; j < f.size(); ++j) {
    const Expr& x = f[j];
    if (x.kind == ExprKind::kLoad) {
      v[j] = x.arg == 0 ? a : b;
      continue;
    }
    if (x.kind == ExprKind::kConst) {
      v[j] = literal(x.dtype, x.value);
      continue;
    }
    int ops[3] = {0, 0, 0};
    const int m = detail::operands(x, ops);
    const std::string& p = v[static_cast<size_t>(ops[0])];
    const std::string q = m > 1 ? v[static_cast<size_t>(ops[1])] : "";
    const std::string r = m > 2 ? v[static_cast<size_t>(ops[2])] : "";
    const DType in = f[static_cast<size_t>(ops[0])].dtype;
    v[j] = x.kind == ExprKind::kOp ? scalar_op(x.op, in, x.dtype, p, q, r) : prim(x, in, p, q, r);
  }
  arcp_ = arcp;
  return v.back();
}

// Rounds a float register to f16/bf16 precision (eager stores every op's result).
std::string IrText::round(DType t, const std::string& v) {
  if (t == DType::f16) {
    const std::string h = emit(str("fptrunc float ", v, " to half"));
    return emit(str("fpext half ", h, " to float"));
  }
  if (t != DType::bf16) return v;
  // Round to nearest even on the upper 16 bits; NaN stays a quiet NaN (BFloat16(float)).
  const std::string u = emit(str("bitcast float ", v, " to i32"));
  const std::string lsb0 = emit(str("lshr i32 ", u, ", 16"));
  const std::string lsb = emit(str("and i32 ", lsb0, ", 1"));
  const std::string bias = emit(str("add i32 ", lsb, ", 32767"));
  const std::string r = emit(str("add i32 ", u, ", ", bias));
  const std::string m = emit(str("and i32 ", r, ", -65536"));
  const std::string q0 = emit(str("or i32 ", u, ", 4194304"));
  const std::string q = emit(str("and i32 ", q0, ", -65536"));
  const std::string nan = emit(str("fcmp uno float ", v, ", 0.0"));
  const std::string b = sel(nan, "i32", q, m);
  return emit(str("bitcast i32 ", b, " to float"));
}

std::string IrText::convert(DType from, DType to, const std::string& v) {
  if (from == to) return v;
  const std::string rs = ty(from), rd = ty(to);
  const bool sf = is_f(from), df = is_f(to);
  if (sf && df) {
    std::string x = v;
    if (rs == "double" && rd == "float") x = emit(str("fptrunc double ", x, " to float"));
    if (rs == "float" && rd == "double") x = emit(str("fpext float ", x, " to double"));
    return round(to, x);  // f64 -> f16 rounds through f32, as eager's Half(float(x))
  }
  if (sf) {
    if (to == DType::b8) return emit(str("fcmp une ", rs, " ", v, ", 0.0"));
    if (to == DType::u8) {  // like GCC's conversion: through i32, keep the low byte
      const std::string w = emit(str("fptosi ", rs, " ", v, " to i32"));
      return emit(str("trunc i32 ", w, " to i8"));
    }
    return emit(str("fptosi ", rs, " ", v, " to ", rd));
  }
  if (df) {
    const std::string x =
        emit(str(is_signed_int(from) ? "sitofp " : "uitofp ", rs, " ", v, " to ", rd));
    return round(to, x);
  }
  if (to == DType::b8) return emit(str("icmp ne ", rs, " ", v, ", 0"));
  if (bits(to) > bits(from))
    return emit(str(is_signed_int(from) ? "sext " : "zext ", rs, " ", v, " to ", rd));
  return emit(str("trunc ", rs, " ", v, " to ", rd));
}

// exp, log, ... in dtype t: the math expansions for f32/f16/bf16 (no libm call
// blocks vectorization); f64 (gradcheck precision) uses libm/intrinsics.
std::string IrText::float_math(OpId op, DType t, const std::string& x) {
  if (has_math_expansion(op, t)) return expansion(op, t, x, "");
  const std::string rt = ty(t);
  const bool d = t == DType::f64;
  std::string r;
  switch (op) {
    case OpId::sqrt:
    case OpId::rsqrt: {
      const std::string fn = d ? "llvm.sqrt.f64" : "llvm.sqrt.f32";
      r = call1(rt, fn, x);
      if (op == OpId::rsqrt) r = emit(str("fdiv ", rt, " 1.0, ", r));
      break;
    }
    case OpId::exp:
      r = call1(rt, "llvm.exp.f64", x);
      break;
    case OpId::log:
      r = call1(rt, "llvm.log.f64", x);
      break;
    case OpId::tanh:
      r = call1(rt, "tanh", x);
      break;
    case OpId::sin:
      r = call1(rt, "llvm.sin.f64", x);
      break;
    case OpId::cos:
      r = call1(rt, "llvm.cos.f64", x);
      break;
    case OpId::log1p:
      r = call1(rt, "log1p", x);
      break;
    case OpId::erf:
      r = call1(rt, "erf", x);
      break;
    case OpId::sigmoid: {
      const std::string n = emit(str("fneg double ", x));
      const std::string e = call1(rt, "llvm.exp.f64", n);
      const std::string s = emit(str("fadd double 1.0, ", e));
      r = emit(str("fdiv double 1.0, ", s));
      break;
    }
    default:
      KILN_ASSERT(false, "no float math rule for ", op_name(op));
  }
  return round(t, r);
}

std::string IrText::scalar_op(OpId op, DType t, DType r, std::string a, std::string b,
                              const std::string& c) {
  const std::string rt = ty(t);
  const bool f = is_f(t), si = is_signed_int(t), boolean = t == DType::b8;
  const std::string zero = f ? "0.0" : (boolean ? "false" : "0");
  if (is_float_math(op)) return float_math(op, t, a);
  switch (op) {
    case OpId::copy:
      return a;
    case OpId::cast:
      return convert(t, r, a);
    case OpId::where:
      return sel(a, ty(r), b, c);
    case OpId::neg:
      if (f) return emit(str("fneg ", rt, " ", a));
      return boolean ? a : emit(str("sub ", rt, " 0, ", a));
    case OpId::abs: {
      if (!f && !si) return a;
      const std::string lt = emit(str(f ? "fcmp olt " : "icmp slt ", rt, " ", a, ", ", zero));
      const std::string n = f ? emit(str("fneg ", rt, " ", a)) : emit(str("sub ", rt, " 0, ", a));
      return sel(lt, rt, n, a);
    }
    case OpId::relu: {
      if (!f && !si) return a;
      if (si) return sel(emit(str("icmp sgt ", rt, " ", a, ", 0")), rt, a, "0");
      const std::string pos = emit(str("fcmp ogt ", rt, " ", a, ", 0.0"));
      const std::string nan = emit(str("fcmp uno ", rt, " ", a, ", ", a));
      return sel(pos, rt, a, sel(nan, rt, a, "0.0"));
    }
    case OpId::sign: {
      if (boolean) return a;
      if (f) {
        const std::string pos = emit(str("fcmp ogt ", rt, " ", a, ", 0.0"));
        const std::string neg = emit(str("fcmp olt ", rt, " ", a, ", 0.0"));
        return sel(pos, rt, "1.0", sel(neg, rt, "-1.0", "0.0"));
      }
      const std::string pos = emit(str(si ? "icmp sgt " : "icmp ne ", rt, " ", a, ", 0"));
      const std::string p = emit(str("zext i1 ", pos, " to ", rt));
      if (!si) return p;
      const std::string neg = emit(str("icmp slt ", rt, " ", a, ", 0"));
      const std::string n = emit(str("zext i1 ", neg, " to ", rt));
      return emit(str("sub ", rt, " ", p, ", ", n));
    }
    case OpId::logical_not:
      if (boolean) return emit(str("xor i1 ", a, ", true"));
      return emit(str(f ? "fcmp oeq " : "icmp eq ", rt, " ", a, ", ", zero));

    case OpId::add:
    case OpId::sub:
    case OpId::mul: {
      if (boolean) {
        const char* bop = op == OpId::add ? "or" : (op == OpId::sub ? "xor" : "and");
        return emit(str(bop, " i1 ", a, ", ", b));
      }
      const char* name = op == OpId::add ? "add" : (op == OpId::sub ? "sub" : "mul");
      if (!f) return emit(str(name, " ", rt, " ", a, ", ", b));
      return round(t, emit(str("f", name, " ", rt, " ", a, ", ", b)));
    }
    case OpId::div: {
      if (f) return round(t, emit(str("fdiv ", arcp_ ? "arcp " : "", rt, " ", a, ", ", b)));
      if (boolean) return emit(str("and i1 ", a, ", ", b));
      // Integer floor division; x / 0 = 0 and never a trap (eager's rule).
      const std::string z = emit(str("icmp eq ", rt, " ", b, ", 0"));
      if (!si) {
        const std::string safe = sel(z, rt, "1", b);
        return sel(z, rt, "0", emit(str("udiv ", rt, " ", a, ", ", safe)));
      }
      const std::string m1 = emit(str("icmp eq ", rt, " ", b, ", -1"));
      const std::string odd = emit(str("or i1 ", z, ", ", m1));
      const std::string safe = sel(odd, rt, "1", b);
      const std::string q = emit(str("sdiv ", rt, " ", a, ", ", safe));
      const std::string r = emit(str("srem ", rt, " ", a, ", ", safe));
      const std::string inexact = emit(str("icmp ne ", rt, " ", r, ", 0"));
      const std::string x = emit(str("xor ", rt, " ", a, ", ", safe));
      const std::string signs = emit(str("icmp slt ", rt, " ", x, ", 0"));
      const std::string adj = emit(str("and i1 ", inexact, ", ", signs));
      const std::string q1 =
          emit(str("sub ", rt, " ", q, ", ", emit(str("zext i1 ", adj, " to ", rt))));
      const std::string neg = emit(str("sub ", rt, " 0, ", a));
      return sel(z, rt, "0", sel(m1, rt, neg, q1));
    }
    case OpId::pow: {
      if (boolean) return emit(str("or i1 ", a, ", ", emit(str("xor i1 ", b, ", true"))));
      if (t == DType::f64) return call2(rt, "llvm.pow.f64", a, b);
      if (f) return expansion(op, t, a, b);
      const std::string name = str("kiln_powi_", dtype_name(t));
      if (!helpers_.count(name)) helpers_[name] = powi_helper(name, rt, si);
      return emit(str("call ", rt, " @", name, "(", rt, " ", a, ", ", rt, " ", b, ")"));
    }
    case OpId::maximum:
    case OpId::minimum: {
      const bool mx = op == OpId::maximum;
      if (boolean) return emit(str(mx ? "or" : "and", " i1 ", a, ", ", b));
      if (!f) {
        const char* pred = si ? (mx ? "sgt" : "slt") : (mx ? "ugt" : "ult");
        return sel(emit(str("icmp ", pred, " ", rt, " ", a, ", ", b)), rt, a, b);
      }
      // NaN wins (the first NaN), else the larger/smaller; ties give b.
      const std::string an = emit(str("fcmp uno ", rt, " ", a, ", ", a));
      const std::string bn = emit(str("fcmp uno ", rt, " ", b, ", ", b));
      const std::string g = emit(str("fcmp ", mx ? "ogt " : "olt ", rt, " ", a, ", ", b));
      return sel(an, rt, a, sel(bn, rt, b, sel(g, rt, a, b)));
    }
    case OpId::eq:
    case OpId::ne:
    case OpId::lt:
    case OpId::le:
    case OpId::gt:
    case OpId::ge: {
      static const std::map<OpId, std::array<const char*, 3>> preds{
          {OpId::eq, {"oeq", "eq", "eq"}},   {OpId::ne, {"une", "ne", "ne"}},
          {OpId::lt, {"olt", "slt", "ult"}}, {OpId::le, {"ole", "sle", "ule"}},
          {OpId::gt, {"ogt", "sgt", "ugt"}}, {OpId::ge, {"oge", "sge", "uge"}}};
      const auto& p = preds.at(op);
      if (f) return emit(str("fcmp ", p[0], " ", rt, " ", a, ", ", b));
      return emit(str("icmp ", si ? p[1] : p[2], " ", rt, " ", a, ", ", b));
    }
    case OpId::logical_and:
    case OpId::logical_or: {
      const char* lop = op == OpId::logical_and ? "and" : "or";
      if (!boolean) {
        a = emit(str(f ? "fcmp une " : "icmp ne ", rt, " ", a, ", ", zero));
        b = emit(str(f ? "fcmp une " : "icmp ne ", rt, " ", b, ", ", zero));
      }
      return emit(str(lop, " i1 ", a, ", ", b));
    }
    default:
      break;
  }
  KILN_ASSERT(false, "no LLVM rule for kernel op ", op_name(op));
  return "";
}

}  // namespace kiln::kir::detail
