// The caching allocators of device and pinned host memory (cuda_allocator.h).
//
// Device memory comes in segments (one cuMemAlloc each): 2 MiB ones shared by
// requests up to 1 MiB, and one per larger request. A segment is a list of
// blocks; a cached block serves a smaller request by splitting (the rest stays
// cached, with the freed block's stream and event), and a freed block merges
// with free neighbours of its segment that are reusable on the same terms
// (freed on the same stream, or all their work known finished).
#include "kernels/cuda/cuda_allocator.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "caching_allocator.h"
#include "kernels/cuda/cuda_graphs.h"
#include "kernels/cuda/driver.h"
#include "kiln/error.h"
#include "kiln/tensor.h"

namespace kiln::cuda {
namespace {

constexpr size_t kSmallRequest = size_t{1} << 20;  // up to this: the small pool
constexpr size_t kSmallSegment = size_t{2} << 20;  // the small pool's segments

// Sizes are rounded: 512 B granules, 2 MiB ones above 1 MiB.
size_t round_size(size_t n) {
  n = std::max<size_t>(n, 1);
  const size_t g = n > kSmallRequest ? (size_t{2} << 20) : 512;
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

// Whether the work before `e` has finished. Asked in relaxed capture mode:
// another thread's capture in global mode would otherwise refuse the query
// and end (it touches no captured stream). A capture's refusal to answer (an
// event recorded in a capture still running) is no answer: the block waits.
// Other errors count as finished: the context is unusable then and nothing
// waits on the block any more.
bool finished(CUevent e) {
  const RelaxedCapture relaxed(true);
  switch (driver().cuEventQuery(e)) {
    case CUDA_ERROR_NOT_READY:
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED:
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED:
    case CUDA_ERROR_STREAM_CAPTURE_IMPLICIT:
    case CUDA_ERROR_CAPTURED_EVENT:
      return false;
    default:
      return true;
  }
}

// ---------------- device memory ----------------
class CudaAllocator final : public CachingAllocator {
 public:
  explicit CudaAllocator(int device) : device_(device) {}

  void* allocate(size_t nbytes) override {
    const size_t size = round_size(nbytes);
    const bool small = size <= kSmallRequest;
    StreamPtr s = current_stream_impl(device_);
    std::lock_guard<std::mutex> lock(mu_);
    use_device(device_);
    ++stats_.num_allocs;
    if (!capturing_on(s->handle)) collect_pending();  // no event query in a capture
    Block* b = take_cached(size, *s, small);
    if (b) {
      ++stats_.num_cache_hits;
    } else {
      b = new_segment(small ? kSmallSegment : size, nbytes, small, s);
      ++stats_.num_os_allocs;
    }
    split(b, size);
    b->state = State::kLive;
    b->stream = std::move(s);
    live_[b->ptr] = b;
    count_handed_out(size);
    count_cached();
    return b->ptr;
  }

  // Runs in destructors: never throws. A block whose events cannot be
  // recorded waits for the whole device instead.
  void deallocate(void* p, size_t) override {
    if (!p) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) return;
    Block* b = it->second;
    live_.erase(it);
    stats_.current_bytes -= static_cast<int64_t>(b->size);
    count_cached();
    b->ready = false;
    std::vector<CUevent> waits;
    bool ok = true;
    try {
      if (streams_in_use() || !b->uses.empty()) {
        use_device(device_);
        b->ev = record(b->stream);  // on failure: recorded when needed
        for (const StreamPtr& u : b->uses) {
          CUevent e = record_event(u, events_);
          if (!e) ok = false;
          if (e) waits.push_back(e);
        }
      }
    } catch (...) {
      ok = false;
    }
    b->uses.clear();
    if (!ok) {  // no events: wait for the whole device instead
      events_.insert(events_.end(), waits.begin(), waits.end());
      waits.clear();
      recycle(b->ev);
      driver().cuCtxSynchronize();
      b->ready = true;
    }
    if (waits.empty()) return make_free(b);
    b->state = State::kPending;
    b->waits = std::move(waits);
    pending_.push_back(b);
  }

  // record_stream: the block at `base` is also used by work on `s`.
  void record_stream(void* base, const StreamPtr& s) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(base);
    KILN_CHECK(it != live_.end(),
               "[record_stream] the tensor's memory is not a block of cuda:", device_,
               "'s caching allocator");
    Block& b = *it->second;
    if (b.stream->id == s->id) return;
    for (const StreamPtr& u : b.uses)
      if (u->id == s->id) return;
    b.uses.push_back(s);
  }

