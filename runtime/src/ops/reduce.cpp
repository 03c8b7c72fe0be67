// Reductions: sum, max/min (amax/amin in the API), argmax/argmin, and sum_to.
//
// The value kernels share one plan: the input dims are sorted by stride and
// coalesced, then one of three loops runs:
//  - row:    the innermost dim is reduced (e.g. sum over the last dim of a
//            contiguous tensor): each output reduces contiguous runs;
//  - column: the innermost dim is kept (e.g. sum over dim 0): each task
//            accumulates whole input rows into a small block of outputs;
//  - split:  few outputs but a long reduction (e.g. a full sum): the reduction
//            of each output is cut into fixed blocks reduced in parallel.
// The choice depends only on shapes and strides, never on the thread count,
// so results are reproducible across KILN_NUM_THREADS settings.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "ops/helpers.h"
#include "ops/registry.h"

namespace kiln {
namespace ops {
namespace {

// The max/min primitives are amax/amin in the user API; errors use those names.
const char* api_name(OpId op) {
  if (op == OpId::max) return "amax";
  if (op == OpId::min) return "amin";
  return op_name(op);
}

bool attr_bool(const Attrs& at, const char* name, bool dflt) {
  return at.has(name) ? at.b(name) : dflt;
}
Dims attr_dims(const Attrs& at, const char* name) {
  return at.has(name) ? at.dims(name) : Dims{};
}

template <typename A>
constexpr bool is_nan(A v) {
  if constexpr (std::is_floating_point_v<A>)
    return v != v;
  else
    return false;
}

// Reducers over an accumulator type A. step() also combines two partial results.
template <typename A>
struct SumOp {
  static A init() { return A(0); }
  static A step(A a, A v) {
    if constexpr (std::is_integral_v<A>) {
      // Wrap around on overflow like PyTorch, without signed-overflow UB.
      using U = std::make_unsigned_t<A>;
      return static_cast<A>(static_cast<U>(a) + static_cast<U>(v));
    } else {
      return a + v;
    }
  }
};
template <typename A>
struct MaxOp {
  static A init() {
    if constexpr (std::is_floating_point_v<A>)
      return -std::numeric_limits<A>::infinity();
    else
      return std::numeric_limits<A>::lowest();
  }
  static constexpr int kExtreme = 1;
  static A step(A a, A v) { return ((v > a) | is_nan(v)) ? v : a; }  // NaN is sticky
};
template <typename A>
struct MinOp {
  static A init() {
    if constexpr (std::is_floating_point_v<A>)
      return std::numeric_limits<A>::infinity();
    else
      return std::numeric_limits<A>::max();
  }
  static constexpr int kExtreme = -1;
  static A step(A a, A v) { return ((v < a) | is_nan(v)) ? v : a; }
};

// Max/min of contiguous f32/f64 with explicit vectors: GCC does not vectorize
// the two-compare select that keeps NaN sticky, and amax feeds every softmax.
template <typename A, int Dir>
A extreme_run(const A* x, int64_t n, A acc) {
  typedef A Vec __attribute__((vector_size(32)));
  constexpr int64_t kW = 32 / sizeof(A);
  Vec m0, m1;
  for (int64_t k = 0; k < kW; ++k) m0[k] = m1[k] = acc;
  int64_t i = 0;
  for (; i + 2 * kW <= n; i += 2 * kW) {
    Vec a, b;
    std::memcpy(&a, x + i, sizeof a);
    std::memcpy(&b, x + i + kW, sizeof b);
    if constexpr (Dir > 0) {
      m0 = ((a > m0) | (a != a)) ? a : m0;
      m1 = ((b > m1) | (b != b)) ? b : m1;
    } else {
      m0 = ((a < m0) | (a != a)) ? a : m0;
      m1 = ((b < m1) | (b != b)) ? b : m1;
    }
  }
  auto step = [](A a, A v) { return ((Dir > 0 ? v > a : v < a) | (v != v)) ? v : a; };
  for (int64_t k = 0; k < kW; ++k) acc = step(step(acc, m0[k]), m1[k]);
  for (; i < n; ++i) acc = step(acc, x[i]);
  return acc;
}
template <typename Op>
concept ExtremeOp = requires {
  Op::kExtreme;
};

// One (coalesced) dim of the reduction: size, input stride, output stride
// (elements; 0 for reduced dims).
struct RDim {
  int64_t size, xs, ys;
  bool red;
};
using RDims = std::vector<RDim>;

// Input and output offsets of linear index i over dims (outer to inner).
inline void unravel(const RDims& ds, int64_t i, int64_t& xo, int64_t& yo) {
  xo = 0;
  yo = 0;
  for (size_t d = ds.size(); d-- > 0;) {
    int64_t k = i % ds[d].size;
    i /= ds[d].size;
    xo += k * ds[d].xs;
    yo += k * ds[d].ys;
  }
}

inline int64_t numel_of_rdims(const RDims& ds) {
  int64_t n = 1;
  for (const RDim& d : ds) n *= d.size;
  return n;
}

// Reduces n elements x[0], x[s], ... Contiguous runs use independent lanes so
// the loop vectorizes without reassociating, and partial sums stay small.
template <typename T, typename A, typename Op>
A reduce_run(const T* x, int64_t n, int64_t s) {
  using C = compute_t<T>;
  A acc = Op::init();
  if constexpr (ExtremeOp<Op> && std::is_same_v<T, A> && std::is_floating_point_v<A>) {
    if (s == 1) return extreme_run<A, Op::kExtreme>(x, n, acc);
  }
  if (s == 1) {
    constexpr int kLanes = 16;
    if (n >= kLanes) {
      A lane[kLanes];
      for (int j = 0; j < kLanes; ++j) lane[j] = Op::init();
      int64_t i = 0;
      for (; i + kLanes <= n; i += kLanes)
        for (int j = 0; j < kLanes; ++j) lane[j] = Op::step(lane[j], A(C(x[i + j])));
      for (int w = kLanes / 2; w > 0; w /= 2)  // pairwise combine of the lanes
        for (int j = 0; j < w; ++j) lane[j] = Op::step(lane[j], lane[j + w]);
      acc = lane[0];
      x += i;
      n -= i;
    }
    for (int64_t i = 0; i < n; ++i) acc = Op::step(acc, A(C(x[i])));
  } else {
    for (int64_t i = 0; i < n; ++i) acc = Op::step(acc, A(C(x[i * s])));
  }
  return acc;
}

// Reduces elements [e0, e1) of the reduced space `outer` x (n, s) starting at x.
template <typename T, typename A, typename Op>
A reduce_range(const T* x, const RDims& outer, int64_t n, int64_t s, int64_t e0, int64_t e1) {
  A acc = Op::init();
  int64_t q = e0 / n, j = e0 % n;
  for (int64_t e = e0; e < e1;) {
    int64_t len = std::min(n - j, e1 - e);
    int64_t xo, yo;
    unravel(outer, q, xo, yo);
    acc = Op::step(acc, reduce_run<T, A, Op>(x + xo + j * s, len, s));
    e += len;
    j = 0;
    ++q;
  }
  return acc;
}

template <typename O, typename A>
O finish(A a) {
  return O(static_cast<compute_t<O>>(a));
}

constexpr int64_t kSplitBlock = 16384;          // elements per block of the split path
constexpr int64_t kColumnChunk = 256;           // outputs accumulated together by the column path
constexpr int64_t kWholeRowColumns = 8192;      // widest rows the whole-row column path takes
constexpr int64_t kWholeRowPartials = 1 << 20;  // most partial sums it keeps at once

// x's dims of size > 1 with their input and output strides (reduced dims
// marked), in memory order (largest input stride outermost), dims that walk
// memory as one merged.
RDims reduction_dims(const Tensor& x, const Dims& dims) {
  const Dims& shape = x.shape();
  Dims ys = contiguous_strides(reduced_shape(shape, dims, true));
  RDims ds;
  for (size_t i = 0, j = 0; i < shape.size(); ++i) {
    bool red = j < dims.size() && dims[j] == static_cast<int64_t>(i);
    if (red) ++j;
    if (shape[i] == 1) continue;
    ds.push_back({shape[i], x.strides()[i], red ? 0 : ys[i], red});
  }
  // Iterate in memory order (largest input stride outermost), then merge dims
  // that walk memory as one.
  std::stable_sort(ds.begin(), ds.end(),
                   [](const RDim& a, const RDim& b) { return std::abs(a.xs) > std::abs(b.xs); });
  RDims co;
  for (const RDim& d : ds) {
    if (!co.empty()) {
      RDim& l = co.back();
      if (l.red == d.red && l.xs == d.xs * d.size && l.ys == d.ys * d.size) {
        l.size *= d.size;
        l.xs = d.xs;
        l.ys = d.ys;
        continue;
      }
    }
    co.push_back(d);
  }
  return co;
}

// The typed leaves of one reduction (input T, output O, accumulator A, reducer
// Op). The paths below choose work and threads once, for every dtype, and call
// the leaves only per output block or per block of rows, so each (dtype, op)
// instantiates the inner loops alone (issue 18: build time). Accumulator
// buffers are bytes; every A is at most 8 bytes.
struct Leaves {
  size_t acc_bytes;
  // y[0..m) = the reduction's identity (a reduction over an empty dim).
  void (*identity)(void* y, int64_t m);
  // Row path: outputs [o0, o1), each reducing rn elements: the outer reduced
  // dims `outer` x the innermost run (n, s).
  void (*rows)(const void* x, void* y, const RDims& kept, const RDims& outer, int64_t n, int64_t s,
               int64_t rn, int64_t o0, int64_t o1);
  // *acc = the reduction of elements [e0, e1) of that space, from x + xo.
  void (*range)(const void* x, int64_t xo, const RDims& outer, int64_t n, int64_t s, int64_t e0,
                int64_t e1, void* acc);
  // acc[0..len) = the reduction of rows [r0, r1) of `red` (offsets from x +
  // xo), each row len elements xs apart.
  void (*fold)(const void* x, int64_t xo, const RDims& red, int64_t r0, int64_t r1, int64_t xs,
               int64_t len, void* acc);
  // acc[j] = step(acc[j], other[j]) for j < n.
  void (*combine)(void* acc, const void* other, int64_t n);
  // y[yo + j ys] = acc[j] as O for j < n.
  void (*store)(void* y, int64_t yo, int64_t ys, const void* acc, int64_t n);
};

template <typename T, typename O, typename A, typename Op>
struct TypedLeaves {
  using C = compute_t<T>;
  static void identity(void* y, int64_t m) {
    O* yp = static_cast<O*>(y);
    for (int64_t i = 0; i < m; ++i) yp[i] = finish<O, A>(Op::init());
  }
  static void rows(const void* x, void* y, const RDims& kept, const RDims& outer, int64_t n,
                   int64_t s, int64_t rn, int64_t o0, int64_t o1) {
    const T* xp = static_cast<const T*>(x);
    O* yp = static_cast<O*>(y);
    for (int64_t o = o0; o < o1; ++o) {
      int64_t xo, yo;
      unravel(kept, o, xo, yo);
      yp[yo] = finish<O, A>(reduce_range<T, A, Op>(xp + xo, outer, n, s, 0, rn));
    }
  }
  static void range(const void* x, int64_t xo, const RDims& outer, int64_t n, int64_t s, int64_t e0,
                    int64_t e1, void* acc) {
    *static_cast<A*>(acc) =
        reduce_range<T, A, Op>(static_cast<const T*>(x) + xo, outer, n, s, e0, e1);
  }
  // Contiguous rows four at a time: each accumulator is loaded and stored once
  // per four input rows. One row at a time loaded and stored every accumulator
  // for every input row (a [128, 1024] f32 sum over dim 0: 22 us on one
  // thread, 2.6x PyTorch). Each column still adds in row order: the same bits.
  // Returns the rows of [r0, r1) folded into a (initialized here).
  static int64_t fold_rows4(const T* x, const RDims& red, int64_t r0, int64_t r1, int64_t len,
                            A* __restrict a) {
    for (int64_t j = 0; j < len; ++j) a[j] = Op::init();
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) {
      int64_t o[4], ry;
      for (int k = 0; k < 4; ++k) unravel(red, r + k, o[k], ry);
      const T* __restrict p0 = x + o[0], * __restrict p1 = x + o[1];
      const T* __restrict p2 = x + o[2], * __restrict p3 = x + o[3];
      for (int64_t j = 0; j < len; ++j)
        a[j] = Op::step(Op::step(Op::step(Op::step(a[j], A(C(p0[j]))), A(C(p1[j]))), A(C(p2[j]))),
                        A(C(p3[j])));
    }
    return r - r0;
  }
  static void fold(const void* x, int64_t xo, const RDims& red, int64_t r0, int64_t r1, int64_t xs,
                   int64_t len, void* acc) {
    A* a = static_cast<A*>(acc);
    int64_t done = 0;  // rows folded four at a time
    if (xs == 1 && r1 - r0 >= 4)
      done = fold_rows4(static_cast<const T*>(x) + xo, red, r0, r1, len, a);
    else
      for (int64_t j = 0; j < len; ++j) a[j] = Op::init();
    for (int64_t r = r0 + done; r < r1; ++r) {
      int64_t rx, ry;
      unravel(red, r, rx, ry);
      const T* p = static_cast<const T*>(x) + xo + rx;
      if (xs == 1) {
        for (int64_t j = 0; j < len; ++j) a[j] = Op::step(a[j], A(C(p[j])));
      } else {
        for (int64_t j = 0; j < len; ++j) a[j] = Op::step(a[j], A(C(p[j * xs])));
      }
    }
  }
  static void combine(void* acc, const void* other, int64_t n) {
    A* a = static_cast<A*>(acc);
    const A* b = static_cast<const A*>(other);
    for (int64_t j = 0; j < n; ++j) a[j] = Op::step(a[j], b[j]);
  }
  static void store(void* y, int64_t yo, int64_t ys, const void* acc, int64_t n) {
    O* q = static_cast<O*>(y) + yo;
    const A* a = static_cast<const A*>(acc);
    for (int64_t j = 0; j < n; ++j) q[j * ys] = finish<O, A>(a[j]);
  }
  static constexpr Leaves kLeaves{sizeof(A), identity, rows, range, fold, combine, store};
};

// A buffer of n accumulators of `bytes` each (new[] of bytes is aligned for any A).
std::unique_ptr<std::byte[]> acc_buffer(int64_t n, size_t bytes) {
  return std::unique_ptr<std::byte[]>(new std::byte[static_cast<size_t>(n) * bytes]());
}

// The column path for tall inputs at most a few thousand wide (a bias
// gradient: [tokens, features] summed over tokens): fixed blocks of whole input
// rows, each folding every column into its own partial row (contiguous reads;
// the partial stays in cache), then the partials combined in block order.
// Striding down columns chunk by chunk instead walks every page of the input
// once per chunk. The blocks depend on the sizes only, so results do not
// depend on the threads.
void reduce_whole_rows(const Leaves& L, const void* xp, void* yp, const RDims& outer_kept,
                       const RDims& red, const RDim& col, int64_t Rn, int64_t outer_n) {
  const int64_t nb = std::clamp<int64_t>(
      std::min(Rn * col.size / kSplitBlock, kWholeRowPartials / (outer_n * col.size)), 1,
      std::min<int64_t>(Rn, 64));
  const size_t row_bytes = static_cast<size_t>(col.size) * L.acc_bytes;
  auto part = acc_buffer(outer_n * nb * col.size, L.acc_bytes);
  parallel_for(0, outer_n * nb, 1, [&](int64_t b, int64_t e) {
    for (int64_t it = b; it < e; ++it) {
      const int64_t o = it / nb, k = it % nb;
      int64_t xo, yo;
      unravel(outer_kept, o, xo, yo);
      L.fold(xp, xo, red, Rn * k / nb, Rn * (k + 1) / nb, 1, col.size,
             part.get() + static_cast<size_t>(it) * row_bytes);
    }
  });
  for (int64_t o = 0; o < outer_n; ++o) {
    std::byte* acc = part.get() + static_cast<size_t>(o * nb) * row_bytes;
    for (int64_t k = 1; k < nb; ++k)
      L.combine(acc, acc + static_cast<size_t>(k) * row_bytes, col.size);
    int64_t xo, yo;
    unravel(outer_kept, o, xo, yo);
    L.store(yp, yo, col.ys, acc, col.size);
  }
}

// The column path (the innermost dim is kept): chunks of kColumnChunk adjacent
// outputs, each accumulating whole input rows.
void reduce_columns(const Leaves& L, const void* xp, void* yp, const RDims& kept, const RDims& red,
                    int64_t Rn, int64_t M) {
  const RDim col = kept.back();
  RDims outer_kept(kept.begin(), kept.end() - 1);
  const int64_t nchunks = (col.size + kColumnChunk - 1) / kColumnChunk;
  const int64_t items = (M / col.size) * nchunks;
  // Folds reduced rows [r0, r1) of output chunk `it` into acc.
  auto accumulate = [&](int64_t it, int64_t r0, int64_t r1, std::byte* acc) {
    const int64_t o = it / nchunks, j0 = (it % nchunks) * kColumnChunk;
    int64_t xo, yo;
    unravel(outer_kept, o, xo, yo);
    L.fold(xp, xo + j0 * col.xs, red, r0, r1, col.xs, std::min(kColumnChunk, col.size - j0), acc);
  };
  auto store = [&](int64_t it, const std::byte* acc) {
    const int64_t o = it / nchunks, j0 = (it % nchunks) * kColumnChunk;
    int64_t xo, yo;
    unravel(outer_kept, o, xo, yo);
    L.store(yp, yo + j0 * col.ys, col.ys, acc, std::min(kColumnChunk, col.size - j0));
  };
  const int64_t outer_n = M / col.size;
  if (col.xs == 1 && col.size <= kWholeRowColumns && Rn >= 2 && Rn * col.size >= 2 * kSplitBlock &&
      outer_n * col.size <= kWholeRowPartials / 2) {
    reduce_whole_rows(L, xp, yp, outer_kept, red, col, Rn, outer_n);
    return;
  }
  const int64_t work = Rn * std::min(col.size, kColumnChunk);  // per item
  const size_t chunk_bytes = kColumnChunk * L.acc_bytes;
  if (items < 16 && work >= 2 * kSplitBlock) {
    // Few tall chunks (e.g. [1e6, 20] over dim 0): split the rows into fixed
    // blocks of partial columns, combined in order.
    const int64_t nb = std::min<int64_t>(64, work / kSplitBlock);
    auto part = acc_buffer(nb * kColumnChunk, L.acc_bytes);
    for (int64_t it = 0; it < items; ++it) {
      parallel_for(0, nb, 1, [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k)
          accumulate(it, Rn * k / nb, Rn * (k + 1) / nb,
                     part.get() + static_cast<size_t>(k) * chunk_bytes);
      });
      for (int64_t k = 1; k < nb; ++k)
        L.combine(part.get(), part.get() + static_cast<size_t>(k) * chunk_bytes, kColumnChunk);
      store(it, part.get());
    }
    return;
  }
  parallel_for(0, items, std::max<int64_t>(1, kDefaultGrain / work), [&](int64_t b, int64_t e) {
    alignas(8) std::byte acc[kColumnChunk * 8];
    for (int64_t it = b; it < e; ++it) {
      accumulate(it, 0, Rn, acc);
      store(it, acc);
    }
  });
}

// Reduces x over the normalized `dims` into the contiguous y.
void reduce_kernel(const Leaves& L, const Tensor& x, const Dims& dims, const Tensor& y) {
  const void* xp = x.data_ptr();
  void* yp = y.data_ptr();
  const int64_t M = y.numel();
  if (M == 0) return;
  if (x.numel() == 0) {  // sum over an empty dim: the identity
    L.identity(yp, M);
    return;
  }
  const RDims co = reduction_dims(x, dims);
  RDims kept, red;
  for (const RDim& d : co) (d.red ? red : kept).push_back(d);
  const int64_t Rn = x.numel() / M;
  // The reduced space as outer dims x an innermost run (n, s).
  RDim inner = red.empty() ? RDim{1, 0, 0, true} : red.back();
  RDims outer_red(red.begin(), red.end() - (red.empty() ? 0 : 1));

  if (M < 16 && Rn >= 2 * kSplitBlock) {
    // Split path: fixed blocks (independent of the thread count), combined in order.
    const int64_t nb = std::min<int64_t>(256, (Rn + kSplitBlock - 1) / kSplitBlock);
    auto part = acc_buffer(nb, L.acc_bytes);
    for (int64_t o = 0; o < M; ++o) {
      int64_t xo, yo;
      unravel(kept, o, xo, yo);
      parallel_for(0, nb, 1, [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k)
          L.range(xp, xo, outer_red, inner.size, inner.xs, Rn * k / nb, Rn * (k + 1) / nb,
                  part.get() + static_cast<size_t>(k) * L.acc_bytes);
      });
      for (int64_t k = 1; k < nb; ++k)
        L.combine(part.get(), part.get() + static_cast<size_t>(k) * L.acc_bytes, 1);
      L.store(yp, yo, 1, part.get(), 1);
    }
    return;
  }
  if (kept.empty() || co.back().red) {
    // Row path: one output per task step, reducing its runs.
    parallel_for(0, M, std::max<int64_t>(1, kDefaultGrain / Rn), [&](int64_t b, int64_t e) {
      L.rows(xp, yp, kept, outer_red, inner.size, inner.xs, Rn, b, e);
    });
    return;
  }
  reduce_columns(L, xp, yp, kept, red, Rn, M);
}
// ---- sum / max / min ----
template <OpId Op>
void infer_reduce(std::span<const Tensor> in, const Attrs& at, std::vector<TensorMeta>& out) {
  const char* name = api_name(Op);
  const Tensor& x = in[0];
  Dims dims = normalize_dims(attr_dims(at, "dims"), x.dim(), name);
  DType dt = x.dtype();
  if constexpr (Op == OpId::sum) {
    if (!is_floating(dt)) dt = DType::i64;
  } else {
    for (int64_t d : dims)
      KILN_CHECK(x.shape()[d] != 0, "[", name, "] cannot reduce over a zero-size dimension (dim ",
                 d, " of shape ", x.shape(), "): the result would have no identity");
  }
  out.push_back({dt, reduced_shape(x.shape(), dims, attr_bool(at, "keepdim", false))});
}

