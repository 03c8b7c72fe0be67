// matmul with NumPy / torch.matmul semantics: 1-D x 1-D is a dot product,
// a 1-D operand is promoted to a matrix (the added dim is removed after), and
// batch dims broadcast. f32/f64 run on CBLAS, reading transposed views
// through BLAS's transpose flags instead of copying; f16/bf16 compute in f32;
// integers use a plain loop.
#include "autograd_internal.h"
#include "ops/blas_layout.h"
#include "ops/gemm.h"
#include "ops/helpers.h"
#include "ops/registry.h"

namespace kiln {
namespace ops {
namespace {

// Sizes of one call: the broadcast batch shape and the matrix sizes (a 1-D
// `a` is [1, K], a 1-D `b` is [K, 1]).
struct MatmulGeom {
  Dims batch;
  int64_t M = 1, K = 1, N = 1;
};

MatmulGeom geometry(const Tensor& a, const Tensor& b) {
  const Dims& as = a.shape();
  const Dims& bs = b.shape();
  KILN_CHECK(a.dim() >= 1 && b.dim() >= 1,
             "[matmul] both operands need at least one dimension, got shapes ", as, " and ", bs);
  MatmulGeom g;
  g.K = as.back();
  int64_t kb = b.dim() == 1 ? bs[0] : bs[bs.size() - 2];
  KILN_CHECK(g.K == kb, "[matmul] shapes ", as, " and ", bs, " cannot be multiplied (", g.K,
             " != ", kb, ")");
  g.M = a.dim() >= 2 ? as[as.size() - 2] : 1;
  g.N = b.dim() >= 2 ? bs.back() : 1;
  const size_t ab = as.size() >= 2 ? as.size() - 2 : 0;
  const size_t bb = bs.size() >= 2 ? bs.size() - 2 : 0;
  const size_t nb = std::max(ab, bb);
  g.batch = Dims(nb, 1);
  for (size_t i = 0; i < nb; ++i) {
    int64_t da = i + ab >= nb ? as[i + ab - nb] : 1;
    int64_t db = i + bb >= nb ? bs[i + bb - nb] : 1;
    KILN_CHECK(da == db || da == 1 || db == 1, "[matmul] the batch dimensions of shapes ", as,
               " and ", bs, " cannot be broadcast together (", da, " vs ", db, ")");
    g.batch[i] = da == 1 ? db : da;
  }
  return g;
}

void infer_matmul(std::span<const Tensor> in, const Attrs&, std::vector<TensorMeta>& out) {
  const Tensor& a = in[0];
  const Tensor& b = in[1];
  KILN_CHECK(a.dtype() == b.dtype(), "[matmul] expected both operands to have the same dtype, got ",
             a.dtype(), " and ", b.dtype(), " (shapes ", a.shape(), " and ", b.shape(), ")");
  KILN_CHECK(a.dtype() != DType::b8, "[matmul] is not supported on bool tensors (shapes ",
             a.shape(), " and ", b.shape(), ")");
  MatmulGeom g = geometry(a, b);
  Dims shape = g.batch;
  if (a.dim() >= 2) shape.push_back(g.M);
  if (b.dim() >= 2) shape.push_back(g.N);
  out.push_back({a.dtype(), std::move(shape)});
}

// Matrix strides of an operand and the element offset of its matrix for
// every output batch index (broadcast batch dims repeat offsets).
struct Operand {
  int64_t rs = 0, cs = 0;
  std::vector<int64_t> boff;
};

Operand operand(const Tensor& t, bool is_a, const Dims& batch) {
  Operand o;
  const Dims& st = t.strides();
  const size_t r = st.size();
  if (r == 1) {
    o.rs = is_a ? 0 : st[0];
    o.cs = is_a ? st[0] : 0;
  } else {
    o.rs = st[r - 2];
    o.cs = st[r - 1];
  }
  const size_t tb = r >= 2 ? r - 2 : 0, nb = batch.size();
  Dims bst(nb, 0);
  for (size_t i = 0; i < tb; ++i)
    if (t.shape()[i] != 1) bst[nb - tb + i] = st[i];
  const int64_t B = numel_of(batch);
  o.boff.resize(static_cast<size_t>(B));
  for (int64_t i = 0; i < B; ++i) {
    int64_t rem = i, off = 0;
    for (size_t d = nb; d-- > 0;) {
      off += (rem % batch[d]) * bst[d];
      rem /= batch[d];
    }
    o.boff[static_cast<size_t>(i)] = off;
  }
  return o;
}

// Whether BLAS can write y's [M, N] matrices in place: unit column stride
// (row-major, ldc = row stride), or unit row stride (written as the transpose,
// C^T = B^T A^T). Contiguous outputs are the first kind.
// An output without a matrix dim (a 1-D operand) must be contiguous.
bool blas_output(const Tensor& y, const MatmulGeom& g, bool& trans, int64_t& ldc) {
  if (y.dim() != static_cast<int64_t>(g.batch.size()) + 2) {
    trans = false;
    ldc = g.N;
    return y.is_contiguous();
  }
  return blas_layout(g.M, g.N, y.strides()[y.dim() - 2], y.strides()[y.dim() - 1], trans, ldc);
}

// y = a @ b for f32/f64. y may be a strided view that blas_output accepts
// (the executor writes a product straight into a later cat's or reshape's
// buffer); its batch dims are the broadcast batch.
template <typename T>
void matmul_blas(Tensor a, Tensor b, const Tensor& y, const MatmulGeom& g) {
  bool ta = false, tb = false, ty = false;
  int64_t lda = 1, ldb = 1, ldc = 1;
  KILN_ASSERT(blas_output(y, g, ty, ldc), "matmul output not BLAS-writable");
  Operand oa = operand(a, true, g.batch);
  if (!blas_layout(g.M, g.K, oa.rs, oa.cs, ta, lda)) {
    a = contiguous_raw(a, a.dtype());  // e.g. expanded or sliced with a step
    oa = operand(a, true, g.batch);
    KILN_ASSERT(blas_layout(g.M, g.K, oa.rs, oa.cs, ta, lda), "contiguous a not BLAS-compatible");
  }
  Operand ob = operand(b, false, g.batch);
  if (!blas_layout(g.K, g.N, ob.rs, ob.cs, tb, ldb)) {
    b = contiguous_raw(b, b.dtype());
    ob = operand(b, false, g.batch);
    KILN_ASSERT(blas_layout(g.K, g.N, ob.rs, ob.cs, tb, ldb), "contiguous b not BLAS-compatible");
  }
  Operand oy;
  if (y.dim() == static_cast<int64_t>(g.batch.size()) + 2) {
    oy = operand(y, true, g.batch);
  } else {
    for (size_t i = 0; i < oa.boff.size(); ++i)
      oy.boff.push_back(static_cast<int64_t>(i) * g.M * g.N);
  }
  const T* ap = static_cast<const T*>(a.data_ptr());
  const T* bp = static_cast<const T*>(b.data_ptr());
  T* yp = static_cast<T*>(y.data_ptr());
  // C^T = op(B)^T op(A)^T: the operands swap and each transpose flag flips.
  auto product = [&](int64_t M, const T* ai, const T* bi, T* yi) {
    if (ty)
      gemm<T>(!tb, !ta, g.N, M, g.K, bi, ldb, ai, lda, yi, ldc, false, "matmul");
    else
      gemm<T>(ta, tb, M, g.N, g.K, ai, lda, bi, ldb, yi, ldc, false, "matmul");
  };
  const size_t B = oa.boff.size();
  // [batch.., M, K] @ [K, N] with a's and y's rows evenly spaced: one GEMM with M' = batch * M.
  bool fold = B > 1 && !ta && !ty;
  for (size_t i = 0; fold && i < B; ++i) {
    const int64_t r = static_cast<int64_t>(i) * g.M;
    fold = ob.boff[i] == 0 && oa.boff[i] == r * lda && oy.boff[i] == r * ldc;
  }
  if (fold || B == 1) {
    // One GEMM (batch rows folded into M), split over the pool when large.
    const int64_t M = fold ? static_cast<int64_t>(B) * g.M : g.M;
    product(M, ap + oa.boff[0], bp + ob.boff[0], yp + oy.boff[0]);
    return;
  }
  auto items = [&](int64_t i0, int64_t i1) {
    for (auto i = static_cast<size_t>(i0); i < static_cast<size_t>(i1); ++i)
      product(g.M, ap + oa.boff[i], bp + ob.boff[i], yp + oy.boff[i]);
  };
  // Many items (attention's heads): whole GEMMs per core, about a million
  // multiply-adds per task. A few large ones: one after another, each split.
  const int64_t macs = std::max<int64_t>(1, g.M * g.N * g.K), n = static_cast<int64_t>(B);
  if (macs <= kSplitMacs || n >= 2 * num_threads())
    parallel_for(0, n, std::max<int64_t>(1, (int64_t{1} << 20) / macs), items);
  else
    items(0, n);
}

template <typename T>
void matmul_int(const Tensor& a0, const Tensor& b0, T* y, const MatmulGeom& g) {
  Tensor a = contiguous_raw(a0, a0.dtype()), b = contiguous_raw(b0, b0.dtype());
  Operand oa = operand(a, true, g.batch), ob = operand(b, false, g.batch);
  const T* ap = static_cast<const T*>(a.data_ptr());
  const T* bp = static_cast<const T*>(b.data_ptr());
  using U = std::make_unsigned_t<T>;  // wraps on overflow (like PyTorch) without UB
  const int64_t rows = static_cast<int64_t>(oa.boff.size()) * g.M;
  const int64_t grain = std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(g.K * g.N, 1));
  parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const size_t bi = static_cast<size_t>(r / g.M);
      const T* ar = ap + oa.boff[bi] + (r % g.M) * oa.rs;
      const T* bm = bp + ob.boff[bi];
      T* yr = y + r * g.N;
      for (int64_t j = 0; j < g.N; ++j) yr[j] = 0;
      for (int64_t k = 0; k < g.K; ++k) {
        const U av = static_cast<U>(ar[k * oa.cs]);
        const T* br = bm + k * ob.rs;
        for (int64_t j = 0; j < g.N; ++j)
          yr[j] = static_cast<T>(static_cast<U>(yr[j]) +
                                 static_cast<U>(av * static_cast<U>(br[j * ob.cs])));
      }
    }
  });
}

