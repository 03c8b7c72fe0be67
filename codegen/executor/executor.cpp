// The executor.
//
// Schedule: the units are the fusion groups and the unfused nodes; they run in
// a topological order of the (acyclic, see fuse.cpp) unit graph that follows
// the graph's own order where it can, so outputs (gradients) become ready as
// early as in the unfused graph. Two refinements:
// - independent units that launch the same compiled kernel and are ready
//   together form one step with one multi-tensor launch (the work items of all
//   instances split over the thread pool at once);
// - a "sink" kernel unit (its outputs are only graph outputs, no gradients;
//   optimizer updates) waits while other instances of its kernel are not ready
//   yet and other work is, so an optimizer step over N parameters becomes one
//   launch. Sinks block nothing, so waiting never delays another node. An
//   update in which a computed buffer dies (its gradient, when remat moved it
//   right after that gradient) is no sink: waiting would keep it alive.
// The order is passes::unit_steps (fuse_order.cpp) given the groups' kernel
// ids (FusionPlan::kernel), so the predicted peak follows the same steps.
// Memory: every buffer is dropped after its last use; a pointwise kernel writes
// an output over an input buffer that dies at that step when nothing else can
// see it (not a graph input or output, storage not shared by any other live
// tensor, same dtype and size, read at the same index) — LLVM's alias scopes
// allow exactly that case (codegen/kernels/llvm/llvm_emit.cpp).
#include "executor/executor.h"

#include <algorithm>
#include <climits>
#include <iostream>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "executor/column_sums.h"
#include "executor/executor_internal.h"
#include "executor/placement.h"
#include "kernels/device_kernels.h"
#include "kernels/kernel_cache.h"
#include "kernels/lower.h"
#include "kiln/autograd.h"
#include "kiln/device_runtime.h"
#include "kiln/dispatch.h"
#include "kiln/env.h"
#include "kiln/functional.h"
#include "kiln/ir/verify.h"
#include "kiln/profiler.h"
#include "kiln/thread_pool.h"

namespace kiln {

using detail::pos;
using detail::Slot;
using detail::slot_at;

Executor::~Executor() = default;
Executor::Executor(Executor&&) noexcept = default;

Executor::Executor(std::shared_ptr<const ir::Graph> graph, ExecutorOptions opts)
    : graph_(std::move(graph)), opts_(std::move(opts)) {
  const ir::Graph& g = *graph_;
  // Every graph, in every build type: the schedule and the kernels trust the
  // declared shapes and dtypes, and a graph may come from IR text.
  static const bool verify_env = env::get_flag("KILN_VERIFY", false);
  try {
    if (opts_.verify || verify_env) ir::verify(g);
  } catch (const Error& e) {
    throw Error(str("[executor] the graph is invalid: ", e.what()));
  }
  plan_.group_of.assign(g.num_nodes(), -1);
  // A device plan folds bias adds into GEMM epilogues: rule 13 leaves them
  // their own groups where the sum is stored anyway.
  opts_.fusion.gemm_bias = !opts_.device.is_cpu() && opts_.gemm_epilogues;
  if (opts_.fuse) plan_ = passes::plan_fusion(g, opts_.fusion);
  build_schedule();
  // Symbols are bound by the first input dim that is exactly the symbol.
  sym_source_.assign(static_cast<size_t>(g.num_syms), {-1, -1});
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const auto& shape = g.inputs()[i]->shape;
    for (size_t d = 0; d < shape.size(); ++d) {
      const int32_t k = shape[d].as_symbol();
      if (k >= 0 && sym_source_[static_cast<size_t>(k)].first < 0)
        sym_source_[static_cast<size_t>(k)] = {static_cast<int>(i), static_cast<int>(d)};
    }
  }
}

std::vector<int64_t> Executor::bind_symbols(std::span<const Tensor> inputs) const {
  std::vector<int64_t> syms(sym_source_.size());
  for (size_t k = 0; k < sym_source_.size(); ++k) {
    auto [i, d] = sym_source_[k];
    KILN_ASSERT(i >= 0, "executor: symbol s", k, " is bound by no input and was not given");
    KILN_CHECK(static_cast<size_t>(i) < inputs.size() && d < inputs[static_cast<size_t>(i)].dim(),
               "[executor] input ", i, " does not have the dim that binds symbol s", k);
    syms[k] = inputs[static_cast<size_t>(i)].size(d);
  }
  return syms;
}

