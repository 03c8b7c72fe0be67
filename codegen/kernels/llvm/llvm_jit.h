// The LLVM CPU JIT (ORC LLJIT) behind the compiled backend, with no LLVM types
// in this header: every LLVM include stays inside codegen/kernels/llvm/. Builds without
// LLVM select codegen/kernels/llvm/, where available() is false.
#pragma once

#include <memory>
#include <string>

namespace kiln::jit {

/// The host CPU as the JIT targets it.
struct CpuInfo {
  std::string triple;    ///< e.g. x86_64-pc-linux-gnu
  std::string cpu;       ///< e.g. znver3
  std::string features;  ///< LLVM feature string (+avx2,+fma,...)
  bool avx2 = false;
  bool fma = false;
  bool avx512f = false;
  /// Vector width kiln's kernels use on this CPU, in bits: 512 wherever AVX-512
  /// is present (LLVM's tuning to 256 is overridden), else the widest register
  /// LLVM's cost model uses (128 or 256).
  int vector_bits = 0;
};

/// True if kiln was built with the LLVM backend.
bool available();
/// The host CPU (kiln::Error if the backend is unavailable).
CpuInfo host_cpu();
/// A named x86-64 CPU ("znver3", "skylake-avx512", ...) with its default
/// features, for compiling (never running) code for another host in tests.
CpuInfo named_cpu(const std::string& cpu);
/// "19.1.7" — the LLVM version the backend was built with ("" without LLVM).
std::string llvm_version();

/// What compile() can also return, for KILN_DUMP and tests.
struct CompileOutputs {
  std::string optimized_ir;  ///< the module after the O3 pipeline
  std::string assembly;      ///< host assembly of the module
};

/// Compiles LLVM IR modules to host machine code. Thread-safe; code stays alive
/// as long as the LlvmJit.
class LlvmJit {
 public:
  LlvmJit();
  /// A JIT for another CPU (named_cpu): compile_to_object only, since its code
  /// may not run here; compile() and load_object() are refused.
  explicit LlvmJit(const std::string& cpu);
  ~LlvmJit();
  LlvmJit(const LlvmJit&) = delete;
  LlvmJit& operator=(const LlvmJit&) = delete;

  /// Parses and verifies `ir_text` (LLVM IR), runs the O3 pipeline built from the
  /// host TargetMachine (so loops vectorize), JIT-compiles it and returns the
  /// address of `symbol`. kiln::Error carrying LLVM's diagnostic on failure.
  void* compile(const std::string& ir_text, const std::string& symbol,
                CompileOutputs* outputs = nullptr);
  /// Like compile(), but returns a relocatable object file of the host (the disk
  /// cache's format) instead of loading it.
  std::string compile_to_object(const std::string& ir_text, CompileOutputs* outputs = nullptr);
  /// Links an object file made by compile_to_object into the JIT and returns
  /// the address of `symbol`; kiln::Error if it does not load or lacks the symbol.
  void* load_object(const std::string& object, const std::string& symbol);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::jit
