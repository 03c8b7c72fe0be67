// cuBLASLt through dlopen (cublaslt.h). Searched as libcublasLt.so.13 on the
// loader's path (pip's nvidia-cublas), then in the CUDA toolkit kiln was
// configured with.
#include "kernels/cuda/cublaslt.h"

#include <cublasLt.h>
#include <dlfcn.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>

#include "kernels/cuda/driver.h"
#include "kernels/cuda/module.h"
#include "kernels/cuda/stream.h"
#include "kiln/cuda.h"
#include "kiln/error.h"
#include "kiln/shared_library.h"
#include "kiln/tensor.h"

namespace kiln::cuda {
namespace {

// clang-format off
#define KILN_CUBLASLT_FUNCS(X) \
  X(cublasLtCreate) \
  X(cublasLtGetVersion) \
  X(cublasLtMatmul) \
  X(cublasLtMatmulDescCreate) \
  X(cublasLtMatmulDescDestroy) \
  X(cublasLtMatmulDescSetAttribute) \
  X(cublasLtMatrixLayoutCreate) \
  X(cublasLtMatrixLayoutDestroy) \
  X(cublasLtMatrixLayoutSetAttribute) \
  X(cublasLtMatmulPreferenceCreate) \
  X(cublasLtMatmulPreferenceDestroy) \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatmulAlgoGetHeuristic) \
  X(cublasLtMatmulAlgoCheck)
// clang-format on

struct Lib {
#define KILN_CUBLASLT_MEMBER(name) decltype(&::name) name = nullptr;
  KILN_CUBLASLT_FUNCS(KILN_CUBLASLT_MEMBER)
#undef KILN_CUBLASLT_MEMBER
  std::string error;
};

const Lib& lib() {
  static const Lib l = [] {
    Lib r;
    void* h =
        open_shared_library({"libcublasLt.so.13", str(KILN_CUDA_LIBDIR, "/libcublasLt.so.13")},
                            "cuBLASLt (libcublasLt.so.13, CUDA 13)", r.error);
    if (!h) return r;
#define KILN_CUBLASLT_RESOLVE(name)                             \
  r.name = reinterpret_cast<decltype(r.name)>(dlsym(h, #name)); \
  if (!r.name && r.error.empty()) r.error = "libcublasLt.so.13 lacks " #name;
    KILN_CUBLASLT_FUNCS(KILN_CUBLASLT_RESOLVE)
#undef KILN_CUBLASLT_RESOLVE
    return r;
  }();
  return l;
}

void ok(cublasStatus_t s, const char* what) {
  KILN_CHECK(s == CUBLAS_STATUS_SUCCESS, "[matmul] cuBLASLt ", what, " failed (cublasStatus ",
             static_cast<int>(s), ")");
}

std::atomic<bool> g_tf32{false};

// cuBLASLt's handle, and the workspace of calls on the default stream.
constexpr size_t kWorkspace = size_t{32} << 20;

struct State {
  cublasLtHandle_t handle = nullptr;
  DeviceBuffer workspace;
  // (dtype, tf32, m, n, k, batch, lda, ldb, ldd, strides, ops, alignments, epilogue and
  // the bias's alignment) -> algorithm
  using Key = std::tuple<int, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                         int64_t, int64_t, int64_t, int, int, int, int>;
  std::map<Key, std::optional<cublasLtMatmulAlgo_t>> algos;  // nullopt: none for that epilogue
  std::mutex mu;
};

// One State per device (its workspace lives there); the device's context is
// current when this is called.
State& state(int device) {
  static std::mutex mu;
  static std::map<int, State*> states;
  std::lock_guard<std::mutex> lock(mu);
  State*& s = states[device];
  if (!s) {
    const Lib& l = lib();
    KILN_CHECK(l.error.empty(), "[matmul] ", l.error);
    auto st = std::make_unique<State>();
    ok(l.cublasLtCreate(&st->handle), "cublasLtCreate");
    st->workspace = DeviceBuffer(kWorkspace);
    s = st.release();  // never destroyed: the driver may be gone at exit
  }
  return *s;
}

// The largest power of two (up to 256) that divides a device address: what
// cuBLASLt's heuristic must assume about the operand's alignment.
int alignment(CUdeviceptr p) {
  int a = 256;
  while (a > 1 && p % static_cast<CUdeviceptr>(a) != 0) a /= 2;
  return a;
}

// An operand as cuBLASLt sees it: a column-major [rows, cols] matrix with
// leading dimension ld, used as op(M) = M or M^T.
struct Layout {
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  cublasOperation_t op = CUBLAS_OP_N;
};

// The row-major [R, C] operand x read as the column-major x^T ([C, R]): a
// row-major matrix is that directly (op N); a column-major one (unit row
// stride) is x itself, transposed by the op.
Layout as_transposed(const GemmOperand& x, int64_t R, int64_t C) {
  Layout l;
  if (x.cs == 1) {
    l.rows = static_cast<uint64_t>(C);
    l.cols = static_cast<uint64_t>(R);
    l.ld = std::max<int64_t>(x.rs, std::max<int64_t>(C, 1));
    l.op = CUBLAS_OP_N;
  } else {
    KILN_ASSERT(x.rs == 1, "[matmul] cuBLASLt operand needs a unit stride, got (", x.rs, ", ", x.cs,
                ")");
    l.rows = static_cast<uint64_t>(R);
    l.cols = static_cast<uint64_t>(C);
    l.ld = std::max<int64_t>(x.cs, std::max<int64_t>(R, 1));
    l.op = CUBLAS_OP_T;
  }
  return l;
}

cudaDataType_t data_type(DType dt) {
  switch (dt) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::f64:
      return CUDA_R_64F;
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    default:
      KILN_CHECK(false, "[matmul] CUDA tensors of dtype ", dt,
                 " are not supported (cuBLASLt: f32, f64, f16, bf16)");
  }
  return CUDA_R_32F;
}

// RAII for the per-call descriptors.
struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descs() {
    const Lib& l = lib();
    if (pref) l.cublasLtMatmulPreferenceDestroy(pref);
    if (d) l.cublasLtMatrixLayoutDestroy(d);
    if (b) l.cublasLtMatrixLayoutDestroy(b);
    if (a) l.cublasLtMatrixLayoutDestroy(a);
    if (op) l.cublasLtMatmulDescDestroy(op);
  }
};

// A matrix layout; its batches `stride` apart, or (`pointers`) at the
// addresses of an array of `batch` pointers passed in its place.
cublasLtMatrixLayout_t layout(cudaDataType_t t, uint64_t rows, uint64_t cols, int64_t ld,
                              int64_t batch, int64_t stride, bool pointers = false) {
  const Lib& l = lib();
  cublasLtMatrixLayout_t m = nullptr;
  ok(l.cublasLtMatrixLayoutCreate(&m, t, rows, cols, ld), "cublasLtMatrixLayoutCreate");
  if (pointers) {  // refused (a cuBLASLt without the mode): nullptr, the caller copies
    const uint32_t mode = CUBLASLT_BATCH_MODE_POINTER_ARRAY;
    if (l.cublasLtMatrixLayoutSetAttribute(m, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, &mode,
                                           sizeof(mode)) != CUBLAS_STATUS_SUCCESS) {
      l.cublasLtMatrixLayoutDestroy(m);
      return nullptr;
    }
  }
  if (batch > 1 || pointers) {
    const int32_t count = static_cast<int32_t>(batch);
    ok(l.cublasLtMatrixLayoutSetAttribute(m, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                          sizeof(count)),
       "batch count");
  }
  if (batch > 1 && !pointers)
    ok(l.cublasLtMatrixLayoutSetAttribute(m, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                          sizeof(stride)),
       "batch stride");
  return m;
}

cublasLtEpilogue_t lt_epilogue(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::kNone:
      return CUBLASLT_EPILOGUE_DEFAULT;
    case GemmEpilogue::kBias:
      return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::kRelu:
      return CUBLASLT_EPILOGUE_RELU;
    case GemmEpilogue::kBiasRelu:
      return CUBLASLT_EPILOGUE_RELU_BIAS;
    case GemmEpilogue::kGelu:
      return CUBLASLT_EPILOGUE_GELU;
    case GemmEpilogue::kBiasGelu:
      return CUBLASLT_EPILOGUE_GELU_BIAS;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// The epilogue and its bias on the descriptor. The bias has D's type (the
// default for every type kiln multiplies) and one value per row of cuBLASLt's
// column-major D, a row-major output's column; its batch stride stays 0, so
// every batch adds the same vector.
void set_epilogue(cublasLtMatmulDesc_t op, GemmEpilogue e, CUdeviceptr bias) {
  if (e == GemmEpilogue::kNone) return;
  const Lib& l = lib();
  const uint32_t epi = lt_epilogue(e);
  ok(l.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)),
     "epilogue");
  if (!epilogue_has_bias(e)) return;
  KILN_ASSERT(bias != 0, "[matmul] a bias epilogue without a bias");
  const void* p = reinterpret_cast<const void*>(bias);
  ok(l.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p, sizeof(p)),
     "bias pointer");
}

