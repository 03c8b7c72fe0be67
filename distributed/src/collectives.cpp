// The CollectiveBackend that kiln_distributed installs when it is loaded: the
// collective ops' eager kernels (and so compiled plans) reach process groups
// through it. start() copies its inputs (the executor may free them at once)
// into one flat buffer and launches an asynchronous all-reduce of it; wait()
// waits and copies the results out.
//
// The flat buffers come from the group's make_comm_buffer (on one host, shared
// memory the all-reduce reduces in place), kept in a small ring per (group,
// dtype, size). Every rank starts the same collectives in the same order, so
// the n-th start of a signature uses ring slot n % kRing on every rank, and a
// new slot is allocated (a collective call) on every rank alike. A slot whose
// previous result was not collected yet hands that result a copy first.
//
// A group id may also be bound to one comm buffer (DDP's bucket): a start
// whose tensors add up to it reduces straight in it (an input that already is
// its slice is not copied) and wait() hands out its slices instead of copies,
// so a compiled step's reduced gradients are the bucket views, as in eager
// DDP (the next collective of that id overwrites them). On CUDA too: the
// copies into the bucket and the kernels that computed gradients in it are on
// the current stream, which the all-reduce follows (the group's event), and
// the wait orders the current stream after it before anything reads or
// rewrites the bucket.
//
// CUDA tensors (an NCCL group, a compiled step's graph on the device): the
// same code is the stream protocol. The copies into the ring buffer run on the
// current stream, the group's all_reduce orders its communication stream after
// that stream with an event, and wait() makes the current stream wait for the
// completion event before the copies out: no host blocks. Ring slots are
// reused in stream order (a slot's next copy-in follows its last wait). The
// same calls made while a compiled step is captured into a CUDA graph record
// that protocol into the graph (process_group_nccl.h), which replays it.
#include "kiln/distributed/collectives.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "kiln/autograd.h"
#include "kiln/error.h"
#ifdef KILN_HAVE_NCCL_BACKEND
#include "kernels/cuda/cuda_graphs.h"
#endif

namespace kiln::dist {
namespace {

std::atomic<int64_t> g_in_place{0}, g_copied{0};  // bound_collective_stats()

class GroupBackend final : public CollectiveBackend {
 public:
  int64_t id_of(const std::shared_ptr<ProcessGroup>& pg) {
    KILN_CHECK(pg != nullptr, "[collectives] no process group (call init_process_group first)");
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, weak] : groups_)
      if (!bound_.contains(id) && weak.lock() == pg) return id;
    const int64_t id = next_group_++;
    groups_.emplace(id, pg);
    return id;
  }

  int64_t bind(const std::shared_ptr<ProcessGroup>& pg, const Tensor& buffer,
               std::vector<int64_t> offsets) {
    KILN_CHECK(pg != nullptr, "[collectives] no process group (call init_process_group first)");
    KILN_CHECK(buffer.defined() && buffer.dim() == 1 && buffer.is_contiguous(),
               "[collectives] a bound buffer must be a flat contiguous tensor, got ",
               buffer.defined() ? str(buffer.dtype(), buffer.shape()) : "an undefined tensor");
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(bound_, [](const auto& kv) { return kv.second->buffer.expired(); });
    const int64_t id = next_group_++;
    groups_.emplace(id, pg);
    auto b = std::make_shared<Bound>();
    b->buffer = buffer.impl_ptr();
    b->offsets = std::move(offsets);
    bound_.emplace(id, std::move(b));
    return id;
  }