template <OpId Op>
void kernel_reduce(std::span<const Tensor> in, const Attrs& at, std::span<Tensor> out) {
  const Tensor& x = in[0];
  Dims dims = normalize_dims(attr_dims(at, "dims"), x.dim(), api_name(Op));
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    if constexpr (Op == OpId::sum) {
      // Floats accumulate in double (f32/f64) or float (f16/bf16); the rest in i64.
      constexpr bool kFloat = std::is_floating_point_v<C>;
      using O = std::conditional_t<kFloat, T, int64_t>;
      using A = std::conditional_t<kFloat, std::conditional_t<std::is_same_v<T, C>, double, float>,
                                   int64_t>;
      reduce_kernel(TypedLeaves<T, O, A, SumOp<A>>::kLeaves, x, dims, out[0]);
    } else if constexpr (Op == OpId::max) {
      reduce_kernel(TypedLeaves<T, T, C, MaxOp<C>>::kLeaves, x, dims, out[0]);
    } else {
      reduce_kernel(TypedLeaves<T, T, C, MinOp<C>>::kLeaves, x, dims, out[0]);
    }
  });
}

// ---- argmax / argmin ----
// Best (value, index) of x[k0*s .. k1*s); NaN counts as the extreme, the first
// occurrence wins. Two passes: the (vectorized) extreme, then its first position.
template <typename T, typename C, bool IsMax>
std::pair<C, int64_t> arg_scan(const T* p, int64_t s, int64_t k0, int64_t k1) {
  using R = std::conditional_t<IsMax, MaxOp<C>, MinOp<C>>;
  const C m = reduce_run<T, C, R>(p + k0 * s, k1 - k0, s);
  int64_t k = k0;
  if (is_nan(m)) {
    while (k + 1 < k1 && !is_nan(C(p[k * s]))) ++k;
  } else {
    while (k + 1 < k1 && !(C(p[k * s]) == m)) ++k;
  }
  return {m, k};
}