// A matmul descriptor for dtype (f32 in exact f32 math unless tf32) with the
// operands' transpose flags.
cublasLtMatmulDesc_t matmul_desc(DType dtype, bool tf32, const Layout& lb, const Layout& la) {
  const Lib& l = lib();
  const cublasComputeType_t compute = dtype == DType::f64 ? CUBLAS_COMPUTE_64F
                                      : tf32              ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                          : CUBLAS_COMPUTE_32F;
  const cudaDataType_t scale = dtype == DType::f64 ? CUDA_R_64F : CUDA_R_32F;
  cublasLtMatmulDesc_t op = nullptr;
  ok(l.cublasLtMatmulDescCreate(&op, compute, scale), "cublasLtMatmulDescCreate");
  ok(l.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &lb.op, sizeof(lb.op)),
     "transa");
  ok(l.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &la.op, sizeof(la.op)),
     "transb");
  return op;
}

// The heuristic's first algorithm for `op` over ds's layouts, for operands
// aligned to `align` bytes (b^T, a^T, d), within the workspace; nullopt if none.
std::optional<cublasLtMatmulAlgo_t> heuristic(State& st, cublasLtMatmulDesc_t op, Descs& ds,
                                              const int align[3]) {
  const Lib& l = lib();
  if (!ds.pref) {
    ok(l.cublasLtMatmulPreferenceCreate(&ds.pref), "cublasLtMatmulPreferenceCreate");
    const uint64_t ws = kWorkspace;
    ok(l.cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                              &ws, sizeof(ws)),
       "workspace preference");
    const uint32_t al[4] = {static_cast<uint32_t>(align[0]), static_cast<uint32_t>(align[1]),
                            static_cast<uint32_t>(align[2]), static_cast<uint32_t>(align[2])};
    const cublasLtMatmulPreferenceAttributes_t which[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; ++i)
      ok(l.cublasLtMatmulPreferenceSetAttribute(ds.pref, which[i], &al[i], sizeof(al[i])),
         "alignment preference");
  }
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  ok(l.cublasLtMatmulAlgoGetHeuristic(st.handle, op, ds.a, ds.b, ds.d, ds.d, ds.pref, 1, &res,
                                      &found),
     "cublasLtMatmulAlgoGetHeuristic");
  if (found == 0) return std::nullopt;
  return res.algo;
}

}  // namespace

