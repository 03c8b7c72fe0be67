// Internal: matrix products on CUDA through cuBLASLt, opened at run time like
// the driver (dlopen of libcublasLt.so.13 on first use: linking it costs every
// process ~200 ms and ~210 MB, CPU users included).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>

#include "kiln/dtype.h"

namespace kiln {
class Tensor;
}

namespace kiln::cuda {

/// One GEMM operand in row-major terms: a [rows, cols] matrix at `ptr` with
/// row stride `rs` and column stride `cs` (one of them 1), and the distance
/// between consecutive batch matrices (0: every batch reads the same one).
struct GemmOperand {
  CUdeviceptr ptr = 0;
  int64_t rs = 0, cs = 1, batch_stride = 0;
};

/// The shape of one batched product d[b] = a[b] (M x K) . b[b] (K x N); d is
/// row-major with leading dimension ldd and batch stride `d_batch_stride`.
struct GemmShape {
  int64_t batch = 1, M = 0, N = 0, K = 0;
  int64_t ldd = 0, d_batch_stride = 0;
};

/// d = a . b on `device` (its context current) and the default stream, for f32 (full f32
/// math unless set_matmul_allow_tf32), f64, f16 and bf16 (f32 accumulation). Row
/// major is mapped onto cuBLASLt's column major by swapping the operands;
/// transposed operands (unit row stride) use its transpose flags, not a copy.
/// The chosen algorithm is cached per shape, layout and alignment.
void gemm(int device, DType dtype, const GemmShape& s, const GemmOperand& a, const GemmOperand& b,
          CUdeviceptr d);

/// out = matmul(a, b) for CUDA tensors with torch.matmul semantics (1-D
/// operands, broadcast batch dims); `out` has the shape matmul infers.
void device_matmul(const Tensor& a, const Tensor& b, const Tensor& out);

/// "" when cuBLASLt can be loaded, else why not.
std::string cublaslt_unavailable_reason();

}  // namespace kiln::cuda
