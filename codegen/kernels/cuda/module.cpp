// Device buffers, modules and launches (module.h).
#include "kernels/cuda/module.h"

#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <mutex>
#include <unordered_map>

#include "kernels/cuda/gpu_printer.h"
#include "kernels/cuda/gpu_printer_batch.h"
#include "kernels/cuda/nvrtc_lib.h"
#include "kernels/cuda/pocl_driver.h"
#include "kernels/kernel_cache.h"
#include "kiln/env.h"
#include "kiln/error.h"

namespace kiln::cuda {

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  const CUresult r = driver().cuMemAlloc(&ptr_, bytes);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    size_t free_b = 0, total_b = 0;
    driver().cuMemGetInfo(&free_b, &total_b);
    KILN_CHECK(false, "[cuda] out of memory: asked for ", bytes, " bytes, ", free_b,
               " bytes free of ", total_b);
  }
  check(r, "cuMemAlloc");
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) driver().cuMemFree(ptr_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) driver().cuMemFree(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = 0;
  }
  return *this;
}

void DeviceBuffer::upload(const void* host, size_t bytes) {
  KILN_CHECK(bytes == bytes_, "[cuda] upload of ", bytes, " bytes into a buffer of ", bytes_);
  if (bytes) check(driver().cuMemcpyHtoD(ptr_, host, bytes), "cuMemcpyHtoD");
}

void DeviceBuffer::download(void* host, size_t bytes) const {
  KILN_CHECK(bytes == bytes_, "[cuda] download of ", bytes, " bytes from a buffer of ", bytes_);
  if (bytes) check(driver().cuMemcpyDtoH(host, ptr_, bytes), "cuMemcpyDtoH");
}

Module::Module(const void* image) {
  check(driver().cuModuleLoadData(&mod_, image), "cuModuleLoadData");
}

Module::~Module() {
  if (mod_) driver().cuModuleUnload(mod_);
}

CUfunction Module::function(const std::string& name) const {
  CUfunction f = nullptr;
  const CUresult r = driver().cuModuleGetFunction(&f, mod_, name.c_str());
  if (r == CUDA_ERROR_NOT_FOUND)
    KILN_CHECK(false, "[cuda] module has no kernel '", name, "' (", error_name(r), ")");
  check(r, "cuModuleGetFunction");
  return f;
}

std::string device_prelude() {
  return driver().emulated ? opencl_prelude() : cuda_prelude();
}

std::vector<char> compile_for_device(const std::string& source, const std::string& name,
                                     int device) {
  if (driver().emulated) {  // the emulated device builds OpenCL C source itself
    std::vector<char> image(source.begin(), source.end());
    image.push_back('\0');
    return image;
  }
  const DeviceInfo info = device_info(device);
  const int arch = info.cc_major * 10 + info.cc_minor;
  const std::vector<int> archs = nvrtc_archs();
  if (std::find(archs.begin(), archs.end(), arch) != archs.end())
    return nvrtc_compile_cached(source, name, arch, /*cubin=*/true);
  // A device newer than this NVRTC: PTX of the newest older architecture.
  int best = 0;
  for (int a : archs)
    if (a <= arch) best = std::max(best, a);
  KILN_CHECK(best > 0, "[cuda] NVRTC ", nvrtc_version(), " cannot compile for device ", device,
             " (", info.name, ", sm_", arch, ")");
  return nvrtc_compile_cached(source, name, best, /*cubin=*/false);
}

namespace {

std::mutex g_nvrtc_mu;
NvrtcCacheStats g_nvrtc_stats;

// An entry: a header line naming the payload's size and XXH64, then the payload.
std::string nvrtc_entry(const std::vector<char>& image) {
  return str("kiln-nvrtc 1 ", image.size(), " ", XXH64(image.data(), image.size(), 0), "\n") +
         std::string(image.begin(), image.end());
}

// The payload of a well-formed entry, else nothing.
bool read_nvrtc_entry(const std::string& bytes, std::vector<char>& image) {
  const size_t nl = bytes.find('\n');
  if (nl == std::string::npos) return false;
  unsigned long long size = 0, sum = 0;
  if (std::sscanf(bytes.substr(0, nl).c_str(), "kiln-nvrtc 1 %llu %llu", &size, &sum) != 2)
    return false;
  if (bytes.size() - nl - 1 != size) return false;
  image.assign(bytes.begin() + static_cast<std::ptrdiff_t>(nl) + 1, bytes.end());
  return XXH64(image.data(), image.size(), 0) == sum;
}

}  // namespace