  int64_t start(int64_t group, int64_t reduce_op, std::span<const Tensor> inputs) override {
    std::shared_ptr<ProcessGroup> pg;
    std::shared_ptr<Bound> bound;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = groups_.find(group);
      if (it != groups_.end()) pg = it->second.lock();
      if (auto b = bound_.find(group); b != bound_.end()) bound = b->second;
    }
    KILN_CHECK(pg != nullptr, "[collective_start] process group ", group,
               " does not exist (destroyed, or created in another process)");
    KILN_CHECK(!inputs.empty(), "[collective_start] no tensors given");
#ifdef KILN_HAVE_NCCL_BACKEND
    // Before any host-side work, alike on every rank: the capture fails and
    // the compiled step runs without a graph.
    KILN_CHECK(!cuda::capturing_graph() || pg->capturable(inputs[0]), "[collective_start] group ",
               group, " (", pg->backend(), ") cannot run inside a CUDA graph capture");
#endif
    const DType dt = inputs[0].dtype();
    int64_t total = 0;
    for (const Tensor& t : inputs) {
      KILN_CHECK(t.dtype() == dt, "[collective_start] tensor dtypes differ: ", t.dtype(), " and ",
                 dt, "; a collective reduces one dtype");
      total += t.numel();
    }
    if (bound)
      if (Tensor buf(bound->buffer.lock());
          buf.defined() && buf.dtype() == dt && bound->fits(buf, inputs))
        return start_in(*pg, *bound, buf, static_cast<ReduceOp>(reduce_op), inputs);
    std::shared_ptr<Ring> ring;
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::erase_if(rings_, [&](const auto& kv) {  // rings of destroyed groups
        auto g = groups_.find(std::get<0>(kv.first));
        return g == groups_.end() || g->second.expired();
      });
      auto& r = rings_[{group, dt, total}];
      if (!r) r = std::make_shared<Ring>();
      ring = r;
    }
    // Only this rank's ring is locked: allocating a slot and waiting for an
    // uncollected result may wait for the other ranks (threads, in tests).
    std::lock_guard<std::mutex> ring_lock(ring->mu);
    const size_t slot = ring->uses++ % kRing;
    if (slot == ring->buffers.size()) {
      ring->buffers.push_back(pg->make_comm_buffer(total, dt));
      ring->holders.emplace_back();
    }
    if (auto prev = ring->holders[slot].lock()) prev->detach();
    Tensor flat = ring->buffers[slot];
    auto pending = std::make_shared<Pending>();
    {
      NoGradGuard ng;
      int64_t off = 0;
      for (const Tensor& t : inputs) {
        Tensor v = flat.narrow(0, off, t.numel()).view(t.shape());
        v.copy_(t);
        pending->tensors.push_back(v);
        off += t.numel();
      }
    }
    pending->work = pg->all_reduce(flat, static_cast<ReduceOp>(reduce_op));
    ring->holders[slot] = pending;
    return remember(std::move(pending));
  }

  void wait(int64_t key, std::span<Tensor> outputs) override {
    std::shared_ptr<Pending> p;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = pending_.find(key);
      KILN_CHECK(it != pending_.end(), "[collective_wait] handle ", key,
                 " was not started or was already waited for");
      p = std::move(it->second);
      pending_.erase(it);
    }
    p->work->wait();
    std::lock_guard<std::mutex> lock(p->mu);  // not while its slot is being taken over
    KILN_CHECK(p->tensors.size() == outputs.size(), "[collective_wait] the collective reduced ",
               p->tensors.size(), " tensors, waiting for ", outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i) {
      KILN_CHECK(p->tensors[i].shape() == outputs[i].shape(), "[collective_wait] tensor ", i,
                 " has shape ", outputs[i].shape(), ", the collective reduced ",
                 p->tensors[i].shape());
      if (p->adopt)
        outputs[i] = p->tensors[i];  // the bound buffer's slice itself
      else
        outputs[i].copy_(p->tensors[i]);
    }
    p->tensors.clear();  // collected: its slot may be reused without a copy
  }

 private:
  struct Pending {
    WorkPtr work;
    std::mutex mu;
    std::vector<Tensor>
        tensors;         // views into a ring buffer (or their copies); empty once collected
    bool adopt = false;  // wait() hands out `tensors` themselves (a bound buffer's slices)

    // Its slot is about to be reused: finish the collective (started on every
    // rank, so this cannot deadlock) and keep the result in its own tensors.
    void detach() {
      work->wait();
      std::lock_guard<std::mutex> lock(mu);
      NoGradGuard ng;
      for (Tensor& t : tensors) t = t.clone();
    }
  };
  static constexpr size_t kRing = 2;
  struct Ring {
    std::mutex mu;
    std::vector<Tensor> buffers;
    std::vector<std::weak_ptr<Pending>> holders;  // per slot: its last user
    uint64_t uses = 0;
  };

  // The comm buffer of a bound group id, held weakly (its owner, DDP, frees it).
  struct Bound {
    std::mutex mu;
    std::weak_ptr<TensorImpl> buffer;
    std::vector<int64_t> offsets;   // of the tensors' slices; empty: one after another
    std::weak_ptr<Pending> holder;  // its last user

    // Where tensor i's slice of the buffer starts.
    int64_t offset(size_t i, std::span<const Tensor> ts) const {
      if (!offsets.empty()) return offsets[i];
      int64_t off = 0;
      for (size_t k = 0; k < i; ++k) off += ts[k].numel();
      return off;
    }
    // Whether `ts` (on buf's device) are laid out as the buffer's slices,
    // which cover it (but for the gaps between given offsets).
    bool fits(const Tensor& buf, std::span<const Tensor> ts) const {
      if (!offsets.empty() && offsets.size() != ts.size()) return false;
      int64_t end = 0;
      for (size_t i = 0; i < ts.size(); ++i) {
        if (ts[i].device() != buf.device()) return false;
        const int64_t at = offset(i, ts);
        if (at < end) return false;
        end = at + ts[i].numel();
      }
      return end == buf.numel();
    }
  };

  int64_t remember(std::shared_ptr<Pending> pending) {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t key = next_key_++;
    pending_.emplace(key, std::move(pending));
    return key;
  }

  // start() into a bound buffer `buf` whose size the inputs add up to.
  int64_t start_in(ProcessGroup& pg, Bound& bound, const Tensor& buf, ReduceOp op,
                   std::span<const Tensor> inputs) {
    std::lock_guard<std::mutex> lock(bound.mu);
    if (auto prev = bound.holder.lock()) prev->detach();  // not collected yet: keep a copy
    auto pending = std::make_shared<Pending>();
    pending->adopt = true;
    NoGradGuard ng;
    std::vector<Tensor> ins(inputs.begin(), inputs.end());
    std::vector<char> there(ins.size());  // already is its slice (computed in the buffer)
    for (size_t i = 0; i < ins.size(); ++i) {
      Tensor& t = ins[i];
      Tensor v = buf.narrow(0, bound.offset(i, inputs), t.numel()).view(t.shape());
      there[i] = t.impl()->storage == v.impl()->storage && t.offset() == v.offset() &&
                 t.strides() == v.strides();
      // Another part of the buffer would be overwritten by an earlier copy: read it first.
      if (!there[i] && t.impl()->storage == buf.impl()->storage) t = t.clone();
      pending->tensors.push_back(std::move(v));
    }
    for (size_t i = 0; i < ins.size(); ++i)
      if (!there[i]) pending->tensors[i].copy_(ins[i]);
    const auto n_there = std::count(there.begin(), there.end(), 1);
    g_in_place.fetch_add(n_there, std::memory_order_relaxed);
    g_copied.fetch_add(static_cast<int64_t>(ins.size()) - n_there, std::memory_order_relaxed);
    pending->work = pg.all_reduce(buf, op);
    bound.holder = pending;
    return remember(std::move(pending));
  }

  std::mutex mu_;
  std::unordered_map<int64_t, std::shared_ptr<Bound>> bound_;  // bound group ids
  std::map<std::tuple<int64_t, DType, int64_t>, std::shared_ptr<Ring>>
      rings_;  // (group, dtype, numel)
  std::unordered_map<int64_t, std::weak_ptr<ProcessGroup>> groups_;
  std::unordered_map<int64_t, std::shared_ptr<Pending>> pending_;
  int64_t next_group_ = 1;
  int64_t next_key_ = 1;
};

