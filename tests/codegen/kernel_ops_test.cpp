// Every elementwise op in every dtype it accepts, compiled vs the interpreter
// (bit-exact) and the interpreter vs the eager kernels (bit-exact, or within 4
// ulp for the transcendentals, which kernels compute with their math
// expansions and eager with libm), on special values (±0, ±inf, NaN,
// subnormals, integer extremes, division by zero) and random ones.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "codegen/kernel_test_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/kernel_ir.h"
#include "kernels/math_expand.h"

namespace kiln::kir {
namespace {

using testing::Buffer;
using testing::Builder;
using KernelOps = testing::NoDiskCache;

constexpr DType kAll[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                          DType::i64, DType::i32, DType::u8,  DType::b8};

// Ops computed by their math expansion (in f32, f16 and bf16).
bool transcendental(OpId op) {
  return has_math_expansion(op, DType::f32);
}

// The op table's ops of `family` with `arity` operands, in table order.
std::vector<OpId> table_ops(const char* family, int arity) {
  std::vector<OpId> out;
  for (int i = 0; i < kNumOps; ++i) {
    const OpInfo& info = op_info(static_cast<OpId>(i));
    if (std::strcmp(info.family, family) == 0 && info.arity == arity)
      out.push_back(static_cast<OpId>(i));
  }
  return out;
}

// Interesting values of each dtype.
std::vector<double> values(DType t) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  switch (t) {
    case DType::b8:
      return {0, 1};
    case DType::u8:
      return {0, 1, 2, 3, 7, 127, 128, 200, 255};
    case DType::i32:
      return {0, 1, -1, 2, -2, 3, -7, 31, 100, -100, 2147483647.0, -2147483648.0};
    case DType::i64:
      return {0, 1, -1, 2, -2, 3, -7, 63, 100, -100, 9007199254740993.0, -9223372036854775808.0};
    default:
      break;
  }
  return {0,  -0.0, 1,    -1,    0.5,   -0.5, 2,    -2.5, 3.75, 1e-3,  -7,    100,
          88, -90,  1e30, -1e30, 1e-40, inf,  -inf, nan,  0.1,  65504, 1.5e4, -1e5};
}

// Distance in units in the last place of dtype t (f32/f16/bf16), 0 if equal.
double ulps(DType t, double a, double b) {
  if (a == b || (std::isnan(a) && std::isnan(b))) return 0;
  if (std::isnan(a) || std::isnan(b) || std::signbit(a) != std::signbit(b)) return 1e30;
  auto key = [&](double v) -> int64_t {
    const float f = static_cast<float>(std::fabs(v));
    if (t == DType::f16) return Half(f).bits;
    if (t == DType::bf16) return BFloat16(f).bits;
    if (t == DType::f64) return std::bit_cast<int64_t>(std::fabs(v));
    return std::bit_cast<int32_t>(f);
  };
  return static_cast<double>(std::llabs(key(a) - key(b)));
}

bool same(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

// One output of a test kernel and what produced it.
struct Probe {
  std::string what;
  OpId op;
  int out_arg;
  std::vector<int> in_args;  // kernel args the op reads
};

// Compiles and interprets `k` on buffers `in`, then checks each probe: JIT vs
// interpreter, and interpreter vs the eager op (when eager computes that op in
// the same dtype).
bool expanded(OpId op, DType t) {
  return transcendental(op) && t != DType::f64 && is_floating(t);
}
void check(const Kernel& k, const std::vector<int64_t>& sizes, std::vector<Buffer> bufs,
           const std::vector<Probe>& probes,
           const std::function<Tensor(const Probe&, const std::vector<Tensor>&)>& eager) {
  std::vector<Buffer> ref = bufs;
  auto pj = testing::pointers(bufs), pr = testing::pointers(ref);
  get_kernel(k)->launch(pj.data(), sizes.data());
  interpret(k, 0, work_items(k, sizes.data()), pr.data(), sizes.data());
  for (const Probe& p : probes) {
    const auto o = static_cast<size_t>(p.out_arg);
    const DType t = k.args[o].dtype;
    int bad = 0;
    for (int64_t i = 0; i < ref[o].numel && bad < 3; ++i) {
      const double x = bufs[o].get(i), y = ref[o].get(i);
      const bool ok = same(x, y);
      if (!ok) {
        ++bad;
        std::string in;
        for (int a : p.in_args) {
          const int64_t n = ref[static_cast<size_t>(a)].numel;
          const int64_t idx = n == ref[o].numel ? i : (n == sizes[0] ? i / sizes.back() : i % n);
          in += str(" ", ref[static_cast<size_t>(a)].get(idx));
        }
        ADD_FAILURE() << p.what << " at element " << i << " (inputs" << in << "): compiled " << x
                      << ", interpreter " << y;
      }
    }
    // The interpreter against eager.
    std::vector<Tensor> inputs;
    for (int a : p.in_args)
      inputs.push_back(testing::to_tensor(ref[static_cast<size_t>(a)],
                                          testing::arg_shape(k, static_cast<size_t>(a), sizes)));
    // Eager's integer pow multiplies signed values that may overflow (UB that
    // the sanitizer build traps): compare with the interpreter's wrapped result only.
    if (p.op == OpId::pow && (t == DType::i64 || t == DType::i32)) continue;
    Tensor want;
    try {
      want = eager(p, inputs);
    } catch (const Error&) {
      continue;  // eager rejects this dtype (e.g. bool - bool): nothing to compare
    }
    if (want.dtype() != t) continue;  // eager computes it differently (int / int is float)
    Tensor got = testing::to_tensor(ref[o], testing::arg_shape(k, o, sizes));
    const std::vector<double> w = want.to_vector<double>(), g = got.to_vector<double>();
    ASSERT_EQ(w.size(), g.size()) << p.what;
    for (size_t i = 0; i < w.size(); ++i)
      if (expanded(p.op, t) ? ulps(t, w[i], g[i]) > 4 : !same(w[i], g[i])) {
        ADD_FAILURE() << p.what << " element " << i << ": interpreter " << g[i] << ", eager "
                      << w[i];
        break;
      }
  }
}

std::vector<Buffer> fill(const Kernel& k, const std::vector<int64_t>& sizes,
                         const std::vector<std::vector<double>>& data) {
  std::mt19937 rng(0);
  std::vector<Buffer> b =
      testing::make_buffers(k, sizes, rng, [](DType, std::mt19937&) { return 0.0; });
  for (size_t a = 0; a < data.size(); ++a)
    for (int64_t i = 0; i < b[a].numel; ++i) b[a].set(i, data[a][static_cast<size_t>(i)]);
  return b;
}

// Every unary op of the op table, and copy.
std::vector<OpId> unary_ops() {
  std::vector<OpId> ops = table_ops("unary", 1);
  ops.push_back(OpId::copy);
  return ops;
}

bool float_only(OpId op) {
  return op_info(op).has(kFloatMath);
}

// Unary ops: one kernel per dtype, one output per op.
TEST_F(KernelOps, UnaryOpsInEveryDtype) {
  for (DType t : kAll) {
    Builder b(1, str("unary_", dtype_name(t)));
    const int xa = b.in(t, {true});
    const int x = b.load(xa);
    std::vector<Probe> probes;
    for (OpId op : unary_ops()) {
      if (float_only(op) && !is_floating(t)) continue;
      const DType r = op == OpId::logical_not ? DType::b8 : t;
      const int o = b.out(r, {true});
      b.store(o, b.op(op, r, x));
      probes.push_back({str(op_name(op), " ", dtype_name(t)), op, o, {xa}});
    }
    std::vector<double> v = values(t);
    if (is_floating(t)) {  // plus a random sweep
      std::mt19937 rng(7);
      std::uniform_real_distribution<double> u(-12, 12);
      for (int i = 0; i < 200; ++i) v.push_back(u(rng));
    }
    const std::vector<int64_t> sizes{static_cast<int64_t>(v.size())};
    check(b.k, sizes, fill(b.k, sizes, {v}), probes,
          [](const Probe& p, const std::vector<Tensor>& in) {
            if (p.op == OpId::copy) return in[0].clone();
            return dispatch1(p.op, {in[0]});
          });
  }
}

// Binary ops on every pair of interesting values ([n, 1] x [1, n] broadcast).
TEST_F(KernelOps, BinaryOpsInEveryDtype) {
  for (DType t : kAll) {
    Builder b(2, str("binary_", dtype_name(t)));
    const int aa = b.in(t, {true, false}), ba = b.in(t, {false, true});
    const int x = b.load(aa), y = b.load(ba);
    std::vector<Probe> probes;
    for (OpId op : table_ops("binary", 2)) {
      const bool to_bool = op >= OpId::eq && op <= OpId::logical_or;
      const DType r = to_bool ? DType::b8 : t;
      const int o = b.out(r, {true, true});
      b.store(o, b.op(op, r, x, y));
      probes.push_back({str(op_name(op), " ", dtype_name(t)), op, o, {aa, ba}});
    }
    const std::vector<double> v = values(t);
    const auto n = static_cast<int64_t>(v.size());
    check(b.k, {n, n}, fill(b.k, {n, n}, {v, v}), probes,
          [](const Probe& p, const std::vector<Tensor>& in) {
            return dispatch1(p.op, {in[0], in[1]});
          });
  }
}

// where in every dtype, with a broadcast condition.
TEST_F(KernelOps, WhereInEveryDtype) {
  for (DType t : kAll) {
    Builder b(2, str("where_", dtype_name(t)));
    const int ca = b.in(DType::b8, {true, true}), aa = b.in(t, {true, false}),
              ba = b.in(t, {false, true});
    const int o = b.out(t, {true, true});
    b.store(o, b.op(OpId::where, t, b.load(ca), b.load(aa), b.load(ba)));
    const std::vector<double> v = values(t);
    const auto n = static_cast<int64_t>(v.size());
    std::vector<double> c;
    for (int64_t i = 0; i < n * n; ++i) c.push_back(static_cast<double>((i * 7 + i / 3) % 2));
    check(b.k, {n, n}, fill(b.k, {n, n}, {c, v, v}),
          {{str("where ", dtype_name(t)), OpId::where, o, {ca, aa, ba}}},
          [](const Probe&, const std::vector<Tensor>& in) { return where(in[0], in[1], in[2]); });
  }
}

// cast between every pair of dtypes; floats go to integers only from values in
// the target's range (elsewhere C++ leaves the result undefined).
TEST_F(KernelOps, CastBetweenEveryDtype) {
  enum Mode { kAny, kSigned, kUnsigned };
  for (DType from : kAll) {
    for (Mode mode : {kAny, kSigned, kUnsigned}) {
      if (mode != kAny && !is_floating(from)) continue;
      Builder b(1, str("cast_", dtype_name(from), "_", static_cast<int>(mode)));
      const int xa = b.in(from, {true});
      const int x = b.load(xa);
      std::vector<Probe> probes;
      for (DType to : kAll) {
        const bool to_int = !is_floating(to) && to != DType::b8;
        if (is_floating(from) && to_int) {
          if (mode == kAny) continue;
          if ((mode == kUnsigned) != (to == DType::u8)) continue;
        } else if (mode != kAny) {
          continue;
        }
        const int o = b.out(to, {true});
        b.store(o, b.op(OpId::cast, to, x));
        probes.push_back(
            {str("cast ", dtype_name(from), " -> ", dtype_name(to)), OpId::cast, o, {xa}});
      }
      std::vector<double> v = values(from);
      if (mode == kSigned)
        v = {0, -0.0, 0.5, -0.5, 1, 1.99, -1.99, 2.5, -7.5, 100.7, 127.9, -128.5};
      if (mode == kUnsigned) v = {0, -0.0, 0.5, -0.5, 1, 1.99, 2.5, 100.7, 127.9, 128.5, 255.9};
      const std::vector<int64_t> sizes{static_cast<int64_t>(v.size())};
      check(b.k, sizes, fill(b.k, sizes, {v}), probes,
            [&](const Probe& p, const std::vector<Tensor>& in) {
              return cast(in[0], b.k.args[static_cast<size_t>(p.out_arg)].dtype).clone();
            });
    }
  }
}

// Constants of every dtype are exact (rounded to the dtype like the interpreter).
TEST_F(KernelOps, ConstantsInEveryDtype) {
  for (DType t : kAll) {
    Builder b(1, str("const_", dtype_name(t)));
    const int xa = b.in(t, {true});
    const int x = b.load(xa);
    std::vector<Probe> probes;
    for (double c : values(t)) {
      if (std::isnan(c) && !is_floating(t)) continue;
      const int o = b.out(t, {true});
      b.store(o, b.op(OpId::add, t, x, b.cnst(t, c)));
      probes.push_back({str("add const ", c, " ", dtype_name(t)), OpId::add, o, {xa}});
    }
    const std::vector<double> v = values(t);
    const std::vector<int64_t> sizes{static_cast<int64_t>(v.size())};
    check(b.k, sizes, fill(b.k, sizes, {v}), probes,
          [](const Probe&, const std::vector<Tensor>&) -> Tensor { throw Error("no eager"); });
  }
}

}  // namespace
}  // namespace kiln::kir