std::vector<char> nvrtc_compile_cached(const std::string& source, const std::string& name, int arch,
                                       bool cubin) {
  std::string key_text = str("kiln-nvrtc 1\nnvrtc ", nvrtc_version(), "\n");
  for (const std::string& o : nvrtc_options(arch, cubin)) key_text += o + "\n";
  key_text += source;
  const XXH128_hash_t h = XXH3_128bits(key_text.data(), key_text.size());
  char hex[40];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  std::string dir = kir::cache_dir();
  if (!dir.empty() && !kir::check_cache_dir(dir).empty()) dir.clear();  // unsafe: compile only
  const std::string path = str(dir, "/nvrtc_", hex, cubin ? ".cubin" : ".ptx");
  bool damaged = false;
  if (!dir.empty()) {
    std::string bytes, why;
    std::vector<char> image;
    const kir::CacheFileRead got = kir::read_cache_file(path, bytes, why);
    if (got == kir::CacheFileRead::kRead && read_nvrtc_entry(bytes, image)) {
      std::lock_guard<std::mutex> lock(g_nvrtc_mu);
      ++g_nvrtc_stats.disk_hits;
      return image;
    }
    damaged = got == kir::CacheFileRead::kRead;
    if (got == kir::CacheFileRead::kRefused) dir.clear();  // someone else's file: leave it
  }
  const NvrtcOutput out = nvrtc_compile(source, name, arch, cubin);
  std::vector<char> image = cubin ? out.cubin : std::vector<char>(out.ptx.begin(), out.ptx.end());
  if (!cubin && (image.empty() || image.back() != '\0'))
    image.push_back('\0');  // cuModuleLoadData's PTX
  if (!dir.empty()) kir::write_cache_file(path, nvrtc_entry(image), nullptr);  // best effort
  std::lock_guard<std::mutex> lock(g_nvrtc_mu);
  ++g_nvrtc_stats.compiled;
  if (damaged) ++g_nvrtc_stats.rebuilt;
  return image;
}

NvrtcCacheStats nvrtc_cache_stats() {
  std::lock_guard<std::mutex> lock(g_nvrtc_mu);
  return g_nvrtc_stats;
}

bool sync_launches() {
  static const bool sync = env::get_flag("KILN_CUDA_SYNC", false);
  return sync;
}

void after_launch(const std::string& kernel) {
  if (!sync_launches()) return;
  const CUresult r = driver().cuCtxSynchronize();
  KILN_CHECK(r == CUDA_SUCCESS, "[cuda] kernel '", kernel, "' failed: ", error_name(r), " (",
             static_cast<int>(r), ")");
}

int64_t row_threads(const kir::Kernel& k, int64_t inner, int held, int64_t max_threads) {
  if (!k.reassoc) return 1;  // sums in index order
  // A held kernel on a smaller block than the row needs streams the row.
  if (held > 0 && inner <= held * kMaxHeldThreads)
    return std::min(max_threads, std::max<int64_t>(32, (inner + held * 32 - 1) / (held * 32) * 32));
  // About 32 elements per thread, 64 to 256 threads: on an H200 rows of 1024
  // ran best with 64 and rows of 4096 with 128 (bench/RESULTS.md).
  int64_t threads = 64;
  while (threads < 256 && threads * 32 < inner) threads *= 2;
  return std::min(threads, max_threads);
}

bool column_warps() {
  static const bool on = env::get_flag("KILN_CUDA_COLUMN_WARPS", true);
  return on;
}

WarpRows warp_rows_mode() {
  static const WarpRows mode = [] {
    const std::string v = env::get_choice("KILN_CUDA_WARP_ROWS", {"0", "1", "all"}, "1");
    return v == "0" ? WarpRows::kOff : v == "all" ? WarpRows::kAll : WarpRows::kSizes;
  }();
  return mode;
}

