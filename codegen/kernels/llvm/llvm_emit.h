// Internal: kernel IR -> LLVM IR text for the CPU backend. Text, so this file
// needs no LLVM headers; codegen/kernels/llvm/ parses, optimizes and JIT-compiles it.
#pragma once

#include <string>

#include "kernels/kernel_ir.h"

namespace kiln::kir {

/// A whole LLVM module (the JIT sets triple and data layout) defining verified
/// kernel `k` as `void @<symbol>(i64 %begin, i64 %end, ptr %ptrs, ptr %sizes)`
/// (kernel_ir.h ABI). Every inner loop asks the vectorizer for the lanes that
/// fill `vector_bits` (jit::CpuInfo::vector_bits; 0: the vectorizer chooses),
/// and the function prefers that width in the backend.
/// Deterministic: the same arguments give the same text.
std::string emit_llvm(const Kernel& k, const std::string& symbol, int vector_bits);

/// Bumped whenever the emitted code changes meaning, so old disk cache entries
/// are never reused (the key also hashes the emitted text itself).
inline constexpr int kEmitVersion = 5;

}  // namespace kiln::kir
