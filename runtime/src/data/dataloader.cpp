// DataLoader: batches in sampler order, built inline or by worker threads.
//
// Workers claim batch numbers in order and write each result (or the exception
// it threw) into slot b % capacity; a worker may only claim batch b once the
// consumer has taken batch b - capacity, which bounds memory and keeps slots
// unique. The consumer takes slots strictly in order, so batches arrive in
// sampler order whatever the worker count. Every wait is a bounded wait_for
// re-checking the stop flag, so stopping never depends on a single notify.
#include "kiln/data/dataloader.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "kiln/autograd.h"
#include "kiln/error.h"
#include "kiln/functional.h"
#include "kiln/profiler.h"

namespace kiln::data {

Example default_collate(std::vector<Example>&& examples) {
  KILN_CHECK(!examples.empty(), "[default_collate] got an empty batch");
  const Example& first = examples[0];
  for (size_t i = 1; i < examples.size(); ++i)
    KILN_CHECK(examples[i].size() == first.size(), "[default_collate] example ", i, " has ",
               examples[i].size(), " fields, example 0 has ", first.size());
  Example out;
  out.reserve(first.size());
  std::vector<Tensor> column(examples.size());
  for (size_t f = 0; f < first.size(); ++f) {
    KILN_CHECK(first[f].defined(), "[default_collate] field ", f, " of example 0 is undefined");
    for (size_t i = 0; i < examples.size(); ++i) {
      const Tensor& t = examples[i][f];
      KILN_CHECK(t.defined(), "[default_collate] field ", f, " of example ", i, " is undefined");
      KILN_CHECK(t.shape() == first[f].shape(), "[default_collate] field ", f, " of example ", i,
                 " has shape ", t.shape(), ", example 0 has ", first[f].shape(),
                 "; use a custom collate for variable-size examples");
      KILN_CHECK(t.dtype() == first[f].dtype(), "[default_collate] field ", f, " of example ", i,
                 " has dtype ", t.dtype(), ", example 0 has ", first[f].dtype());
      column[i] = t;
    }
    out.push_back(stack(column, 0));
  }
  return out;
}

namespace detail {

// One pass over the data: the batch index lists plus (optionally) workers.
class Epoch {
 public:
  Epoch(std::shared_ptr<const Dataset> dataset, CollateFn collate,
        std::vector<std::vector<int64_t>> batches, int workers, int capacity)
      : dataset_(std::move(dataset)),
        collate_(std::move(collate)),
        batches_(std::move(batches)),
        slots_(workers > 0 ? static_cast<size_t>(capacity) : 0) {
    threads_.reserve(static_cast<size_t>(workers));
    try {
      for (int w = 0; w < workers; ++w) threads_.emplace_back([this] { work(); });
    } catch (...) {
      stop();
      throw;
    }
  }
  ~Epoch() { stop(); }
  Epoch(const Epoch&) = delete;
  Epoch& operator=(const Epoch&) = delete;

  // Next batch into `out`; false at the end. Rethrows the batch's exception.
  bool next(Example& out) {
    if (threads_.empty()) {
      KILN_CHECK(!stop_.load(), kStopped);
      if (next_yield_ >= count()) return false;
      int64_t b = next_yield_++;
      profiler::Span span("data", "dataloader batch");  // loaded inline: the wait is the build
      out = build(b);
      return true;
    }
    profiler::Span span("data", "dataloader wait");
    std::unique_lock<std::mutex> lock(mu_);
    if (next_yield_ >= count()) return false;
    Slot& s = slots_[static_cast<size_t>(next_yield_) % slots_.size()];
    while (!stop_.load() && !(s.ready && s.batch == next_yield_)) ready_cv_.wait_for(lock, kPoll);
    KILN_CHECK(!stop_.load(), kStopped);
    std::exception_ptr err = std::move(s.error);
    out = std::move(s.value);
    s = Slot{};
    ++next_yield_;
    lock.unlock();
    space_cv_.notify_all();
    if (err) std::rethrow_exception(err);
    return true;
  }

  // Stops the workers (they finish at most the example they are loading) and joins them.
  void stop() {
    std::lock_guard<std::mutex> join(join_mu_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_.store(true);
    }
    space_cv_.notify_all();
    ready_cv_.notify_all();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

 private:
  static constexpr auto kPoll = std::chrono::milliseconds(50);
  static constexpr const char* kStopped =
      "[DataLoader] this epoch was stopped (the loader was destroyed or a new epoch began)";

  struct Slot {
    bool ready = false;
    int64_t batch = -1;
    Example value;
    std::exception_ptr error;
  };

  int64_t count() const { return static_cast<int64_t>(batches_.size()); }

  // Loads and collates batch b; gives up early (with an empty result) when stopped.
  Example build(int64_t b) {
    const auto& idx = batches_[static_cast<size_t>(b)];
    std::vector<Example> examples;
    examples.reserve(idx.size());
    for (int64_t i : idx) {
      if (stop_.load()) return {};
      examples.push_back(dataset_->get(i));
    }
    return collate_(std::move(examples));
  }

  void work() {
    NoGradGuard no_grad;  // loading never records autograd graphs
    for (;;) {
      int64_t b;
      {
        std::unique_lock<std::mutex> lock(mu_);
        while (!stop_.load() && next_claim_ < count() &&
               next_claim_ >= next_yield_ + static_cast<int64_t>(slots_.size()))
          space_cv_.wait_for(lock, kPoll);
        if (stop_.load() || next_claim_ >= count()) return;
        b = next_claim_++;
      }
      Slot result;
      result.batch = b;
      try {
        profiler::Span span("data", "load batch");
        result.value = build(b);
      } catch (...) {
        result.error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stop_.load()) return;
        result.ready = true;
        slots_[static_cast<size_t>(b) % slots_.size()] = std::move(result);
      }
      ready_cv_.notify_all();
    }
  }