// Column form for a reduced dim that is not innermost in memory: per input
// row, update the running best of a chunk of adjacent outputs.
template <typename T, typename C, bool IsMax>
void arg_columns(const T* xp, const RDims& outer, int64_t cols, int64_t K, int64_t s, int64_t* yp) {
  const int64_t nchunks = (cols + kColumnChunk - 1) / kColumnChunk;
  const int64_t items = numel_of_rdims(outer) * nchunks;
  const int64_t grain = std::max<int64_t>(1, kDefaultGrain / (K * std::min(cols, kColumnChunk)));
  parallel_for(0, items, grain, [&](int64_t b, int64_t e) {
    C best[kColumnChunk];
    int64_t bi[kColumnChunk];
    for (int64_t it = b; it < e; ++it) {
      const int64_t o = it / nchunks, j0 = (it % nchunks) * kColumnChunk;
      const int64_t len = std::min(kColumnChunk, cols - j0);
      int64_t xo, yo;
      unravel(outer, o, xo, yo);
      const T* base = xp + xo + j0;
      for (int64_t j = 0; j < len; ++j) {
        best[j] = C(base[j]);
        bi[j] = 0;
      }
      for (int64_t k = 1; k < K; ++k) {
        const T* row = base + k * s;
        for (int64_t j = 0; j < len; ++j) {
          const C v = C(row[j]);
          const bool better = IsMax ? v > best[j] : v < best[j];
          if ((better | is_nan(v)) & !is_nan(best[j])) {
            best[j] = v;
            bi[j] = k;
          }
        }
      }
      std::memcpy(yp + o * cols + j0, bi, static_cast<size_t>(len) * sizeof(int64_t));
    }
  });
}

