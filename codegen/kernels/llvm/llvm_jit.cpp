// ORC LLJIT for the host CPU. The optimization pipeline is built with the
// host TargetMachine: with a generic PassBuilder, TargetTransformInfo knows no
// vector widths and loops are not vectorized.
#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/Analysis/TargetTransformInfo.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/DiagnosticInfo.h>
#include <llvm/IR/DiagnosticPrinter.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/IRReader/IRReader.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <mutex>

#include "kernels/llvm/llvm_jit.h"
#include "kiln/error.h"

namespace kiln::jit {

namespace {

std::string message(llvm::Error e) {
  return llvm::toString(std::move(e));
}

template <typename T>
T unwrap(llvm::Expected<T> v, const char* what) {
  if (!v) throw Error(str("[llvm] ", what, ": ", message(v.takeError())));
  return std::move(*v);
}

void init_llvm() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
  });
}

// Position-independent, small code model: what JITLink links, so object files
// written to the disk cache load back into any process.
llvm::orc::JITTargetMachineBuilder configured(llvm::orc::JITTargetMachineBuilder jtmb) {
  jtmb.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  jtmb.setRelocationModel(llvm::Reloc::PIC_);
  jtmb.setCodeModel(llvm::CodeModel::Small);
  return jtmb;
}

llvm::orc::JITTargetMachineBuilder host_builder() {
  init_llvm();
  return configured(
      unwrap(llvm::orc::JITTargetMachineBuilder::detectHost(), "detecting the host CPU"));
}

// The process's triple with another CPU's name and default features.
llvm::orc::JITTargetMachineBuilder named_builder(const std::string& cpu) {
  init_llvm();
  const std::string triple = llvm::sys::getProcessTriple();
  std::string err;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, err);
  KILN_CHECK(target != nullptr, "[llvm] no target for ", triple, ": ", err);
  // Checked before a TargetMachine exists: LLVM would print a warning and go on.
  std::unique_ptr<llvm::MCSubtargetInfo> sti(target->createMCSubtargetInfo(triple, "", ""));
  KILN_CHECK(sti && sti->isCPUStringValid(cpu), "[llvm] unknown CPU '", cpu, "' for ", triple);
  llvm::orc::JITTargetMachineBuilder jtmb{llvm::Triple(triple)};
  jtmb.setCPU(cpu);
  return configured(std::move(jtmb));
}

// The widest fixed vector register the target's cost model uses, read from
// the TargetTransformInfo of a function without attributes, like every kernel.
int vector_register_bits(llvm::TargetMachine& tm) {
  llvm::LLVMContext ctx;
  llvm::Module m("kiln_probe", ctx);
  m.setDataLayout(tm.createDataLayout());
  auto* fn = llvm::Function::Create(llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), false),
                                    llvm::Function::ExternalLinkage, "kiln_probe", m);
  return static_cast<int>(tm.getTargetTransformInfo(*fn)
                              .getRegisterBitWidth(llvm::TargetTransformInfo::RGK_FixedWidthVector)
                              .getFixedValue());
}

CpuInfo describe(llvm::orc::JITTargetMachineBuilder jtmb) {
  auto tm = unwrap(jtmb.createTargetMachine(), "creating the target machine");
  const llvm::MCSubtargetInfo& sti = *tm->getMCSubtargetInfo();
  CpuInfo c;
  c.triple = jtmb.getTargetTriple().str();
  c.cpu = jtmb.getCPU();
  c.features = jtmb.getFeatures().getString();
  c.avx2 = sti.checkFeatures("+avx2");
  c.fma = sti.checkFeatures("+fma");
  c.avx512f = sti.checkFeatures("+avx512f");
  // AVX-512 CPUs get their 512-bit registers, as kiln's eager loops do (the
  // x86-64-v4 dispatch), though LLVM tunes Intel's server cores down to 256
  // for Skylake-SP's clock drop: on a Sapphire/Emerald Rapids host that ran
  // erf and GELU kernels at half the eager loops' width (bench/RESULTS.md).
  // Each kernel asks for this width with "prefer-vector-width" (llvm_emit).
  c.vector_bits = c.avx512f ? 512 : vector_register_bits(*tm);
  return c;
}

}  // namespace

bool available() {
  return true;
}

std::string llvm_version() {
  return LLVM_VERSION_STRING;
}

CpuInfo host_cpu() {
  static const CpuInfo host = describe(host_builder());  // detection costs milliseconds
  return host;
}

CpuInfo named_cpu(const std::string& cpu) {
  return describe(named_builder(cpu));
}

struct LlvmJit::Impl {
  std::mutex mu;
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::unique_ptr<llvm::TargetMachine> tm;
  int next_dylib = 0;
  std::string foreign_cpu;  // set when the target is not the host: no code may run

  void init(llvm::orc::JITTargetMachineBuilder jtmb) {
    tm = unwrap(jtmb.createTargetMachine(), "creating the target machine");
    jit = unwrap(llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(jtmb).create(),
                 "creating the JIT");
  }
  void check_runnable() const {
    KILN_CHECK(foreign_cpu.empty(), "[llvm] this JIT targets CPU '", foreign_cpu,
               "', not the host: it only writes object files");
  }
};

LlvmJit::LlvmJit() : impl_(std::make_unique<Impl>()) {
  impl_->init(host_builder());
}

LlvmJit::LlvmJit(const std::string& cpu) : impl_(std::make_unique<Impl>()) {
  impl_->init(named_builder(cpu));
  impl_->foreign_cpu = cpu;
}

