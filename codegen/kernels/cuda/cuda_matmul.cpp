// matmul for CUDA tensors (cublaslt.h): torch.matmul's shapes reduced to one
// strided-batched cuBLASLt call. Operands are read in place where cuBLASLt can
// address them (row- or column-major matrices, batches a fixed stride apart or
// all the same matrix), else copied contiguous on the device first.
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <vector>

#include "kernels/cuda/cublaslt.h"
#include "kernels/cuda/cuda_graphs.h"
#include "kernels/cuda/device_ops.h"
#include "kernels/cuda/driver.h"
#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/pocl_driver.h"
#include "kernels/cuda/stream.h"
#include "kiln/autograd.h"
#include "kiln/env.h"
#include "kiln/error.h"
#include "kiln/functional.h"
#include "kiln/tensor.h"

namespace kiln::cuda {
namespace {

CUdeviceptr address(const Tensor& t) {
  return reinterpret_cast<CUdeviceptr>(t.data_ptr());
}

// The batch dims of t (all but its last two) as one stride, if they are one:
// 0 when every batch index reads the same matrix, else the stride of the
// innermost batch dim that moves, when the others continue it.
bool one_batch_stride(const Tensor& t, int64_t& stride) {
  const Dims& sh = t.shape();
  const Dims& st = t.strides();
  const size_t nb = sh.size() - 2;
  stride = 0;
  int64_t expect = -1;  // the stride the next outer dim must have
  for (size_t i = nb; i-- > 0;) {
    if (sh[i] == 1) continue;
    if (expect < 0) {
      stride = st[i];
      expect = st[i] * sh[i];
      continue;
    }
    if (st[i] != expect) return false;
    expect *= sh[i];
  }
  return stride >= 0;
}

// t's matrices ([..., R, C]) as cuBLASLt reads them in place, row- or
// column-major (batch stride aside); false if they are neither.
bool in_place(const Tensor& t, GemmOperand& g) {
  const int64_t R = t.shape()[t.dim() - 2], C = t.shape()[t.dim() - 1];
  int64_t rs = t.strides()[t.dim() - 2], cs = t.strides()[t.dim() - 1];
  // Strides of size-1 dims say nothing: choose ones that make a valid layout.
  if (C == 1) cs = 1;
  if (R == 1) rs = cs == 1 ? std::max<int64_t>(C, 1) : 1;
  const bool row_major = cs == 1 && rs >= std::max<int64_t>(C, 1);
  const bool col_major = rs == 1 && cs >= std::max<int64_t>(R, 1);
  if (!row_major && !col_major) return false;
  g = {address(t), row_major ? rs : 1, row_major ? 1 : cs, 0};
  return true;
}

// The operand t ([..., R, C], already expanded to the output's batch) as
// cuBLASLt takes it; `owner` keeps a contiguous copy alive when one is needed.
GemmOperand operand(const Tensor& t, Tensor& owner) {
  const int64_t R = t.shape()[t.dim() - 2], C = t.shape()[t.dim() - 1];
  GemmOperand g;
  int64_t bs = 0;
  const bool placed = in_place(t, g);
  if (placed && one_batch_stride(t, bs)) {
    g.batch_stride = bs;
    return g;
  }
  if (placed && g.cs != 1 && R > 1) {
    // Copied as it is laid out (a transposed view stays transposed: K^T of
    // [B, L, H, D] copies D-runs, 16 bytes a move).
    owner = t.transpose(-2, -1).contiguous();
    return {address(owner), 1, std::max<int64_t>(R, 1), R * C};
  }
  owner = t.contiguous();
  return {address(owner), std::max<int64_t>(C, 1), 1, R * C};
}

std::atomic<int> g_pointer_batches_set{-1};  // set_pointer_batches; -1: the environment's
std::atomic<int64_t> g_pointer_batches{0};

// KILN_CUDA_POINTER_BATCHES, read at the first batched product (a bad value
// is that product's error, not the process's at load time).
bool pointer_batches_on() {
  const int set = g_pointer_batches_set.load(std::memory_order_relaxed);
  if (set >= 0) return set == 1;
  static const bool on = env::get_flag("KILN_CUDA_POINTER_BATCHES", true);
  return on;
}

// The largest power of two up to 256 dividing the byte address of every
// matrix of t and of each of its rows or columns: its base, each batch step
// and its leading dimension (g's rs or cs).
int matrices_alignment(const Tensor& t, size_t batch_dims, const GemmOperand& g) {
  const uint64_t es = dtype_size(t.dtype());
  uint64_t bits = reinterpret_cast<uint64_t>(t.data_ptr()) | 256;
  bits |= static_cast<uint64_t>(g.cs == 1 ? g.rs : g.cs) * es;
  for (size_t i = 0; i < batch_dims; ++i)
    if (t.shape()[i] > 1) bits |= static_cast<uint64_t>(t.strides()[i]) * es;
  return static_cast<int>(bits & (~bits + 1));
}

// A batched product whose a, b (expanded to the batch) or out no single
// batch stride addresses, each read or written in place through cuBLASLt's
// pointer arrays (the attention's [B, H, L, D] views of [B, L, H, D]: no
// operand copies, no temporary output). False: the copying path serves.
struct PointerPlan {
  GemmOperand a, b, d;
  KilnIndexGeom geom{};
  int rank = 0;
  int align[3] = {0, 0, 0};
};
bool pointer_plan(const Tensor& a, const Tensor& b, const Tensor& out, int64_t nbatch,
                  PointerPlan& p) {
  if (nbatch < 2 || nbatch > INT32_MAX || !pointer_batches_on()) return false;
  const size_t nb = out.dim() - 2;
  if (nb > 8 || !in_place(a, p.a) || !in_place(b, p.b) || !in_place(out, p.d) || p.d.cs != 1)
    return false;
  int64_t s = 0;
  if (one_batch_stride(a, s) && one_batch_stride(b, s) && one_batch_stride(out, s) &&
      out.is_contiguous())
    return false;  // one strided call, nothing copied
  const int64_t es = static_cast<int64_t>(dtype_size(out.dtype()));
  for (size_t i = 0; i < nb; ++i) {
    if (out.shape()[i] > 1 && out.strides()[i] == 0) return false;  // batches would overlap
    p.geom.size[i] = out.shape()[i];
    p.geom.x[i] = a.strides()[i] * es;
    p.geom.idx[i] = b.strides()[i] * es;
    p.geom.out[i] = out.strides()[i] * es;
  }
  p.rank = static_cast<int>(nb);
  p.align[0] = matrices_alignment(a, nb, p.a);
  p.align[1] = matrices_alignment(b, nb, p.b);
  p.align[2] = matrices_alignment(out, nb, p.d);
  return true;
}

// The address tables of plan p (3 x nbatch on the device: a's, b's, d's).
Tensor pointer_tables(const PointerPlan& p, int64_t nbatch, int device) {
  Tensor t = make_tensor({3 * nbatch}, DType::i64, Device::cuda(device));
  CUdeviceptr pt = address(t);
  long long n = nbatch;
  int rank = p.rank;
  unsigned long long pa = p.a.ptr, pb = p.b.ptr, pd = p.d.ptr;
  KilnIndexGeom g = p.geom;
  std::vector<void*> params = {&pt, &n, &rank, &pa, &pb, &pd, &g};
  launch_printed([] { return print_pointer_table("kiln_pointer_table"); }, "kiln_pointer_table",
                 device, n, params);
  return t;
}

// The emulated device's product as a host function (cuLaunchHostFunc) over
// contiguous device operands, reached through the host addresses where the
// emulation keeps them (device addresses are not host-addressable): the same
// CPU matmul as outside a capture, so the same bits.
struct HostMatmul {
  void* a;
  void* b;
  void* out;
  Dims a_shape, b_shape, out_shape;
  DType a_dtype, b_dtype, out_dtype;
  GemmEpilogue epilogue;
  void* bias;  // with a bias epilogue: bias_shape of out_dtype
  Dims bias_shape;
};

// The product of host (or emulated-device) tensors with cuBLASLt's epilogue
// contract: without one, the CPU's matmul (its bits); with one, the product
// in the accumulator's type (f64 for f64, else f32: the CPU's f16/bf16
// product is the f32 product of the widened operands, rounded once), the bias
// added in that type, then ReLU or tanh GELU, and one rounding to `out`.
DType accumulator(DType out) {
  return out == DType::f64 ? DType::f64 : DType::f32;
}

// Epilogue `e` on the accumulated products `y` (of accumulator(out)), then
// rounded to `out`.
Tensor apply_epilogue(Tensor y, GemmEpilogue e, const Tensor& bias, DType out) {
  NoGradGuard no_grad;
  if (epilogue_has_bias(e)) y = y + bias.to(y.dtype());
  if (e == GemmEpilogue::kRelu || e == GemmEpilogue::kBiasRelu) y = relu(y);
  if (e == GemmEpilogue::kGelu || e == GemmEpilogue::kBiasGelu) y = gelu(y, "tanh");
  return y.to(out);
}

Tensor host_product(const Tensor& a, const Tensor& b, GemmEpilogue e, const Tensor& bias,
                    DType out) {
  NoGradGuard no_grad;
  if (e == GemmEpilogue::kNone) return matmul(a, b);
  const DType acc = accumulator(out);
  return apply_epilogue(matmul(a.to(acc), b.to(acc)), e, bias, out);
}

// A host view of the emulated device's contiguous tensor at device address p.
Tensor emulated_view(void* p, const Dims& shape, DType dtype) {
  size_t n = dtype_size(dtype);
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  if (n == 0) return make_tensor(shape, dtype);  // K = 0: no bytes, maybe no address
  void* host = emulated_host_address(reinterpret_cast<CUdeviceptr>(p), n);
  KILN_CHECK(host, "[matmul] an operand of ", shape, " ", dtype, ": ", take_emulated_detail());
  return from_blob(host, shape, dtype);
}

void CUDA_CB run_host_matmul(void* p) {
  const auto* m = static_cast<const HostMatmul*>(p);
  try {
    NoGradGuard no_grad;
    Tensor o = emulated_view(m->out, m->out_shape, m->out_dtype);
    const Tensor bias = m->bias ? emulated_view(m->bias, m->bias_shape, m->out_dtype) : Tensor();
    o.copy_(host_product(emulated_view(m->a, m->a_shape, m->a_dtype),
                         emulated_view(m->b, m->b_shape, m->b_dtype), m->epilogue, bias,
                         o.dtype()));
  } catch (const std::exception& e) {  // the same product ran before the capture: not expected
    std::fprintf(stderr, "kiln: emulated matmul in a CUDA graph failed: %s\n", e.what());
  }
}

void emulated_host_matmul(const Tensor& a0, const Tensor& b0, const Tensor& out, GemmEpilogue e,
                          const Tensor& bias0) {
  const Tensor a = a0.detach().contiguous(), b = b0.detach().contiguous();
  const Tensor bias = bias0.defined() ? bias0.detach().contiguous() : Tensor();
  const Tensor d = out.is_contiguous() ? out : empty_like(out).contiguous();
  auto m = std::make_shared<HostMatmul>(
      HostMatmul{a.data_ptr(), b.data_ptr(), d.data_ptr(), a.shape(), b.shape(), d.shape(),
                 a.dtype(), b.dtype(), out.dtype(), e, bias.defined() ? bias.data_ptr() : nullptr,
                 bias.defined() ? bias.shape() : Dims{}});
  check(driver().cuLaunchHostFunc(current_cu_stream(out.device().index), run_host_matmul, m.get()),
        "cuLaunchHostFunc");
  keep_for_graph(std::move(m));  // its pointers are the pool's, fixed while the graph lives
  if (!d.is_same(out)) {
    Tensor o = out;
    o.copy_(d);
  }
}

// The emulated device's pointer-array product, as cuBLASLt's contract: the
// tables built on the device by the same kernel, then a host function reads
// every matrix through them, multiplies the batch as the copying path does
// (contiguous operands: the same bits) and writes each product through d's.
struct HostPointerMatmul {
  CUdeviceptr tables;
  int64_t n, M, N, K;
  GemmOperand a, b, d;  // rs and cs of each matrix
  DType dtype;
  GemmEpilogue epilogue;
  void* bias;
  Dims bias_shape;
};

void CUDA_CB run_host_pointer_matmul(void* p) {
  const auto* m = static_cast<const HostPointerMatmul*>(p);
  try {
    NoGradGuard no_grad;
    const size_t n = static_cast<size_t>(m->n);
    const auto* table =
        static_cast<const uint64_t*>(emulated_host_address(m->tables, 3 * n * sizeof(uint64_t)));
    KILN_CHECK(table, "[matmul] the pointer tables: ", take_emulated_detail());
    auto matrix = [&](uint64_t at, int64_t R, int64_t C, const GemmOperand& g) {
      const int64_t extent = (R - 1) * g.rs + (C - 1) * g.cs + 1;
      return as_strided(emulated_view(reinterpret_cast<void*>(at), {extent}, m->dtype), {R, C},
                        {g.rs, g.cs}, 0);
    };
    // An operand every batch reads the same matrix of stays one matrix, as
    // the CPU's matmul takes a broadcast one (its bits).
    auto operand = [&](size_t k, int64_t R, int64_t C, const GemmOperand& g) {
      const uint64_t* t = table + k * n;
      if (std::all_of(t, t + n, [&](uint64_t v) { return v == t[0]; }))
        return matrix(t[0], R, C, g);
      std::vector<Tensor> ms;
      for (size_t i = 0; i < n; ++i) ms.push_back(matrix(t[i], R, C, g));
      return stack(ms);
    };
    const Tensor bias = m->bias ? emulated_view(m->bias, m->bias_shape, m->dtype) : Tensor();
    Tensor prod = host_product(operand(0, m->M, m->K, m->a), operand(1, m->K, m->N, m->b),
                               m->epilogue, bias, m->dtype);
    if (prod.dim() == 2) prod = prod.expand({m->n, m->M, m->N});
    for (size_t i = 0; i < n; ++i)
      matrix(table[2 * n + i], m->M, m->N, m->d).copy_(prod.select(0, static_cast<int64_t>(i)));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: emulated pointer-array matmul failed: %s\n", e.what());
  }
}

void emulated_pointer_matmul(const PointerPlan& plan, int64_t nbatch, int64_t M, int64_t N,
                             int64_t K, const Tensor& out, GemmEpilogue e, const Tensor& bias0) {
  const int device = out.device().index;
  const Tensor tables = pointer_tables(plan, nbatch, device);
  const Tensor bias = bias0.defined() ? bias0.detach().contiguous() : Tensor();
  auto m = std::make_shared<HostPointerMatmul>(HostPointerMatmul{
      address(tables), nbatch, M, N, K, plan.a, plan.b, plan.d, out.dtype(), e,
      bias.defined() ? bias.data_ptr() : nullptr, bias.defined() ? bias.shape() : Dims{}});
  const CUstream stream = current_cu_stream(device);
  check(driver().cuLaunchHostFunc(stream, run_host_pointer_matmul, m.get()), "cuLaunchHostFunc");
  g_pointer_batches.fetch_add(1, std::memory_order_relaxed);
  if (capturing_graph()) {
    keep_for_graph(std::move(m));  // its pointers are the pool's, fixed while the graph lives
  } else {
    check(driver().cuStreamSynchronize(stream), "cuStreamSynchronize");  // m, tables, bias live
  }
}

}  // namespace

void device_matmul(const Tensor& a0, const Tensor& b0, const Tensor& out, GemmEpilogue epilogue,
                   const Tensor& bias) {
  // A 1-D a is [1, K] and a 1-D b is [K, 1]; the added dims are not in `out`.
  const Tensor a = a0.dim() == 1 ? a0.unsqueeze(0) : a0;
  const Tensor b = b0.dim() == 1 ? b0.unsqueeze(1) : b0;
  const int64_t M = a.shape()[a.dim() - 2], K = a.shape()[a.dim() - 1];
  const int64_t N = b.shape()[b.dim() - 1];
  Dims batch(out.shape().begin(),
             out.shape().end() - (a0.dim() >= 2 ? 1 : 0) - (b0.dim() >= 2 ? 1 : 0));
  int64_t nbatch = 1;
  for (int64_t d : batch) nbatch *= d;
  if (nbatch == 0 || M == 0 || N == 0) return;
  KILN_CHECK(
      !epilogue_has_bias(epilogue) || (bias.defined() && bias.dtype() == out.dtype() &&
                                       bias.dim() == 1 && (bias.size(0) == N || bias.size(0) == 1)),
      "[matmul] a bias epilogue takes a 1-D bias of ", N, " (or 1) ", out.dtype(),
      " elements, got ", bias.defined() ? bias.dtype() : out.dtype(),
      bias.defined() ? bias.shape() : Dims{});
  GemmOperand od;
  if (a0.dim() >= 2 && b0.dim() >= 2 && epilogue == GemmEpilogue::kNone && M > 1 && N > 1 &&
      in_place(out, od) && od.cs != 1) {
    // A column-major output (K^T's gradient placed in the q/k/v gradients'
    // buffer): the transposed product b^T a^T writes it row-major.
    return device_matmul(b0.transpose(-2, -1), a0.transpose(-2, -1), out.transpose(-2, -1),
                         epilogue, bias);
  }
  Dims ashape = batch, bshape = batch;
  ashape.push_back(M);
  ashape.push_back(K);
  bshape.push_back(K);
  bshape.push_back(N);
  PointerPlan plan;
  const bool by_pointers = a0.dim() >= 2 && b0.dim() >= 2 && K > 0 &&
                           pointer_plan(a.expand(ashape), b.expand(bshape), out, nbatch, plan);
  if (driver().emulated) {
    // The emulated device has no cuBLASLt: the product runs on the host CPU,
    // in a captured graph as a host function in stream order.
    if (by_pointers) return emulated_pointer_matmul(plan, nbatch, M, N, K, out, epilogue, bias);
    if (capturing_graph()) return emulated_host_matmul(a0, b0, out, epilogue, bias);
    UncountedTransfers uncounted;
    Tensor o = out;
    o.copy_(host_product(a0.detach().cpu(), b0.detach().cpu(), epilogue,
                         bias.defined() ? bias.detach().cpu() : Tensor(), out.dtype()));
    return;
  }
  if (K == 0) {
    Tensor o = out;
    if (epilogue == GemmEpilogue::kNone) {
      o.zero_();  // an empty sum
    } else {      // the epilogue of an empty sum, on the device's own kernels
      o.copy_(apply_epilogue(zeros(out.shape(), accumulator(out.dtype()), out.device()), epilogue,
                             bias, out.dtype()));
    }
    return;
  }
  // cuBLASLt reads N packed bias values: a [1] bias is widened first, one at
  // an odd address (a view into a flat buffer) copied to a fresh block.
  Tensor bias_n;
  if (epilogue_has_bias(epilogue)) {
    bias_n = bias.detach().expand({N}).contiguous();
    if (address(bias_n) % 16 != 0) bias_n = bias_n.clone();
  }
  const int device = out.device().index;
  GemmShape s;
  s.batch = nbatch;
  s.M = M;
  s.N = N;
  s.K = K;
  s.epilogue = epilogue;
  if (by_pointers) {
    Tensor tables;  // alive until the product is queued (stream-ordered reuse)
    s.pointer_tables = [&] {
      tables = pointer_tables(plan, nbatch, device);
      return address(tables);
    };
    s.ldd = plan.d.rs;
    std::copy(plan.align, plan.align + 3, s.align);
    if (gemm(device, out.dtype(), s, {0, plan.a.rs, plan.a.cs, 0}, {0, plan.b.rs, plan.b.cs, 0}, 0,
             bias_n.defined() ? address(bias_n) : 0)) {
      g_pointer_batches.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    s.pointer_tables = nullptr;  // not on the arrays (or not with this epilogue): copies
  }
  Tensor a_owner, b_owner;
  const GemmOperand ga = operand(a.expand(ashape), a_owner);
  const GemmOperand gb = operand(b.expand(bshape), b_owner);
  // The product goes straight into a contiguous `out`, else through a temporary.
  Tensor d = out.is_contiguous() ? out : empty_like(out).contiguous();
  s.ldd = std::max<int64_t>(N, 1);
  s.d_batch_stride = M * N;
  if (!gemm(device, out.dtype(), s, ga, gb, address(d), bias_n.defined() ? address(bias_n) : 0)) {
    // No algorithm with this epilogue: the product, then the epilogue by the
    // device's own kernels (f16/bf16 then round twice, as unfused).
    s.epilogue = GemmEpilogue::kNone;
    gemm(device, out.dtype(), s, ga, gb, address(d));
    d.copy_(apply_epilogue(d.to(accumulator(out.dtype())), epilogue, bias_n, out.dtype()));
  }
  if (!d.is_same(out)) {
    Tensor o = out;
    o.copy_(d);
  }
}

int64_t pointer_batches() {
  return g_pointer_batches.load(std::memory_order_relaxed);
}

void set_pointer_batches(bool on) {
  g_pointer_batches_set.store(on ? 1 : 0, std::memory_order_relaxed);
}

}  // namespace kiln::cuda
