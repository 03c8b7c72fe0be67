// Compiling kernel IR to callable kernels, with a cache: in memory (per process)
// and on disk under KILN_CACHE_DIR as object files, so a second process compiles
// nothing. Key = XXH3-128 of the canonical kernel IR + the emitted LLVM IR + CPU
// triple/name/features + LLVM and kiln versions. KILN_DUMP=dir also writes
// dir/kernels/<name>_<key>.{kir,ll,opt.ll,s} for every kernel not found in memory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/kernel_ir.h"

namespace kiln::kir {

/// A kernel ready to run: JIT-compiled code, or the reference interpreter when
/// kiln was built without LLVM. Immutable and thread-safe once made.
class LoadedKernel {
 public:
  /// Runs work items [begin, end) (see kernel_ir.h for the ABI).
  void operator()(int64_t begin, int64_t end, void* const* ptrs, const int64_t* sizes) const;
  /// Runs all work items, split over the runtime's thread pool in (begin, end)
  /// ranges (~32K elements per chunk).
  void launch(void* const* ptrs, const int64_t* sizes) const;
  const Kernel& kernel() const { return kernel_; }
  const std::string& key() const { return key_; }  ///< cache key (hex)
  KernelFn fn() const { return fn_; }              ///< null when interpreted

  LoadedKernel(Kernel k, std::string key, KernelFn fn);

 private:
  Kernel kernel_;
  std::string key_;
  KernelFn fn_ = nullptr;
};

/// Where a kernel came from (stats for the harness and tests).
enum class KernelSource : uint8_t { kMemory, kDisk, kCompiled, kInterpreted };

/// Figures of the process-wide cache.
struct KernelCacheStats {
  int64_t memory_hits = 0;
  int64_t disk_hits = 0;
  int64_t compiled = 0;
  int64_t disk_rebuilt = 0;  ///< corrupt disk entries detected and rebuilt
  double compile_ms = 0;     ///< total time in LLVM (emit + optimize + codegen)
  double load_ms = 0;        ///< total time loading disk entries
};

/// Returns the loaded kernel for `k` (from memory, disk, or compiled now).
/// Thread-safe; concurrent processes never corrupt a disk entry (temp + rename).
std::shared_ptr<const LoadedKernel> get_kernel(const Kernel& k, KernelSource* source = nullptr);
KernelCacheStats kernel_cache_stats();
/// Drops the in-memory cache (tests: the next get_kernel goes to disk).
void clear_memory_cache();
/// The disk cache directory in use ("" = disk cache disabled: KILN_CACHE_DIR=off).
std::string cache_dir();

// ---- files of the other disk caches in cache_dir() (the driver's plan cache) ----
/// Creates `dir` if needed; "" if only this user (or root) can change what it
/// holds, else why the cache refuses it (the kernel cache's own rules).
std::string check_cache_dir(const std::string& dir);
/// What read_cache_file found.
enum class CacheFileRead : uint8_t { kAbsent, kRefused, kRead };
/// Reads `path` into `out` unless it is not a regular file that only this user
/// or root can write (then kRefused, with `why`).
CacheFileRead read_cache_file(const std::string& path, std::string& out, std::string& why);
/// Writes `bytes` to `path` atomically (a unique temporary, mode 0644, then
/// rename): concurrent writers never leave a torn file. False (with `error`) on failure.
bool write_cache_file(const std::string& path, const std::string& bytes, std::string* error);

/// The optimized LLVM IR that `k` compiles to for the named x86-64 CPU
/// (jit::named_cpu: "znver3", "skylake-avx512"...), as get_kernel would emit it
/// there. Nothing runs; tests check other hosts' code with it.
std::string optimized_ir_for_cpu(const Kernel& k, const std::string& cpu);
/// The assembly of the same compilation (which registers the code really uses).
std::string assembly_for_cpu(const Kernel& k, const std::string& cpu);

}  // namespace kiln::kir
