// Internal: kernel IR -> LLVM IR text for the CPU backend. Text, so this file
// needs no LLVM headers; codegen/llvm/ parses, optimizes and JIT-compiles it.
#pragma once

#include <string>

#include "kiln/kernel_ir.h"

namespace kiln::kir {

/// A whole LLVM module (target-independent; the JIT sets triple and data
/// layout) defining verified kernel `k` as
/// `void @<symbol>(i64 %begin, i64 %end, ptr %ptrs, ptr %sizes)` (kernel_ir.h ABI).
/// Deterministic: the same kernel and symbol give the same text.
std::string emit_llvm(const Kernel& k, const std::string& symbol);

/// Bumped whenever the emitted code changes meaning, so old disk cache entries
/// are never reused (the key also hashes the emitted text itself).
inline constexpr int kEmitVersion = 4;

}  // namespace kiln::kir
