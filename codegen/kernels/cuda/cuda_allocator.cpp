// The caching allocators of device and pinned host memory (cuda_allocator.h).
#include "kernels/cuda/cuda_allocator.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kernels/cuda/driver.h"
#include "kiln/error.h"
#include "kiln/tensor.h"

namespace kiln::cuda {
namespace {

// Blocks are kept per rounded size: 512 B granules, 2 MiB ones above 1 MiB.
size_t round_size(size_t n) {
  n = std::max<size_t>(n, 1);
  const size_t g = n > (size_t{1} << 20) ? (size_t{2} << 20) : 512;
  return (n + g - 1) / g * g;
}

// An event recorded now on `s`, or nullptr when the driver refused (the
// caller then waits some other way). The device's context is current.
CUevent record_event(const StreamPtr& s, std::vector<CUevent>& pool) {
  CUevent e = nullptr;
  if (!pool.empty()) {
    e = pool.back();
    pool.pop_back();
  } else if (driver().cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
    return nullptr;
  }
  if (driver().cuEventRecord(e, s->handle) != CUDA_SUCCESS) {
    pool.push_back(e);
    return nullptr;
  }
  return e;
}

// Whether the work before `e` has finished (errors count as finished: the
// context is unusable then and nothing waits on the block any more).
bool finished(CUevent e) {
  return driver().cuEventQuery(e) != CUDA_ERROR_NOT_READY;
}

// ---------------- device memory ----------------
class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int device) : device_(device) {}

  void* allocate(size_t nbytes) override {
    const size_t size = round_size(nbytes);
    StreamPtr s = current_stream_impl(device_);
    std::lock_guard<std::mutex> lock(mu_);
    use_device(device_);
    ++stats_.num_allocs;
    collect_pending();
    void* p = take_cached(size, *s);
    if (p) {
      stats_.cached_bytes -= static_cast<int64_t>(size);
      ++stats_.num_cache_hits;
    } else {
      p = fresh(size, nbytes);
      ++stats_.num_os_allocs;
    }
    live_[p] = Live{size, std::move(s), {}};
    stats_.current_bytes += static_cast<int64_t>(size);
    stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
    return p;
  }