template <OpId Op>
void infer_arg(std::span<const Tensor> in, const Attrs& at, std::vector<TensorMeta>& out) {
  const char* name = op_name(Op);
  const Tensor& x = in[0];
  bool keepdim = attr_bool(at, "keepdim", false);
  if (attr_bool(at, "flat", false)) {
    KILN_CHECK(x.numel() > 0, "[", name, "] cannot take the ", name, " of an empty tensor (shape ",
               x.shape(), ")");
    out.push_back({DType::i64, keepdim ? Dims(x.shape().size(), 1) : Dims{}});
    return;
  }
  const int64_t d = wrap_dim(at.has("dim") ? at.i("dim") : 0, x.dim(), name);
  if (x.dim() == 0) {
    out.push_back({DType::i64, {}});
    return;
  }
  KILN_CHECK(x.shape()[d] != 0, "[", name, "] cannot reduce over a zero-size dimension (dim ", d,
             " of shape ", x.shape(), ")");
  out.push_back({DType::i64, reduced_shape(x.shape(), {d}, keepdim)});
}

template <OpId Op>
void kernel_arg(std::span<const Tensor> in, const Attrs& at, std::span<Tensor> out) {
  constexpr bool kMax = Op == OpId::argmax;
  Tensor x = in[0];
  int64_t* yp = out[0].data<int64_t>();
  const int64_t M = out[0].numel();
  if (M == 0) return;
  int64_t K = 1, s = 0;
  RDims others;  // the kept dims, for the per-output offset
  if (attr_bool(at, "flat", false)) {
    if (!x.is_contiguous()) {
      Tensor c = make_tensor(x.shape(), x.dtype());
      copy_into(c, x);
      x = c;
    }
    K = x.numel();
    s = 1;
  } else if (x.dim() > 0) {
    int64_t d = wrap_dim(at.has("dim") ? at.i("dim") : 0, x.dim(), op_name(Op));
    K = x.shape()[d];
    s = x.strides()[d];
    for (int64_t i = 0; i < x.dim(); ++i)
      if (i != d) others.push_back({x.shape()[i], x.strides()[i], 0, false});
  }
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    if (M < 16 && K >= 2 * kSplitBlock) {
      // Few long scans: split each into blocks, then pick the first best block.
      const int64_t nb = std::min<int64_t>(256, (K + kSplitBlock - 1) / kSplitBlock);
      std::vector<std::pair<C, int64_t>> part(static_cast<size_t>(nb));
      for (int64_t o = 0; o < M; ++o) {
        int64_t xo, yo;
        unravel(others, o, xo, yo);
        parallel_for(0, nb, 1, [&](int64_t b, int64_t e) {
          for (int64_t k = b; k < e; ++k)
            part[static_cast<size_t>(k)] =
                arg_scan<T, C, kMax>(xp + xo, s, K * k / nb, K * (k + 1) / nb);
        });
        auto best = part[0];
        for (size_t k = 1; k < part.size() && !is_nan(best.first); ++k) {
          const auto& p = part[k];
          if (is_nan(p.first) || (kMax ? p.first > best.first : p.first < best.first)) best = p;
        }
        yp[o] = best.second;
      }
      return;
    }
    if (s != 1 && !others.empty() && others.back().xs == 1 && others.back().size >= 16) {
      const RDims outer(others.begin(), others.end() - 1);
      arg_columns<T, C, kMax>(xp, outer, others.back().size, K, s, yp);
      return;
    }
    parallel_for(0, M, std::max<int64_t>(1, kDefaultGrain / K), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        int64_t xo, yo;
        unravel(others, o, xo, yo);
        yp[o] = arg_scan<T, C, kMax>(xp + xo, s, 0, K).second;
      }
    });
  });
}