GroupBackend& backend() {
  static GroupBackend* b = [] {
    auto* g = new GroupBackend();  // leaked: plans may run during static destruction
    set_collective_backend(g);
    return g;
  }();
  return *b;
}

// Installed when the library loads, so plans replayed without any DDP call
// in this process still find their groups' backend.
[[maybe_unused]] const bool g_installed = (backend(), true);

}  // namespace

int64_t collective_group_id(const std::shared_ptr<ProcessGroup>& pg) {
  return backend().id_of(pg);
}

BoundCollectiveStats bound_collective_stats() {
  return {g_in_place.load(std::memory_order_relaxed), g_copied.load(std::memory_order_relaxed)};
}

int64_t collective_group_id_in(const std::shared_ptr<ProcessGroup>& pg, const Tensor& buffer,
                               std::vector<int64_t> offsets) {
  return backend().bind(pg, buffer, std::move(offsets));
}

Tensor all_reduce_start(const std::shared_ptr<ProcessGroup>& pg, const std::vector<Tensor>& tensors,
                        ReduceOp op) {
  return all_reduce_start(collective_group_id(pg), tensors, op);
}

Tensor all_reduce_start(int64_t group, const std::vector<Tensor>& tensors, ReduceOp op) {
  return collective_start(tensors, group, static_cast<int64_t>(op));
}

std::vector<Tensor> all_reduce_wait(const std::shared_ptr<ProcessGroup>& pg, const Tensor& handle,
                                    const std::vector<Tensor>& tensors) {
  return collective_wait(handle, tensors, collective_group_id(pg));
}

}  // namespace kiln::dist
