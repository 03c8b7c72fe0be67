// Backend-independent pieces of the process groups (private to
// kiln_distributed): the Work implementation, the per-group ring log of recent
// collectives, argument checks, and the KILN_DIST_DEBUG cross-rank check.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/distributed/process_group.h"

namespace kiln::dist::detail {

using Millis = std::chrono::milliseconds;

/// What one collective (or send/recv) does: for the log, errors and the debug check.
struct CollectiveInfo {
  std::string op;      ///< "all_reduce"
  uint64_t seq = 0;    ///< collective number within the group (send/recv: their own count)
  std::string dtype;   ///< "f32"; empty for barrier
  std::string shape;   ///< "[4, 256]" (first tensor)
  int64_t numel = 0;   ///< elements per rank that must agree across ranks
  std::string detail;  ///< "sum", "root=0", "dst=1 tag=3"
  /// "all_reduce #5 f32[4, 256] sum".
  std::string str() const;
  /// What every rank must agree on: "all_reduce(f32, 1024 elements, sum)".
  std::string signature() const;
};

/// The last `capacity` collectives of a group with their state and timings.
/// Thread-safe.
class CollectiveLog {
 public:
  explicit CollectiveLog(size_t capacity = 32) : capacity_(capacity) {}
  /// Records a queued op; returns its id for the calls below.
  uint64_t add(const std::string& what);
  void started(uint64_t id);
  void finished(uint64_t id, const std::string& error = {});
  /// One line per entry, oldest first, under `header`.
  std::string dump(const std::string& header) const;

 private:
  enum class State { kQueued, kRunning, kDone, kFailed };
  struct Entry {
    uint64_t id;
    std::string what;
    State state;
    Clock::time_point queued, start, end;
    std::string error;
  };
  Entry* find(uint64_t id);
  mutable std::mutex mu_;
  size_t capacity_;
  uint64_t next_id_ = 0;
  std::deque<Entry> entries_;
};

/// Prints `log` to stderr under a header naming `where` (one write, so lines of
/// different ranks do not interleave within a dump).
void print_log(const CollectiveLog& log, const std::string& where, const std::string& why);

/// The Work every backend returns: a state, the result tensors and timestamps,
/// completed by the backend's worker with mark_done / mark_failed.
class WorkImpl final : public Work {
 public:
  /// `where`: "rank 0/2, group 'default_pg'"; `log_id`: its CollectiveLog entry.
  WorkImpl(CollectiveInfo info, std::string where, std::vector<Tensor> results,
           Millis default_timeout, std::shared_ptr<CollectiveLog> log, uint64_t log_id);
  void wait(Millis timeout = Millis(-1)) override;
  bool is_completed() const override;
  std::vector<Tensor> result() const override;
  Clock::time_point start_time() const override;
  Clock::time_point end_time() const override;
  std::string describe() const override;

  const CollectiveInfo& info() const { return info_; }
  void mark_started();
  void mark_done();
  /// `message` is the full kiln::Error text that wait() throws. `before_wake`
  /// runs once the log shows the failure but before any waiter wakes.
  void mark_failed(const std::string& message, const std::function<void()>& before_wake = {});
  /// "[all_reduce] all_reduce #5 f32[8] sum failed on rank 0/2, group 'g': " + why.
  std::string failure(const std::string& why) const;

 private:
  enum class State { kPending, kDone, kFailed };
  CollectiveInfo info_;
  std::string where_;
  std::vector<Tensor> results_;
  Millis default_timeout_;
  std::shared_ptr<CollectiveLog> log_;
  uint64_t log_id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  State state_ = State::kPending;
  std::string error_;
  Clock::time_point start_{}, end_{};
};

/// A Work that has already failed with `message` (it is logged as failed).
std::shared_ptr<WorkImpl> failed_work(CollectiveInfo info, const std::string& where,
                                      std::shared_ptr<CollectiveLog> log,
                                      const std::string& message);

/// Front-end checks: `t` is defined, has storage (not traced), lives on the CPU
/// and is contiguous; kiln::Error tagged with `op` otherwise.
void check_cpu_tensor(const char* op, const Tensor& t, const char* name = "tensor");
/// kiln::Error unless `dt` can be reduced with `rop` (Avg needs a floating dtype).
void check_reducible(const char* op, DType dt, ReduceOp rop);
/// "[4, 256]".
std::string shape_str(const Tensor& t);
/// The CollectiveInfo of a collective on one tensor: op, dtype, shape, numel.
CollectiveInfo tensor_op(const char* op, const Tensor& t, std::string detail = {});
/// all_reduce_coalesced's front-end checks (`check` on each tensor, one shared
/// dtype, reducible with `rop`) and its info: the flat buffer's numel and
/// "[N in K tensors]". kiln::Error otherwise.
CollectiveInfo coalesced_info(const std::vector<Tensor>& ts, ReduceOp rop,
                              const std::function<void(const char*, const Tensor&)>& check);
/// all_reduce_into's arguments: dst 1-D and contiguous, every src defined,
/// contiguous, with dst's dtype and device, their sizes summing to dst's; a src
/// sharing dst's storage is exactly its range of dst. kiln::Error otherwise.
void check_all_reduce_into(const std::vector<Tensor>& srcs, const Tensor& dst);

/// KILN_DIST_DEBUG: publishes this rank's signature of collective info.seq under
/// `prefix` and compares it with every other rank's. kiln::Error naming both
/// ranks and both signatures on a mismatch, or naming the ranks that did not
/// issue it within `timeout` (after calling `on_timeout`, e.g. to print the
/// log), or saying the store went away. Blocks until all ranks issued it.
void debug_check(Store& store, const std::string& prefix, int rank, int size,
                 const CollectiveInfo& info, Millis timeout,
                 const std::function<void()>& on_timeout);

/// debug_check as a group runs it before issuing a collective: on a timeout the
/// group's log is printed (under `where`), and a failure is entered in the log
/// (as a failed Work) before the kiln::Error propagates.
void debug_check_logged(Store& store, const std::string& prefix, int rank, int size,
                        const CollectiveInfo& info, Millis timeout,
                        const std::shared_ptr<CollectiveLog>& log, const std::string& where);

/// A string's bytes as a store value, and back.
inline Bytes to_bytes(const std::string& s) {
  return Bytes(s.begin(), s.end());
}
inline std::string from_bytes(const Bytes& b) {
  return std::string(b.begin(), b.end());
}

/// The ranks (of 0..size-1) whose key `prefix + rank` is not set, probing each
/// briefly (used after a store wait timed out). A store failure other than a
/// timeout propagates (the store is gone: no rank can be named).
std::vector<int> missing_ranks(Store& store, const std::string& prefix, int size);

/// "lost the store (<e>); without kilnrun, rank 0 of the job serves it, so rank
/// 0 has exited ..." (or kilnrun's launcher stopped, under kilnrun).
std::string store_lost(const Error& e);

}  // namespace kiln::dist::detail