  /// A graph pool's end: its free segments go back to the driver; the pool is
  /// deleted unless tensors still hold blocks (they then stay cached here).
  void retire() {
    bool empty = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      release_cached();  // idle blocks' events join events_
      empty = live_.empty() && pending_.empty();
      if (empty)
        for (CUevent e : events_) driver().cuEventDestroy(e);
    }
    if (empty) delete this;
  }

  /// Each segment's blocks in address order: {bytes, in use} (device_segments).
  std::vector<std::vector<std::pair<size_t, bool>>> segments() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::vector<std::pair<size_t, bool>>> out;
    for (Block* first : segments_) {
      out.emplace_back();
      for (Block* b = first; b; b = b->next)
        out.back().push_back({b->size, b->state == State::kLive});
    }
    return out;
  }

 private:
  enum class State { kLive, kFree, kPending };
  struct Block {
    char* ptr = nullptr;
    size_t size = 0;
    bool small = false;
    Block* prev = nullptr;  // neighbours in the segment
    Block* next = nullptr;
    State state = State::kFree;
    StreamPtr stream;             // live: allocated on; free: freed on
    std::vector<StreamPtr> uses;  // live: record_stream's other streams
    CUevent ev = nullptr;         // free: recorded on `stream` at free time (null: not yet)
    uint64_t seq = 0;             // ev's recording order (later events cover earlier ones)
    bool ready = false;           // free: all work on it known finished
    std::vector<CUevent> waits;   // pending: record_stream's streams at free time
  };
  struct BySize {
    bool operator()(const Block* a, const Block* b) const {
      return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
    }
  };
  using FreeSet = std::set<Block*, BySize>;

  FreeSet& pool(const Block* b) { return free_[b->small ? 0 : 1]; }

  CUevent record(const StreamPtr& s) {
    CUevent e = record_event(s, events_);
    if (e) seq_[e] = ++next_seq_;
    return e;
  }
  void recycle(CUevent& e) {
    if (e) events_.push_back(e);
    e = nullptr;
  }
  void count_cached() { stats_.cached_bytes = reserved_ - stats_.current_bytes; }

  // Whether free block b may serve stream s now: freed on s (stream order
  // makes it safe), or its free-time work has finished.
  bool usable(Block& b, const Stream::Impl& s) {
    if (b.ready || b.stream->id == s.id) return true;
    // During a capture CUDA refuses an event query (and ends the capture):
    // the block waits for the capture's end, as in PyTorch's allocator.
    if (capturing_on(s.handle)) return false;
    if (!b.ev) b.ev = record(b.stream);  // freed before streams existed
    if (b.ev && finished(b.ev)) {
      b.ready = true;
      recycle(b.ev);
    }
    return b.ready;
  }

  // The smallest usable cached block of at least `size` in the pool, taken
  // out of the free set.
  Block* take_cached(size_t size, const Stream::Impl& s, bool small) {
    FreeSet& set = free_[small ? 0 : 1];
    Block probe;
    probe.size = size;
    for (auto it = set.lower_bound(&probe); it != set.end(); ++it) {
      if (!usable(**it, s)) continue;
      Block* b = *it;
      set.erase(it);
      return b;
    }
    return nullptr;
  }

  // Cuts b to `size`; the rest stays cached as b was (stream, event, ready).
  void split(Block* b, size_t size) {
    if (b->size > size) {
      auto* r = new Block;
      r->ptr = b->ptr + size;
      r->size = b->size - size;
      r->small = b->small;
      r->prev = b;
      r->next = b->next;
      if (b->next) b->next->prev = r;
      b->next = r;
      r->stream = b->stream;
      r->ev = b->ev;
      r->seq = b->seq;
      r->ready = b->ready;
      b->ev = nullptr;
      b->size = size;
      pool(r).insert(r);
    }
    recycle(b->ev);
  }

  // Free neighbours a and b (a before b) are one block when reusable on the
  // same terms: both finished, or freed on one stream (the later event then
  // covers both: a stream runs its work in order).
  static bool mergeable(const Block& a, const Block& b) {
    return b.state == State::kFree && ((a.ready && b.ready) || a.stream->id == b.stream->id);
  }
  void merge_into(Block* keep, Block* gone) {
    if (keep->ready && gone->ready) {
      recycle(keep->ev);
      recycle(gone->ev);
    } else if (keep->ready || gone->ready) {
      Block* busy = keep->ready ? gone : keep;
      Block* idle = keep->ready ? keep : gone;
      recycle(idle->ev);
      keep->ev = busy->ev;
      keep->seq = busy->seq;
      keep->stream = busy->stream;
      keep->ready = false;
    } else if (!keep->ev || !gone->ev) {  // one to record when needed: it covers both
      recycle(keep->ev);
      recycle(gone->ev);
    } else if (seq_[gone->ev] > seq_[keep->ev]) {
      recycle(keep->ev);
      keep->ev = gone->ev;
    } else {
      recycle(gone->ev);
    }
    gone->ev = nullptr;
    if (gone == keep->next) {
      keep->next = gone->next;
      if (gone->next) gone->next->prev = keep;
    } else {
      keep->prev = gone->prev;
      if (gone->prev)
        gone->prev->next = keep;
      else
        std::replace(segments_.begin(), segments_.end(), gone, keep);
      keep->ptr = gone->ptr;
    }
    keep->size += gone->size;
    delete gone;
  }

  // b (freed, its events recorded) joins the cache, merged with its neighbours.
  void make_free(Block* b) {
    b->state = State::kFree;
    for (Block* n : {b->prev, b->next})
      if (n && mergeable(*b, *n)) {
        pool(n).erase(n);
        merge_into(b, n);
      }
    pool(b).insert(b);
  }

  // Pending blocks whose other streams have finished join the cache.
  void collect_pending() {
    for (size_t i = pending_.size(); i-- > 0;) {
      Block* b = pending_[i];
      if (!std::all_of(b->waits.begin(), b->waits.end(), finished)) continue;
      events_.insert(events_.end(), b->waits.begin(), b->waits.end());
      b->waits.clear();
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
      make_free(b);
    }
  }

  // A new segment of `bytes` as one free block (not in the cache); out of
  // memory frees the cache (after the device is idle, so every cached block
  // is safe) and retries once.
  Block* new_segment(size_t bytes, size_t asked, bool small, const StreamPtr& s) {
    CUdeviceptr d = 0;
    RelaxedCapture relaxed;  // a graph's pool grows during its capture
    CUresult r = driver().cuMemAlloc(&d, bytes);
    const int64_t cached = stats_.cached_bytes;
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      release_cached();
      r = driver().cuMemAlloc(&d, bytes);
    }
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      size_t free_b = 0, total_b = 0;
      driver().cuMemGetInfo(&free_b, &total_b);
      KILN_CHECK(false, "[cuda] out of memory on cuda:", device_, ": asked for ", asked,
                 " bytes; tensors hold ", stats_.current_bytes, ", the cache held ", cached,
                 " (freed and retried); the device has ", free_b, " bytes free of ", total_b);
    }
    check(r, "cuMemAlloc");
    reserved_ += static_cast<int64_t>(bytes);
    auto* b = new Block;
    b->ptr = reinterpret_cast<char*>(d);
    b->size = bytes;
    b->small = small;
    b->stream = s;
    b->ready = true;  // nothing ever ran on it
    segments_.push_back(b);
    return b;
  }

  // Gives back every segment that is one free block (mu_ held).
  void release_cached() override {
    use_device(device_);
    driver().cuCtxSynchronize();  // every event completes: all cached blocks are idle
    for (Block* b : pending_) {
      events_.insert(events_.end(), b->waits.begin(), b->waits.end());
      b->waits.clear();
      b->ready = true;
      make_free(b);
    }
    pending_.clear();
    // Idle now: every free block is reusable anywhere, and free neighbours merge.
    for (Block* first : segments_)
      for (Block* b = first; b; b = b->next)
        if (b->state == State::kFree) {
          b->ready = true;
          recycle(b->ev);
        }
    for (Block* first : segments_)
      for (Block* b = first; b && b->next;) {
        if (b->state != State::kFree || b->next->state != State::kFree) {
          b = b->next;
          continue;
        }
        pool(b).erase(b);
        pool(b->next).erase(b->next);
        merge_into(b, b->next);
        pool(b).insert(b);
      }
    for (size_t i = segments_.size(); i-- > 0;) {
      Block* b = segments_[i];
      if (b->state != State::kFree || b->next) continue;
      pool(b).erase(b);
      recycle(b->ev);
      driver().cuMemFree(reinterpret_cast<CUdeviceptr>(b->ptr));
      reserved_ -= static_cast<int64_t>(b->size);
      segments_.erase(segments_.begin() + static_cast<std::ptrdiff_t>(i));
      delete b;
    }
    count_cached();
  }

  int device_;
  FreeSet free_[2];               // cached blocks: the small pool, the large one
  std::vector<Block*> pending_;   // freed, but record_stream's streams may still use them
  std::vector<Block*> segments_;  // each segment's first block
  std::unordered_map<void*, Block*> live_;
  std::vector<CUevent> events_;  // events to record again
  std::unordered_map<CUevent, uint64_t> seq_;
  uint64_t next_seq_ = 0;
  int64_t reserved_ = 0;  // bytes of all segments
};