  // Runs in destructors: never throws. A block whose events cannot be
  // recorded waits for the whole device instead.
  void deallocate(void* p, size_t) override {
    if (!p) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) return;
    Live b = std::move(it->second);
    live_.erase(it);
    stats_.current_bytes -= static_cast<int64_t>(b.size);
    stats_.cached_bytes += static_cast<int64_t>(b.size);
    Free f{p, b.size, b.stream, nullptr, false};
    std::vector<CUevent> waits;
    bool ok = true;
    try {
      if (streams_in_use() || !b.uses.empty()) {
        use_device(device_);
        f.ev = record_event(b.stream, events_);  // on failure: recorded when needed
        for (const StreamPtr& u : b.uses) {
          CUevent e = record_event(u, events_);
          if (!e) ok = false;
          if (e) waits.push_back(e);
        }
      }
    } catch (...) {
      ok = false;
    }
    if (!ok) {  // no events: wait for the whole device instead
      events_.insert(events_.end(), waits.begin(), waits.end());
      waits.clear();
      if (f.ev) events_.push_back(f.ev);
      f.ev = nullptr;
      driver().cuCtxSynchronize();
      f.ready = true;
    }
    if (waits.empty())
      free_[f.size].push_back(std::move(f));
    else
      pending_.push_back(Pending{std::move(f), std::move(waits)});
  }

  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_bytes = stats_.current_bytes;
  }
  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mu_);
    release_cached();
  }

  // record_stream: the block at `base` is also used by work on `s`.
  void record_stream(void* base, const StreamPtr& s) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(base);
    KILN_CHECK(it != live_.end(),
               "[record_stream] the tensor's memory is not a block of cuda:", device_,
               "'s caching allocator");
    Live& b = it->second;
    if (b.stream->id == s->id) return;
    for (const StreamPtr& u : b.uses)
      if (u->id == s->id) return;
    b.uses.push_back(s);
  }

 private:
  struct Live {
    size_t size = 0;
    StreamPtr stream;             // the stream it was allocated on
    std::vector<StreamPtr> uses;  // record_stream's other streams
  };
  struct Free {
    void* p = nullptr;
    size_t size = 0;
    StreamPtr stream;      // its stream when freed
    CUevent ev = nullptr;  // recorded on `stream` at free time (null: not yet)
    bool ready = false;    // all work on it known finished
  };
  struct Pending {  // freed, but record_stream's streams may still use it
    Free f;
    std::vector<CUevent> waits;
  };

  // A cached block of `size` for stream `s`: one freed on `s` (stream order
  // makes it safe), else one whose free-time event has completed.
  void* take_cached(size_t size, const Stream::Impl& s) {
    auto it = free_.find(size);
    if (it == free_.end() || it->second.empty()) return nullptr;
    std::vector<Free>& list = it->second;
    auto take = [&](size_t i) {
      void* p = list[i].p;
      if (list[i].ev) events_.push_back(list[i].ev);
      list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
      return p;
    };
    for (size_t i = list.size(); i-- > 0;)
      if (list[i].ready || list[i].stream->id == s.id) return take(i);
    for (size_t i = list.size(); i-- > 0;) {
      Free& f = list[i];
      if (!f.ev) f.ev = record_event(f.stream, events_);  // freed before streams existed
      if (f.ev && finished(f.ev)) return take(i);
    }
    return nullptr;
  }

  // Pending blocks whose other streams have finished join the free lists.
  void collect_pending() {
    for (size_t i = pending_.size(); i-- > 0;) {
      Pending& pd = pending_[i];
      if (!std::all_of(pd.waits.begin(), pd.waits.end(), finished)) continue;
      events_.insert(events_.end(), pd.waits.begin(), pd.waits.end());
      free_[pd.f.size].push_back(std::move(pd.f));
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }

  // New device memory; out of memory frees the cache (after the device is
  // idle, so every cached block is safe) and retries once.
  void* fresh(size_t size, size_t nbytes) {
    CUdeviceptr d = 0;
    CUresult r = driver().cuMemAlloc(&d, size);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      release_cached();
      r = driver().cuMemAlloc(&d, size);
    }
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      size_t free_b = 0, total_b = 0;
      driver().cuMemGetInfo(&free_b, &total_b);
      KILN_CHECK(false, "[cuda] out of memory on cuda:", device_, ": asked for ", nbytes,
                 " bytes; tensors hold ", stats_.current_bytes, ", the cache held ",
                 stats_.cached_bytes, " (freed and retried); the device has ", free_b,
                 " bytes free of ", total_b);
    }
    check(r, "cuMemAlloc");
    return reinterpret_cast<void*>(d);
  }

  void release_cached() {
    use_device(device_);
    driver().cuCtxSynchronize();  // every event completes: all cached blocks are idle
    for (Pending& pd : pending_) {
      events_.insert(events_.end(), pd.waits.begin(), pd.waits.end());
      free_[pd.f.size].push_back(std::move(pd.f));
    }
    pending_.clear();
    for (auto& [size, list] : free_) {
      for (Free& f : list) {
        driver().cuMemFree(reinterpret_cast<CUdeviceptr>(f.p));
        if (f.ev) events_.push_back(f.ev);
      }
      stats_.cached_bytes -= static_cast<int64_t>(size * list.size());
      list.clear();
    }
  }

  int device_;
  mutable std::mutex mu_;
  std::map<size_t, std::vector<Free>> free_;
  std::vector<Pending> pending_;
  std::unordered_map<void*, Live> live_;
  std::vector<CUevent> events_;  // recorded-and-finished events to reuse
  AllocatorStats stats_;
};