  std::shared_ptr<const Dataset> dataset_;
  CollateFn collate_;
  std::vector<std::vector<int64_t>> batches_;
  std::mutex mu_;       // guards the slots and the claim/yield counters
  std::mutex join_mu_;  // serializes stop()
  std::condition_variable space_cv_, ready_cv_;
  std::vector<Slot> slots_;
  int64_t next_claim_ = 0;
  int64_t next_yield_ = 0;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

}  // namespace detail

// ---------------- iterator ----------------

DataLoader::Iterator::Iterator(std::shared_ptr<detail::Epoch> epoch) : epoch_(std::move(epoch)) {
  fetch();
}

DataLoader::Iterator::~Iterator() {
  if (epoch_) epoch_->stop();
}

DataLoader::Iterator& DataLoader::Iterator::operator=(Iterator&& o) noexcept {
  if (this != &o) {
    if (epoch_) epoch_->stop();
    epoch_ = std::move(o.epoch_);
    batch_ = std::move(o.batch_);
  }
  return *this;
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  KILN_CHECK(epoch_ != nullptr, "[DataLoader] incremented an iterator past the end");
  fetch();
  return *this;
}

void DataLoader::Iterator::fetch() {
  batch_.clear();
  if (!epoch_->next(batch_)) {
    epoch_->stop();
    epoch_.reset();
  }
}

// ---------------- loader ----------------

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions opts)
    : dataset_(std::move(dataset)), opts_(std::move(opts)) {
  KILN_CHECK(dataset_ != nullptr, "[DataLoader] dataset is null");
  KILN_CHECK(opts_.batch_size >= 1, "[DataLoader] batch_size must be >= 1, got ", opts_.batch_size);
  KILN_CHECK(opts_.num_workers >= 0, "[DataLoader] num_workers must be >= 0, got ",
             opts_.num_workers);
  KILN_CHECK(opts_.prefetch_factor >= 1, "[DataLoader] prefetch_factor must be >= 1, got ",
             opts_.prefetch_factor);
  // Sanity caps: each worker is an OS thread, each queued batch lives in memory.
  KILN_CHECK(opts_.num_workers <= 1024, "[DataLoader] num_workers must be <= 1024, got ",
             opts_.num_workers);
  KILN_CHECK(opts_.prefetch_factor <= 1024, "[DataLoader] prefetch_factor must be <= 1024, got ",
             opts_.prefetch_factor);
  KILN_CHECK(static_cast<bool>(opts_.collate), "[DataLoader] collate function is empty");
  KILN_CHECK(!(opts_.sampler && opts_.shuffle),
             "[DataLoader] sampler and shuffle=true are mutually exclusive "
             "(give the sampler its own shuffling)");
  if (opts_.sampler) {
    sampler_ = opts_.sampler;
  } else if (opts_.shuffle) {
    sampler_ = std::make_shared<RandomSampler>(dataset_->size(), opts_.seed);
  } else {
    sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  }
}

DataLoader::~DataLoader() {
  if (auto e = running_.lock()) e->stop();
}

int64_t DataLoader::size() const {
  int64_t n = sampler_->size(), bs = opts_.batch_size;
  return opts_.drop_last ? n / bs : (n + bs - 1) / bs;
}

DataLoader::Iterator DataLoader::begin() {
  if (auto e = running_.lock()) e->stop();
  sampler_->set_epoch(next_epoch_++);
  std::vector<int64_t> order = sampler_->indices();
  auto bs = static_cast<size_t>(opts_.batch_size);
  std::vector<std::vector<int64_t>> batches;
  batches.reserve(order.size() / bs + 1);
  for (size_t s = 0; s < order.size(); s += bs) {
    size_t e = std::min(order.size(), s + bs);
    if (e - s < bs && opts_.drop_last) break;
    batches.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(s),
                         order.begin() + static_cast<std::ptrdiff_t>(e));
  }
  int workers = batches.empty() ? 0 : opts_.num_workers;
  auto epoch = std::make_shared<detail::Epoch>(dataset_, opts_.collate, std::move(batches), workers,
                                               workers * opts_.prefetch_factor);
  running_ = epoch;
  return Iterator(std::move(epoch));
}

}  // namespace kiln::data
