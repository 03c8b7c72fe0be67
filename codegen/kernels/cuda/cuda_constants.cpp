// Each CUDA device's pool of constant scalars (cuda_constants.h): slabs of
// device memory (one cuMemAlloc each, never freed), a slot per distinct
// (dtype, bits) filled by one upload on its first use.
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

struct Pool {
  std::mutex mu;
  // Each value's own storage (a view of a slab slot, no owner: never freed),
  // so two constants never look like the same memory.
  std::unordered_map<Key, std::shared_ptr<StorageImpl>, KeyHash> values;
  CUdeviceptr slab = 0;
  size_t slab_used = kSlabSlots;  // slots taken in `slab` (full: none yet)
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

// A new slot of `p` holding `cpu_scalar`'s value, uploaded and complete (the
// next reader may be on another stream). Called with p.mu held.
std::shared_ptr<StorageImpl> add_value(Pool& p, const Tensor& cpu_scalar, int device) {
  use_device(device);
  if (p.slab_used == kSlabSlots) {
    check(driver().cuMemAlloc(&p.slab, kSlabSlots * kSlotBytes), "cuMemAlloc (constant pool)");
    p.slab_used = 0;
  }
  auto st = std::make_shared<StorageImpl>();
  st->data = reinterpret_cast<void*>(p.slab + p.slab_used * kSlotBytes);
  st->nbytes = cpu_scalar.element_size();
  st->device = Device::cuda(device);
  const Tensor slot = detail::tensor_over(st, {}, cpu_scalar.dtype());
  device_runtime(st->device, "constant pool").copy(slot, cpu_scalar);
  check(driver().cuStreamSynchronize(current_cu_stream(device)), "cuStreamSynchronize");
  ++p.slab_used;
  return st;
}

// Whether work queued on the current stream of `device` would be captured
// (a capture kiln did not start: cuStreamBeginCapture called directly).
bool stream_capturing(int device) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  check(driver().cuStreamIsCapturing(current_cu_stream(device), &status), "cuStreamIsCapturing");
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
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
    if (auto it = p.values.find(key); it != p.values.end()) {
      st = it->second;
      g_hits.fetch_add(1, std::memory_order_relaxed);
    } else if (p.values.size() >= capacity || capturing_graph() || stream_capturing(device)) {
      g_refused.fetch_add(1, std::memory_order_relaxed);
      return Tensor();
    } else {
      st = add_value(p, cpu_scalar, device);
      p.values.emplace(key, st);
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