// ---- derivative rules (Tensor ops, so they differentiate again) ----
// The keepdim shape of a reduction and its normalized dims.
Dims keep_shape(const VjpArgs& a, const char* name, Dims& dims) {
  const Dims& xs = a.in_meta[0].shape;
  dims = normalize_dims(attr_dims(a.attrs, "dims"), static_cast<int64_t>(xs.size()), name);
  return reduced_shape(xs, dims, true);
}

void vjp_sum(const VjpArgs& a, std::vector<Tensor>& gi) {
  Dims dims;
  Dims keep = keep_shape(a, "sum", dims);
  Tensor g = a.grads[0];
  if (!(g.shape() == keep)) g = reshape(g, keep);
  const Dims& xs = a.in_meta[0].shape;
  gi[0] = keep == xs ? g : expand(g, xs);
}

// Ties share the gradient evenly (like PyTorch's amax/amin).
void vjp_extreme(const VjpArgs& a, std::vector<Tensor>& gi) {
  Dims dims;
  Dims keep = keep_shape(a, "amax", dims);
  Tensor g = a.grads[0], y = a.outputs[0];
  if (!(g.shape() == keep)) {
    g = reshape(g, keep);
    y = reshape(y, keep);
  }
  Tensor mask = cast(eq(a.inputs[0], y), g.dtype());
  gi[0] = g * mask / sum(mask, dims, true);
}

}  // namespace

