// The collective ops (see kiln/collective.h): rules, eager kernels that call
// the installed CollectiveBackend, and the built-in single-process group 0.
// On a device (a compiled step's CUDA graph) the same kernels run: the backend
// orders the collective after the caller's current stream and collective_wait
// orders that stream after it, so neither blocks the host (DDP's buckets).
#include "kiln/collective.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "kiln/dispatch.h"
#include "ops/helpers.h"
#include "ops/registry.h"

namespace kiln {
namespace {

std::atomic<CollectiveBackend*> g_backend{nullptr};

// Group 0: this process alone. Every reduction of one tensor is the tensor.
struct LocalGroup {
  std::mutex mu;
  int64_t next = 1;
  std::unordered_map<int64_t, std::vector<Tensor>> pending;
  static LocalGroup& get() {
    static LocalGroup* g = new LocalGroup();  // outlives static destructors
    return *g;
  }
};

// The keys of handles that live on a device. collective_start also writes the
// key into the device scalar (a fill kernel), but collective_wait finds it here
// by the handle's storage: reading it back would block the host until the
// stream reached the start, which would serialize the step.
struct DeviceHandles {
  std::mutex mu;
  std::unordered_map<const StorageImpl*, std::pair<std::weak_ptr<StorageImpl>, int64_t>> keys;
  static DeviceHandles& get() {
    static DeviceHandles* h = new DeviceHandles();  // outlives static destructors
    return *h;
  }
};

void set_handle(Tensor& out, int64_t key) {
  if (out.device().is_cpu()) {
    out.data<int64_t>()[0] = key;
    return;
  }
  out.fill_(Scalar(key));
  DeviceHandles& h = DeviceHandles::get();
  std::lock_guard<std::mutex> lock(h.mu);
  std::erase_if(h.keys, [](const auto& kv) { return kv.second.first.expired(); });
  h.keys[out.impl()->storage.get()] = {out.impl()->storage, key};
}

int64_t handle_key(const Tensor& handle) {
  if (handle.device().is_cpu()) return handle.item<int64_t>();
  {
    DeviceHandles& h = DeviceHandles::get();
    std::lock_guard<std::mutex> lock(h.mu);
    auto it = h.keys.find(handle.impl()->storage.get());
    if (it != h.keys.end() && it->second.first.lock() == handle.impl()->storage) {
      const int64_t key = it->second.second;
      h.keys.erase(it);
      return key;
    }
  }
  return handle.item<int64_t>();  // a copy of a handle: read back (synchronizes)
}

constexpr int64_t kNumReduceOps = 5;  // dist::ReduceOp: sum, avg, max, min, product

void check_attrs(const Attrs& a, const char* op) {
  KILN_CHECK(a.has("group") && a.i("group") >= 0, "[", op, "] needs a group id >= 0");
  if (a.has("reduce_op")) {
    const int64_t r = a.i("reduce_op");
    KILN_CHECK(r >= 0 && r < kNumReduceOps, "[", op, "] reduce_op ", r,
               " is not a ReduceOp (0..4)");
  }
}

void infer_start(std::span<const Tensor> in, const Attrs& a, std::vector<TensorMeta>& out) {
  KILN_CHECK(!in.empty(), "[collective_start] expected at least one tensor");
  check_attrs(a, "collective_start");
  KILN_CHECK(a.has("reduce_op"), "[collective_start] needs a reduce_op");
  out.push_back({DType::i64, Dims{}});
}

void kernel_start(std::span<const Tensor> in, const Attrs& a, std::span<Tensor> out) {
  const int64_t group = a.i("group");
  int64_t key = 0;
  if (group == 0) {
    std::vector<Tensor> copies;
    for (const Tensor& t : in) copies.push_back(t.clone());
    LocalGroup& g = LocalGroup::get();
    std::lock_guard<std::mutex> lock(g.mu);
    key = -(g.next++);  // negative: the local group's keys
    g.pending.emplace(key, std::move(copies));
  } else {
    CollectiveBackend* b = g_backend.load();
    KILN_CHECK(b != nullptr, "[collective_start] group ", group,
               " needs kiln_distributed (no collective backend is installed)");
    key = b->start(group, a.i("reduce_op"), in);
  }
  set_handle(out[0], key);
}

void infer_wait(std::span<const Tensor> in, const Attrs& a, std::vector<TensorMeta>& out) {
  KILN_CHECK(in.size() >= 2, "[collective_wait] expected a handle and at least one tensor");
  check_attrs(a, "collective_wait");
  KILN_CHECK(in[0].dtype() == DType::i64 && in[0].dim() == 0,
             "[collective_wait] input 0 must "
             "be the i64 scalar handle of collective_start, got ",
             in[0].dtype(), in[0].shape());
  for (size_t i = 1; i < in.size(); ++i) out.push_back({in[i].dtype(), in[i].shape()});
}

void kernel_wait(std::span<const Tensor> in, const Attrs& a, std::span<Tensor> out) {
  const int64_t key = handle_key(in[0]);
  if (a.i("group") == 0) {
    std::vector<Tensor> res;
    {
      LocalGroup& g = LocalGroup::get();
      std::lock_guard<std::mutex> lock(g.mu);
      auto it = g.pending.find(key);
      KILN_CHECK(it != g.pending.end(), "[collective_wait] handle ", key,
                 " was not started or was already waited for");
      res = std::move(it->second);
      g.pending.erase(it);
    }
    KILN_CHECK(res.size() == out.size(), "[collective_wait] the handle reduced ", res.size(),
               " tensors, waiting for ", out.size());
    for (size_t i = 0; i < out.size(); ++i) {
      KILN_CHECK(res[i].shape() == out[i].shape() && res[i].dtype() == out[i].dtype(),
                 "[collective_wait] tensor ", i, " is ", out[i].dtype(), out[i].shape(),
                 " but the collective reduced ", res[i].dtype(), res[i].shape());
      out[i].copy_(res[i]);
    }
    return;
  }
  CollectiveBackend* b = g_backend.load();
  KILN_CHECK(b != nullptr, "[collective_wait] no collective backend is installed");
  b->wait(key, out);
}

void reg(ops::OpTable& t, OpId id, InferFn infer, KernelFn kernel) {
  OpInfo& e = t[id];
  e.infer = infer;
  e.kernel = kernel;
  e.vjp = nullptr;  // kNonDiff
  e.saves = kSaveNone;
}

}  // namespace

namespace ops {
void register_collective(OpTable& t) {
  reg(t, OpId::collective_start, infer_start, kernel_start);
  reg(t, OpId::collective_wait, infer_wait, kernel_wait);
}
}  // namespace ops

void set_collective_backend(CollectiveBackend* backend) {
  g_backend.store(backend);
}

Tensor collective_start(const std::vector<Tensor>& tensors, int64_t group, int64_t reduce_op) {
  Attrs a;
  a.set("group", AttrValue(group)).set("reduce_op", AttrValue(reduce_op));
  return dispatch1(OpId::collective_start, std::span<const Tensor>(tensors), a);
}

std::vector<Tensor> collective_wait(const Tensor& handle, const std::vector<Tensor>& tensors,
                                    int64_t group) {
  std::vector<Tensor> in;
  in.reserve(tensors.size() + 1);
  in.push_back(handle);
  in.insert(in.end(), tensors.begin(), tensors.end());
  Attrs a;
  a.set("group", AttrValue(group));
  return dispatch(OpId::collective_wait, in, a);
}

}  // namespace kiln
