// The LLVM backend's stand-in for builds without LLVM 19: reports it unavailable.
#include "kernels/llvm/llvm_jit.h"
#include "kiln/error.h"

namespace kiln::jit {

namespace {
[[noreturn]] void unavailable() {
  throw Error(
      "[llvm] kiln was built without LLVM 19 (install llvm-19-dev and libzstd-dev, "
      "then reconfigure)");
}
}  // namespace

bool available() {
  return false;
}
CpuInfo host_cpu() {
  unavailable();
}
CpuInfo named_cpu(const std::string&) {
  unavailable();
}
std::string llvm_version() {
  return "";
}

struct LlvmJit::Impl {};
LlvmJit::LlvmJit() {
  unavailable();
}
LlvmJit::LlvmJit(const std::string&) {
  unavailable();
}
LlvmJit::~LlvmJit() = default;
void* LlvmJit::compile(const std::string&, const std::string&, CompileOutputs*) {
  unavailable();
}
std::string LlvmJit::compile_to_object(const std::string&, CompileOutputs*) {
  unavailable();
}
void* LlvmJit::load_object(const std::string&, const std::string&) {
  unavailable();
}

}  // namespace kiln::jit
