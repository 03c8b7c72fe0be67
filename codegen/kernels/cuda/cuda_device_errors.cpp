// Errors CUDA kernels record on the device, reported at the host's next
// synchronization (device_errors.h).
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "kernels/cuda/cuda_graphs.h"
#include "kernels/cuda/device_errors.h"
#include "kernels/cuda/driver.h"
#include "kernels/cuda/stream.h"
#include "kiln/error.h"

namespace kiln::cuda {
namespace {

// What the record holds, as the kernels write it (gpu_printer_index.cpp).
struct HostRecord {
  int32_t tag = 0;  // 0: no error
  int32_t pad = 0;
  int64_t value = 0;
};
static_assert(sizeof(HostRecord) == 16);

struct Site {
  std::string op;
  int64_t dim = 0, bound = 0;
};

std::mutex g_sites_mu;
std::vector<Site> g_sites;  // tag - 1 -> site; never shrinks (graphs replay old tags)
std::map<std::tuple<std::string, int64_t, int64_t>, int> g_tags;

int tag_of(const char* op, int64_t dim, int64_t bound) {
  std::lock_guard<std::mutex> lock(g_sites_mu);
  auto [it, added] = g_tags.try_emplace({op, dim, bound}, static_cast<int>(g_sites.size()) + 1);
  if (added) g_sites.push_back({op, dim, bound});
  return it->second;
}

Site site_of(int tag) {
  std::lock_guard<std::mutex> lock(g_sites_mu);
  KILN_ASSERT(tag > 0 && static_cast<size_t>(tag) <= g_sites.size(), "unknown error tag ", tag);
  return g_sites[static_cast<size_t>(tag) - 1];
}

struct Record {
  std::mutex mu;                   // one allocation, one read-and-reset at a time
  std::atomic<bool> armed{false};  // allocated: an index kernel may have written it
  CUdeviceptr at = 0;              // never freed: captured graphs write it
  CUstream reader = nullptr;       // the checks' own stream: a read waits for nothing else
};

Record& record(int device) {
  static const std::vector<std::unique_ptr<Record>>* all = [] {
    auto* v = new std::vector<std::unique_ptr<Record>>;
    for (int i = 0; i < driver().devices; ++i) v->push_back(std::make_unique<Record>());
    return v;
  }();
  KILN_ASSERT(device >= 0 && static_cast<size_t>(device) < all->size(), "device ", device);
  return *(*all)[static_cast<size_t>(device)];
}

}  // namespace

ErrorSlot index_error_slot(int device, const char* op, int64_t dim, int64_t bound) {
  Record& r = record(device);
  if (!r.armed.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(r.mu);
    if (!r.armed.load(std::memory_order_relaxed)) {
      use_device(device);
      RelaxedCapture relaxed;  // the first index launch may be inside a capture
      check(driver().cuMemAlloc(&r.at, sizeof(HostRecord)), "cuMemAlloc (error record)");
      check(driver().cuMemsetD8(r.at, 0, sizeof(HostRecord)), "cuMemsetD8 (error record)");
      r.armed.store(true, std::memory_order_release);
    }
  }
  return {r.at, tag_of(op, dim, bound)};
}

void check_device_errors(int device, const char* where) {
  Record& r = record(device);
  if (!r.armed.load(std::memory_order_acquire) || capturing_graph()) return;
  HostRecord h;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    use_device(device);
    if (!r.reader)
      check(driver().cuStreamCreateWithPriority(&r.reader, CU_STREAM_NON_BLOCKING, 0),
            "cuStreamCreateWithPriority (error record)");
    // Read through the driver (device memory is not host memory).
    check(driver().cuMemcpyDtoHAsync(&h, r.at, sizeof h, r.reader),
          "cuMemcpyDtoHAsync (error record)");
    check(driver().cuStreamSynchronize(r.reader), "cuStreamSynchronize (error record)");
    if (h.tag == 0) return;
    // Reset under the lock: a check racing this one finds it clear.
    static const HostRecord kClear{};
    check(driver().cuMemcpyHtoDAsync(r.at, &kClear, sizeof kClear, r.reader),
          "cuMemcpyHtoDAsync (error record)");
    check(driver().cuStreamSynchronize(r.reader), "cuStreamSynchronize (error record)");
  }
  const Site s = site_of(h.tag);
  const bool at_launch = std::string_view(where) == kAtLaunch;
  KILN_CHECK(false, "[", s.op, "] index ", h.value, " is out of bounds for dimension ", s.dim,
             " with size ", s.bound, " (a CUDA kernel on cuda:", device, " recorded it; found at ",
             at_launch ? "" : "the host's next synchronization with the device: ", where,
             at_launch ? "" : "; KILN_CUDA_SYNC=1 reports it at the launch", ")");
}

}  // namespace kiln::cuda
