// The transcendental expansions (see math_expand.h): the f32 functions of
// runtime/src/math/expansions.h (shared with eager mode) instantiated with a
// builder that appends kernel-IR expressions, one per operation.
#include "kernels/math_expand.h"

#include <array>
#include <mutex>

#include "kernels/kernel_ir_util.h"
#include "kiln/error.h"
#include "math/expansions.h"

namespace kiln::kir {

namespace {

// A kernel-IR value of dtype T: the index of the expression computing it.
template <DType T>
struct X {
  int i = -1;
};

// The builder of math/expansions.h: each operation appends one expression
// (constants first) and returns its index.
class B {
 public:
  using F = X<DType::f32>;
  using D = X<DType::f64>;
  using I = X<DType::i32>;
  using L = X<DType::i64>;
  using M = X<DType::b8>;
  std::vector<Expr> ex;

  int push(const Expr& e) {
    ex.push_back(e);
    return static_cast<int>(ex.size()) - 1;
  }
  template <DType T>
  X<T> c(double v) {
    return {push(Expr::constant(v, T))};
  }
  template <DType T>
  X<T> like(X<T>, double v) {
    return c<T>(v);
  }
  I ci(double v) { return c<DType::i32>(v); }
  template <DType T>
  X<T> op(OpId o, X<T> a, X<T> b) {
    return {push(Expr::make_op(o, T, a.i, b.i))};
  }
  template <DType T>
  M cmp(OpId o, X<T> a, X<T> b) {
    return {push(Expr::make_op(o, DType::b8, a.i, b.i))};
  }
  template <DType T>
  X<T> prim(Prim p, X<T> a, int b = -1, int cc = -1) {
    return {push(Expr::make_prim(p, T, a.i, b, cc))};
  }
  template <DType To, DType T>
  X<To> cast(X<T> a) {
    return {push(Expr::make_op(OpId::cast, To, a.i))};
  }
  template <DType To, DType T>
  X<To> bitcast(X<T> a) {
    return {push(Expr::make_prim(Prim::kBitcast, To, a.i))};
  }

#define KIR_BINARY(name, o)     \
  template <DType T>            \
  X<T> name(X<T> a, X<T> b) {   \
    return op(o, a, b);         \
  }                             \
  template <DType T>            \
  X<T> name(X<T> a, double v) { \
    return op(o, a, c<T>(v));   \
  }
  KIR_BINARY(add, OpId::add)
  KIR_BINARY(sub, OpId::sub)
  KIR_BINARY(mul, OpId::mul)
  KIR_BINARY(div, OpId::div)
#undef KIR_BINARY
  std::vector<int> normal_divs;  // indices of div_normal's divisions
  F div_normal(F a, F b) {
    const F q = div(a, b);
    normal_divs.push_back(q.i);
    return q;
  }
#define KIR_COMPARE(name, o)   \
  template <DType T>           \
  M name(X<T> a, X<T> b) {     \
    return cmp(o, a, b);       \
  }                            \
  template <DType T>           \
  M name(X<T> a, double v) {   \
    return cmp(o, a, c<T>(v)); \
  }
  KIR_COMPARE(lt, OpId::lt)
  KIR_COMPARE(gt, OpId::gt)
  KIR_COMPARE(ge, OpId::ge)
  KIR_COMPARE(eq, OpId::eq)
  KIR_COMPARE(ne, OpId::ne)
#undef KIR_COMPARE
  template <DType T>
  X<T> neg(X<T> a) {
    return {push(Expr::make_op(OpId::neg, T, a.i))};
  }
  M land(M a, M b) {
    return op(OpId::logical_and, a, b);
  }
  M lor(M a, M b) {
    return op(OpId::logical_or, a, b);
  }
  M lnot(M a) {
    return {push(Expr::make_op(OpId::logical_not, DType::b8, a.i))};
  }
  template <DType T>
  X<T> sel(M m, X<T> a, X<T> b) {
    return {push(Expr::make_op(OpId::where, T, m.i, a.i, b.i))};
  }
  template <DType T>
  X<T> sel(M m, X<T> a, double v) {
    return sel(m, a, c<T>(v));
  }
  template <DType T>
  X<T> sel(M m, double v, X<T> b) {
    return sel(m, c<T>(v), b);
  }
  template <DType T>
  X<T> fma(X<T> a, X<T> b, X<T> cc) {
    return prim(Prim::kFma, a, b.i, cc.i);
  }
  template <DType T>
  X<T> fma(X<T> a, double v, X<T> cc) {
    return fma(a, c<T>(v), cc);
  }
  template <DType T>
  X<T> rint(X<T> a) {
    return prim(Prim::kRint, a);
  }
  template <DType T>
  X<T> trunc(X<T> a) {
    return prim(Prim::kTrunc, a);
  }
  I bits(F a) {
    return bitcast<DType::i32>(a);
  }
  L bits(D a) {
    return bitcast<DType::i64>(a);
  }
  F from_bits(I a) {
    return bitcast<DType::f32>(a);
  }
  D from_bits(L a) {
    return bitcast<DType::f64>(a);
  }
  template <DType T>
  X<T> band(X<T> a, X<T> b) {
    return prim(Prim::kAnd, a, b.i);
  }
  template <DType T>
  X<T> band(X<T> a, double v) {
    return band(a, c<T>(v));
  }
  template <DType T>
  X<T> bor(X<T> a, X<T> b) {
    return prim(Prim::kOr, a, b.i);
  }
  template <DType T>
  X<T> bor(X<T> a, double v) {
    return bor(a, c<T>(v));
  }
  template <DType T>
  X<T> shl(X<T> a, int n) {
    return prim(Prim::kShl, a, c<T>(n).i);
  }
  template <DType T>
  X<T> shr(X<T> a, int n) {
    return prim(Prim::kShr, a, c<T>(n).i);
  }
  template <DType T>
  F to_f32(X<T> a) {
    return cast<DType::f32>(a);
  }
  template <DType T>
  D to_f64(X<T> a) {
    return cast<DType::f64>(a);
  }
  template <DType T>
  I to_i32(X<T> a) {
    return cast<DType::i32>(a);
  }
  template <DType T>
  L to_i64(X<T> a) {
    return cast<DType::i64>(a);
  }
  // Kernel IR has no branches: a guarded path is computed and selected.
  bool maybe_any(M) {
    return true;
  }
  I table(I idx) {
    Expr e = Expr::make_prim(Prim::kTable, DType::i32, idx.i);
    e.arg = 0;
    return {push(e)};
  }
};

// pow and the float math ops of the table (kFloatMath) except sqrt and rsqrt,
// which are correctly rounded instructions everywhere.
constexpr bool expandable_op(OpId op) {
  return op == OpId::pow || (detail::is_float_math(op) && op != OpId::sqrt && op != OpId::rsqrt);
}

// The f32 body of `op` on inputs x (and y for pow).
B::F expand_f32(B& b, OpId op, B::F x, B::F y) {
  switch (op) {
    case OpId::exp:
      return math::exp_f32(b, x);
    case OpId::log:
      return math::log_f32(b, x);
    case OpId::log1p:
      return math::log1p_f32(b, x);
    case OpId::tanh:
      return math::tanh_f32(b, x);
    case OpId::sigmoid:
      return math::sigmoid_f32(b, x);
    case OpId::erf:
      return math::erf_f32(b, x);
    case OpId::sin:
      return math::sincos_f32(b, x, true);
    case OpId::cos:
      return math::sincos_f32(b, x, false);
    case OpId::pow:
      return math::pow_f32(b, x, y);
    default:
      break;
  }
  KILN_ASSERT(false, "no math expansion for ", op_name(op));
  return {};
}

// One expansion: its expressions and, per expression, whether it is a
// div_normal division.
struct Expansion {
  std::vector<Expr> exprs;
  std::vector<char> normal_div;
};

Expansion build(OpId op, DType t) {
  B b;
  const int arity = op == OpId::pow ? 2 : 1;
  int in[2] = {-1, -1};
  for (int i = 0; i < arity; ++i) in[i] = b.push(Expr::load(i, t));
  if (t == DType::f32) {
    expand_f32(b, op, {in[0]}, {in[1]});
  } else {  // f16/bf16: compute in float, round once
    for (int i = 0; i < arity; ++i) in[i] = b.push(Expr::make_op(OpId::cast, DType::f32, in[i]));
    const B::F r = expand_f32(b, op, {in[0]}, {in[1]});
    b.push(Expr::make_op(OpId::cast, t, r.i));
  }
  std::vector<char> normal(b.ex.size(), 0);
  for (int i : b.normal_divs) normal[static_cast<size_t>(i)] = 1;
  return {b.ex, normal};
}

constexpr int dtype_slot(DType t) {
  return t == DType::f32 ? 0 : (t == DType::f16 ? 1 : 2);
}

}  // namespace

bool has_math_expansion(OpId op, DType t) {
  return expandable_op(op) && (t == DType::f32 || t == DType::f16 || t == DType::bf16);
}

namespace {

const Expansion& expansion(OpId op, DType t) {
  KILN_ASSERT(has_math_expansion(op, t), "no math expansion for ", op_name(op), " in ", t);
  static const auto table = [] {
    std::vector<std::array<Expansion, 3>> all(static_cast<size_t>(kNumOps));
    for (int o = 0; o < kNumOps; ++o) {
      const auto op = static_cast<OpId>(o);
      if (!expandable_op(op)) continue;
      for (DType dt : {DType::f32, DType::f16, DType::bf16})
        all[static_cast<size_t>(o)][static_cast<size_t>(dtype_slot(dt))] = build(op, dt);
    }
    return all;
  }();
  return table[static_cast<size_t>(op)][static_cast<size_t>(dtype_slot(t))];
}

}  // namespace

const std::vector<Expr>& math_expansion(OpId op, DType t) {
  return expansion(op, t).exprs;
}

const std::vector<char>& normal_divisions(OpId op, DType t) {
  return expansion(op, t).normal_div;
}

Kernel expand_math(const Kernel& k, std::vector<char>* normal_div) {
  Kernel out = k;
  out.exprs.clear();
  if (normal_div) normal_div->clear();
  std::vector<int> map(k.exprs.size(), -1);
  auto remap = [](Expr e, const std::vector<int>& m) {
    if (e.kind == ExprKind::kOp || e.kind == ExprKind::kPrim) {
      for (int* o : {&e.a, &e.b, &e.c})
        if (*o >= 0) *o = m[static_cast<size_t>(*o)];
    }
    return e;
  };
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    const Expr& e = k.exprs[i];
    const DType in =
        e.kind == ExprKind::kOp && e.a >= 0 ? k.exprs[static_cast<size_t>(e.a)].dtype : e.dtype;
    if (e.kind != ExprKind::kOp || !has_math_expansion(e.op, in)) {
      out.exprs.push_back(remap(e, map));
      if (normal_div) normal_div->push_back(0);
      map[i] = static_cast<int>(out.exprs.size()) - 1;
      continue;
    }
    const std::vector<Expr>& f = math_expansion(e.op, in);
    const std::vector<char>& nd = normal_divisions(e.op, in);
    std::vector<int> fm(f.size(), -1);
    const int operands[2] = {e.a, e.b};
    for (size_t j = 0; j < f.size(); ++j) {
      if (f[j].kind == ExprKind::kLoad) {
        fm[j] = map[static_cast<size_t>(operands[f[j].arg])];
        continue;
      }
      out.exprs.push_back(remap(f[j], fm));
      if (normal_div) normal_div->push_back(nd[j]);
      fm[j] = static_cast<int>(out.exprs.size()) - 1;
    }
    map[i] = fm.back();
  }
  for (Reduction& r : out.reductions) r.expr = map[static_cast<size_t>(r.expr)];
  for (Store& s : out.stores) s.expr = map[static_cast<size_t>(s.expr)];
  return out;
}

std::span<const int32_t> math_table(int id) {
  KILN_ASSERT(id >= 0 && id < kNumMathTables, "no math table ", id);
  return math::kTwoOverPiTable;
}

}  // namespace kiln::kir
