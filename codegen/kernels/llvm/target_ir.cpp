// Kernels compiled for a CPU other than the host, for tests: the same emitter
// input (that CPU's vector width) and pipeline as get_kernel, without running.
#include "kernels/kernel_cache.h"
#include "kernels/llvm/llvm_emit.h"
#include "kernels/llvm/llvm_jit.h"

namespace kiln::kir {

namespace {

jit::CompileOutputs compile_for_cpu(const Kernel& k, const std::string& cpu) {
  verify(k);
  const jit::CpuInfo info = jit::named_cpu(cpu);
  jit::LlvmJit jit(cpu);
  jit::CompileOutputs out;
  jit.compile_to_object(emit_llvm(k, k.name, info.vector_bits), &out);
  return out;
}

}  // namespace

std::string optimized_ir_for_cpu(const Kernel& k, const std::string& cpu) {
  return compile_for_cpu(k, cpu).optimized_ir;
}

std::string assembly_for_cpu(const Kernel& k, const std::string& cpu) {
  return compile_for_cpu(k, cpu).assembly;
}

}  // namespace kiln::kir