void register_reduce(OpTable& t) {
  OpInfo& s = t[OpId::sum];
  s.infer = infer_reduce<OpId::sum>;
  s.kernel = kernel_reduce<OpId::sum>;
  s.vjp = vjp_sum;
  s.saves = kSaveNone;
  for (OpId op : {OpId::max, OpId::min}) {
    OpInfo& e = t[op];
    e.vjp = vjp_extreme;
    e.saves = kSaveInputs | kSaveOutputs;
  }
  t[OpId::max].infer = infer_reduce<OpId::max>;
  t[OpId::max].kernel = kernel_reduce<OpId::max>;
  t[OpId::min].infer = infer_reduce<OpId::min>;
  t[OpId::min].kernel = kernel_reduce<OpId::min>;
  OpInfo& am = t[OpId::argmax];
  am.infer = infer_arg<OpId::argmax>;
  am.kernel = kernel_arg<OpId::argmax>;
  am.saves = kSaveNone;
  OpInfo& an = t[OpId::argmin];
  an.infer = infer_arg<OpId::argmin>;
  an.kernel = kernel_arg<OpId::argmin>;
  an.saves = kSaveNone;
}

}  // namespace ops

namespace {
Attrs reduce_attrs(const Dims& dims, bool keepdim) {
  return Attrs().set("dims", dims).set("keepdim", AttrValue(keepdim));
}
Attrs arg_attrs(std::optional<int64_t> dim, bool keepdim) {
  return Attrs()
      .set("dim", AttrValue(dim.value_or(0)))
      .set("keepdim", AttrValue(keepdim))
      .set("flat", AttrValue(!dim.has_value()));
}
}  // namespace