RowBlock row_block(const kir::Kernel& k, int64_t rows, int64_t inner, int held, int64_t max_threads,
                   WarpRows mode) {
  // A block per row runs two reductions' barriers and shared partials per row
  // on 2 warps (rows of 1024 on 64 threads): short rows are then bound by
  // those latencies, not by memory. One warp per row reduces with shuffles
  // alone and keeps twice the rows in flight per SM.
  const bool sizes =
      mode == WarpRows::kAll || (mode == WarpRows::kSizes && inner <= kWarpRowsMaxInner &&
                                 rows >= kWarpRowsMinRows && (held <= 0 || inner <= held * 32));
  if (sizes && k.reassoc && !has_column_sums(k) && max_threads >= 32)
    return {32, std::min(kWarpRowsPerBlock, max_threads / 32)};
  // Column sums: the column-warps form where the row fits its warp's share
  // of the shared partials (half the warps: rows twice as long).
  if (has_column_sums(k) && k.reassoc && column_warps())
    for (const int64_t w : {int64_t{kColumnWarps}, int64_t{kColumnWarps / 2}})
      if (w > 1 && inner <= column_warps_cap(k) * kColumnWarps / w && max_threads >= 32 * w)
        return {32, w};
  return {row_threads(k, inner, held, max_threads), 1};
}

int64_t max_block_threads(CUfunction fn) {
  static std::mutex mu;
  static std::unordered_map<CUfunction, int64_t> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(fn);
  if (it != known.end()) return it->second;
  int v = 0;
  check(driver().cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn),
        "cuFuncGetAttribute");
  const int64_t threads = std::max<int64_t>(32, v / 32 * 32);
  known.emplace(fn, threads);
  return threads;
}

namespace {

// A pointwise kernel's block: 256 threads (fewer where its registers allow fewer).
int64_t pointwise_threads(CUfunction fn) {
  return std::min<int64_t>(256, max_block_threads(fn));
}

// Blocks for n elements: each thread takes 4 elements per grid-stride step
// (the printer's unroll), at most 2^16 blocks (the 32-bit loops' bound).
int64_t pointwise_blocks(int64_t n, int64_t threads) {
  return std::min<int64_t>((n + threads * 4 - 1) / (threads * 4), int64_t{1} << 16);
}

}  // namespace

void launch_kernel(CUfunction fn, const kir::Kernel& k, const std::vector<CUdeviceptr>& ptrs,
                   const int64_t* sizes, CUstream stream, int64_t parts, int held) {
  KILN_CHECK(ptrs.size() == k.args.size(), "[cuda] kernel '", k.name, "' takes ", k.args.size(),
             " buffers, got ", ptrs.size());
  const int64_t n = kir::work_items(k, sizes);
  if (n <= 0) return;
  for (int d = 0; d + 1 < k.rank; ++d)
    if (sizes[d] <= 0) return;
  std::vector<long long> scalars;
  scalars.push_back(n);
  for (int d = 0; d < k.rank; ++d) scalars.push_back(sizes[d]);
  std::vector<void*> params;
  for (const CUdeviceptr& p : ptrs) params.push_back(const_cast<CUdeviceptr*>(&p));
  const bool sums = has_column_sums(k);
  if (sums) {
    KILN_CHECK(parts >= 0, "[cuda] kernel '", k.name, "' has column sums: launch it with parts");
    if (parts == 0) return;
    scalars.push_back(parts);
  }
  for (long long& s : scalars) params.push_back(&s);
  int64_t threads, blocks, rows_per_block = 1;
  if (sums && !k.has_reductions()) {
    // One thread per column and part, columns in tiles of `threads`.
    const int64_t inner = sizes[k.rank - 1];
    threads = std::min<int64_t>({256, (inner + 31) / 32 * 32, max_block_threads(fn)});
    blocks = std::min<int64_t>(parts * ((inner + threads - 1) / threads), int64_t{1} << 16);
  } else if (k.has_reductions()) {
    // One block per row, or one warp (row_block).
    const RowBlock b = row_block(k, n, sizes[k.rank - 1], held, max_block_threads(fn));
    threads = b.x;
    rows_per_block = b.y;
    blocks = std::min<int64_t>(sums ? parts : (n + b.y - 1) / b.y, int64_t{1} << 16);
  } else {
    threads = pointwise_threads(fn);
    blocks = pointwise_blocks(n, threads);
  }
  check(driver().cuLaunchKernel(
            fn, static_cast<unsigned>(blocks), 1, 1, static_cast<unsigned>(threads),
            static_cast<unsigned>(rows_per_block), 1, 0, stream, params.data(), nullptr),
        "cuLaunchKernel");
  after_launch(k.name);
}

