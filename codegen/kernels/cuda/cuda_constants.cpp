// Each CUDA device's pool of constant scalars (cuda_constants.h): slabs of
// device memory (one cuMemAlloc each, never freed), a slot per distinct
// (dtype, bits) filled by one upload on its first use, never waited for by
// the host (an event orders readers on other streams).
#include "kernels/cuda/cuda_constants.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kernels/cuda/cuda_graphs.h"
#include "kernels/cuda/driver.h"
#include "kernels/cuda/stream.h"
#include "kiln/device_runtime.h"
#include "tensor_storage.h"

namespace kiln::cuda {
namespace {

constexpr size_t kSlotBytes = 8;        // the widest dtype; every dtype's alignment
constexpr size_t kSlabSlots = 8192;     // 64 KiB per cuMemAlloc
std::atomic<size_t> g_capacity{65536};  // values per device

std::atomic<int64_t> g_hits{0}, g_refused{0}, g_values{0};

// (dtype, the value's bits): equal bits share a slot, whatever they mean.
struct Key {
  uint64_t bits = 0;
  DType dtype = DType::f32;
  bool operator==(const Key&) const = default;
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    return std::hash<uint64_t>()(k.bits * 31 + static_cast<uint64_t>(k.dtype));
  }
};

// One value: its own storage (a view of a slab slot, no owner: never freed),
// so two constants never look like the same memory; while its upload may
// still be in flight, the event after it and the stream it was queued on
// (held: its handle is not reused meanwhile).
struct Slot {
  std::shared_ptr<StorageImpl> storage;
  CUevent uploaded = nullptr;  // nullptr once the upload is known complete
  StreamPtr stream;
};

struct Pool {
  std::mutex mu;
  std::unordered_map<Key, Slot, KeyHash> values;
  CUdeviceptr slab = 0;
  size_t slab_used = kSlabSlots;  // slots taken in `slab` (full: none yet)
  std::vector<CUevent> spare;     // events of completed uploads, for the next ones
};

Pool& pool(int device) {
  static auto* all = [] {  // never destroyed: kernels may run past exit's destructors
    auto* v = new std::vector<std::unique_ptr<Pool>>;
    for (int i = 0; i < driver().devices; ++i) v->push_back(std::make_unique<Pool>());
    return v;
  }();
  KILN_ASSERT(device >= 0 && static_cast<size_t>(device) < all->size(), "device ", device);
  return *(*all)[static_cast<size_t>(device)];
}

// A new slot of `p` holding `cpu_scalar`'s value, its upload queued on the
// current stream with an event after it (no wait: an eager program keeps
// running ahead of the device). Called with p.mu held.
Slot add_value(Pool& p, const Tensor& cpu_scalar, int device) {
  use_device(device);
  if (p.slab_used == kSlabSlots) {
    check(driver().cuMemAlloc(&p.slab, kSlabSlots * kSlotBytes), "cuMemAlloc (constant pool)");
    p.slab_used = 0;
  }
  Slot s;
  s.storage = std::make_shared<StorageImpl>();
  s.storage->data = reinterpret_cast<void*>(p.slab + p.slab_used * kSlotBytes);
  s.storage->nbytes = cpu_scalar.element_size();
  s.storage->device = Device::cuda(device);
  const Tensor slot = detail::tensor_over(s.storage, {}, cpu_scalar.dtype());
  device_runtime(s.storage->device, "constant pool").copy(slot, cpu_scalar);
  s.stream = current_stream_impl(device);
  if (p.spare.empty()) {
    check(driver().cuEventCreate(&s.uploaded, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  } else {
    s.uploaded = p.spare.back();
    p.spare.pop_back();
  }
  check(driver().cuEventRecord(s.uploaded, s.stream->handle), "cuEventRecord");
  ++p.slab_used;
  return s;
}

// Whether `s`'s upload is complete, its event back in `p`'s spares once it is.
bool upload_done(Pool& p, Slot& s) {
  if (!s.uploaded) return true;
  // The event was recorded outside any capture, so asking about it is safe
  // in one; a GPU still refuses the query (and ends the capture) unless this
  // thread's capture mode is relaxed.
  const RelaxedCapture relaxed(true);
  const CUresult r = driver().cuEventQuery(s.uploaded);
  if (r == CUDA_ERROR_NOT_READY) return false;
  check(r, "cuEventQuery");
  p.spare.push_back(s.uploaded);
  s.uploaded = nullptr;
  s.stream.reset();
  return true;
}

}  // namespace

Tensor pooled_constant(const Tensor& cpu_scalar, int device) {
  const size_t capacity = g_capacity.load(std::memory_order_relaxed);
  if (capacity == 0 || !cpu_scalar.device().is_cpu() || cpu_scalar.dim() != 0 ||
      cpu_scalar.is_symbolic())
    return Tensor();
  Key key;
  key.dtype = cpu_scalar.dtype();
  std::memcpy(&key.bits, cpu_scalar.data_ptr(), cpu_scalar.element_size());
  Pool& p = pool(device);
  std::shared_ptr<StorageImpl> st;
  {
    std::lock_guard<std::mutex> lock(p.mu);
    auto it = p.values.find(key);
    // Asked only where it matters (a driver call): a value new or in flight.
    auto capturing = [device] { return capturing_on(current_cu_stream(device)); };
    if (it != p.values.end() && !upload_done(p, it->second)) {
      // In flight: work on the uploading stream is ordered after it; another
      // stream waits for it; a graph being captured cannot (the upload
      // belongs to no graph, and a replay may run on any stream): a copy.
      if (capturing()) {
        g_refused.fetch_add(1, std::memory_order_relaxed);
        return Tensor();
      }
      const CUstream cur = current_cu_stream(device);
      if (cur != it->second.stream->handle)
        check(driver().cuStreamWaitEvent(cur, it->second.uploaded, 0), "cuStreamWaitEvent");
    }
    if (it != p.values.end()) {
      st = it->second.storage;
      g_hits.fetch_add(1, std::memory_order_relaxed);
    } else if (p.values.size() >= capacity || capturing()) {
      g_refused.fetch_add(1, std::memory_order_relaxed);
      return Tensor();
    } else {
      Slot s = add_value(p, cpu_scalar, device);
      st = s.storage;
      p.values.emplace(key, std::move(s));
      g_values.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return detail::tensor_over(std::move(st), {}, key.dtype);
}

ConstantPoolStats constant_pool_stats() {
  return {g_values.load(), g_hits.load(), g_refused.load()};
}

void set_constant_pool_capacity(size_t values) {
  g_capacity.store(values);
}

}  // namespace kiln::cuda
