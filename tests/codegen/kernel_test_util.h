// Test helpers for hand-built kernels: a small builder for kir::Kernel and
// typed buffers laid out as the kernel ABI expects (contiguous, dense or
// broadcast per dim).
#pragma once

#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/scoped_env.h"
#include "kernels/kernel_ir.h"
#include "kiln/kiln.h"

namespace kiln::kir::testing {

using kiln::testing::ScopedEnv;  // tests/common/scoped_env.h

/// Kernel tests compile for real: no disk cache (and nothing written to $HOME).
class NoDiskCache : public ::testing::Test {
  ScopedEnv env_{"KILN_CACHE_DIR", "off"};
};

/// Builds a kernel expression by expression.
struct Builder {
  Kernel k;
  explicit Builder(int rank, std::string name = "test") {
    k.rank = rank;
    k.name = std::move(name);
  }
  int arg(DType t, std::vector<bool> dense, bool out = false) {
    k.args.push_back(Arg{t, out, std::move(dense)});
    return static_cast<int>(k.args.size()) - 1;
  }
  int in(DType t, std::vector<bool> dense) { return arg(t, std::move(dense)); }
  int out(DType t, std::vector<bool> dense) { return arg(t, std::move(dense), true); }
  int push(Expr e) {
    k.exprs.push_back(e);
    return static_cast<int>(k.exprs.size()) - 1;
  }
  int load(int a) { return push(Expr::load(a, k.args[static_cast<size_t>(a)].dtype)); }
  int cnst(DType t, double v) { return push(Expr::constant(v, t)); }
  int op(OpId op, DType t, int a, int b = -1, int c = -1) {
    return push(Expr::make_op(op, t, a, b, c));
  }
  /// Adds a reduction and returns the expression reading its result.
  int reduce(OpId op, int expr, int phase, DType t) {
    k.reductions.push_back(Reduction{op, expr, phase, t});
    Expr e;
    e.kind = ExprKind::kReduced;
    e.arg = static_cast<int>(k.reductions.size()) - 1;
    e.dtype = t;
    return push(e);
  }
  void store(int a, int expr) { k.stores.push_back(Store{a, expr}); }
  /// A column sum: `expr` (f64) added to output `a`'s column.
  void accumulate(int a, int expr) { k.stores.push_back(Store{a, expr, true}); }
};

/// One argument's buffer: raw bytes of the arg's dtype, sized from the dense dims.
struct Buffer {
  DType dtype = DType::f32;
  std::vector<char> bytes;
  int64_t numel = 0;
  void* data() { return bytes.data(); }

  /// Element i as a double (bool and ints exactly).
  double get(int64_t i) const {
    return visit_dtype(dtype, [&](auto tag) {
      using T = decltype(tag);
      T v;
      std::memcpy(&v, bytes.data() + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
        return static_cast<double>(static_cast<float>(v));
      else
        return static_cast<double>(v);
    });
  }
  void set(int64_t i, double x) {
    visit_dtype(dtype, [&](auto tag) {
      using T = decltype(tag);
      T v;
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
        v = T(static_cast<float>(x));
      else if constexpr (std::is_same_v<T, bool>)
        v = x != 0;
      else
        v = static_cast<T>(x);
      std::memcpy(bytes.data() + i * static_cast<int64_t>(sizeof(T)), &v, sizeof(T));
    });
  }
};

/// Number of elements of arg `a` for iteration sizes `sizes`.
inline int64_t arg_numel(const Kernel& k, size_t a, const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (size_t d = 0; d < sizes.size(); ++d)
    if (k.args[a].dense[d]) n *= sizes[d];
  return n;
}

/// Buffers for every arg; inputs drawn from `pick(dtype, rng)`, outputs zeroed.
template <typename Pick>
std::vector<Buffer> make_buffers(const Kernel& k, const std::vector<int64_t>& sizes,
                                 std::mt19937& rng, Pick pick) {
  std::vector<Buffer> b(k.args.size());
  for (size_t a = 0; a < k.args.size(); ++a) {
    b[a].dtype = k.args[a].dtype;
    b[a].numel = arg_numel(k, a, sizes);
    b[a].bytes.assign(static_cast<size_t>(b[a].numel) * dtype_size(b[a].dtype), 0);
    if (!k.args[a].is_output)
      for (int64_t i = 0; i < b[a].numel; ++i) b[a].set(i, pick(b[a].dtype, rng));
  }
  return b;
}

inline std::vector<void*> pointers(std::vector<Buffer>& b) {
  std::vector<void*> p;
  for (Buffer& x : b) p.push_back(x.data());
  return p;
}

/// A tensor holding buffer `b` viewed with `shape` (a copy).
inline Tensor to_tensor(const Buffer& b, const Dims& shape) {
  Tensor t = make_tensor(shape, b.dtype);
  std::memcpy(t.data_ptr(), b.bytes.data(), b.bytes.size());
  return t;
}

/// The shape of arg `a`: broadcast dims are 1.
inline Dims arg_shape(const Kernel& k, size_t a, const std::vector<int64_t>& sizes) {
  Dims s;
  for (size_t d = 0; d < sizes.size(); ++d) s.push_back(k.args[a].dense[d] ? sizes[d] : 1);
  return s;
}

}  // namespace kiln::kir::testing
