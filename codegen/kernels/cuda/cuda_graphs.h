// Internal: what kiln's CUDA code does differently while a compiled graph is
// captured into a CUDA graph on this thread (cuda_graph_runner.cpp): device
// allocations come from the plan's private pool, host data a copy uploads is
// staged in pinned memory kept with the graph, and the driver calls kiln makes
// on purpose during a capture (growing the pool) run in relaxed capture mode.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "kernels/cuda/driver.h"
#include "kiln/allocator.h"

namespace kiln::cuda {

/// Whether this thread is capturing a compiled graph into a CUDA graph.
bool capturing_graph();
/// capturing_graph(), or work queued on `s` is captured (a caller's own
/// cuStreamBeginCapture): no event may be queried or waited for then.
bool capturing_on(CUstream s);

/// Keeps `p` alive as long as the graph being captured on this thread (the
/// pinned host buffers its copies read, its host functions' payloads).
/// kiln::Error when this thread is not capturing.
void keep_for_graph(std::shared_ptr<void> p);

/// What a library whose stream work is captured into a graph (NCCL's
/// collectives) does around each replay of that graph, since the host-side
/// bookkeeping it does for work issued outside a graph (watching completion,
/// failing on an error) cannot run during the capture.
class ReplayWatch {
 public:
  virtual ~ReplayWatch() = default;
  /// Before each launch of the graph; a kiln::Error stops the replay (and
  /// reaches the compiled call's caller), e.g. a failed communicator.
  virtual void before_launch() = 0;
  /// After each launch, with the CUstream the graph was launched on.
  virtual void after_launch(void* stream) = 0;

  /// Destroys the graph (a replay in flight still finishes; the host does not
  /// wait) and makes its plan run without a graph from then on, `why` its
  /// graph_stats().last_fallback. A library calls it before freeing what the
  /// graph's nodes use: ncclCommDestroy and ncclCommAbort wait until every
  /// graph holding the communicator's work is destroyed. Any thread; once the
  /// graph is gone (or before the runner set it up), nothing.
  void release(const std::string& why);
  /// The graph runner's side of release() (set once the graph is made).
  void set_release(std::function<void(const std::string&)> f);

 private:
  std::mutex mu_;
  std::function<void(const std::string&)> release_;
};

/// The watch `owner` keeps on the graph being captured on this thread: made
/// by `make` on the owner's first call in this capture, the same object on
/// later ones. kiln::Error when this thread is not capturing.
ReplayWatch& replay_watch(const void* owner,
                          const std::function<std::shared_ptr<ReplayWatch>()>& make);

/// While alive, and this thread captures: its capture-unsafe driver calls are
/// allowed (CU_STREAM_CAPTURE_MODE_RELAXED), as PyTorch's allocator does
/// around cudaMalloc. A new segment of memory is not part of the graph: it
/// exists when the graph runs because the pool keeps it. `any_capture`: also
/// in a capture kiln did not begin (cuStreamBeginCapture called directly).
class RelaxedCapture {
 public:
  explicit RelaxedCapture(bool any_capture = false);
  ~RelaxedCapture();
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  bool on_ = false;
  int previous_ = 0;  // the thread's CUstreamCaptureMode before
};

/// A private pool of device `device`'s memory (a caching allocator of its
/// own): the blocks a captured graph uses stay at fixed addresses and are
/// never handed to other work. Dropping the last handle gives the pool's
/// free segments back to the driver.
std::shared_ptr<Allocator> make_graph_pool(int device);

/// While alive: device `device`'s allocations on this thread come from `pool`.
class PoolGuard {
 public:
  PoolGuard(Allocator* pool, int device);
  ~PoolGuard();
  PoolGuard(const PoolGuard&) = delete;
  PoolGuard& operator=(const PoolGuard&) = delete;

 private:
  Allocator* previous_;
  int previous_device_;
};

}  // namespace kiln::cuda
