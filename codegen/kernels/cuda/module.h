// Internal: device memory, loaded modules and kernel launches over the driver
// table (driver.h). The first pieces of the CUDA runtime: the caching
// allocator and streams build on these.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kernels/cuda/driver.h"
#include "kernels/kernel_ir.h"

namespace kiln::cuda {

/// One plain device allocation (cuMemAlloc), freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  /// Synchronous copies between host and this buffer (sizes must match).
  void upload(const void* host, size_t bytes);
  void download(void* host, size_t bytes) const;

 private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

/// A loaded cubin or PTX image (cuModuleLoadData), unloaded on destruction.
class Module {
 public:
  /// Loads `image` (a cubin, or NUL-terminated PTX) into the current context.
  explicit Module(const void* image);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  /// The kernel `name`; kiln::Error if the image has no such kernel.
  CUfunction function(const std::string& name) const;

 private:
  CUmodule mod_ = nullptr;
};

/// The prelude for the loaded device's dialect: cuda_prelude() on a GPU,
/// opencl_prelude() on the emulated device. Programs are this + printed kernels.
std::string device_prelude();

/// NVRTC output for the current device: a cubin for its architecture when
/// NVRTC supports it, else PTX for the newest architecture NVRTC knows (the
/// driver JITs it). `device` picks the architecture. On the emulated device:
/// the source itself (OpenCL C, built when the module loads).
std::vector<char> compile_for_device(const std::string& source, const std::string& name,
                                     int device);

/// nvrtc_compile's cubin (`cubin`) or NUL-terminated PTX for `source`, from
/// the disk cache under KILN_CACHE_DIR (the kernel cache's directory and file
/// rules) or compiled now and stored there. The key hashes everything the
/// output depends on: the source, NVRTC's version, the target and the options;
/// a damaged entry is compiled again and replaced.
std::vector<char> nvrtc_compile_cached(const std::string& source, const std::string& name, int arch,
                                       bool cubin);

/// Counters of nvrtc_compile_cached in this process.
struct NvrtcCacheStats {
  int64_t compiled = 0;   ///< compiled by NVRTC (no usable disk entry)
  int64_t disk_hits = 0;  ///< read from the disk cache
  int64_t rebuilt = 0;    ///< damaged disk entries compiled again
};
NvrtcCacheStats nvrtc_cache_stats();

/// KILN_CUDA_SYNC (read once): every launch and copy is waited for as it runs.
bool sync_launches();

/// With KILN_CUDA_SYNC=1: waits for the kernel just launched and raises a
/// kiln::Error naming `kernel` if it failed (otherwise nothing).
void after_launch(const std::string& kernel);

/// Launches printed kernel `fn` of `k` (gpu_printer.h's ABI) over the sizes
/// `sizes` with device pointers `ptrs` (one per argument) on `stream`. A
/// kernel with column sums takes `parts` (column_parts(); 0: nothing to run)
/// and the partials' addresses in place of its column-sum arguments. A row
/// kernel printed with `held` elements per thread (print_row_kernel; a held
/// twin: held_of(k)) gets a block fitted to its rows (row_block).
void launch_kernel(CUfunction fn, const kir::Kernel& k, const std::vector<CUdeviceptr>& ptrs,
                   const int64_t* sizes, CUstream stream = nullptr, int64_t parts = -1,
                   int held = 0);

/// A kernel's functions: `fn`, print_kernel's, and for a row kernel with
/// held_of(k) > 0, `held`, which compiles its held twin of the given count
/// per thread (print_held_twin) at its first call for that count and returns
/// it (empty: none).
struct KernelFns {
  CUfunction fn = nullptr;
  std::function<CUfunction(int)> held;
};
/// Whether rows of `inner` elements run held, `held` per thread: when they
/// fill more than half of the held slots of their fitted block (row_threads)
/// of at most `max_threads`. Fewer filled slots ran slower than streaming.
bool holds_row(int held, int64_t inner, int64_t max_threads = 1024);
/// The count per thread a twin holds rows of `inner` elements with, of a
/// kernel whose twins hold at most `max_held` (held_of): the smallest of
/// max_held / 4, / 2 and max_held that holds the row in one warp (rows of
/// 129-256 hold 8, 257-512 16, 513-1024 32 by default), else max_held where
/// holds_row says so (longer rows, several warps), else 0: the row streams.
/// On an H200 the twin holding 32 ran rows of 256 at less than half the
/// streaming kernel's speed (24 of each lane's 32 slots idle).
int twin_held(int max_held, int64_t inner, int64_t max_threads = 1024);
/// launch_kernel of print_kernel's functions `f`: the held twin where
/// holds_row says so, else the streaming kernel.
void launch_kernel(const KernelFns& f, const kir::Kernel& k, const std::vector<CUdeviceptr>& ptrs,
                   const int64_t* sizes, CUstream stream = nullptr);

/// The words of a batched launch's table on the loaded device
/// (gpu_printer_batch.h: kBatchWordsCuda on a GPU, kBatchWordsOpenCl on the
/// emulated device); batched kernels are printed for it.
int batch_words();

/// Launches batched kernel `fn` (print_batched_kernel of `k` with
/// batch_words()) over the instances whose argument addresses (one per
/// kernel argument) and sizes are ptrs[i] and sizes[i], on `stream`: each
/// instance gets launch_kernel's blocks for it (an empty one none), at most
/// batch_capacity() instances per launch, in order. Returns the launches made.
int64_t launch_batched(CUfunction fn, const kir::Kernel& k, std::span<void* const* const> ptrs,
                       std::span<const int64_t* const> sizes, CUstream stream = nullptr);

/// Threads per block of a row kernel over rows of `inner` elements: 1 for a
/// reassoc = false kernel; with held > 0 and rows of at most held * kMaxHeldThreads,
/// the fewest whole warps holding the row; else about 32 elements per thread
/// (64 to 256 threads). Never more than `max_threads` (max_block_threads).
int64_t row_threads(const kir::Kernel& k, int64_t inner, int held = 0, int64_t max_threads = 1024);
/// A row kernel's block: `x` threads per row, `y` rows (one per warp when y > 1).
struct RowBlock {
  int64_t x = 1, y = 1;
};
/// Warp rows: rows of at most this many elements (32 per lane at most) ...
constexpr int64_t kWarpRowsMaxInner = 1024;
/// ... when there are at least this many (fewer rows leave a block per row
/// more threads than warps per row would) ...
constexpr int64_t kWarpRowsMinRows = 2048;
/// ... run one warp per row, this many rows per block.
constexpr int64_t kWarpRowsPerBlock = 4;
/// When row kernels run as warp rows: never, for the sizes above (the
/// default), or at every size (the tests' way to run each row kernel so).
enum class WarpRows { kOff, kSizes, kAll };
/// KILN_CUDA_WARP_ROWS: 0, 1 (the default) or "all" (read once; else an error).
WarpRows warp_rows_mode();
/// KILN_CUDA_COLUMN_WARPS: 1 (the default) or 0, which keeps row kernels with
/// column sums in their block-per-part form (read once; else an error).
bool column_warps();
/// The block launch_kernel gives row kernel `k` over `rows` rows of `inner`
/// elements: warp rows (32 x up to kWarpRowsPerBlock) where `mode` allows
/// the sizes, the kernel has no column sums, sums in any order and, if held,
/// holds the row in one warp; with column sums, column warps where
/// column_warps() and the kernel sums in any order: 32 x kColumnWarps for rows
/// of at most column_warps_cap, 32 x kColumnWarps / 2 for twice that;
/// else {row_threads(), 1}.
RowBlock row_block(const kir::Kernel& k, int64_t rows, int64_t inner, int held, int64_t max_threads,
                   WarpRows mode = warp_rows_mode());
/// The most threads a block of `fn` can have on its device, in whole warps: a
/// GPU gives a kernel with many registers per thread fewer than 1024 (a held
/// row kernel at 158 registers on an H100: a 512-thread launch failed with
/// CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES). Cached per function.
int64_t max_block_threads(CUfunction fn);
/// The largest block a held row kernel is launched with (its registers must
/// fit: 65536 / 512 = 128 per thread).
constexpr int64_t kMaxHeldThreads = 512;

}  // namespace kiln::cuda