bool holds_row(int held, int64_t inner, int64_t max_threads) {
  if (held <= 0 || inner > held * std::min(kMaxHeldThreads, max_threads)) return false;
  const int64_t threads = std::max<int64_t>(32, (inner + held * 32 - 1) / (held * 32) * 32);
  return 2 * inner > held * threads;
}

int twin_held(int max_held, int64_t inner, int64_t max_threads) {
  for (const int h : {max_held / 4, max_held / 2})
    if (h > 0 && inner <= 32 * h && holds_row(h, inner, max_threads)) return h;
  return holds_row(max_held, inner, max_threads) ? max_held : 0;
}

void launch_kernel(const KernelFns& f, const kir::Kernel& k, const std::vector<CUdeviceptr>& ptrs,
                   const int64_t* sizes, CUstream stream) {
  // Rows too short or too long for a held block never compile a twin.
  const int held = f.held ? twin_held(held_of(k), sizes[k.rank - 1]) : 0;
  if (held > 0) {
    const CUfunction twin = f.held(held);
    if (holds_row(held, sizes[k.rank - 1], max_block_threads(twin)))
      return launch_kernel(twin, k, ptrs, sizes, stream, -1, held);
  }
  launch_kernel(f.fn, k, ptrs, sizes, stream);
}

int batch_words() {
  return driver().emulated ? kBatchWordsOpenCl : kBatchWordsCuda;
}

int64_t launch_batched(CUfunction fn, const kir::Kernel& k, std::span<void* const* const> ptrs,
                       std::span<const int64_t* const> sizes, CUstream stream) {
  KILN_CHECK(ptrs.size() == sizes.size(), "[cuda] batched launch of kernel '", k.name, "' with ",
             ptrs.size(), " pointer lists and ", sizes.size(), " size lists");
  const int words = batch_words();
  const auto cap = static_cast<size_t>(batch_capacity(k, words));
  const int64_t threads = pointwise_threads(fn);
  const bool emulated = driver().emulated;
  std::vector<uint64_t> addresses;  // every instance's, translated on the emulated device
  std::vector<BatchInstance> live;  // the instances with work, in order
  addresses.reserve(ptrs.size() * k.args.size());
  live.reserve(ptrs.size());
  for (size_t i = 0; i < ptrs.size(); ++i) {
    const int64_t n = kir::work_items(k, sizes[i]);
    if (n <= 0) continue;
    for (size_t a = 0; a < k.args.size(); ++a) {
      auto p = reinterpret_cast<CUdeviceptr>(ptrs[i][a]);
      if (emulated && p) {
        // Its kernels address PoCL's shared virtual memory: the table holds
        // the host address of each device address (a pointer parameter is
        // translated by the emulated launch itself).
        void* h = emulated_host_address(p, 0);
        KILN_CHECK(h, "[cuda] batched launch of kernel '", k.name, "': argument ", a,
                   " of instance ", i, ": ", take_emulated_detail());
        p = reinterpret_cast<CUdeviceptr>(h);
      }
      addresses.push_back(static_cast<uint64_t>(p));
    }
    live.push_back({nullptr, sizes[i], pointwise_blocks(n, threads)});
  }
  for (size_t j = 0; j < live.size(); ++j) live[j].ptrs = addresses.data() + j * k.args.size();
  std::array<int64_t, kBatchWordsCuda> table;  // copied by each launch
  static_assert(kBatchWordsOpenCl <= kBatchWordsCuda);
  int64_t launches = 0;
  for (size_t at = 0; at < live.size(); at += cap) {
    const std::span<const BatchInstance> part(live.data() + at, std::min(cap, live.size() - at));
    batch_table(k, std::span(table.data(), static_cast<size_t>(words)), part);
    int64_t blocks = 0;
    for (const BatchInstance& in : part) blocks += in.blocks;
    void* params[] = {table.data()};
    check(driver().cuLaunchKernel(fn, static_cast<unsigned>(blocks), 1, 1,
                                  static_cast<unsigned>(threads), 1, 1, 0, stream, params, nullptr),
          "cuLaunchKernel");
    after_launch(k.name);
    ++launches;
  }
  return launches;
}

}  // namespace kiln::cuda