void kernel_matmul(std::span<const Tensor> in, const Attrs& attrs, std::span<Tensor> out) {
  const Tensor& y = out[0];
  if (y.numel() == 0) return;
  MatmulGeom g = geometry(in[0], in[1]);
  const DType dt = in[0].dtype();
  bool ty = false;
  int64_t ldc = 0;
  if (!y.is_contiguous() &&
      !((dt == DType::f32 || dt == DType::f64) && blas_output(y, g, ty, ldc))) {
    // A strided output no kernel below writes directly: through a temporary.
    Tensor tmp = make_tensor(y.shape(), y.dtype());
    std::array<Tensor, 1> o{tmp};
    kernel_matmul(in, attrs, o);
    copy_into(y, tmp);
    return;
  }
  if (dt == DType::f16 || dt == DType::bf16) {
    Tensor y32 = make_tensor(y.shape(), DType::f32);
    matmul_blas<float>(contiguous_raw(in[0], DType::f32), contiguous_raw(in[1], DType::f32), y32,
                       g);
    copy_into(y, y32);
    return;
  }
  visit_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      matmul_blas<T>(in[0], in[1], y, g);
    } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      matmul_int<T>(in[0], in[1], static_cast<T*>(y.data_ptr()), g);
    } else {
      KILN_ASSERT(false, "matmul kernel reached with dtype ", dt);
    }
  });
}

