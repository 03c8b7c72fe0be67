// kiln::checkpoint, PyTorch's non-reentrant form. The region's forward runs
// normally (so the graph reaches the parameters fn captures, and outputs
// require grad when they do), but every tensor autograd saves inside it is
// dropped: the SavedTensor keeps only its region and its save number. The
// first unpack in backward re-runs fn on the region's inputs with the random
// generator as it was, collecting the saves in the same order. Nested regions
// work the same way at each level: while a region recomputes, an inner
// checkpoint call opens a fresh inner region whose saves are dropped again.
#include <atomic>
#include <utility>

#include "autograd_internal.h"
#include "kiln/autograd.h"
#include "kiln/random.h"

namespace kiln {
namespace autograd {

struct CheckpointFrame : std::enable_shared_from_this<CheckpointFrame> {
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> fn;
  std::vector<Tensor> inputs;
  std::vector<uint32_t> input_versions;  // an input changed in place recomputes wrongly
  Generator rng;                         // the generator when the forward started
  // Per save of the forward: dtype and shape, to check the recomputation.
  std::vector<std::pair<DType, Dims>> meta;
  std::vector<Tensor> slots;  // the recomputed saves, in order
  bool recomputing = false;
  bool recomputed = false;
  uint64_t id = 0;  // of the current recomputation

  void recompute();
};

namespace {

// The regions open on this thread, innermost last.
thread_local std::vector<CheckpointFrame*> t_frames;

struct FrameScope {
  explicit FrameScope(CheckpointFrame* f) { t_frames.push_back(f); }
  ~FrameScope() { t_frames.pop_back(); }
  FrameScope(const FrameScope&) = delete;
  FrameScope& operator=(const FrameScope&) = delete;
};

}  // namespace

void CheckpointFrame::recompute() {
  KILN_CHECK(!recomputing,
             "[checkpoint] backward reached a checkpointed region while it was "
             "being recomputed (fn runs backward on its own saved tensors)");
  for (size_t i = 0; i < inputs.size(); ++i)
    KILN_CHECK(!inputs[i].defined() || inputs[i].version() == input_versions[i],
               "[checkpoint] input ", i, " (shape ", inputs[i].shape(),
               ") was modified in place after the checkpointed forward: recomputing it "
               "would not give the values backward needs");
  static std::atomic<uint64_t> next_id{1};
  Generator now = default_generator();
  default_generator() = rng;
  recomputing = true;
  id = next_id.fetch_add(1);
  slots.clear();
  try {
    FrameScope scope(this);
    GradModeGuard on(true);  // the saves exist only where the graph is built
    fn(inputs);
  } catch (...) {
    recomputing = false;
    default_generator() = now;
    throw;
  }
  recomputing = false;
  default_generator() = now;
  KILN_CHECK(slots.size() == meta.size(), "[checkpoint] recomputing the region saved ",
             slots.size(), " tensors for backward, its forward saved ", meta.size(),
             ": fn must run the same ops every time it is called");
  recomputed = true;
}

std::shared_ptr<CheckpointFrame> checkpoint_save(const Tensor& t, bool is_output, uint32_t& slot) {
  if (t_frames.empty()) return nullptr;
  CheckpointFrame* f = t_frames.back();
  if (f->recomputing) {
    f->slots.push_back(is_output ? t.detach() : t);
    return nullptr;
  }
  slot = static_cast<uint32_t>(f->meta.size());
  f->meta.emplace_back(t.dtype(), t.shape());
  return f->shared_from_this();
}

bool in_checkpoint_region() {
  return !t_frames.empty();
}

uint64_t recompute_region() {
  for (auto it = t_frames.rbegin(); it != t_frames.rend(); ++it)
    if ((*it)->recomputing) return (*it)->id;
  return 0;
}

Tensor checkpoint_unpack(CheckpointFrame& f, uint32_t slot, const char* op) {
  if (!f.recomputed) f.recompute();
  const Tensor& t = f.slots[slot];
  const auto& [dtype, shape] = f.meta[slot];
  KILN_CHECK(t.dtype() == dtype && t.shape() == shape, "[", op,
             "] a tensor recomputed by "
             "kiln::checkpoint is ",
             t.dtype(), t.shape(), " but the forward saved ", dtype, shape,
             ": fn must compute the same thing every time it is called");
  return t;
}

}  // namespace autograd

std::vector<Tensor> checkpoint(
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
    const std::vector<Tensor>& inputs) {
  if (!grad_mode_enabled()) return fn(inputs);  // autograd saves nothing to drop
  auto frame = std::make_shared<autograd::CheckpointFrame>();
  frame->fn = fn;
  frame->inputs = inputs;
  for (const Tensor& t : inputs) frame->input_versions.push_back(t.defined() ? t.version() : 0);
  frame->rng = default_generator();
  // The frame lives as long as a SavedTensor of the region refers to it.
  autograd::FrameScope scope(frame.get());
  return fn(inputs);
}

}  // namespace kiln