// ---------------- pinned host memory ----------------
class PinnedAllocator final : public CachingAllocator {
 public:
  void* allocate(size_t nbytes) override {
    const size_t size = round_size(nbytes);
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.num_allocs;
    if (!capturing_graph()) collect_pending();  // (a caller's own capture: see record_use)
    void* p = take_free(free_[size], size);
    if (!p) {
      use_device(0);           // cuMemHostAlloc needs a context; PORTABLE serves every device
      RelaxedCapture relaxed;  // staging a graph's host data during its capture
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
    count_handed_out(size);
    return p;
  }

  void deallocate(void* p, size_t) override {
    if (!p) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(reinterpret_cast<uintptr_t>(p));
    if (it == live_.end()) return;
    Block b = std::move(it->second);
    live_.erase(it);
    count_returned(b.size);
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
    use_device(s->device);
    if (!capturing_on(s->handle)) drop_finished(uses);
    CUevent e = nullptr;
    if (driver().cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS &&
        driver().cuEventRecord(e, s->handle) == CUDA_SUCCESS) {
      uses.push_back(e);
      return;
    }
    if (e) driver().cuEventDestroy(e);
    check(driver().cuStreamSynchronize(s->handle), "cuStreamSynchronize");  // no event: wait now
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

  void release_cached() override {
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

  std::map<size_t, std::vector<void*>> free_;
  std::vector<std::pair<void*, Block>> pending_;
  std::map<uintptr_t, Block> live_;
};

}  // namespace

namespace {
// The graph pool this thread allocates from while capturing (PoolGuard).
thread_local Allocator* t_pool = nullptr;
thread_local int t_pool_device = -1;
}  // namespace

std::shared_ptr<Allocator> make_graph_pool(int device) {
  return std::shared_ptr<Allocator>(new CudaAllocator(device),
                                    [](Allocator* a) { static_cast<CudaAllocator*>(a)->retire(); });
}

PoolGuard::PoolGuard(Allocator* pool, int device)
    : previous_(t_pool), previous_device_(t_pool_device) {
  t_pool = pool;
  t_pool_device = device;
}
PoolGuard::~PoolGuard() {
  t_pool = previous_;
  t_pool_device = previous_device_;
}

Allocator& device_allocator(int device) {
  if (t_pool && t_pool_device == device) return *t_pool;
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

std::vector<std::vector<std::pair<size_t, bool>>> device_segments(int device) {
  return static_cast<CudaAllocator&>(device_allocator(device)).segments();
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
