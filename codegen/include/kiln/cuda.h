// CUDA devices as PyTorch's torch.cuda reports them. kiln opens the NVIDIA
// driver at run time (it is never linked), so these answer on any machine:
// without a driver or GPU they say so instead of failing.
#pragma once

#include <string>

namespace kiln::cuda {

/// True when the NVIDIA driver loads and reports at least one device.
bool is_available();
/// The number of CUDA devices (0 without a usable driver).
int device_count();
/// Why CUDA is unusable ("" when is_available()): no driver, the toolkit's stub
/// library, a driver older than kiln's CUDA 13 headers, no device, or a kiln
/// built without the CUDA toolkit.
std::string unavailable_reason();
/// Waits until all work queued on CUDA device `device` has finished (kiln::Error
/// when CUDA is unavailable).
void synchronize(int device = 0);
/// Whether f32 matmuls on CUDA may use TF32 tensor cores (10-bit mantissa
/// operands; PyTorch's torch.backends.cuda.matmul.allow_tf32). Off by default.
void set_matmul_allow_tf32(bool allow);
/// The current set_matmul_allow_tf32 choice.
bool matmul_allow_tf32();

}  // namespace kiln::cuda
