// DDP's communication hooks: the default averaging all-reduce, fp16/bf16
// compression, and the Work adaptor that runs a continuation on wait().
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

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

// A bucket's narrow-dtype comm buffer and the last all-reduce that used it.
struct NarrowSlot {
  Tensor buffer;
  WorkPtr last;
};

// The narrow comm buffer of each bucket, made once and reused (from the
// group's make_comm_buffer: over shared memory it is reduced in place, without
// staging). Keyed by the bucket buffer's storage, which lives as long as the
// DDP; entries of dead buckets are dropped.
std::shared_ptr<NarrowSlot> narrow_slot(ProcessGroup& pg, const GradBucket& bucket, DType narrow) {
  struct Entry {
    std::weak_ptr<StorageImpl> bucket;
    DType dtype;
    std::shared_ptr<NarrowSlot> slot;
  };
  static std::mutex mu;
  static std::vector<Entry> entries;
  const auto& storage = bucket.buffer.impl()->storage;
  {
    std::lock_guard<std::mutex> lock(mu);
    std::erase_if(entries, [](const Entry& e) { return e.bucket.expired(); });
    for (const Entry& e : entries)
      if (e.bucket.lock() == storage && e.dtype == narrow &&
          e.slot->buffer.numel() == bucket.buffer.numel())
        return e.slot;
  }
  // Not under the lock: every rank makes it (store round trips), and ranks may
  // be threads of this process.
  auto slot = std::make_shared<NarrowSlot>();
  slot->buffer = pg.make_comm_buffer(bucket.buffer.numel(), narrow);
  if (slot->buffer.device() != bucket.buffer.device())  // an "auto" group's is the CPU's
    slot->buffer = zeros({bucket.buffer.numel()}, narrow, bucket.buffer.device());
  std::lock_guard<std::mutex> lock(mu);
  entries.push_back({storage, narrow, slot});
  return slot;
}

// Casts the bucket into its narrow buffer, all-reduces half the bytes, and
// casts the mean back on wait(). f16 is pre-divided by the world size (the sum
// could overflow its range); bf16 has f32's range and is averaged by the
// reduction itself (one pass fewer).
WorkPtr compressed_allreduce(ProcessGroup& pg, const GradBucket& bucket, DType narrow) {
  auto slot = narrow_slot(pg, bucket, narrow);
  if (slot->last) {
    // Normally long done; an abandoned iteration's may still be in flight. Its
    // failure is not this call's (a broken group fails the new all-reduce too).
    try {
      slot->last->wait();
    } catch (const Error&) {
    }
  }
  Tensor compressed = slot->buffer;
  ReduceOp op = ReduceOp::kAvg;
  {
    NoGradGuard ng;
    if (narrow == DType::f16) {
      compressed.copy_(bucket.buffer * (1.0 / pg.size()));
      op = ReduceOp::kSum;
    } else {
      compressed.copy_(bucket.buffer);
    }
  }
  slot->last = pg.all_reduce(compressed, op);
  Tensor buffer = bucket.buffer;
  return then_work(slot->last, [buffer, compressed]() mutable {
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
