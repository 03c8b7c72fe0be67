// matmul for CUDA tensors (cublaslt.h): torch.matmul's shapes reduced to one
// strided-batched cuBLASLt call. Operands are read in place where cuBLASLt can
// address them (row- or column-major matrices, batches a fixed stride apart or
// all the same matrix), else copied contiguous on the device first.
#include <cuda.h>

#include <cstdio>
#include <memory>

#include "kernels/cuda/cublaslt.h"
#include "kernels/cuda/cuda_graphs.h"
#include "kernels/cuda/device_ops.h"
#include "kernels/cuda/driver.h"
#include "kernels/cuda/pocl_driver.h"
#include "kernels/cuda/stream.h"
#include "kiln/autograd.h"
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

// The operand t ([..., R, C], already expanded to the output's batch) as
// cuBLASLt takes it; `owner` keeps a contiguous copy alive when one is needed.
GemmOperand operand(const Tensor& t, Tensor& owner) {
  const int64_t R = t.shape()[t.dim() - 2], C = t.shape()[t.dim() - 1];
  int64_t rs = t.strides()[t.dim() - 2], cs = t.strides()[t.dim() - 1];
  // Strides of size-1 dims say nothing: choose ones that make a valid layout.
  if (C == 1) cs = 1;
  if (R == 1) rs = cs == 1 ? std::max<int64_t>(C, 1) : 1;
  const bool row_major = cs == 1 && rs >= std::max<int64_t>(C, 1);
  const bool col_major = rs == 1 && cs >= std::max<int64_t>(R, 1);
  int64_t bs = 0;
  if ((row_major || col_major) && one_batch_stride(t, bs))
    return {address(t), row_major ? rs : 1, row_major ? 1 : cs, bs};
  if (col_major && !row_major && R > 1) {
    // Copied as it is laid out (a transposed view stays transposed: the
    // attention's K^T from [B, L, H, D] copies D-runs, 16 bytes a move).
    owner = t.transpose(-2, -1).contiguous();
    return {address(owner), 1, std::max<int64_t>(R, 1), R * C};
  }
  owner = t.contiguous();
  return {address(owner), std::max<int64_t>(C, 1), 1, R * C};
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
  if (driver().emulated) {
    // The emulated device has no cuBLASLt: the product runs on the host CPU,
    // in a captured graph as a host function in stream order.
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
  Dims ashape = batch, bshape = batch;
  ashape.push_back(M);
  ashape.push_back(K);
  bshape.push_back(K);
  bshape.push_back(N);
  Tensor a_owner, b_owner;
  const GemmOperand ga = operand(a.expand(ashape), a_owner);
  const GemmOperand gb = operand(b.expand(bshape), b_owner);
  // The product goes straight into a contiguous `out`, else through a temporary.
  Tensor d = out.is_contiguous() ? out : empty_like(out).contiguous();
  GemmShape s;
  s.batch = nbatch;
  s.M = M;
  s.N = N;
  s.K = K;
  s.ldd = std::max<int64_t>(N, 1);
  s.d_batch_stride = M * N;
  s.epilogue = epilogue;
  // cuBLASLt reads N packed bias values: a [1] bias is widened first, one at
  // an odd address (a view into a flat buffer) copied to a fresh block.
  Tensor bias_n;
  if (epilogue_has_bias(epilogue)) {
    bias_n = bias.detach().expand({N}).contiguous();
    if (address(bias_n) % 16 != 0) bias_n = bias_n.clone();
  }
  if (!gemm(out.device().index, out.dtype(), s, ga, gb, address(d),
            bias_n.defined() ? address(bias_n) : 0)) {
    // No algorithm with this epilogue: the product, then the epilogue by the
    // device's own kernels (f16/bf16 then round twice, as unfused).
    s.epilogue = GemmEpilogue::kNone;
    gemm(out.device().index, out.dtype(), s, ga, gb, address(d));
    d.copy_(apply_epilogue(d.to(accumulator(out.dtype())), epilogue, bias_n, out.dtype()));
  }
  if (!d.is_same(out)) {
    Tensor o = out;
    o.copy_(d);
  }
}

}  // namespace kiln::cuda
