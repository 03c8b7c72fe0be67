// The CollectiveBackend that kiln_distributed installs when it is loaded: the
// collective ops' eager kernels (and so compiled plans) reach process groups
// through it. start() copies its inputs (the executor may free them at once)
// and launches an asynchronous coalesced all-reduce; wait() waits for it.
#include "kiln/distributed/collectives.h"

#include <mutex>
#include <unordered_map>

#include "kiln/error.h"

namespace kiln::dist {
namespace {

class GroupBackend final : public CollectiveBackend {
 public:
  int64_t id_of(const std::shared_ptr<ProcessGroup>& pg) {
    KILN_CHECK(pg != nullptr, "[collectives] no process group (call init_process_group first)");
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, weak] : groups_)
      if (weak.lock() == pg) return id;
    const int64_t id = next_group_++;
    groups_.emplace(id, pg);
    return id;
  }

  int64_t start(int64_t group, int64_t reduce_op, std::span<const Tensor> inputs) override {
    std::shared_ptr<ProcessGroup> pg;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = groups_.find(group);
      if (it != groups_.end()) pg = it->second.lock();
    }
    KILN_CHECK(pg != nullptr, "[collective_start] process group ", group,
               " does not exist (destroyed, or created in another process)");
    std::vector<Tensor> copies;
    copies.reserve(inputs.size());
    for (const Tensor& t : inputs) copies.push_back(t.contiguous().clone());
    WorkPtr w = pg->all_reduce_coalesced(copies, static_cast<ReduceOp>(reduce_op));
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t key = next_key_++;
    pending_.emplace(key, Pending{std::move(w), std::move(copies)});
    return key;
  }

  void wait(int64_t key, std::span<Tensor> outputs) override {
    Pending p;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = pending_.find(key);
      KILN_CHECK(it != pending_.end(), "[collective_wait] handle ", key,
                 " was not started or was already waited for");
      p = std::move(it->second);
      pending_.erase(it);
    }
    p.work->wait();
    KILN_CHECK(p.tensors.size() == outputs.size(), "[collective_wait] the collective reduced ",
               p.tensors.size(), " tensors, waiting for ", outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i) {
      KILN_CHECK(p.tensors[i].shape() == outputs[i].shape(), "[collective_wait] tensor ", i,
                 " has shape ", outputs[i].shape(), ", the collective reduced ",
                 p.tensors[i].shape());
      outputs[i].copy_(p.tensors[i]);
    }
  }

 private:
  struct Pending {
    WorkPtr work;
    std::vector<Tensor> tensors;
  };
  std::mutex mu_;
  std::unordered_map<int64_t, std::weak_ptr<ProcessGroup>> groups_;
  std::unordered_map<int64_t, Pending> pending_;
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

Tensor all_reduce_start(const std::shared_ptr<ProcessGroup>& pg, const std::vector<Tensor>& tensors,
                        ReduceOp op) {
  return collective_start(tensors, collective_group_id(pg), static_cast<int64_t>(op));
}

std::vector<Tensor> all_reduce_wait(const std::shared_ptr<ProcessGroup>& pg, const Tensor& handle,
                                    const std::vector<Tensor>& tensors) {
  return collective_wait(handle, tensors, collective_group_id(pg));
}

}  // namespace kiln::dist