// True for a 2-D transpose of a contiguous matrix (a Linear weight's w.t()).
bool is_transposed_matrix(const Tensor& t) {
  return t.dim() == 2 && t.size(0) > 1 && t.size(1) > 1 && t.stride(0) == 1 &&
         t.stride(1) == t.size(0);
}

// d/da = g @ b^T, d/db = a^T @ g, with 1-D operands (and g's matching dims)
// restored to matrices first; the engine sums broadcast batch dims. The
// gradient of an operand that is a transposed matrix is computed transposed
// ((a^T g)^T = g^T a) so that, once transpose's backward flips it back, it has
// its parameter's contiguous layout: no strided copy when it is accumulated.
void vjp_matmul(const VjpArgs& a, std::vector<Tensor>& gi) {
  const Tensor& A = a.inputs[0];
  const Tensor& B = a.inputs[1];
  const bool a1 = A.dim() == 1, b1 = B.dim() == 1;
  Tensor A2 = a1 ? unsqueeze(A, 0) : A;
  Tensor B2 = b1 ? unsqueeze(B, 1) : B;
  Tensor g = a.grads[0];
  if (b1) g = unsqueeze(g, -1);
  if (a1) g = unsqueeze(g, -2);
  if (a.needs(0)) {
    autograd::DestinationsFor only_a(0);
    Tensor ga = is_transposed_matrix(A2) && g.dim() == 2
                    ? transpose(matmul(B2, transpose(g, 0, 1)), 0, 1)
                    : matmul(g, transpose(B2, -1, -2));
    gi[0] = a1 ? squeeze(ga, -2) : ga;
  }
  if (a.needs(1)) {
    autograd::DestinationsFor only_b(1);
    Tensor gb;
    if (B2.dim() == 2 && (A2.dim() > 2 || is_transposed_matrix(B2))) {
      // A weight-like b: fold a's batch into rows (one GEMM, no batched temporary to sum).
      const int64_t K = A2.size(-1), N = g.size(-1);
      const int64_t rows = numel_of(Dims(A2.shape().begin(), A2.shape().end() - 1));
      Tensor a_rows = reshape(A2, {rows, K}), g_rows = reshape(g, {rows, N});
      gb = is_transposed_matrix(B2) ? transpose(matmul(transpose(g_rows, 0, 1), a_rows), 0, 1)
                                    : matmul(transpose(a_rows, 0, 1), g_rows);
    } else {
      gb = matmul(transpose(A2, -1, -2), g);
    }
    gi[1] = b1 ? squeeze(gb, -1) : gb;
  }
}

}  // namespace

void register_linalg(OpTable& t) {
  OpInfo& e = t[OpId::matmul];
  e.infer = infer_matmul;
  e.kernel = kernel_matmul;
  e.vjp = vjp_matmul;
  e.saves = kSaveInputs;
}

}  // namespace ops

Tensor matmul(const Tensor& a, const Tensor& b) {
  return dispatch1(OpId::matmul, {a, b});
}

}  // namespace kiln
