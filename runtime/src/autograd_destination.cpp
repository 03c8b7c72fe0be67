// Gradient destinations (kiln/grad_destination.h): the registry of leaves'
// destination buffers, and dispatch's claim of one as an opaque op's output.
// The engine (autograd.cpp) decides which destinations a node may claim and
// checks what the claim produced; AccumulateGrad adopts or fills them.
#include "kiln/grad_destination.h"

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "autograd_internal.h"
#include "kiln/error.h"

namespace kiln::autograd {

constinit thread_local std::vector<PendingDestination>* t_pending_destinations = nullptr;
constinit thread_local int t_destination_input = -1;

namespace {

struct Entry {
  std::weak_ptr<TensorImpl> leaf;  // guards against a new tensor at a freed address
  Tensor dst;
};

std::mutex g_mu;
std::unordered_map<const TensorImpl*, Entry> g_entries;
std::atomic<size_t> g_count{0};
std::atomic<int64_t> g_computed{0}, g_copied{0};

// Drops entries whose leaf is gone (their buffers would otherwise stay alive).
void prune_locked() {
  std::erase_if(g_entries, [](const auto& kv) { return kv.second.leaf.expired(); });
  g_count.store(g_entries.size(), std::memory_order_relaxed);
}

}  // namespace

void set_grad_destination(const Tensor& leaf, const Tensor& dst) {
  const char* op = "[set_grad_destination] ";
  KILN_CHECK(leaf.defined() && dst.defined(), op, "the leaf and the destination must be defined");
  KILN_CHECK(leaf.requires_grad() && leaf.is_leaf(), op,
             "the tensor must be a leaf that requires grad (a parameter), got ",
             leaf.requires_grad() ? "a tensor with a grad_fn" : "one that does not require grad");
  KILN_CHECK(!leaf.is_symbolic() && !dst.is_symbolic(), op,
             "cannot be called on a traced (symbolic) tensor");
  KILN_CHECK(
      dst.shape() == leaf.shape() && dst.dtype() == leaf.dtype() && dst.device() == leaf.device(),
      op, "the destination is ", dst.dtype(), " ", dst.shape(), " on ", dst.device(),
      " but the leaf is ", leaf.dtype(), " ", leaf.shape(), " on ", leaf.device());
  KILN_CHECK(dst.is_contiguous(), op, "the destination must be contiguous (strides ", dst.strides(),
             ")");
  KILN_CHECK(!dst.requires_grad(), op, "the destination must not require grad");
  KILN_CHECK(dst.impl()->storage != leaf.impl()->storage, op,
             "the destination shares memory with the leaf itself");
  std::lock_guard<std::mutex> lock(g_mu);
  prune_locked();
  g_entries[leaf.impl()] = Entry{leaf.impl_ptr(), dst};
  g_count.store(g_entries.size(), std::memory_order_relaxed);
}

void clear_grad_destination(const Tensor& leaf) {
  if (!leaf.defined()) return;
  std::lock_guard<std::mutex> lock(g_mu);
  g_entries.erase(leaf.impl());
  prune_locked();
}

Tensor grad_destination(const Tensor& leaf) {
  return leaf.defined() ? find_grad_destination(*leaf.impl()) : Tensor();
}

GradDestinationStats grad_destination_stats() {
  return {g_computed.load(std::memory_order_relaxed), g_copied.load(std::memory_order_relaxed)};
}

bool any_grad_destination() {
  return g_count.load(std::memory_order_relaxed) > 0;
}

Tensor find_grad_destination(const TensorImpl& leaf) {
  if (!any_grad_destination()) return {};
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_entries.find(&leaf);
  if (it == g_entries.end()) return {};
  auto alive = it->second.leaf.lock();
  return alive.get() == &leaf ? it->second.dst : Tensor();
}

void count_grad_destination(bool computed_in_place) {
  (computed_in_place ? g_computed : g_copied).fetch_add(1, std::memory_order_relaxed);
}

bool claim_destination_slow(const OpInfo& info, const TensorMeta& meta, Device dev, Tensor& out) {
  // Only the kernels that produce a weight's gradient whole (GEMM, conv), and
  // a reduction that a derivative rule says computes a given input's gradient
  // (a bias's sum over the batch, under DestinationsFor): a claim by any
  // other op is undone by the engine (a copy), so keep the candidates few.
  // Any device: the CPU's kernels and a device runtime's (CUDA: cuBLASLt, the
  // conv kernels) write a contiguous output at any offset of its storage. A
  // device kernel built from nested ops cannot take a claimed destination
  // twice; one that takes another leaf's is undone by the engine as above.
  if (info.has(kCollective)) return false;
  if (!info.has(kOpaque) && !(info.has(kReduction) && t_destination_input >= 0)) return false;
  int64_t numel = 1;
  for (int64_t d : meta.shape) numel *= d;
  for (PendingDestination& p : *t_pending_destinations) {
    if (p.claimed || p.dst.numel() != numel || p.dst.dtype() != meta.dtype || p.dst.device() != dev)
      continue;
    if (t_destination_input >= 0 && p.slot != static_cast<size_t>(t_destination_input)) continue;
    p.claimed = true;
    out = as_strided(p.dst, meta.shape, contiguous_strides(meta.shape), p.dst.offset());
    return true;
  }
  return false;
}

}  // namespace kiln::autograd