// ---------------- pinned host memory ----------------
class PinnedAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    const size_t size = round_size(nbytes);
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.num_allocs;
    collect_pending();
    void* p = nullptr;
    auto& list = free_[size];
    if (!list.empty()) {
      p = list.back();
      list.pop_back();
      stats_.cached_bytes -= static_cast<int64_t>(size);
      ++stats_.num_cache_hits;
    } else {
      use_device(0);  // cuMemHostAlloc needs a context; PORTABLE serves every device
      CUresult r = driver().cuMemHostAlloc(&p, size, CU_MEMHOSTALLOC_PORTABLE);
      if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        release_cached();
        r = driver().cuMemHostAlloc(&p, size, CU_MEMHOSTALLOC_PORTABLE);
      }
      KILN_CHECK(r != CUDA_ERROR_OUT_OF_MEMORY,
                 "[pin_memory] out of pinned host memory: asked for ", nbytes,
                 " bytes; pinned tensors hold ", stats_.current_bytes);
      check(r, "cuMemHostAlloc");
      ++stats_.num_os_allocs;
    }
    live_[reinterpret_cast<uintptr_t>(p)] = Block{size, {}};
    stats_.current_bytes += static_cast<int64_t>(size);
    stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
    return p;
  }

  void deallocate(void* p, size_t) override {
    if (!p) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(reinterpret_cast<uintptr_t>(p));
    if (it == live_.end()) return;
    Block b = std::move(it->second);
    live_.erase(it);
    stats_.current_bytes -= static_cast<int64_t>(b.size);
    stats_.cached_bytes += static_cast<int64_t>(b.size);
    if (b.uses.empty())
      free_[b.size].push_back(p);
    else
      pending_.push_back({p, std::move(b)});
  }

  void record_use(const void* p, const StreamPtr& s) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.upper_bound(reinterpret_cast<uintptr_t>(p));
    KILN_CHECK(it != live_.begin(), "[cuda] not pinned memory");
    --it;
    KILN_CHECK(reinterpret_cast<uintptr_t>(p) < it->first + it->second.size,
               "[cuda] not pinned memory");
    std::vector<CUevent>& uses = it->second.uses;
    drop_finished(uses);
    use_device(s->device);
    CUevent e = nullptr;
    if (driver().cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS &&
        driver().cuEventRecord(e, s->handle) == CUDA_SUCCESS) {
      uses.push_back(e);
      return;
    }
    if (e) driver().cuEventDestroy(e);
    check(driver().cuStreamSynchronize(s->handle), "cuStreamSynchronize");  // no event: wait now
  }

  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_bytes = stats_.current_bytes;
  }
  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mu_);
    release_cached();
  }

 private:
  struct Block {
    size_t size = 0;
    std::vector<CUevent> uses;  // asynchronous copies that may still touch it
  };

  static void drop_finished(std::vector<CUevent>& uses) {
    std::erase_if(uses, [](CUevent e) {
      if (!finished(e)) return false;
      driver().cuEventDestroy(e);
      return true;
    });
  }

  void collect_pending() {
    for (size_t i = pending_.size(); i-- > 0;) {
      Block& b = pending_[i].second;
      drop_finished(b.uses);
      if (!b.uses.empty()) continue;
      free_[b.size].push_back(pending_[i].first);
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }

  void release_cached() {
    for (auto& [p, b] : pending_) {
      for (CUevent e : b.uses) {
        driver().cuEventSynchronize(e);
        driver().cuEventDestroy(e);
      }
      free_[b.size].push_back(p);
    }
    pending_.clear();
    for (auto& [size, list] : free_) {
      for (void* p : list) driver().cuMemFreeHost(p);
      stats_.cached_bytes -= static_cast<int64_t>(size * list.size());
      list.clear();
    }
  }

  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;
  std::vector<std::pair<void*, Block>> pending_;
  std::map<uintptr_t, Block> live_;
  AllocatorStats stats_;
};

}  // namespace

Allocator& device_allocator(int device) {
  static std::mutex mu;
  static auto* all = new std::map<int, CudaAllocator*>;  // never freed: tensors outlive statics
  std::lock_guard<std::mutex> lock(mu);
  CudaAllocator*& a = (*all)[device];
  if (!a) a = new CudaAllocator(device);
  return *a;
}

Allocator& pinned_host_allocator() {
  static auto* a = new PinnedAllocator;  // never freed, as device_allocator's
  return *a;
}

void pinned_record_use(const void* p, const StreamPtr& stream) {
  static_cast<PinnedAllocator&>(pinned_host_allocator()).record_use(p, stream);
}

void record_stream(const Tensor& t, const Stream& s) {
  KILN_CHECK(t.defined() && !t.is_symbolic(), "[record_stream] needs a tensor with memory");
  KILN_CHECK(t.device().is_cuda(), "[record_stream] needs a CUDA tensor, got one on ", t.device());
  KILN_CHECK(t.device().index == s.device(), "[record_stream] the tensor is on ", t.device(),
             " but the stream on cuda:", s.device());
  const StorageImpl& st = *t.impl()->storage;
  Allocator& a = device_allocator(t.device().index);
  KILN_CHECK(st.allocator == &a,
             "[record_stream] the tensor's memory does not come from kiln's CUDA allocator");
  static_cast<CudaAllocator&>(a).record_stream(st.data, s.impl());
}

}  // namespace kiln::cuda