GemmEpilogue gemm_epilogue(bool bias, bool relu, bool gelu) {
  KILN_ASSERT(!(relu && gelu), "[matmul] an epilogue has ReLU or GELU, not both");
  if (relu) return bias ? GemmEpilogue::kBiasRelu : GemmEpilogue::kRelu;
  if (gelu) return bias ? GemmEpilogue::kBiasGelu : GemmEpilogue::kGelu;
  return bias ? GemmEpilogue::kBias : GemmEpilogue::kNone;
}

std::string cublaslt_unavailable_reason() {
  return lib().error;
}

void set_matmul_allow_tf32(bool allow) {
  g_tf32 = allow;
}
bool matmul_allow_tf32() {
  return g_tf32;
}

bool gemm(int device, DType dtype, const GemmShape& s, const GemmOperand& a, const GemmOperand& b,
          CUdeviceptr d, CUdeviceptr bias) {
  KILN_CHECK(s.batch <= INT32_MAX, "[matmul] a batch of ", s.batch,
             " matrices is more than cuBLASLt takes in one call");
  const cudaDataType_t t = data_type(dtype);
  State& st = state(device);
  const Lib& l = lib();
  // Column major: d^T [N, M] = b^T [N, K] . a^T [K, M].
  const Layout lb = as_transposed(b, s.K, s.N), la = as_transposed(a, s.M, s.K);
  const bool tf32 = dtype == DType::f32 && g_tf32;
  const bool ptrs = static_cast<bool>(s.pointer_tables);
  Descs ds, plain, packed;
  ds.op = matmul_desc(dtype, tf32, lb, la);
  set_epilogue(ds.op, s.epilogue, bias);
  ds.a = layout(t, lb.rows, lb.cols, lb.ld, s.batch, b.batch_stride, ptrs);
  ds.b = layout(t, la.rows, la.cols, la.ld, s.batch, a.batch_stride, ptrs);
  ds.d = layout(t, static_cast<uint64_t>(s.N), static_cast<uint64_t>(s.M), s.ldd, s.batch,
                s.d_batch_stride, ptrs);
  if (!ds.a || !ds.b || !ds.d) return false;
  const int align[3] = {ptrs ? s.align[1] : alignment(b.ptr), ptrs ? s.align[0] : alignment(a.ptr),
                        ptrs ? s.align[2] : alignment(d)};
  // Pointer arrays take the algorithm of the same product packed (each
  // operand contiguous, batches one matrix apart), checked below to run on
  // the arrays: the copying path's summation order.
  const auto packed_ld = [&](const Layout& x) {
    return ptrs ? static_cast<int64_t>(x.rows) : x.ld;
  };
  const auto packed_stride = [&](const Layout& x, int64_t stride) {
    return ptrs ? static_cast<int64_t>(x.rows * x.cols) : stride;
  };
  State::Key key{static_cast<int>(dtype),
                 tf32,
                 s.N,
                 s.M,
                 s.K,
                 s.batch,
                 packed_ld(lb),
                 packed_ld(la),
                 ptrs ? s.N : s.ldd,
                 packed_stride(lb, b.batch_stride),
                 packed_stride(la, a.batch_stride),
                 ptrs ? s.M * s.N : s.d_batch_stride,
                 align[0] * 2 + (lb.op == CUBLAS_OP_T),
                 align[1] * 2 + (la.op == CUBLAS_OP_T),
                 align[2],
                 0};
  cublasLtMatmulAlgo_t algo;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    // The plain product's algorithm (the heuristic's first, cached per key).
    auto it = st.algos.find(key);
    if (it == st.algos.end()) {
      Descs* over = &ds;
      if (ptrs) {
        packed.a = layout(t, lb.rows, lb.cols, packed_ld(lb), s.batch, packed_stride(lb, 0));
        packed.b = layout(t, la.rows, la.cols, packed_ld(la), s.batch, packed_stride(la, 0));
        packed.d = layout(t, static_cast<uint64_t>(s.N), static_cast<uint64_t>(s.M), s.N, s.batch,
                          s.M * s.N);
        over = &packed;
      }
      plain.op = matmul_desc(dtype, tf32, lb, la);
      const auto found = heuristic(st, plain.op, *over, align);
      KILN_CHECK(found, "[matmul] cuBLASLt has no algorithm for ", dtype, " [", s.batch, " x ", s.M,
                 " x ", s.K, "] . [", s.K, " x ", s.N, "]");
      it = st.algos.emplace(key, found).first;
    }
    algo = *it->second;
    if (s.epilogue != GemmEpilogue::kNone || ptrs) {
      // With an epilogue or pointer arrays: the same algorithm, so the
      // products are summed in the same order and f32 keeps the unfused
      // (copied) bits, when cuBLASLt runs it so (cublasLtMatmulAlgoCheck);
      // else nothing, and the caller applies the epilogue itself (copies the
      // operands).
      std::get<15>(key) =
          (ptrs ? 1 << 20 : 0) + static_cast<int>(s.epilogue) * 512 + (bias ? alignment(bias) : 0);
      if (ptrs) {  // checked on the arrays' own leading dimensions
        std::get<6>(key) = lb.ld;
        std::get<7>(key) = la.ld;
        std::get<8>(key) = s.ldd;
      }
      auto e = st.algos.find(key);
      if (e == st.algos.end()) {
        cublasLtMatmulHeuristicResult_t res{};
        const bool fits = l.cublasLtMatmulAlgoCheck(st.handle, ds.op, ds.a, ds.b, ds.d, ds.d, &algo,
                                                    &res) == CUBLAS_STATUS_SUCCESS &&
                          res.workspaceSize <= kWorkspace;
        e = st.algos.emplace(key, fits ? std::optional(algo) : std::nullopt).first;
      }
      if (!e->second) return false;
    }
  }
  CUdeviceptr pa = a.ptr, pb = b.ptr, pd = d;
  if (ptrs) {
    const CUdeviceptr tables = s.pointer_tables(), step = static_cast<CUdeviceptr>(s.batch) * 8;
    pa = tables;
    pb = tables + step;
    pd = tables + 2 * step;
  }
  const float one_f = 1, zero_f = 0;
  const double one_d = 1, zero_d = 0;
  const void* alpha = dtype == DType::f64 ? static_cast<const void*>(&one_d) : &one_f;
  const void* beta = dtype == DType::f64 ? static_cast<const void*>(&zero_d) : &zero_f;
  // The shared workspace serves the default stream; another stream takes one
  // from the caching allocator (stream-ordered: reusable by its next call).
  const CUstream stream = current_cu_stream(device);
  Tensor ws_owner;
  void* ws = reinterpret_cast<void*>(st.workspace.get());
  if (stream != nullptr) {
    ws_owner = make_tensor({static_cast<int64_t>(kWorkspace)}, DType::u8, Device::cuda(device));
    ws = ws_owner.data_ptr();
  }
  ok(l.cublasLtMatmul(st.handle, ds.op, alpha, reinterpret_cast<const void*>(pb), ds.a,
                      reinterpret_cast<const void*>(pa), ds.b, beta,
                      reinterpret_cast<const void*>(pd), ds.d, reinterpret_cast<void*>(pd), ds.d,
                      &algo, ws, kWorkspace, stream),
     "cublasLtMatmul");
  after_launch("matmul (cuBLASLt)");
  return true;
}

}  // namespace kiln::cuda
