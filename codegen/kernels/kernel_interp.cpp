// The kernel IR's reference interpreter. It applies the eager kernels' own
// scalar functors (runtime/src/ops/scalar_ops.h) in the dtype each op computes
// in, so its results are the eager results bit for bit (reductions: in
// sequential order, with eager's accumulator types), except for the
// transcendentals that have a math expansion (math_expand.h): it evaluates
// those expansions, as the backends do, so compiled and interpreted results
// agree bit for bit.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>

#include "kernels/kernel_ir.h"
#include "kernels/kernel_ir_util.h"
#include "kernels/math_expand.h"
#include "kiln/error.h"
#include "ops/scalar_ops.h"

namespace kiln::kir {

namespace {

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

// The interpreter's functor of each unary and binary elementwise op (looked up
// by op name): the eager one (ops::scalar), whose integer rules are defined for
// every input (wrapping products, x / -1, division by zero); `where` and `cast`
// have none (apply() handles them before the per-op switch).
namespace fn {
using namespace ops::scalar;
struct where {};
struct cast {};
}  // namespace fn

// Functor F on x (unary) or x, y (binary); a bool result stays bool
// (comparisons, logical ops), any other is the operand dtype T.
template <typename F, typename T, typename C>
Val apply_fn(OpId op, C x, C y) {
  if constexpr (std::is_invocable_v<F, C>) {
    const auto r = F{}(x);
    if constexpr (std::is_same_v<std::remove_const_t<decltype(r)>, bool>)
      return put<bool>(r);
    else
      return put<T>(static_cast<T>(r));
  } else if constexpr (std::is_invocable_v<F, C, C>) {
    const auto r = F{}(x, y);
    if constexpr (std::is_same_v<std::remove_const_t<decltype(r)>, bool>)
      return put<bool>(r);
    else
      return put<T>(static_cast<T>(r));
  }
  KILN_ASSERT(false, "kernel op ", op_name(op), " has no interpreter rule");
  return Val{};
}

Val apply(OpId op, DType in, DType out, const Val& a, const Val& b, const Val& c) {
  if (op == OpId::where) return a.i ? b : c;
  if (op == OpId::cast) return cast_val(in, out, a);
  if (op == OpId::copy) return a;
  return visit_dtype(in, [&](auto tag) -> Val {
    using T = decltype(tag);
    using C = compute_t<T>;
    const C x = static_cast<C>(get<T>(a)), y = static_cast<C>(get<T>(b));
    // One case per unary and binary op of the op table (ops.def).
    switch (op) {
#define KIR_CASE_unary(name) \
  case OpId::name:           \
    return apply_fn<fn::name, T>(op, x, y);
#define KIR_CASE_binary(name) KIR_CASE_unary(name)
#define KIR_CASE_reduce(name)
#define KIR_CASE_linalg(name)
#define KIR_CASE_conv(name)
#define KIR_CASE_movement(name)
#define KIR_CASE_factory(name)
#define KIR_CASE_collective(name)
#define KIR_CASE_scan(name)
#define KIR_CASE_sort(name)
#define KILN_OP(name, family, arity, traits) KIR_CASE_##family(name)
#include "kiln/ops.def"
#undef KILN_OP
#undef KIR_CASE_unary
#undef KIR_CASE_binary
#undef KIR_CASE_reduce
#undef KIR_CASE_linalg
#undef KIR_CASE_conv
#undef KIR_CASE_movement
#undef KIR_CASE_factory
#undef KIR_CASE_collective
#undef KIR_CASE_scan
#undef KIR_CASE_sort
      default:
        break;
    }
    KILN_ASSERT(false, "kernel op ", op_name(op), " has no interpreter rule");
    return Val{};
  });
}

// A primitive (kernel_ir.h) on operands of dtype `in`.
Val apply_prim(const Expr& e, DType in, const Val& a, const Val& b, const Val& c) {
  const bool f32 = in == DType::f32, i32 = in == DType::i32;
  auto flt = [&](auto fn) {
    return f32 ? put<float>(
                     fn(static_cast<float>(a.f), static_cast<float>(b.f), static_cast<float>(c.f)))
               : put<double>(fn(a.f, b.f, c.f));
  };
  auto integer = [&](int64_t v) {
    return i32 ? put<int32_t>(static_cast<int32_t>(v)) : put<int64_t>(v);
  };
  switch (e.prim) {
    case Prim::kFma:
      return flt([](auto x, auto y, auto z) { return std::fma(x, y, z); });
    case Prim::kRint:
      return flt([](auto x, auto, auto) { return std::rint(x); });
    case Prim::kTrunc:
      return flt([](auto x, auto, auto) { return std::trunc(x); });
    case Prim::kBitcast:
      switch (in) {
        case DType::f32:
          return put<int32_t>(std::bit_cast<int32_t>(static_cast<float>(a.f)));
        case DType::i32:
          return put<float>(std::bit_cast<float>(static_cast<int32_t>(a.i)));
        case DType::f64:
          return put<int64_t>(std::bit_cast<int64_t>(a.f));
        default:
          return put<double>(std::bit_cast<double>(a.i));
      }
    case Prim::kShl:  // in the unsigned type: no overflow
      return integer(i32 ? static_cast<int32_t>(static_cast<uint32_t>(a.i) << b.i)
                         : static_cast<int64_t>(static_cast<uint64_t>(a.i) << b.i));
    case Prim::kShr:  // i32 values are held sign-extended: the same bits
      return integer(a.i >> b.i);
    case Prim::kAnd:
      return integer(a.i & b.i);
    case Prim::kOr:
      return integer(a.i | b.i);
    case Prim::kXor:
      return integer(a.i ^ b.i);
    case Prim::kTable: {
      const std::span<const int32_t> t = math_table(e.arg);
      KILN_ASSERT(a.i >= 0 && static_cast<size_t>(a.i) < t.size(), "table index ", a.i);
      return put<int32_t>(t[static_cast<size_t>(a.i)]);
    }
  }
  return Val{};
}

// Op `op` (has_math_expansion) on a, b: its expansion, evaluated in `scratch`.
Val apply_expansion(OpId op, DType in, const Val& a, const Val& b, std::vector<Val>& scratch) {
  const std::vector<Expr>& f = math_expansion(op, in);
  scratch.resize(f.size());
  for (size_t j = 0; j < f.size(); ++j) {
    const Expr& x = f[j];
    if (x.kind == ExprKind::kLoad) {
      scratch[j] = x.arg == 0 ? a : b;
    } else if (x.kind == ExprKind::kConst) {
      scratch[j] = constant(x.dtype, x.value);
    } else {
      int ops[3] = {0, 0, 0};
      const int m = detail::operands(x, ops);
      const Val none;
      const Val& p = scratch[static_cast<size_t>(ops[0])];
      const Val& q = m > 1 ? scratch[static_cast<size_t>(ops[1])] : none;
      const Val& r = m > 2 ? scratch[static_cast<size_t>(ops[2])] : none;
      const DType t = f[static_cast<size_t>(ops[0])].dtype;
      scratch[j] =
          x.kind == ExprKind::kOp ? apply(x.op, t, x.dtype, p, q, r) : apply_prim(x, t, p, q, r);
    }
  }
  return scratch.back();
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
        case ExprKind::kOp:
        case ExprKind::kPrim: {
          int ops[3] = {0, 0, 0};
          const int m = detail::operands(e, ops);
          const Val none;
          const Val& a = v_[static_cast<size_t>(ops[0])];
          const Val& b = m > 1 ? v_[static_cast<size_t>(ops[1])] : none;
          const Val& c = m > 2 ? v_[static_cast<size_t>(ops[2])] : none;
          const DType in = k_.exprs[static_cast<size_t>(ops[0])].dtype;
          if (e.kind == ExprKind::kPrim)
            v_[i] = apply_prim(e, in, a, b, c);
          else if (has_math_expansion(e.op, in))
            v_[i] = apply_expansion(e.op, in, a, b, scratch_);
          else
            v_[i] = apply(e.op, in, e.dtype, a, b, c);
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
  std::vector<Val> scratch_;  // values of a math expansion (apply_expansion)
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