int Executor::producer_of_output(size_t i) const {
  KILN_ASSERT(i < output_producer_.size(), "executor: output ", i, " out of range");
  return output_producer_[i];
}

size_t Executor::num_kernels() const {
  return groups_.size();
}
std::vector<size_t> Executor::kernel_ids() const {
  std::vector<size_t> ids;
  ids.reserve(groups_.size());
  for (const Group& grp : groups_) ids.push_back(grp.kernel_id);
  return ids;
}
size_t Executor::num_steps() const {
  return steps_.size();
}

std::string Executor::schedule_text() const {
  std::string s;
  for (const Step& st : steps_) {
    if (st.gemm_epilogue) {
      s += st.gemm_relu ? "matmul+bias+relu\n" : "matmul+bias\n";
      continue;
    }
    if (st.node) {
      s += str(st.node->is_constant() ? "constant" : st.node->info().name, "\n");
      continue;
    }
    const Group& first = groups_[st.groups.front()];
    s += str("kernel ", first.lowered.kernel.name, " x", st.groups.size(), "\n");
  }
  return s;
}

std::string Executor::kernels_text() const {
  std::string s;
  for (size_t i = 0; i < groups_.size(); ++i)
    s += str("# group ", i, "\n", kir::to_string(groups_[i].lowered.kernel));
  return s;
}

Executor::Destinations Executor::destinations(const RunArgs& args) const {
  Destinations r;
  if (args.dests.empty() || !opts_.in_place) return r;
  KILN_ASSERT(args.dests.size() == output_slots_.size(), "executor: ", args.dests.size(),
              " destinations for ", output_slots_.size(), " outputs");
  // None given (a .grad not made yet): nothing to look up, nothing allocated.
  if (std::none_of(args.dests.begin(), args.dests.end(),
                   [](const Tensor& d) { return d.defined(); }))
    return r;
  r.input.assign(num_slots_, nullptr);
  r.free.assign(num_slots_, nullptr);
  // Inputs by storage (sorted, no allocation per input): a storage's entries
  // are adjacent, so how many share it and the last of them are found by search.
  std::vector<std::pair<const StorageImpl*, size_t>> by_storage(args.inputs.size());
  for (size_t i = 0; i < args.inputs.size(); ++i)
    by_storage[i] = {args.inputs[i].impl()->storage.get(), i};
  std::sort(by_storage.begin(), by_storage.end());
  struct Candidate {
    const StorageImpl* storage;
    const char *begin, *end;
    Slot slot;
  };
  std::vector<Candidate> cands;
  for (size_t o = 0; o < args.dests.size(); ++o) {
    const Tensor& d = args.dests[o];
    if (!d.defined() || !d.impl()->storage || !d.is_contiguous()) continue;
    const StorageImpl* ds = d.impl()->storage.get();
    const auto lo = std::lower_bound(by_storage.begin(), by_storage.end(),
                                     std::pair<const StorageImpl*, size_t>{ds, 0});
    if (lo != by_storage.end() && lo->first == ds) {
      const bool one = lo + 1 == by_storage.end() || (lo + 1)->first != ds;
      const Slot in = slot_at(lo->second);  // graph input i is slot i
      if (one && args.inputs[pos(in)].is_same(d) && input_alias_until_[in] != INT_MAX)
        r.input[in] = &d;
      continue;
    }
    const Slot sl = output_slots_[o];
    if (d.numel() == 0 || is_input_slot_[sl] || outputs_of_slot_[sl].front() != o)
      continue;  // each slot once
    bool only_dest = true;
    for (size_t q : outputs_of_slot_[sl]) only_dest = only_dest && args.dests[q].is_same(d);
    if (!only_dest) continue;
    const char* b = static_cast<const char*>(d.data_ptr());
    cands.push_back({d.impl()->storage.get(), b,
                     b + d.numel() * static_cast<int64_t>(dtype_size(d.dtype())), sl});
  }
  // Overlapping destinations (views of one buffer) are all dropped: sorted by
  // address, a run of overlapping ones is a cluster of more than one.
  std::sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) {
    return a.storage != b.storage ? a.storage < b.storage : a.begin < b.begin;
  });
  for (size_t i = 0; i < cands.size();) {
    size_t j = i + 1;
    const char* end = cands[i].end;
    for (; j < cands.size() && cands[j].storage == cands[i].storage && cands[j].begin < end; ++j)
      end = std::max(end, cands[j].end);
    if (j == i + 1) {
      const size_t o = outputs_of_slot_[cands[i].slot].front();
      r.free[cands[i].slot] = &args.dests[o];
    }
    i = j;
  }
  lend_to_collective_inputs(r);
  return r;
}

