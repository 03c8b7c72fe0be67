// DataLoader, like torch.utils.data.DataLoader: batches a Dataset in sampler
// order, optionally on background worker threads that prefetch into a
// bounded queue. `for (auto& batch : loader)` runs one epoch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/data/dataset.h"
#include "kiln/data/sampler.h"

namespace kiln::data {

/// Merges the examples of one batch into a single Example.
using CollateFn = std::function<Example(std::vector<Example>&&)>;

/// Stacks field k of every example along a new dim 0 (kiln::stack). Raises
/// kiln::Error naming the example and field when counts, shapes or dtypes differ.
Example default_collate(std::vector<Example>&& examples);

/// DataLoader settings (PyTorch's argument names).
struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;     ///< RandomSampler(seed) instead of SequentialSampler
  uint64_t seed = 0;        ///< shuffle seed; the order depends only on (seed, epoch)
  bool drop_last = false;   ///< drop the last batch when it is smaller than batch_size
  int num_workers = 0;      ///< 0: batches are built on the calling thread
  int prefetch_factor = 2;  ///< batches buffered per worker (queue = workers * factor)
  CollateFn collate = default_collate;
  std::shared_ptr<Sampler> sampler = nullptr;  ///< overrides shuffle/seed when set
};

/// One batch: its fields (a std::vector<Tensor>, so indexing and iteration work
/// as on any Example) that also unpack like PyTorch's `for x, y in loader`:
/// `for (auto& [x, y] : loader)` needs exactly two fields and raises
/// kiln::Error naming the count otherwise (index other batches: batch[2]).
class Batch : public Example {
 public:
  using Example::Example;
  Batch() = default;
  Batch(Example fields) : Example(std::move(fields)) {}  // NOLINT: implicit, as the vector
  /// Field I of a two-field batch (the structured-binding protocol).
  template <size_t I>
  Tensor& get() {
    check_pair();
    return (*this)[I];
  }
  template <size_t I>
  const Tensor& get() const {
    check_pair();
    return (*this)[I];
  }

 private:
  void check_pair() const {
    KILN_CHECK(size() == 2,
               "[DataLoader] `auto& [x, y] = batch` unpacks two fields, this batch has ", size(),
               ": index it instead (batch[0], batch[1], ...)");
  }
};

namespace detail {
class Epoch;
}

/// Iterates a dataset in batches; each begin() starts a new epoch.
class DataLoader {
 public:
  /// Move-only input iterator over one epoch's batches. Destroying it before the
  /// end (e.g. `break`) stops and joins the epoch's workers.
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = Batch*;
    using reference = Batch&;

    Iterator() = default;  ///< the end iterator
    Iterator(Iterator&& o) noexcept = default;
    Iterator& operator=(Iterator&& o) noexcept;
    Iterator(const Iterator&) = delete;
    Iterator& operator=(const Iterator&) = delete;
    ~Iterator();

    Batch& operator*() { return batch_; }
    Batch* operator->() { return &batch_; }
    /// Fetches the next batch; rethrows (at that batch) what a worker or the
    /// collate function threw. The failing batch is skipped if iteration goes on.
    Iterator& operator++();
    /// Equal when both are at the end (iterators of one epoch are not copyable).
    bool operator==(const Iterator& o) const { return epoch_ == o.epoch_; }

   private:
    friend class DataLoader;
    explicit Iterator(std::shared_ptr<detail::Epoch> epoch);
    void fetch();

    std::shared_ptr<detail::Epoch> epoch_;  // null at the end
    Batch batch_;
  };

  /// Raises kiln::Error on a null dataset, batch_size < 1, num_workers < 0,
  /// prefetch_factor < 1, an empty collate, or a sampler together with shuffle.
  explicit DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions opts = {});
  /// Stops and joins the workers of a running epoch.
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Starts epoch epoch() (then increments it); stops a previous unfinished epoch,
  /// whose iterators then raise kiln::Error on ++.
  Iterator begin();
  Iterator end() { return Iterator(); }
  /// Number of batches per epoch.
  int64_t size() const;
  /// Sets the epoch the next begin() uses (the sampler's set_epoch).
  void set_epoch(uint64_t epoch) { next_epoch_ = epoch; }
  /// The epoch the next begin() uses.
  uint64_t epoch() const { return next_epoch_; }
  const Dataset& dataset() const { return *dataset_; }
  Sampler& sampler() { return *sampler_; }
  const DataLoaderOptions& options() const { return opts_; }

 private:
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions opts_;
  std::shared_ptr<Sampler> sampler_;
  uint64_t next_epoch_ = 0;
  std::weak_ptr<detail::Epoch> running_;
};

}  // namespace kiln::data

// A Batch unpacks into two tensors (`auto& [x, y] = batch`).
template <>
struct std::tuple_size<kiln::data::Batch> : std::integral_constant<size_t, 2> {};
template <size_t I>
struct std::tuple_element<I, kiln::data::Batch> {
  using type = kiln::Tensor;
};
