// Verifies DataLoader: batching, shuffling, collate, workers, errors, early stop.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "kiln/data/data.h"
#include "kiln/kiln.h"

using namespace kiln;
using namespace kiln::data;
using namespace std::chrono_literals;

namespace {

// Example i = {f32 [2] = {i, -i}, i64 0-d = i}; optionally sleeps or throws.
class CountingDataset : public Dataset {
 public:
  explicit CountingDataset(int64_t n, std::chrono::milliseconds delay = 0ms, int64_t bad = -1)
      : n_(n), delay_(delay), bad_(bad) {}
  int64_t size() const override { return n_; }
  Example get(int64_t i) const override {
    ++calls;
    if (delay_ > 0ms) std::this_thread::sleep_for(delay_);
    KILN_CHECK(i != bad_, "[CountingDataset] example ", i, " is broken");
    auto f = static_cast<float>(i);
    return {from_vector<float>({f, -f}), scalar_tensor(i, DType::i64)};
  }
  mutable std::atomic<int64_t> calls{0};

 private:
  int64_t n_;
  std::chrono::milliseconds delay_;
  int64_t bad_;
};

// The first-field values (i) of every batch of one epoch.
std::vector<std::vector<int64_t>> epoch_labels(DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (auto& batch : loader) out.push_back(batch[1].to_vector<int64_t>());
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// Batches are stacked along dim 0; the last partial batch is kept by default.
TEST(LoaderBatching, KeepsLastPartialBatch) {
  auto ds = std::make_shared<CountingDataset>(10);
  DataLoader loader(ds, {.batch_size = 4});
  EXPECT_EQ(loader.size(), 3);
  int64_t n = 0;
  for (auto& batch : loader) {
    ASSERT_EQ(batch.size(), 2u);
    int64_t expect = n == 2 ? 2 : 4;
    EXPECT_EQ(batch[0].shape(), (Dims{expect, 2}));
    EXPECT_EQ(batch[1].shape(), (Dims{expect}));
    EXPECT_EQ(batch[1].dtype(), DType::i64);
    ++n;
  }
  EXPECT_EQ(n, 3);
  EXPECT_EQ(epoch_labels(loader),
            (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
}

// drop_last drops the incomplete batch and size() agrees.
TEST(LoaderBatching, DropLast) {
  auto ds = std::make_shared<CountingDataset>(10);
  DataLoader loader(ds, {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(loader.size(), 2);
  EXPECT_EQ(epoch_labels(loader), (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  DataLoader exact(ds, {.batch_size = 5, .drop_last = true});
  EXPECT_EQ(exact.size(), 2);
  DataLoader empty(std::make_shared<CountingDataset>(3), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(empty.size(), 0);
  EXPECT_TRUE(empty.begin() == empty.end());
}

// Shuffling with a seed is reproducible across loaders, differs per epoch, covers everything.
TEST(LoaderBatching, ShuffleReproducible) {
  auto ds = std::make_shared<CountingDataset>(20);
  DataLoaderOptions opts{.batch_size = 5, .shuffle = true, .seed = 9};
  DataLoader a(ds, opts), b(ds, opts);
  auto a0 = epoch_labels(a), a1 = epoch_labels(a);
  EXPECT_EQ(a0, epoch_labels(b));
  EXPECT_EQ(a1, epoch_labels(b));
  EXPECT_NE(a0, a1);
  std::vector<int64_t> all;
  for (auto& v : a0) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  for (int64_t i = 0; i < 20; ++i) EXPECT_EQ(all[static_cast<size_t>(i)], i);
  a.set_epoch(0);
  EXPECT_EQ(epoch_labels(a), a0);
  EXPECT_EQ(a.epoch(), 1u);
}

// A custom collate receives the examples of the batch, in order.
TEST(LoaderBatching, CustomCollate) {
  auto ds = std::make_shared<CountingDataset>(5);
  DataLoaderOptions opts{.batch_size = 2};
  opts.collate = [](std::vector<Example>&& xs) {
    int64_t sum = 0;
    for (auto& x : xs) sum += x[1].item<int64_t>();
    return Example{scalar_tensor(sum, DType::i64)};
  };
  DataLoader loader(ds, opts);
  std::vector<int64_t> sums;
  for (auto& b : loader) sums.push_back(b[0].item<int64_t>());
  EXPECT_EQ(sums, (std::vector<int64_t>{1, 5, 4}));
}

// A user-provided sampler decides the order; it conflicts with shuffle=true.
TEST(LoaderBatching, CustomSampler) {
  auto ds = std::make_shared<CountingDataset>(6);
  auto sampler = std::make_shared<RandomSampler>(6, 3);
  DataLoader loader(ds, {.batch_size = 6, .sampler = sampler});
  auto got = epoch_labels(loader);
  EXPECT_EQ(got[0], random_permutation(6, 3, 0));
  EXPECT_THROW(DataLoader(ds, {.shuffle = true, .sampler = sampler}), Error);
}

// default_collate reports mismatched shapes, dtypes and field counts clearly.
TEST(LoaderBatching, DefaultCollateErrors) {
  std::vector<Example> xs{{zeros({2})}, {zeros({3})}};
  try {
    default_collate(std::move(xs));
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("[default_collate]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("example 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[3]"), std::string::npos) << msg;
  }
  EXPECT_THROW(default_collate({{zeros({2})}, {zeros({2}, DType::f64)}}), Error);
  EXPECT_THROW(default_collate({{zeros({2})}, {zeros({2}), zeros({2})}}), Error);
  EXPECT_THROW(default_collate({}), Error);
}

// Invalid options are rejected with kiln::Error.
TEST(LoaderBatching, OptionErrors) {
  auto ds = std::make_shared<CountingDataset>(4);
  EXPECT_THROW(DataLoader(nullptr), Error);
  EXPECT_THROW(DataLoader(ds, {.batch_size = 0}), Error);
  EXPECT_THROW(DataLoader(ds, {.num_workers = -1}), Error);
  EXPECT_THROW(DataLoader(ds, {.prefetch_factor = 0}), Error);
  EXPECT_THROW(DataLoader(ds, {.collate = nullptr}), Error);
}

// Two workers produce exactly the batches of the inline loader, in order, for several epochs.
TEST(LoaderWorkers, SameBatchesAsInline) {
  auto ds = std::make_shared<CountingDataset>(37);
  DataLoader inline_loader(ds, {.batch_size = 3, .shuffle = true, .seed = 5});
  DataLoader threaded(ds, {.batch_size = 3, .shuffle = true, .seed = 5, .num_workers = 2});
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<std::vector<float>> a, b;
    for (auto& batch : inline_loader) a.push_back(batch[0].to_vector<float>());
    for (auto& batch : threaded) b.push_back(batch[0].to_vector<float>());
    EXPECT_EQ(a, b);
    EXPECT_EQ(static_cast<int64_t>(b.size()), threaded.size());
  }
}

// Prefetching is bounded: a consumer that stops taking batches stops the workers.
TEST(LoaderWorkers, PrefetchIsBounded) {
  auto ds = std::make_shared<CountingDataset>(100);
  DataLoader loader(ds, {.batch_size = 1, .num_workers = 2, .prefetch_factor = 2});
  auto it = loader.begin();
  std::this_thread::sleep_for(100ms);
  // The taken batch + 4 queued + at most 2 in progress.
  EXPECT_LE(ds->calls.load(), 1 + 4 + 2);
}

// A worker's exception reaches the consumer at the failing batch; later batches still come.
TEST(LoaderWorkers, ExceptionPropagatesAtTheRightBatch) {
  for (int workers : {0, 2}) {
    auto ds = std::make_shared<CountingDataset>(10, 0ms, /*bad=*/7);
    DataLoader loader(ds, {.batch_size = 2, .num_workers = workers});
    auto it = loader.begin();
    std::vector<int64_t> firsts;
    std::string msg;
    while (it != loader.end()) {
      firsts.push_back((*it)[1].to_vector<int64_t>()[0]);
      try {
        ++it;
      } catch (const Error& e) {
        msg = e.what();
        ++it;  // skips the failing batch
      }
    }
    EXPECT_NE(msg.find("example 7 is broken"), std::string::npos) << "workers=" << workers;
    EXPECT_EQ(firsts, (std::vector<int64_t>{0, 2, 4, 8})) << "workers=" << workers;
  }
}

// An exception in the first batch is raised by begin(), i.e. by the range-for itself.
TEST(LoaderWorkers, ExceptionInFirstBatch) {
  auto ds = std::make_shared<CountingDataset>(4, 0ms, /*bad=*/0);
  DataLoader loader(ds, {.batch_size = 2, .num_workers = 2});
  EXPECT_THROW(
      {
        for (auto& b : loader) (void)b;
      },
      Error);
}

// Breaking out of the loop stops the workers promptly even when loading is slow.
TEST(LoaderWorkers, EarlyBreakReturnsPromptly) {
  auto ds = std::make_shared<CountingDataset>(1000, 20ms);
  auto t0 = std::chrono::steady_clock::now();
  {
    DataLoader loader(ds, {.batch_size = 4, .num_workers = 2, .prefetch_factor = 4});
    for (auto& b : loader) {
      EXPECT_EQ(b[1].size(0), 4);
      break;
    }
    int64_t after_break = ds->calls.load();
    std::this_thread::sleep_for(60ms);
    EXPECT_EQ(ds->calls.load(), after_break);  // workers are gone
  }
  EXPECT_LT(seconds_since(t0), 2.0);
}

// Destroying the loader mid-epoch joins its workers; the orphaned iterator then raises.
TEST(LoaderWorkers, DestroyMidEpoch) {
  auto ds = std::make_shared<CountingDataset>(1000, 20ms);
  auto t0 = std::chrono::steady_clock::now();
  DataLoader::Iterator it;
  {
    DataLoader loader(ds, {.batch_size = 4, .num_workers = 2});
    it = loader.begin();
    ++it;
  }
  EXPECT_LT(seconds_since(t0), 2.0);
  EXPECT_THROW(++it, Error);
}

// Starting a new epoch while one is running stops the old one; the new one is complete.
TEST(LoaderWorkers, RestartMidEpoch) {
  auto ds = std::make_shared<CountingDataset>(12, 1ms);
  DataLoader loader(ds, {.batch_size = 2, .num_workers = 2});
  auto first = loader.begin();
  ++first;
  int64_t n = 0;
  for (auto& b : loader) n += b[1].size(0);
  EXPECT_EQ(n, 12);
  EXPECT_THROW(++first, Error);
}
