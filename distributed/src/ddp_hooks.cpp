// DDP's communication hooks: the default averaging all-reduce, fp16/bf16
// compression, and the Work adaptor that runs a continuation on wait().
#include <exception>
#include <mutex>

#include "kiln/autograd.h"
#include "kiln/distributed/ddp.h"
#include "kiln/functional.h"

namespace kiln::dist {
namespace {

// Waits for `inner`, then runs `then` exactly once; a failure of either is
// rethrown by every later wait().
class ThenWork final : public Work {
 public:
  ThenWork(WorkPtr inner, std::function<void()> then)
      : inner_(std::move(inner)), then_(std::move(then)) {}

  void wait(std::chrono::milliseconds timeout) override {
    inner_->wait(timeout);
    std::lock_guard<std::mutex> lock(mu_);
    if (!ran_) {
      ran_ = true;
      try {
        if (then_) then_();
      } catch (...) {
        error_ = std::current_exception();
      }
      then_ = nullptr;  // drop captured tensors
    }
    if (error_) std::rethrow_exception(error_);
  }
  bool is_completed() const override { return inner_->is_completed(); }
  std::vector<Tensor> result() const override { return inner_->result(); }
  Clock::time_point start_time() const override { return inner_->start_time(); }
  Clock::time_point end_time() const override { return inner_->end_time(); }
  std::string describe() const override { return inner_->describe(); }

 private:
  WorkPtr inner_;
  std::function<void()> then_;
  std::mutex mu_;
  bool ran_ = false;
  std::exception_ptr error_;
};

// Pre-divides a compressed copy of the bucket (so the sum cannot overflow the
// narrow type), all-reduces it, and casts the mean back on wait().
WorkPtr compressed_allreduce(ProcessGroup& pg, const GradBucket& bucket, DType narrow) {
  Tensor compressed;
  {
    NoGradGuard ng;
    compressed = (bucket.buffer * (1.0 / pg.size())).to(narrow);
  }
  Tensor buffer = bucket.buffer;
  return then_work(pg.all_reduce(compressed, ReduceOp::kSum), [buffer, compressed]() mutable {
    NoGradGuard ng;
    buffer.copy_(compressed);
  });
}

}  // namespace

WorkPtr then_work(WorkPtr inner, std::function<void()> then) {
  KILN_CHECK(inner != nullptr, "[then_work] the inner Work is null");
  return std::make_shared<ThenWork>(std::move(inner), std::move(then));
}

WorkPtr allreduce_hook(ProcessGroup& pg, const GradBucket& bucket) {
  return pg.all_reduce(bucket.buffer, ReduceOp::kAvg);
}

WorkPtr fp16_compress_hook(ProcessGroup& pg, const GradBucket& bucket) {
  return compressed_allreduce(pg, bucket, DType::f16);
}

WorkPtr bf16_compress_hook(ProcessGroup& pg, const GradBucket& bucket) {
  return compressed_allreduce(pg, bucket, DType::bf16);
}

}  // namespace kiln::dist