LlvmJit::~LlvmJit() = default;

namespace {

// Parses, verifies and optimizes (O3 with the host's TargetTransformInfo and
// library info, loop and SLP vectorizers on) one module.
std::unique_ptr<llvm::Module> optimized_module(const std::string& ir_text, llvm::LLVMContext& ctx,
                                               llvm::TargetMachine& tm,
                                               const llvm::DataLayout& dl) {
  // Remarks are dropped: every inner loop asks for a vector width (llvm_emit),
  // and loops that cannot vectorize (in-order f64 sums, libm calls) would print
  // one "loop not vectorized" remark each. Warnings and errors are printed.
  ctx.setDiagnosticHandlerCallBack([](const llvm::DiagnosticInfo* di, void*) {
    if (di->getSeverity() == llvm::DS_Remark || di->getSeverity() == llvm::DS_Note) return;
    std::string text;
    llvm::raw_string_ostream os(text);
    llvm::DiagnosticPrinterRawOStream printer(os);
    di->print(printer);
    llvm::errs() << "kiln: [llvm] " << os.str() << "\n";
  });
  llvm::SMDiagnostic diag;
  std::unique_ptr<llvm::Module> m =
      llvm::parseIR(llvm::MemoryBufferRef(ir_text, "kiln_kernel"), diag, ctx);
  if (!m) {
    std::string text;
    llvm::raw_string_ostream os(text);
    diag.print("kiln_kernel", os);
    throw Error(str("[llvm] invalid IR: ", os.str()));
  }
  m->setDataLayout(dl);
  m->setTargetTriple(tm.getTargetTriple().str());
  {
    std::string text;
    llvm::raw_string_ostream os(text);
    if (llvm::verifyModule(*m, &os))
      throw Error(str("[llvm] the module does not verify: ", os.str()));
  }
  llvm::PipelineTuningOptions pto;
  pto.LoopVectorization = true;
  pto.SLPVectorization = true;
  llvm::PassBuilder pb(&tm, pto);
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::TargetLibraryInfoImpl tlii(tm.getTargetTriple());
  fam.registerPass([&] { return llvm::TargetLibraryAnalysis(tlii); });  // before the defaults
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(*m, mam);
  return m;
}

// Machine code of `m` as assembly text or an object file.
std::string emit_file(llvm::Module& m, llvm::TargetMachine& tm, llvm::CodeGenFileType type) {
  llvm::SmallString<0> buf;
  llvm::raw_svector_ostream os(buf);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, type))
    throw Error("[llvm] the target cannot emit this file type");
  pm.run(m);
  return std::string(buf.str());
}

void fill_outputs(llvm::Module& m, llvm::TargetMachine& tm, CompileOutputs* outputs) {
  if (!outputs) return;
  outputs->optimized_ir.clear();
  llvm::raw_string_ostream os(outputs->optimized_ir);
  m.print(os, nullptr);
  os.flush();
  // From a clone: emitting runs codegen passes that change the module.
  auto clone = llvm::CloneModule(m);
  outputs->assembly = emit_file(*clone, tm, llvm::CodeGenFileType::AssemblyFile);
}

}  // namespace

// Adds a module or object to a fresh JITDylib (kernels may reuse symbol names
// across modules) and returns the address of `symbol`.
template <typename Add>
static void* add_and_lookup(llvm::orc::LLJIT& jit, int& next_dylib, const std::string& symbol,
                            Add&& add) {
  auto jd_or = jit.createJITDylib(str("kiln_", next_dylib++));
  if (!jd_or) throw Error(str("[llvm] creating a JITDylib: ", message(jd_or.takeError())));
  llvm::orc::JITDylib& jd = *jd_or;
  jd.addToLinkOrder(jit.getMainJITDylib());
  if (auto err = add(jd)) throw Error(str("[llvm] adding code: ", message(std::move(err))));
  auto addr = unwrap(jit.lookup(jd, symbol), str("looking up ", symbol).c_str());
  return addr.toPtr<void*>();
}

void* LlvmJit::compile(const std::string& ir_text, const std::string& symbol,
                       CompileOutputs* outputs) {
  impl_->check_runnable();
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto ctx = std::make_unique<llvm::LLVMContext>();
  auto m = optimized_module(ir_text, *ctx, *impl_->tm, impl_->jit->getDataLayout());
  fill_outputs(*m, *impl_->tm, outputs);
  return add_and_lookup(*impl_->jit, impl_->next_dylib, symbol, [&](llvm::orc::JITDylib& jd) {
    return impl_->jit->addIRModule(jd, llvm::orc::ThreadSafeModule(std::move(m), std::move(ctx)));
  });
}

std::string LlvmJit::compile_to_object(const std::string& ir_text, CompileOutputs* outputs) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  llvm::LLVMContext ctx;
  auto m = optimized_module(ir_text, ctx, *impl_->tm, impl_->jit->getDataLayout());
  fill_outputs(*m, *impl_->tm, outputs);
  return emit_file(*m, *impl_->tm, llvm::CodeGenFileType::ObjectFile);
}

void* LlvmJit::load_object(const std::string& object, const std::string& symbol) {
  impl_->check_runnable();
  std::lock_guard<std::mutex> lock(impl_->mu);
  return add_and_lookup(*impl_->jit, impl_->next_dylib, symbol, [&](llvm::orc::JITDylib& jd) {
    return impl_->jit->addObjectFile(
        jd, llvm::MemoryBuffer::getMemBufferCopy(object, str("kiln_object_", symbol)));
  });
}

}  // namespace kiln::jit
