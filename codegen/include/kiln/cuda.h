// CUDA devices as PyTorch's torch.cuda reports them. kiln opens the NVIDIA
// driver at run time (it is never linked), so these answer on any machine:
// without a driver or GPU they say so instead of failing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace kiln {
class Tensor;
}  // namespace kiln

namespace kiln::cuda {

/// True when the NVIDIA driver loads and reports at least one device.
bool is_available();
/// The number of CUDA devices (0 without a usable driver).
int device_count();
/// Why CUDA is unusable ("" when is_available()): no driver, the toolkit's stub
/// library, a driver older than kiln's CUDA 13 headers, no device, or a kiln
/// built without the CUDA toolkit.
std::string unavailable_reason();
/// Waits until all work queued on CUDA device `device`, on every stream, has
/// finished (kiln::Error when CUDA is unavailable). As every wait of the host
/// for the device (copies to the host, Stream/Event::synchronize), it then
/// raises kiln::Error for an out-of-range index a kernel met since the last
/// wait (indexing ops check their indices on the device, not at the launch).
void synchronize(int device = 0);
/// Whether f32 matmuls on CUDA may use TF32 tensor cores (10-bit mantissa
/// operands; PyTorch's torch.backends.cuda.matmul.allow_tf32). Off by default.
void set_matmul_allow_tf32(bool allow);
/// The current set_matmul_allow_tf32 choice.
bool matmul_allow_tf32();

class Event;

/// A CUDA stream (torch.cuda.Stream): an in-order queue of work on one device.
/// kiln's kernels, copies and allocations go to the current stream of their
/// device (current_stream, StreamGuard). Created streams do not synchronize
/// with the default stream (CU_STREAM_NON_BLOCKING, as PyTorch's): order work
/// across streams with events. Copies of a Stream share one stream, destroyed
/// with the last copy (its queued work still completes).
class Stream {
 public:
  /// A new stream on `device`. `priority`: lower numbers are scheduled first
  /// (CUDA's convention: 0 is the default, negative is higher; values outside
  /// the device's range are clamped by the driver).
  explicit Stream(int device = 0, int priority = 0);
  /// The device the stream belongs to.
  int device() const;
  /// The priority it was created with (0 for the default stream).
  int priority() const;
  /// True for a device's default stream (the legacy null stream).
  bool is_default() const;
  /// A number naming this stream in the process, never reused (0 for every
  /// device's default stream).
  uint64_t id() const;
  /// The driver's CUstream (nullptr for the default stream), for libraries
  /// that take one (NCCL, cuBLAS).
  void* handle() const;
  /// Work queued on this stream later waits until `e` completes (the host does
  /// not wait); an event never recorded is complete.
  void wait(const Event& e) const;
  /// Work queued on this stream later waits for the work queued on `other` so far.
  void wait(const Stream& other) const;
  /// True when all work queued on this stream has finished.
  bool query() const;
  /// Waits on the host until all work queued on this stream has finished;
  /// then as cuda::synchronize, raises a bad index a kernel met.
  void synchronize() const;
  bool operator==(const Stream& o) const { return id() == o.id() && device() == o.device(); }
  bool operator!=(const Stream& o) const { return !(*this == o); }

  struct Impl;
  /// Internal: a handle on shared stream state (default_stream, current_stream).
  explicit Stream(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  /// Internal: the shared state (the caching allocator keeps it alive).
  const std::shared_ptr<Impl>& impl() const { return impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

/// The default stream of `device` (torch.cuda.default_stream).
Stream default_stream(int device = 0);
/// The current stream of `device` on this thread: the default stream unless
/// set_current_stream or a StreamGuard chose another (torch.cuda.current_stream).
Stream current_stream(int device = 0);
/// Makes `s` the current stream of its device on this thread (torch.cuda.set_stream).
void set_current_stream(const Stream& s);

/// Makes `s` the current stream of its device on this thread for the guard's
/// scope and restores the previous one after (PyTorch's StreamGuard, `with
/// torch.cuda.stream(s)`).
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& s);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
};

/// A CUDA event (torch.cuda.Event): a point in a stream's work, created on its
/// first record. Copies share one event.
class Event {
 public:
  /// An event; `enable_timing` allows elapsed_time (costs a timestamp).
  explicit Event(bool enable_timing = false);
  /// Captures the work queued on `s` so far (replacing an earlier record).
  void record(const Stream& s);
  /// record(current_stream(0)).
  void record();
  /// s.wait(*this).
  void wait(const Stream& s) const;
  /// True when the recorded work has finished (or the event was never recorded).
  bool query() const;
  /// Waits on the host until the recorded work has finished; then as
  /// cuda::synchronize, raises a bad index a kernel met.
  void synchronize() const;
  /// Milliseconds from this event to `end`; both recorded with enable_timing
  /// and complete, else kiln::Error.
  float elapsed_time(const Event& end) const;
  /// Internal: the driver's CUevent (nullptr until recorded).
  void* handle() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

/// Marks `t`'s memory (a CUDA tensor) as used by work on `s` (PyTorch's
/// Tensor.record_stream): when `t`'s storage is freed, the caching allocator
/// hands its block out again only after the work queued on `s` by then has
/// finished. Needed when a tensor made on one stream is used on another.
void record_stream(const Tensor& t, const Stream& s);

/// Compiled graphs run through CUDA graphs in this process (a plan with static
/// shapes captures its launches on its second run and replays them from then
/// on; KILN_CUDA_GRAPHS=0 turns this off).
struct GraphStats {
  int64_t captures = 0;   ///< graphs captured (again when a plan's inputs or outputs moved)
  int64_t replays = 0;    ///< compiled calls served by replaying a captured graph
  int64_t fallbacks = 0;  ///< plans left on the plain launch path (why: last_fallback)
  /// Outputs of a replay still held by the caller when the next replay was
  /// due, moved out of the graph's memory first (one device copy each).
  int64_t outputs_moved = 0;
  std::string last_fallback;  ///< why the last such plan cannot run from a graph
};
/// This process's GraphStats so far.
GraphStats graph_stats();

/// Copies between the host and CUDA devices in this process so far (each
/// upload or download kiln queues, pinned or not; a graph replay's captured
/// copies are not counted again).
struct TransferStats {
  int64_t uploads = 0;         ///< host -> device copies
  int64_t upload_bytes = 0;    ///< their bytes
  int64_t downloads = 0;       ///< device -> host copies
  int64_t download_bytes = 0;  ///< their bytes
};
/// This process's TransferStats so far.
TransferStats transfer_stats();

}  // namespace kiln::cuda
