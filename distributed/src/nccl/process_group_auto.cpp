// The "auto" backend (PyTorch's default "cpu:gloo,cuda:nccl"): one group of
// ranks with a Gloo part for CPU tensors and an NCCL part for CUDA tensors;
// each collective goes to the part of its tensors' device.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/cuda.h"
#include "kiln/distributed/process_group.h"
#include "kiln/error.h"

namespace kiln::dist {
namespace {

class AutoGroup final : public ProcessGroup {
 public:
  AutoGroup(std::shared_ptr<ProcessGroup> gloo, std::shared_ptr<ProcessGroup> nccl,
            std::string why_no_nccl)
      : gloo_(std::move(gloo)), nccl_(std::move(nccl)), why_no_nccl_(std::move(why_no_nccl)) {}

  int rank() const override { return gloo_->rank(); }
  int size() const override { return gloo_->size(); }
  std::string backend() const override { return "auto"; }
  /// The CPU part's transport ("shm", "tcp").
  std::string transport() const override { return gloo_->transport(); }
  const ProcessGroupOptions& options() const override { return gloo_->options(); }

  WorkPtr all_reduce(Tensor t, ReduceOp op) override {
    return part("all_reduce", t).all_reduce(std::move(t), op);
  }
  WorkPtr all_reduce_coalesced(std::vector<Tensor> ts, ReduceOp op) override {
    KILN_CHECK(!ts.empty(), "[all_reduce_coalesced] no tensors given");
    ProcessGroup& pg = part("all_reduce_coalesced", ts[0]);
    return pg.all_reduce_coalesced(std::move(ts), op);
  }
  WorkPtr all_reduce_into(std::vector<Tensor> srcs, Tensor dst, ReduceOp op) override {
    ProcessGroup& pg = part("all_reduce_into", dst);
    return pg.all_reduce_into(std::move(srcs), std::move(dst), op);
  }
  WorkPtr broadcast(Tensor t, int root) override {
    return part("broadcast", t).broadcast(std::move(t), root);
  }
  WorkPtr reduce(Tensor t, int root, ReduceOp op) override {
    return part("reduce", t).reduce(std::move(t), root, op);
  }
  WorkPtr all_gather(std::vector<Tensor> outs, Tensor in) override {
    ProcessGroup& pg = part("all_gather", in);
    return pg.all_gather(std::move(outs), std::move(in));
  }
  WorkPtr reduce_scatter(Tensor out, Tensor in, ReduceOp op) override {
    ProcessGroup& pg = part("reduce_scatter", in);
    return pg.reduce_scatter(std::move(out), std::move(in), op);
  }
  /// On the CPU part: a barrier orders the hosts, not a stream.
  WorkPtr barrier() override { return gloo_->barrier(); }
  WorkPtr send(Tensor t, int dst, int tag) override {
    return part("send", t).send(std::move(t), dst, tag);
  }
  WorkPtr recv(Tensor t, int src, int tag) override {
    return part("recv", t).recv(std::move(t), src, tag);
  }
  bool capturable(const Tensor& t) const override {
    return t.defined() && t.device().is_cuda() && nccl_ && nccl_->capturable(t);
  }
  /// CPU memory (the Gloo part's; shared memory on one host).
  Tensor make_comm_buffer(int64_t numel, DType dtype) override {
    return gloo_->make_comm_buffer(numel, dtype);
  }

 private:
  ProcessGroup& part(const char* op, const Tensor& t) {
    if (!t.defined() || !t.device().is_cuda()) return *gloo_;
    KILN_CHECK(nccl_ != nullptr, "[", op, "] the tensor is on ", t.device(),
               " but this 'auto' group has no NCCL part: ", why_no_nccl_);
    return *nccl_;
  }

  std::shared_ptr<ProcessGroup> gloo_, nccl_;
  std::string why_no_nccl_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_auto_group(std::shared_ptr<Store> store, int rank, int size,
                                              int device, ProcessGroupOptions options,
                                              const std::string& prefix) {
  auto gloo = make_gloo_group(store, rank, size, options, prefix);
  std::shared_ptr<ProcessGroup> nccl;
  std::string why = cuda::unavailable_reason();
  if (why.empty()) nccl = make_nccl_group(store, rank, size, device, options, prefix + "/nccl");
  return std::make_shared<AutoGroup>(
      std::move(gloo), std::move(nccl),
      why.empty() ? "" : "CUDA was unavailable at init (" + why + ")");
}

}  // namespace kiln::dist