Tensor sum(const Tensor& x, const Dims& dims, bool keepdim) {
  return dispatch1(OpId::sum, {x}, reduce_attrs(dims, keepdim));
}
Tensor amax(const Tensor& x, const Dims& dims, bool keepdim) {
  return dispatch1(OpId::max, {x}, reduce_attrs(dims, keepdim));
}
Tensor amin(const Tensor& x, const Dims& dims, bool keepdim) {
  return dispatch1(OpId::min, {x}, reduce_attrs(dims, keepdim));
}
Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return dispatch1(OpId::argmax, {x}, arg_attrs(dim, keepdim));
}
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return dispatch1(OpId::argmin, {x}, arg_attrs(dim, keepdim));
}

Tensor sum_to(const Tensor& g, const Dims& shape) {
  const Dims& gs = g.shape();
  if (gs == shape) return g;
  KILN_CHECK(shape.size() <= gs.size(), "[sum_to] a tensor of shape ", gs,
             " cannot be summed to shape ", shape);
  const size_t lead = gs.size() - shape.size();
  Dims dims;
  for (size_t i = 0; i < gs.size(); ++i) {
    if (i < lead) {
      dims.push_back(static_cast<int64_t>(i));
      continue;
    }
    int64_t want = shape[i - lead];
    KILN_CHECK(want == gs[i] || want == 1, "[sum_to] a tensor of shape ", gs,
               " cannot be summed to shape ", shape);
    if (want == 1 && gs[i] != 1) dims.push_back(static_cast<int64_t>(i));
  }
  // Empty dims would mean "all dims" to sum(): only sum when something is reduced.
  Tensor r = dims.empty() ? g : sum(g, dims, true);
  return r.shape() == shape ? r : reshape(r, shape);
}

}  // namespace kiln
