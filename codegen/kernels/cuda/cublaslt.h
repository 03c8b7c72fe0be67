// Internal: matrix products on CUDA through cuBLASLt, opened at run time like
// the driver (dlopen of libcublasLt.so.13 on first use: linking it costs every
// process ~200 ms and ~210 MB, CPU users included).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <string>

#include "kiln/dtype.h"
#include "kiln/tensor.h"

namespace kiln::cuda {

/// One GEMM operand in row-major terms: a [rows, cols] matrix at `ptr` with
/// row stride `rs` and column stride `cs` (one of them 1), and the distance
/// between consecutive batch matrices (0: every batch reads the same one).
struct GemmOperand {
  CUdeviceptr ptr = 0;
  int64_t rs = 0, cs = 1, batch_stride = 0;
};

/// What a GEMM applies to its accumulator (f32; f64 for f64) before the
/// output conversion, as cuBLASLt's CUBLASLT_EPILOGUE_*: a bias (one value per
/// output column, the same for every row and batch) added first, then ReLU or
/// GELU. cuBLASLt's GELU is the tanh approximation, computed by its own code:
/// not kiln's expansion, so kiln uses it nowhere by default.
enum class GemmEpilogue : uint8_t { kNone, kBias, kRelu, kBiasRelu, kGelu, kBiasGelu };

/// Whether `e` reads a bias vector.
constexpr bool epilogue_has_bias(GemmEpilogue e) {
  return e == GemmEpilogue::kBias || e == GemmEpilogue::kBiasRelu || e == GemmEpilogue::kBiasGelu;
}
/// The epilogue of a product with (`bias`) or without a bias, then ReLU
/// (`relu`) or GELU, tanh form (`gelu`), or nothing else. The CUDA runtime's
/// matmul takes it as the executor and eager `linear` ask through
/// DeviceRuntime::run: a third input (the bias) and the bool attributes
/// "relu" / "gelu".
GemmEpilogue gemm_epilogue(bool bias, bool relu, bool gelu);

/// The shape of one batched product d[b] = a[b] (M x K) . b[b] (K x N); d is
/// row-major with leading dimension ldd and batch stride `d_batch_stride`;
/// `epilogue` applied to each element before it is stored.
/// With `pointer_tables`, the batches are addressed through arrays of their
/// matrices' addresses (cuBLASLt's pointer-array mode; a.ptr, b.ptr, d and
/// the batch strides unused): called once the algorithm is settled, it
/// returns the device address of a's, b's and d's arrays of `batch` entries,
/// back to back (print_pointer_table); every matrix of a, b and d is aligned
/// to `align[0..2]` bytes.
struct GemmShape {
  int64_t batch = 1, M = 0, N = 0, K = 0;
  int64_t ldd = 0, d_batch_stride = 0;
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  std::function<CUdeviceptr()> pointer_tables;
  int align[3] = {0, 0, 0};
};

/// d = epilogue(a . b [+ bias]) on `device` (its context current) and the current stream, for f32
/// (full f32 math unless set_matmul_allow_tf32), f64, f16 and bf16 (f32 accumulation). Row
/// major is mapped onto cuBLASLt's column major by swapping the operands;
/// transposed operands (unit row stride) use its transpose flags, not a copy.
/// `bias`: N contiguous elements of `dtype` on the device, when the epilogue
/// has one (cuBLASLt's bias follows D's rows, which are row-major d's columns).
/// The chosen algorithm is cached per shape, layout and alignment. With an
/// epilogue it is the plain product's algorithm (the same summation order, so
/// f32 keeps the unfused bits) if cuBLASLt runs that one with the epilogue;
/// else false (nothing run): the caller multiplies without one and applies it.
/// Pointer arrays likewise take the packed product's algorithm; false where
/// cuBLASLt does not run it on the arrays (the caller copies the operands).
bool gemm(int device, DType dtype, const GemmShape& s, const GemmOperand& a, const GemmOperand& b,
          CUdeviceptr d, CUdeviceptr bias = 0);

/// Batched products run on cuBLASLt's pointer arrays so far: those whose
/// operands or output no single batch stride addresses (the attention's
/// [B, H, L, D] views of [B, L, H, D]), read and written in place.
int64_t pointer_batches();
/// Turns that path on or off (KILN_CUDA_POINTER_BATCHES; off: such operands
/// are copied contiguous first and the output goes through a temporary).
void set_pointer_batches(bool on);

/// out = matmul(a, b) for CUDA tensors with torch.matmul semantics (1-D
/// operands, broadcast batch dims); `out` has the shape matmul infers. With an
/// epilogue, `bias` (a contiguous [N] or [1] tensor of out's dtype, when the
/// epilogue has one) is added, then ReLU/GELU. f32: the unfused path's bits.
/// f16/bf16: the emulated device rounds once (f32 product, bias, activation);
/// an H100's cuBLASLt was within two units of the unfused path, not of that.
void device_matmul(const Tensor& a, const Tensor& b, const Tensor& out,
                   GemmEpilogue epilogue = GemmEpilogue::kNone, const Tensor& bias = Tensor());

/// "" when cuBLASLt can be loaded, else why not.
std::string cublaslt_unavailable_reason();

}  // namespace kiln::cuda
