// The executor's schedule: units (fusion groups, unfused nodes) in a
// topological order, same-kernel units batched into one step, sinks waiting for
// their kernel's other instances, and each buffer's last use (see executor.cpp
// for the whole design).
#include "executor/executor.h"
#include "executor/executor_internal.h"

#include <algorithm>
#include <climits>
#include <iostream>
#include <unordered_map>

#include "executor/column_sums.h"
#include "executor/gemm_epilogue.h"
#include "executor/placement.h"
#include "kernels/kernel_cache.h"
#include "kernels/lower.h"
#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/env.h"
#include "kiln/functional.h"
#include "kiln/ir/verify.h"
#include "kiln/thread_pool.h"

namespace kiln {

using detail::kNoSlot;
using detail::pos;
using detail::Slot;
using detail::slot_at;
using detail::SlotVec;

namespace {

// The kernel ready to run. Should the JIT fail on it (a backend bug), the
// interpreter runs it instead: same results, slower, with one warning.
std::shared_ptr<const kir::LoadedKernel> load_kernel(const kir::Kernel& k, KernelBackend backend) {
  if (backend == KernelBackend::kAuto) {
    try {
      return kir::get_kernel(k);
    } catch (const std::exception& e) {
      std::cerr << "[kiln] warning: kernel " << k.name
                << " failed to compile and runs interpreted: " << e.what() << "\n";
    }
  }
  return std::make_shared<const kir::LoadedKernel>(k, "", nullptr);
}

}  // namespace

// Slots by value id (unique within a graph; the graph is verified, so every
// use is defined): graph inputs first, then each node's outputs. Positions come
// from the graph: no hashing per lookup.
Executor::SlotByValue Executor::assign_slots() {
  const ir::Graph& g = *graph_;
  const auto nodes = g.nodes();
  int ids = 0;
  for (const ir::Value* v : g.inputs()) ids = std::max(ids, v->id() + 1);
  for (const ir::Node* n : nodes)
    for (const ir::Value* v : n->outputs) ids = std::max(ids, v->id() + 1);
  std::vector<Slot> slot_by_id(static_cast<size_t>(ids), kNoSlot);
  auto take = [&](const ir::Value* v) {
    slot_by_id[static_cast<size_t>(v->id())] = num_slots_;
    num_slots_ = slot_at(pos(num_slots_) + 1);
  };
  for (const ir::Value* v : g.inputs()) take(v);
  is_input_slot_.assign(num_slots_, true);
  for (const ir::Node* n : nodes)
    for (const ir::Value* v : n->outputs) take(v);
  is_input_slot_.resize(num_slots_, false);
  return SlotByValue(std::move(slot_by_id));
}

namespace {

// Whether fusion group `g` lowers to the kernel that group `r` lowered to
// (`rl`), with its own arguments and sizes: the same ops and dtypes node by
// node, arguments of the same dtypes and layouts, the same column sums. What
// a plan cache entry's kernel numbers claim (ExecutorOptions::kernel_ids).
bool same_kernel(const passes::FusionGroup& g, const passes::FusionGroup& r,
                 const detail::LoweredGroup& rl) {
  if (g.inputs.size() != r.inputs.size() || g.outputs.size() != r.outputs.size() ||
      g.dims.size() != r.dims.size() || g.in_dense != r.in_dense || g.out_dense != r.out_dense ||
      g.column_sums.size() != r.column_sums.size())
    return false;
  // Node by node, skipping the views lowering reads through (expand,
  // reshape, copy: one group may hold a view the other does not need).
  auto computes = [](const ir::Node* n) {
    return !(n->is_op(OpId::expand) || n->is_op(OpId::reshape) || n->is_op(OpId::copy));
  };
  auto a = g.nodes.begin(), b = r.nodes.begin();
  for (;; ++a, ++b) {
    a = std::find_if(a, g.nodes.end(), computes);
    b = std::find_if(b, r.nodes.end(), computes);
    if (a == g.nodes.end() || b == r.nodes.end()) break;
    if ((*a)->op != (*b)->op || (*a)->output()->dtype != (*b)->output()->dtype) return false;
  }
  if (a != g.nodes.end() || b != r.nodes.end()) return false;
  for (size_t i = 0; i < g.inputs.size(); ++i)
    if (g.inputs[i]->dtype != r.inputs[i]->dtype) return false;
  for (size_t j = 0; j < g.outputs.size(); ++j) {
    const ir::Value* v = g.outputs[j];
    const bool sum = std::any_of(g.column_sums.begin(), g.column_sums.end(),
                                 [&](const ir::Node* n) { return n->output() == v; });
    if (v->dtype != r.outputs[j]->dtype || sum != (rl.column_sum[j] != 0)) return false;
  }
  return true;
}

}  // namespace

// Every group lowered, with its kernel's number (by first use: identical
// kernels share one). Lowering and the kernels' text keys are independent per
// group: on the pool. With ExecutorOptions::kernel_ids (a warm start from the
// plan cache: at depth 256, 1537 groups and a handful of kernels) only each
// kernel's first group is lowered, unless KILN_VERIFY=1.
std::vector<Executor::Group> Executor::lower_groups(size_t& num_kernels) const {
  const size_t ng = plan_.groups.size();
  const std::vector<size_t>* known = opts_.kernel_ids.get();
  const bool verify_env = known && env::get_flag("KILN_VERIFY", false);
  std::vector<size_t> first_of;  // kernel number -> its first group (known numbers)
  std::vector<char> lower_it(ng, 1);
  if (known) {
    KILN_CHECK(known->size() == ng, "[executor] ", known->size(), " kernel numbers for ", ng,
               " fusion groups");
    for (size_t k = 0; k < ng; ++k) {
      const size_t id = (*known)[k];
      KILN_CHECK(id <= first_of.size(), "[executor] kernel number ", id, " of fusion group ", k,
                 " is not numbered by first use");
      if (id == first_of.size())
        first_of.push_back(k);
      else
        lower_it[k] = verify_env;
    }
  }
  std::vector<Group> groups(ng);
  std::vector<std::string> keys(ng);
  parallel_for(0, static_cast<int64_t>(ng), 16, [&](int64_t b, int64_t e) {
    for (auto k = static_cast<size_t>(b); k < static_cast<size_t>(e); ++k)
      if (lower_it[k]) {
        groups[k].lowered = detail::lower(plan_.groups[k], opts_.reassociate);
        keys[k] = kir::to_string(groups[k].lowered.kernel);
      }
  });
  std::unordered_map<std::string, size_t> kernel_id;
  for (size_t k = 0; k < ng; ++k) {
    Group& grp = groups[k];
    if (lower_it[k]) {
      grp.kernel_id = kernel_id.emplace(std::move(keys[k]), kernel_id.size()).first->second;
      KILN_CHECK(!known || grp.kernel_id == (*known)[k], "[executor] fusion group ", k,
                 " lowers to kernel ", grp.kernel_id, ", not to the recorded kernel ", (*known)[k]);
      continue;
    }
    grp.kernel_id = (*known)[k];
    const size_t r = first_of[grp.kernel_id];
    const passes::FusionGroup& fg = plan_.groups[k];
    KILN_CHECK(same_kernel(fg, plan_.groups[r], groups[r].lowered), "[executor] fusion group ", k,
               " does not match the kernel of group ", r, " recorded for it");
    grp.lowered = groups[r].lowered;  // kernel IR and in-place pairs: the same kernel's
    grp.lowered.args.assign(fg.inputs.begin(), fg.inputs.end());
    grp.lowered.args.insert(grp.lowered.args.end(), fg.outputs.begin(), fg.outputs.end());
    grp.lowered.dims = fg.dims;
  }
  num_kernels = kernel_id.size();
  return groups;
}

// The kernels, one per group; identical kernels share one compiled kernel.
// Returns the number of distinct kernels.
size_t Executor::compile_kernels(const SlotByValue& slot_of) {
  size_t num_kernels = 0;
  groups_ = lower_groups(num_kernels);
  for (size_t k = 0; k < groups_.size(); ++k) {
    Group& grp = groups_[k];
    for (const ir::Value* v : grp.lowered.args) grp.arg_slot.push_back(slot_of(v));
    grp.nodes = static_cast<int>(plan_.groups[k].nodes.size());
  }
  std::vector<std::shared_ptr<const kir::LoadedKernel>> kernels(num_kernels);
  // Distinct kernels compile concurrently (the cache and the JIT are thread-safe).
  std::vector<const kir::Kernel*> first(kernels.size(), nullptr);
  for (const Group& grp : groups_)
    if (!first[grp.kernel_id]) first[grp.kernel_id] = &grp.lowered.kernel;
  if (!opts_.device.is_cpu()) {
    // Kernels for a device come from its backend (compiled once per source).
    detail::DeviceKernelCompiler& dc = detail::device_kernel_compiler(opts_.device.type);
    std::vector<std::shared_ptr<const detail::DeviceKernel>> dk(kernels.size());
    for (size_t i = 0; i < dk.size(); ++i) dk[i] = dc.compile(*first[i], opts_.device);
    for (Group& grp : groups_) grp.device_kernel = dk[grp.kernel_id];
  } else {
    parallel_for(0, static_cast<int64_t>(kernels.size()), 1, [&](int64_t b, int64_t e) {
      for (auto i = static_cast<size_t>(b); i < static_cast<size_t>(e); ++i)
        kernels[i] = load_kernel(*first[i], opts_.kernels);
    });
    for (Group& grp : groups_) grp.kernel = kernels[grp.kernel_id];
  }
  return kernels.size();
}

// The units (groups first, then one per unfused node) in steps: a topological
// order of the unit graph, same-kernel units batched, sinks waiting for their
// kernel's other instances (see the top of executor.cpp): passes::unit_steps,
// which the predicted peak follows too, given the kernel ids (plan_.kernel).
std::vector<std::vector<size_t>> Executor::order_units() const {
  return passes::unit_steps(*graph_, plan_);
}

// One step per batch of units, with the slots it reads and writes; matmuls
// computed straight into a later cat's or reshape's buffer.
void Executor::make_steps(const std::vector<std::vector<size_t>>& order,
                          const SlotByValue& slot_of) {
  const ir::Graph& g = *graph_;
  const auto nodes = g.nodes();
  const size_t ng = groups_.size();
  for (const auto& units : order) {
    Step st;
    if (units.front() >= ng) {
      st.node = nodes[units.front() - ng];
      for (const ir::Value* v : st.node->inputs) st.in.push_back(slot_of(v));
      for (const ir::Value* v : st.node->outputs) st.out.push_back(slot_of(v));
      if (st.node->is_constant()) {
        // The IR records no device: on a device plan a host tensor moves there
        // once (0-d host scalars stay: kernels and eager ops read them as numbers).
        const Tensor& c = st.node->constant;
        const bool move =
            !opts_.device.is_cpu() && c.defined() && c.dim() > 0 && c.device() != opts_.device;
        st.constant = move ? c.to(opts_.device) : c;
      }
    } else {
      st.groups = units;
      for (size_t gi : units) {
        const Group& grp = groups_[gi];
        for (size_t a = 0; a < grp.arg_slot.size(); ++a)
          (a < grp.lowered.num_inputs ? st.in : st.out).push_back(grp.arg_slot[a]);
      }
    }
    if (st.node && st.node->is_op(OpId::collective_wait))
      collective_waits_.push_back(steps_.size());
    steps_.push_back(std::move(st));
  }
  if (!opts_.device.is_cpu() && opts_.gemm_epilogues) fold_gemm_epilogues(slot_of);
  // Matmuls computed straight into a later cat's or reshape's buffer.
  if (opts_.in_place) {
    auto placements = detail::plan_placements(
        g, [&](const ir::Node* n) { return plan_.group_of[g.position(n)] >= 0; });
    for (Step& st : steps_) {
      auto it = st.node ? placements.find(st.node) : placements.end();
      if (it == placements.end()) continue;
      st.place = static_cast<int>(placements_.size());
      st.host_slot = slot_of(it->second.host->output());
      placements_.push_back(std::move(it->second));
    }
  }
}

// Each epilogue group that gemm_epilogue.h's rule matches leaves its step and
// becomes its matmul's step, at the group's place (the bias is ready there):
// one GEMM with the bias (+ relu) epilogue writing the group's output. The
// matmul's own step goes; its product, which nothing else reads, never exists.
void Executor::fold_gemm_epilogues(const SlotByValue& slot_of) {
  const ir::Graph& g = *graph_;
  std::vector<char> folded_node(g.num_nodes(), 0);
  std::vector<Step> steps;
  steps.reserve(steps_.size());
  for (Step& st : steps_) {
    std::vector<Step> gemms;
    std::vector<size_t> kept;
    for (size_t gi : st.groups) {
      const auto m = detail::match_gemm_epilogue(plan_.groups[gi], g);
      if (!m) {
        kept.push_back(gi);
        continue;
      }
      Step s;
      s.node = m->matmul;
      for (const ir::Value* v : m->matmul->inputs) s.in.push_back(slot_of(v));
      s.in.push_back(slot_of(m->bias));
      s.out.push_back(slot_of(plan_.groups[gi].outputs[0]));
      s.gemm_epilogue = true;
      s.gemm_relu = m->relu;
      folded_node[g.position(m->matmul)] = 1;
      gemms.push_back(std::move(s));
    }
    if (!gemms.empty()) {
      st.groups = kept;
      st.in.clear();
      st.out.clear();
      for (size_t gi : kept) {
        const Group& grp = groups_[gi];
        for (size_t a = 0; a < grp.arg_slot.size(); ++a)
          (a < grp.lowered.num_inputs ? st.in : st.out).push_back(grp.arg_slot[a]);
      }
    }
    if (st.node || !st.groups.empty()) steps.push_back(std::move(st));
    for (Step& s : gemms) steps.push_back(std::move(s));
  }
  // The matmuls' own steps (each before its group's, so already in `steps`).
  std::erase_if(steps, [&](const Step& s) {
    return s.node && !s.gemm_epilogue && folded_node[g.position(s.node)];
  });
  steps_ = std::move(steps);
  collective_waits_.clear();
  for (size_t i = 0; i < steps_.size(); ++i)
    if (steps_[i].node && steps_[i].node->is_op(OpId::collective_wait))
      collective_waits_.push_back(i);
}

// Each slot's last use (freed after it), the graph outputs' slots and steps,
// and what a kernel may overwrite in place: dying inputs and graph inputs no
// unfused view still reads.
void Executor::plan_last_uses(const SlotByValue& slot_of) {
  const ir::Graph& g = *graph_;
  const int num_steps = static_cast<int>(steps_.size());
  SlotVec<int> last(num_slots_, -1);
  for (int s = 0; s < num_steps; ++s)
    for (Slot i : steps_[static_cast<size_t>(s)].in) last[i] = s;
  SlotVec<bool> is_out(num_slots_, false);
  for (const ir::Value* v : g.outputs()) {
    output_producer_.push_back(v->producer ? static_cast<int>(g.position(v->producer)) : -1);
    output_slots_.push_back(slot_of(v));
    is_out[slot_of(v)] = true;
  }
  for (Slot sl : last.slots()) {
    const int l = last[sl];
    if (l >= 0 && !is_out[sl]) steps_[static_cast<size_t>(l)].free_after.push_back(sl);
  }
  // Graph inputs an unfused view may alias at run time (views of views too):
  // a kernel may write such an input in place only after the last step that
  // reads any alias, which would otherwise see the new value. An alias that is
  // a graph output, or an input a collective touches, is never overwritten.
  input_alias_until_.assign(slot_at(g.inputs().size()), -1);
  for (Slot i : input_alias_until_.slots()) {
    int& until = input_alias_until_[i];
    std::vector<const ir::Value*> work{g.inputs()[pos(i)]};
    while (!work.empty() && until != INT_MAX) {
      const ir::Value* v = work.back();
      work.pop_back();
      for (const ir::Node* u : v->users) {
        if (plan_.group_of[g.position(u)] >= 0) continue;  // fused: never aliases
        if (u->info().has(kCollective)) {
          until = INT_MAX;
          break;
        }
        if (!u->info().has(kView)) continue;
        for (const ir::Value* a : u->outputs) {
          const Slot sl = slot_of(a);
          if (is_out[sl]) until = INT_MAX;
          if (until != INT_MAX) until = std::max(until, last[sl]);
          work.push_back(a);
        }
      }
    }
  }
  outputs_of_slot_.assign(num_slots_, {});
  for (size_t o = 0; o < output_slots_.size(); ++o) outputs_of_slot_[output_slots_[o]].push_back(o);
  // Per kernel step: the slots that die there (inputs are never freed, but
  // their last reader is known) and are read by exactly one instance of the
  // batch (the others run concurrently), in slot order. Only the step's own
  // inputs can die there; readers are counted once per instance.
  SlotVec<int> readers(num_slots_, 0);
  SlotVec<int> counted_by(num_slots_, -1);  // last instance counted
  std::vector<Slot> dying;
  int instance = 0;
  for (int s = 0; s < num_steps; ++s) {
    Step& st = steps_[static_cast<size_t>(s)];
    if (st.groups.empty()) continue;
    dying.clear();
    for (size_t gi : st.groups) {
      const Group& grp = groups_[gi];
      ++instance;
      for (size_t a = 0; a < grp.lowered.num_inputs; ++a) {
        const Slot sl = grp.arg_slot[a];
        if (last[sl] != s || is_out[sl] || counted_by[sl] == instance) continue;
        counted_by[sl] = instance;
        if (readers[sl]++ == 0) dying.push_back(sl);
      }
    }
    std::sort(dying.begin(), dying.end());
    for (Slot sl : dying) {
      if (readers[sl] == 1) (is_input_slot_[sl] ? st.dying_inputs : st.overwritable).push_back(sl);
      readers[sl] = 0;
    }
  }
  // The same as per-slot lookups, so a run tests membership in O(1) (a batched
  // optimizer step has thousands of instances and dying slots).
  dying_input_at_.assign(num_slots_, -1);
  overwritable_at_.assign(num_slots_, -1);
  for (int s = 0; s < num_steps; ++s) {
    for (Slot sl : steps_[static_cast<size_t>(s)].dying_inputs) dying_input_at_[sl] = s;
    for (Slot sl : steps_[static_cast<size_t>(s)].overwritable) overwritable_at_[sl] = s;
  }
  // Where each output becomes available: 0 = before the first step, s+1 = after step s.
  outputs_at_step_.resize(steps_.size() + 1);
  SlotVec<size_t> made_at(num_slots_, 0);
  for (size_t s = 0; s < steps_.size(); ++s)
    for (Slot o : steps_[s].out) made_at[o] = s + 1;
  for (size_t i = 0; i < output_slots_.size(); ++i)
    outputs_at_step_[made_at[output_slots_[i]]].push_back(i);
}

// A graph without symbols has the same shapes and kernel sizes at every run:
// evaluated once here instead of per run and value.
void Executor::precompute_static_shapes(const SlotByValue& slot_of) {
  const ir::Graph& g = *graph_;
  if (g.num_syms != 0) return;
  static_shape_.resize(num_slots_);
  auto note = [&](const ir::Value* v) { static_shape_[slot_of(v)] = ir::eval_shape(v->shape, {}); };
  // Only values a run sees: inputs, unfused nodes' outputs, kernel arguments
  // (most values live inside a fused kernel and have no buffer).
  for (const ir::Value* v : g.inputs()) note(v);
  for (const Step& st : steps_)
    if (st.node)
      for (const ir::Value* v : st.node->outputs) note(v);
  for (const detail::Placement& p : placements_) note(p.host->output());
  for (Group& grp : groups_) {
    for (size_t a = grp.lowered.num_inputs; a < grp.lowered.args.size(); ++a)
      note(grp.lowered.args[a]);
    grp.static_sizes = detail::kernel_sizes(grp.lowered, {});
    grp.static_items = kir::work_items(grp.lowered.kernel, grp.static_sizes.data());
  }
}

void Executor::build_schedule() {
  const SlotByValue slot_of = assign_slots();
  compile_kernels(slot_of);
  // Batching (opts_.horizontal) runs ready instances of one kernel together.
  plan_.kernel.clear();
  if (opts_.horizontal)
    for (const Group& grp : groups_) plan_.kernel.push_back(static_cast<int>(grp.kernel_id));
  make_steps(order_units(), slot_of);
  plan_last_uses(slot_of);
  precompute_static_shapes(slot_of);
}

}  // namespace kiln