// A collective_wait output's free destination is lent to the value it
// reduces when only its collective_start and that wait read the value: DDP's
// weight GEMM then writes into its bucket view, which the bound collective
// reduces in place (nothing reads the value after that) and hands out as the
// wait's result (distributed/src/collectives.cpp), with no copy either way.
void Executor::lend_to_collective_inputs(Destinations& r) const {
  for (size_t i : collective_waits_) {
    const Step& st = steps_[i];
    const ir::Node* n = st.node;
    const ir::Node* start = n->inputs[0]->producer;
    for (size_t k = 0; k + 1 < n->inputs.size() && k < st.out.size(); ++k) {
      const ir::Value* v = n->inputs[k + 1];
      const Slot sl = st.in[k + 1];
      const Tensor* d = r.free[st.out[k]];
      if (!d || r.free[sl] || is_input_slot_[sl] || !outputs_of_slot_[sl].empty() || !v->producer ||
          v->producer->info().has(kView) || v->producer->is_constant())
        continue;
      const bool only = std::all_of(v->users.begin(), v->users.end(),
                                    [&](const ir::Node* u) { return u == n || u == start; });
      if (only) r.free[sl] = d;
    }
  }
}

void Executor::note_peak(PeakReport& r, size_t step, const detail::SlotVec<Tensor>& slots,
                         int64_t bytes, const std::function<bool(const Tensor&)>& counts) const {
  // Slots are numbered as the schedule numbers them: inputs, then each node's outputs.
  detail::SlotVec<const ir::Value*> value_of;
  for (const ir::Value* v : graph_->inputs()) value_of.push_back(v);
  for (const ir::Node* n : graph_->nodes())
    for (const ir::Value* v : n->outputs) value_of.push_back(v);
  const Step& st = steps_[step];
  r.peak_bytes = bytes;
  r.step = st.node ? str("node ", st.node->info().name)
                   : str("kernel ", groups_[st.groups.front()].lowered.kernel.name);
  r.values.clear();
  std::unordered_set<const StorageImpl*> seen;
  for (Slot sl : slots.slots()) {
    const Tensor& t = slots[sl];
    if (!counts(t) || !seen.insert(t.impl()->storage.get()).second) continue;
    // A view's slot may be the first holding a storage whose own value is
    // already freed (permute(dz) outliving dz): name the value that made the
    // buffer, not the view.
    const ir::Value* v = value_of[sl];
    while (v && v->producer && !v->producer->is_constant() && v->producer->info().has(kView) &&
           !v->producer->inputs.empty())
      v = v->producer->inputs[0];
    PeakValue pv;
    pv.value = v && !v->name.empty() ? v->name : str("%", v ? v->id() : -1);
    pv.op = v && v->producer ? v->producer->info().name : "input";
    if (const int gi = v && v->producer ? plan_.group_of[graph_->position(v->producer)] : -1;
        gi >= 0)
      pv.op = str("fused kernel ", groups_[static_cast<size_t>(gi)].lowered.kernel.name);
    pv.type = str(t.dtype(), t.shape());
    pv.bytes = static_cast<int64_t>(t.impl()->storage->nbytes);
    r.values.push_back(std::move(pv));
  }
  std::stable_sort(r.values.begin(), r.values.end(),
                   [](const PeakValue& a, const PeakValue& b) { return a.bytes > b.bytes; });
}

}  // namespace kiln
