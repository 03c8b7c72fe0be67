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
//   launch. Sinks block nothing, so waiting never delays another node.
// Memory: every buffer is dropped after its last use; a pointwise kernel writes
// an output over an input buffer that dies at that step when nothing else can
// see it (not a graph input or output, storage not shared by any other live
// tensor, same dtype and size, read at the same index) — LLVM's alias scopes
// allow exactly that case (codegen/src/llvm_emit.cpp).
#include "kiln/executor.h"

#include <algorithm>
#include <climits>
#include <iostream>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "column_sums.h"
#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/functional.h"
#include "kiln/ir/verify.h"
#include "kiln/kernel_cache.h"
#include "kiln/thread_pool.h"
#include "lower.h"
#include "placement.h"

namespace kiln {

struct Executor::Group {
  detail::LoweredGroup lowered;
  std::shared_ptr<const kir::LoadedKernel> kernel;
  int kernel_id = 0;          // equal ids: the same compiled kernel
  std::vector<int> arg_slot;  // per kernel argument
  int nodes = 0;
};

struct Executor::Step {
  const ir::Node* node = nullptr;  // an unfused node, or
  std::vector<int> groups;         // fused kernels launched together
  std::vector<int> in;
  std::vector<int> out;
  std::vector<int> free_after;    // slots whose last use is this step
  std::vector<int> overwritable;  // dying slots one kernel here may write in place
  std::vector<int> dying_inputs;  // graph-input slots read last here, by one instance
  int place = -1;                 // a matmul: its placement (placements_), if any
  int host_slot = -1;             // a matmul with a placement: the host's output slot
};

Executor::~Executor() = default;
Executor::Executor(Executor&&) noexcept = default;

Executor::Executor(std::shared_ptr<const ir::Graph> graph, ExecutorOptions opts)
    : graph_(std::move(graph)), opts_(std::move(opts)) {
  const ir::Graph& g = *graph_;
  // Every graph, in every build type: the schedule and the kernels trust the
  // declared shapes and dtypes, and a graph may come from IR text.
  try {
    ir::verify(g);
  } catch (const Error& e) {
    throw Error(str("[executor] the graph is invalid: ", e.what()));
  }
  plan_.group_of.assign(g.num_nodes(), -1);
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

void Executor::build_schedule() {
  const ir::Graph& g = *graph_;
  const auto nodes = g.nodes();
  // Slots by value id (unique within a graph; the graph is verified, so every
  // use is defined) and positions from the graph: no hashing per lookup.
  int ids = 0;
  for (const ir::Value* v : g.inputs()) ids = std::max(ids, v->id() + 1);
  for (const ir::Node* n : nodes)
    for (const ir::Value* v : n->outputs) ids = std::max(ids, v->id() + 1);
  std::vector<int> slot_by_id(static_cast<size_t>(ids), -1);
  auto slot_of = [&](const ir::Value* v) { return slot_by_id[static_cast<size_t>(v->id())]; };
  auto pos_of = [&](const ir::Node* n) { return static_cast<int>(g.position(n)); };
  for (const ir::Value* v : g.inputs()) slot_by_id[static_cast<size_t>(v->id())] = num_slots_++;
  is_input_slot_.assign(static_cast<size_t>(num_slots_), true);
  for (const ir::Node* n : nodes)
    for (const ir::Value* v : n->outputs) slot_by_id[static_cast<size_t>(v->id())] = num_slots_++;
  is_input_slot_.resize(static_cast<size_t>(num_slots_), false);

  // ---- kernels, one per group; identical kernels share one compiled kernel ----
  std::unordered_map<std::string, int> kernel_id;
  std::vector<std::shared_ptr<const kir::LoadedKernel>> kernels;
  for (const passes::FusionGroup& fg : plan_.groups) {
    Group grp;
    grp.lowered = detail::lower(fg, opts_.reassociate);
    auto [it, fresh] =
        kernel_id.emplace(kir::to_string(grp.lowered.kernel), static_cast<int>(kernels.size()));
    if (fresh) kernels.emplace_back();
    grp.kernel_id = it->second;
    for (const ir::Value* v : grp.lowered.args) grp.arg_slot.push_back(slot_of(v));
    grp.nodes = static_cast<int>(fg.nodes.size());
    groups_.push_back(std::move(grp));
  }
  // Distinct kernels compile concurrently (the cache and the JIT are thread-safe).
  std::vector<const kir::Kernel*> first(kernels.size(), nullptr);
  for (const Group& grp : groups_)
    if (!first[static_cast<size_t>(grp.kernel_id)])
      first[static_cast<size_t>(grp.kernel_id)] = &grp.lowered.kernel;
  parallel_for(0, static_cast<int64_t>(kernels.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      kernels[static_cast<size_t>(i)] = load_kernel(*first[static_cast<size_t>(i)], opts_.kernels);
  });
  for (Group& grp : groups_) grp.kernel = kernels[static_cast<size_t>(grp.kernel_id)];

  // ---- the unit graph: groups first, then one unit per unfused node ----
  const int ng = static_cast<int>(groups_.size());
  auto unit_of = [&](const ir::Node* n) {
    const int gi = plan_.group_of[static_cast<size_t>(pos_of(n))];
    return gi >= 0 ? gi : ng + pos_of(n);
  };
  const size_t nu = static_cast<size_t>(ng) + nodes.size();
  std::vector<int> first_pos(nu, 0);
  std::vector<char> live(nu, 0);
  for (size_t p = 0; p < nodes.size(); ++p) {
    const int u = unit_of(nodes[p]);
    if (!live[static_cast<size_t>(u)]) first_pos[static_cast<size_t>(u)] = static_cast<int>(p);
    live[static_cast<size_t>(u)] = 1;
  }
  std::vector<std::vector<int>> succ(nu);
  std::vector<int> indeg(nu, 0);
  auto depend = [&](int from, int to) {
    // The edges into one unit are added one after another, so a repeated edge
    // is always the last one added (no scan of a hub's successor list).
    if (from == to) return;
    auto& s = succ[static_cast<size_t>(from)];
    if (!s.empty() && s.back() == to) return;
    s.push_back(to);
    ++indeg[static_cast<size_t>(to)];
  };
  for (int gi = 0; gi < ng; ++gi)
    for (size_t a = 0; a < groups_[static_cast<size_t>(gi)].lowered.num_inputs; ++a) {
      const ir::Value* v = groups_[static_cast<size_t>(gi)].lowered.args[a];
      if (v->producer) depend(unit_of(v->producer), gi);
    }
  for (size_t p = 0; p < nodes.size(); ++p) {
    if (plan_.group_of[p] >= 0) continue;
    for (const ir::Value* v : nodes[p]->inputs)
      if (v->producer) depend(unit_of(v->producer), ng + static_cast<int>(p));
  }
  // Sinks that may wait for the other instances of their kernel (see the top).
  std::unordered_set<const ir::Value*> gradients;
  for (size_t o = 0; o < g.outputs().size(); ++o)
    if (g.output_names()[o].rfind("grad:", 0) == 0) gradients.insert(g.outputs()[o]);
  std::vector<char> sink(static_cast<size_t>(ng), 0);
  std::vector<int> remaining(kernels.size(), 0);
  for (int gi = 0; gi < ng; ++gi) {
    const Group& grp = groups_[static_cast<size_t>(gi)];
    ++remaining[static_cast<size_t>(grp.kernel_id)];
    bool s = opts_.horizontal;
    for (size_t a = grp.lowered.num_inputs; s && a < grp.lowered.args.size(); ++a) {
      const ir::Value* v = grp.lowered.args[a];
      for (const ir::Node* u : v->users) s = s && unit_of(u) == gi;
      s = s && !gradients.count(v);
    }
    sink[static_cast<size_t>(gi)] = s;
  }
  auto kid = [&](int u) { return u < ng ? groups_[static_cast<size_t>(u)].kernel_id : -1; };
  // A kernel with column sums launches alone (its blocks own the partials).
  auto column_sums = [&](int u) {
    const auto& cs = groups_[static_cast<size_t>(u)].lowered.column_sum;
    return std::find(cs.begin(), cs.end(), 1) != cs.end();
  };
  // Ready units by first position (unique per unit, so the order is total):
  // those that may run now, and sinks whose kernel still has instances that
  // are not ready (`remaining[k]` counts those; it only decreases, so each
  // sink moves from `waiting` to `avail` at most once). Each step takes the
  // earliest unit that may run (else the earliest waiting one) and every
  // ready instance of its kernel: O(units log units) in all.
  using Entry = std::pair<int, int>;  // (first position, unit)
  auto entry = [&](int u) { return Entry{first_pos[static_cast<size_t>(u)], u}; };
  std::set<Entry> avail, waiting;
  std::vector<std::set<Entry>> ready_of(kernels.size());
  auto make_ready = [&](int u) {
    if (u >= ng) {
      avail.insert(entry(u));
      return;
    }
    const auto k = static_cast<size_t>(kid(u));
    ready_of[k].insert(entry(u));
    if (--remaining[k] == 0)
      for (const Entry& e : ready_of[k])
        if (waiting.erase(e)) avail.insert(e);
    (sink[static_cast<size_t>(u)] && remaining[k] > 0 ? waiting : avail).insert(entry(u));
  };
  for (size_t u = 0; u < nu; ++u)
    if (live[u] && indeg[u] == 0) make_ready(static_cast<int>(u));
  // A recomputation (remat, checkpoint) runs at its own position, never early
  // with another instance of its kernel: its inputs are ready since the forward.
  std::vector<char> recomputes(static_cast<size_t>(ng), 0);
  for (int gi = 0; gi < ng; ++gi)
    for (const ir::Node* n : plan_.groups[static_cast<size_t>(gi)].nodes)
      recomputes[static_cast<size_t>(gi)] |= n->attrs.has("recompute") ? 1 : 0;
  std::vector<std::vector<int>> order;  // units per step
  while (!avail.empty() || !waiting.empty()) {
    const int best = (avail.empty() ? *waiting.begin() : *avail.begin()).second;
    std::vector<int> batch{best};
    if (best < ng && opts_.horizontal && !column_sums(best))
      for (const Entry& e : ready_of[static_cast<size_t>(kid(best))])
        if (e.second != best && !recomputes[static_cast<size_t>(e.second)])
          batch.push_back(e.second);
    std::sort(batch.begin(), batch.end(), [&](int a, int b) {
      return first_pos[static_cast<size_t>(a)] < first_pos[static_cast<size_t>(b)];
    });
    for (int u : batch) {
      avail.erase(entry(u));
      waiting.erase(entry(u));
      if (u < ng) ready_of[static_cast<size_t>(kid(u))].erase(entry(u));
    }
    for (int u : batch)
      for (int s : succ[static_cast<size_t>(u)])
        if (--indeg[static_cast<size_t>(s)] == 0) make_ready(s);
    order.push_back(std::move(batch));
  }

  // ---- steps, their slots and last uses ----
  for (const auto& units : order) {
    Step st;
    if (units.front() >= ng) {
      st.node = nodes[static_cast<size_t>(units.front() - ng)];
      for (const ir::Value* v : st.node->inputs) st.in.push_back(slot_of(v));
      for (const ir::Value* v : st.node->outputs) st.out.push_back(slot_of(v));
    } else {
      st.groups = units;
      for (int gi : units) {
        const Group& grp = groups_[static_cast<size_t>(gi)];
        for (size_t a = 0; a < grp.arg_slot.size(); ++a)
          (a < grp.lowered.num_inputs ? st.in : st.out).push_back(grp.arg_slot[a]);
      }
    }
    steps_.push_back(std::move(st));
  }
  // Matmuls computed straight into a later cat's or reshape's buffer.
  if (opts_.in_place) {
    auto placements = detail::plan_placements(
        g, [&](const ir::Node* n) { return plan_.group_of[static_cast<size_t>(pos_of(n))] >= 0; });
    for (Step& st : steps_) {
      auto it = st.node ? placements.find(st.node) : placements.end();
      if (it == placements.end()) continue;
      st.place = static_cast<int>(placements_.size());
      st.host_slot = slot_of(it->second.host->output());
      placements_.push_back(std::move(it->second));
    }
  }
  size_t scheduled = 0;
  for (const auto& units : order) scheduled += units.size();
  KILN_ASSERT(scheduled == static_cast<size_t>(std::count(live.begin(), live.end(), 1)),
              "executor: the fusion groups form a cycle");
  std::vector<int> last(static_cast<size_t>(num_slots_), -1);
  for (size_t s = 0; s < steps_.size(); ++s)
    for (int i : steps_[s].in) last[static_cast<size_t>(i)] = static_cast<int>(s);
  std::vector<bool> is_out(static_cast<size_t>(num_slots_), false);
  for (const ir::Value* v : g.outputs()) {
    output_producer_.push_back(v->producer ? pos_of(v->producer) : -1);
    output_slots_.push_back(slot_of(v));
    is_out[static_cast<size_t>(slot_of(v))] = true;
  }
  for (int sl = 0; sl < num_slots_; ++sl) {
    const int l = last[static_cast<size_t>(sl)];
    if (l >= 0 && !is_out[static_cast<size_t>(sl)])
      steps_[static_cast<size_t>(l)].free_after.push_back(sl);
  }
  // Graph inputs an unfused view may alias at run time (views of views too):
  // a kernel may write such an input in place only after the last step that
  // reads any alias, which would otherwise see the new value. An alias that is
  // a graph output, or an input a collective touches, is never overwritten.
  input_alias_until_.assign(g.inputs().size(), -1);
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    int& until = input_alias_until_[i];
    std::vector<const ir::Value*> work{g.inputs()[i]};
    while (!work.empty() && until != INT_MAX) {
      const ir::Value* v = work.back();
      work.pop_back();
      for (const ir::Node* u : v->users) {
        if (plan_.group_of[static_cast<size_t>(pos_of(u))] >= 0) continue;  // fused: never aliases
        if (u->info().has(kCollective)) {
          until = INT_MAX;
          break;
        }
        if (!u->info().has(kView)) continue;
        for (const ir::Value* a : u->outputs) {
          const int sl = slot_of(a);
          if (is_out[static_cast<size_t>(sl)]) until = INT_MAX;
          if (until != INT_MAX) until = std::max(until, last[static_cast<size_t>(sl)]);
          work.push_back(a);
        }
      }
    }
  }
  outputs_of_slot_.assign(static_cast<size_t>(num_slots_), {});
  for (size_t o = 0; o < output_slots_.size(); ++o)
    outputs_of_slot_[static_cast<size_t>(output_slots_[o])].push_back(o);
  // Per kernel step: the slots that die there (inputs are never freed, but
  // their last reader is known) and are read by exactly one instance of the
  // batch (the others run concurrently), in slot order. Only the step's own
  // inputs can die there; readers are counted once per instance.
  std::vector<int> readers(static_cast<size_t>(num_slots_), 0);
  std::vector<int> counted_by(static_cast<size_t>(num_slots_), -1);  // last instance counted
  std::vector<int> dying;
  int instance = 0;
  for (size_t s = 0; s < steps_.size(); ++s) {
    Step& st = steps_[s];
    if (st.groups.empty()) continue;
    dying.clear();
    for (int gi : st.groups) {
      const Group& grp = groups_[static_cast<size_t>(gi)];
      ++instance;
      for (size_t a = 0; a < grp.lowered.num_inputs; ++a) {
        const auto sl = static_cast<size_t>(grp.arg_slot[a]);
        if (last[sl] != static_cast<int>(s) || is_out[sl] || counted_by[sl] == instance) continue;
        counted_by[sl] = instance;
        if (readers[sl]++ == 0) dying.push_back(static_cast<int>(sl));
      }
    }
    std::sort(dying.begin(), dying.end());
    for (int sl : dying) {
      if (readers[static_cast<size_t>(sl)] == 1)
        (is_input_slot_[static_cast<size_t>(sl)] ? st.dying_inputs : st.overwritable).push_back(sl);
      readers[static_cast<size_t>(sl)] = 0;
    }
  }
  // Where each output becomes available: 0 = before the first step, s+1 = after step s.
  outputs_at_step_.resize(steps_.size() + 1);
  std::unordered_map<int, size_t> made_at;
  for (size_t s = 0; s < steps_.size(); ++s)
    for (int o : steps_[s].out) made_at[o] = s + 1;
  for (size_t i = 0; i < output_slots_.size(); ++i) {
    auto it = made_at.find(output_slots_[i]);
    outputs_at_step_[it == made_at.end() ? 0 : it->second].push_back(i);
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
size_t Executor::num_steps() const {
  return steps_.size();
}

std::string Executor::schedule_text() const {
  std::string s;
  for (const Step& st : steps_) {
    if (st.node) {
      s += str(st.node->is_constant() ? "constant" : st.node->info().name, "\n");
      continue;
    }
    const Group& first = groups_[static_cast<size_t>(st.groups.front())];
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

namespace {

// Buffers alive during one run (counted once per storage), for RunStats::peak_bytes.
class Liveness {
 public:
  explicit Liveness(bool on) : on_(on) {}
  // A buffer that existed before the run (a graph input): its views and the
  // outputs written into it are not intermediate buffers.
  void exclude(const Tensor& t) {
    if (on_ && t.defined() && t.impl()->storage) excluded_.insert(t.impl()->storage.get());
  }
  void hold(const Tensor& t) {
    if (!on_ || !t.defined() || !t.impl()->storage) return;
    if (excluded_.count(t.impl()->storage.get())) return;
    if (live_[t.impl()->storage.get()]++ == 0)
      cur_ += static_cast<int64_t>(t.impl()->storage->nbytes);
    peak_ = std::max(peak_, cur_);
  }
  void drop(const Tensor& t) {
    if (!on_ || !t.defined() || !t.impl()->storage) return;
    auto it = live_.find(t.impl()->storage.get());
    if (it != live_.end() && --it->second == 0) {
      cur_ -= static_cast<int64_t>(t.impl()->storage->nbytes);
      live_.erase(it);
    }
  }
  int64_t peak() const { return peak_; }

 private:
  bool on_;
  std::unordered_map<const StorageImpl*, int> live_;
  std::unordered_set<const StorageImpl*> excluded_;
  int64_t cur_ = 0, peak_ = 0;
};

// True if `t` can be written over in place as a contiguous [numel] buffer of dtype dt:
// the slot holds the only handle to it and nothing else shares its storage.
bool exclusive(const Tensor& t, DType dt, int64_t numel) {
  return t.defined() && t.impl_ptr().use_count() == 1 && t.impl()->storage &&
         t.impl()->storage.use_count() == 1 && t.dtype() == dt && t.numel() == numel &&
         t.offset() == 0 && t.is_contiguous();
}

// t (contiguous, with shape's element count) viewed with `shape`.
Tensor shaped(const Tensor& t, const Dims& shape) {
  return t.shape() == shape ? t : t.reshape(shape);
}

// One kernel instance ready to launch.
struct Launch {
  std::vector<void*> ptrs;
  std::vector<int64_t> sizes;
  std::vector<Tensor> keep;  // contiguous copies of strided inputs
  int64_t items = 0;
  std::vector<detail::ColumnPartial> sums;  // column sums (then launched alone, in blocks)
  int64_t blocks = 0;
};

}  // namespace

// Where run() may write outputs straight into RunArgs::dests, by slot.
struct Executor::Destinations {
  // Graph-input slot -> the destination it holds, when no other input shares
  // its storage and no unfused view of it escapes as an output (written by
  // the kernel that reads that input last, after every reader of its views).
  std::vector<const Tensor*> input;
  // Output slot -> a destination no input shares (a .grad the graph does not
  // read) and no other destination overlaps, for a value that is nothing but
  // that destination (not also a result or saved value).
  std::vector<const Tensor*> free;
};

Executor::Destinations Executor::destinations(const RunArgs& args) const {
  Destinations r;
  if (args.dests.empty() || !opts_.in_place) return r;
  KILN_ASSERT(args.dests.size() == output_slots_.size(), "executor: ", args.dests.size(),
              " destinations for ", output_slots_.size(), " outputs");
  r.input.assign(static_cast<size_t>(num_slots_), nullptr);
  r.free.assign(static_cast<size_t>(num_slots_), nullptr);
  // Inputs by storage: how many share it, and the last of them.
  std::unordered_map<const StorageImpl*, std::pair<int, size_t>> by_storage;
  for (size_t i = 0; i < args.inputs.size(); ++i) {
    auto& e = by_storage[args.inputs[i].impl()->storage.get()];
    ++e.first;
    e.second = i;
  }
  struct Candidate {
    const StorageImpl* storage;
    const char *begin, *end;
    int slot;
  };
  std::vector<Candidate> cands;
  for (size_t o = 0; o < args.dests.size(); ++o) {
    const Tensor& d = args.dests[o];
    if (!d.defined() || !d.impl()->storage || !d.is_contiguous()) continue;
    const auto it = by_storage.find(d.impl()->storage.get());
    if (it != by_storage.end()) {
      const auto [count, i] = it->second;
      if (count == 1 && args.inputs[i].is_same(d) && input_alias_until_[i] != INT_MAX)
        r.input[i] = &d;
      continue;
    }
    const int sl = output_slots_[o];
    if (d.numel() == 0 || is_input_slot_[static_cast<size_t>(sl)] ||
        outputs_of_slot_[static_cast<size_t>(sl)].front() != o)
      continue;  // each slot once
    bool only_dest = true;
    for (size_t q : outputs_of_slot_[static_cast<size_t>(sl)])
      only_dest = only_dest && args.dests[q].is_same(d);
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
      const size_t o = outputs_of_slot_[static_cast<size_t>(cands[i].slot)].front();
      r.free[static_cast<size_t>(cands[i].slot)] = &args.dests[o];
    }
    i = j;
  }
  return r;
}

std::vector<Tensor> Executor::run(const RunArgs& args) const {
  const ir::Graph& g = *graph_;
  KILN_CHECK(args.inputs.size() == g.inputs().size(), "[executor] the graph takes ",
             g.inputs().size(), " inputs, got ", args.inputs.size());
  const std::vector<int64_t> syms = args.syms.empty()
                                        ? bind_symbols(args.inputs)
                                        : std::vector<int64_t>(args.syms.begin(), args.syms.end());
  std::vector<Tensor> slots(static_cast<size_t>(num_slots_));
  for (size_t i = 0; i < args.inputs.size(); ++i) {
    const ir::Value* v = g.inputs()[i];
    const Tensor& t = args.inputs[i];
    KILN_CHECK(t.defined() && !t.is_symbolic(), "[executor] input ", i, " (", v->name,
               ") is undefined or symbolic");
    const Dims want = ir::eval_shape(v->shape, syms);
    KILN_CHECK(t.dtype() == v->dtype && t.shape() == want, "[executor] input ", i, " (", v->name,
               ") is ", t.dtype(), t.shape(), ", the graph expects ", v->dtype, want);
    // Promotion differs for wrapped numbers (C++ scalars): the graph's dtypes
    // hold only for the kind of input it was built for.
    KILN_CHECK(t.impl()->wrapped_number == v->wrapped_number, "[executor] input ", i, " (", v->name,
               ") is ", t.impl()->wrapped_number ? "" : "not ",
               "a wrapped number (a 0-d tensor made from a C++ scalar), the graph declares it ",
               v->wrapped_number ? "wrapped" : "an ordinary tensor");
    slots[i] = t;
  }
  NoGradGuard no_grad;
  UntracedGuard untraced;
  auto fire = [&](size_t at) {
    if (!args.on_ready) return;
    for (size_t o : outputs_at_step_[at])
      (*args.on_ready)(o, slots[static_cast<size_t>(output_slots_[o])]);
  };
  const Destinations dst = destinations(args);
  const std::vector<const Tensor*>& dest_of_slot = dst.input;
  const std::vector<const Tensor*>& free_dest = dst.free;
  // The free destination of output slot `sl` if it fits (dtype, element count).
  auto free_dest_for = [&](int sl, DType dt, const Dims& shape) -> const Tensor* {
    if (free_dest.empty()) return nullptr;
    const Tensor* d = free_dest[static_cast<size_t>(sl)];
    return d && d->dtype() == dt && d->numel() == numel_of(shape) ? d : nullptr;
  };
  // Output slot `sl`'s free destination viewed with `shape`, else a new tensor.
  auto dest_or_new = [&](int sl, DType dt, const Dims& shape) {
    const Tensor* d = free_dest_for(sl, dt, shape);
    return d ? shaped(*d, shape) : empty(shape, dt);
  };
  // The graph input a kernel output may overwrite as its destination, or -1.
  auto dest_input = [&](const Step& step, const Group& grp, size_t j, const Dims& shape, DType dt,
                        const std::vector<int>& claimed) {
    if (dest_of_slot.empty()) return -1;
    const int out_slot = grp.arg_slot[grp.lowered.num_inputs + j];
    for (int a : grp.lowered.in_place[j]) {
      const int sl = grp.arg_slot[static_cast<size_t>(a)];
      const Tensor* d = dest_of_slot[static_cast<size_t>(sl)];
      if (d == nullptr || d->dtype() != dt || d->numel() != numel_of(shape)) continue;
      if (std::find(step.dying_inputs.begin(), step.dying_inputs.end(), sl) ==
              step.dying_inputs.end() ||
          input_alias_until_[static_cast<size_t>(sl)] >= static_cast<int>(&step - steps_.data()) ||
          std::find(claimed.begin(), claimed.end(), sl) != claimed.end())
        continue;
      // Every graph output this value is must be that destination (not also a
      // result or a value saved for backward, which would alias the state).
      const auto& outs = outputs_of_slot_[static_cast<size_t>(out_slot)];
      bool all = !outs.empty();
      for (size_t o : outs) all = all && args.dests[o].is_same(*d);
      if (all) return sl;
    }
    return -1;
  };
  Liveness mem(args.stats != nullptr);
  for (const Tensor& t : args.inputs) mem.exclude(t);
  RunStats st;
  // Host buffers (by the host's output slot) allocated by their first placed
  // matmul, until the host step takes them.
  std::vector<Tensor> hosted(placements_.empty() ? 0 : static_cast<size_t>(num_slots_));
  // The view of its host's buffer a placed matmul writes, or undefined.
  auto placed_output = [&](const Step& step) -> Tensor {
    if (step.place < 0) return {};
    const detail::Placement& p = placements_[static_cast<size_t>(step.place)];
    const std::optional<detail::Layout> l = detail::placed_layout(p, syms);
    if (!l) return {};
    Tensor& h = hosted[static_cast<size_t>(step.host_slot)];
    if (!h.defined()) {
      const ir::Value* hv = p.host->output();
      h = dest_or_new(step.host_slot, hv->dtype, ir::eval_shape(hv->shape, syms));
      mem.hold(h);
    }
    return as_strided(h, l->shape, l->strides, h.offset() + l->offset);
  };
  fire(0);
  std::vector<Tensor> ins;
  std::vector<Launch> launches;
  std::vector<int> claimed;
  for (size_t s = 0; s < steps_.size(); ++s) {
    const Step& step = steps_[s];
    if (step.node && step.node->is_constant()) {
      const ir::Node& n = *step.node;
      if (!n.sym_attrs.empty()) {
        // A number that depends on a dynamic size (mean's count).
        const ir::SymAttr& sa = n.sym_attrs.front();
        const double e = static_cast<double>(sa.expr.eval(syms));
        const double v = sa.reciprocal ? 1.0 / e : e;
        Tensor c = scalar_tensor(Scalar(v), n.constant.dtype());
        c.impl()->wrapped_number = n.constant.impl()->wrapped_number;
        slots[static_cast<size_t>(step.out[0])] = c;
      } else {
        slots[static_cast<size_t>(step.out[0])] = n.constant;
      }
      ++st.nodes_run;
    } else if (step.node) {
      const ir::Node& n = *step.node;
      ins.clear();
      for (int i : step.in) ins.push_back(slots[static_cast<size_t>(i)]);
      Attrs attrs = n.sym_attrs.empty() ? n.attrs : n.eval_attrs(syms);
      if (n.info().has(kRandom) && !n.attrs.has("fixed_seed")) {
        attrs.set("seed", AttrValue(static_cast<int64_t>(args.rng_seed)))
            .set("offset", AttrValue(static_cast<int64_t>(args.rng_base) + n.attrs.i("offset")));
      }
      std::vector<Tensor> outs;
      const OpInfo& info = n.info();
      const ir::Value* ov = n.outputs.size() == 1 ? n.outputs[0] : nullptr;
      const Tensor* d = nullptr;
      if (ov && !info.has(kView) && !info.has(kCollective) && info.kernel)
        d = free_dest_for(step.out[0], ov->dtype, ir::eval_shape(ov->shape, syms));
      Tensor host;
      if (!hosted.empty() && !step.out.empty())
        host = std::move(hosted[static_cast<size_t>(step.out[0])]);
      if (host.defined() && n.is_op(OpId::cat)) {
        // Copy in only the inputs no matmul has already written in place.
        const int64_t dim = wrap_dim(attrs.i("dim"), host.dim(), "cat");
        int64_t at = 0;
        for (const Tensor& t : ins) {
          if (t.dim() != host.dim()) continue;  // an empty 1-D input, which cat skips
          Dims shape = host.shape();
          shape[static_cast<size_t>(dim)] = t.size(dim);
          Tensor part =
              as_strided(host, shape, host.strides(), host.offset() + at * host.stride(dim));
          if (t.impl()->storage != part.impl()->storage || t.offset() != part.offset() ||
              t.strides() != part.strides())
            part.copy_(t);
          at += t.size(dim);
        }
        outs.push_back(host);
      } else if (Tensor placed = d ? Tensor() : placed_output(step); placed.defined()) {
        outs.push_back(placed);
        info.kernel(ins, attrs, outs);
        ++st.placed;
      } else if (d) {
        // The eager kernel, writing its one output into the destination.
        std::vector<TensorMeta> metas;
        info.infer(ins, attrs, metas);
        outs.push_back(shaped(*d, metas[0].shape));
        info.kernel(ins, attrs, outs);
        ++st.in_place;
      } else {
        outs = dispatch(n.op, ins, attrs);
      }
      ins.clear();
      for (size_t k = 0; k < outs.size(); ++k) {
        mem.hold(outs[k]);
        slots[static_cast<size_t>(step.out[k])] = std::move(outs[k]);
      }
      mem.drop(host);  // the host's buffer now lives in its slot (or its views')
      ++st.nodes_run;
    } else {
      launches.assign(step.groups.size(), Launch{});
      claimed.clear();
      for (size_t i = 0; i < step.groups.size(); ++i) {
        const Group& grp = groups_[static_cast<size_t>(step.groups[i])];
        const detail::LoweredGroup& lg = grp.lowered;
        Launch& l = launches[i];
        l.sizes = detail::kernel_sizes(lg, syms);
        l.items = kir::work_items(lg.kernel, l.sizes.data());
        // Eager's rule for amax/amin (a dynamic dim may reach 0 after tracing).
        for (const kir::Reduction& r : lg.kernel.reductions)
          KILN_CHECK(r.op == OpId::sum || l.sizes.back() != 0, "[",
                     r.op == OpId::max ? "amax" : "amin",
                     "] cannot reduce over a zero-size dimension (fused kernel ", lg.kernel.name,
                     ", run-time sizes ", l.sizes, ")");
        l.ptrs.resize(lg.args.size());
        // Outputs first: the in-place test needs the slots' handle counts untouched.
        for (size_t j = 0; j + lg.num_inputs < lg.args.size(); ++j) {
          const ir::Value* v = lg.args[lg.num_inputs + j];
          const Dims shape = ir::eval_shape(v->shape, syms);
          Tensor o;
          if (lg.column_sum[j]) {
            // The sum's value, and the f64 partials the kernel writes instead.
            const int sl = grp.arg_slot[lg.num_inputs + j];
            o = dest_or_new(sl, v->dtype, shape);
            if (l.blocks == 0) l.blocks = detail::column_blocks(l.items, numel_of(l.sizes));
            Tensor part = detail::column_partials(l.blocks, l.sizes.back());
            l.ptrs[lg.num_inputs + j] = part.data_ptr();
            l.sums.push_back({lg.num_inputs + j, o, std::move(part)});
            mem.hold(o);
            slots[static_cast<size_t>(sl)] = std::move(o);
            continue;
          }
          if (const int sl = dest_input(step, grp, j, shape, v->dtype, claimed); sl >= 0) {
            const Tensor& d = *dest_of_slot[static_cast<size_t>(sl)];
            o = shaped(d, shape);
            claimed.push_back(sl);
            ++st.in_place;
          }
          for (int a : opts_.in_place && !o.defined() ? lg.in_place[j] : std::vector<int>{}) {
            const int sl = grp.arg_slot[static_cast<size_t>(a)];
            if (std::find(step.overwritable.begin(), step.overwritable.end(), sl) ==
                    step.overwritable.end() ||
                std::find(claimed.begin(), claimed.end(), sl) != claimed.end())
              continue;
            const Tensor& t = slots[static_cast<size_t>(sl)];
            if (!exclusive(t, v->dtype, numel_of(shape))) continue;
            o = shaped(t, shape);
            claimed.push_back(sl);
            ++st.in_place;
            break;
          }
          if (!o.defined())
            if (const Tensor* d = free_dest_for(grp.arg_slot[lg.num_inputs + j], v->dtype, shape)) {
              o = shaped(*d, shape);
              ++st.in_place;
            }
          if (!o.defined()) o = empty(shape, v->dtype);
          mem.hold(o);
          l.ptrs[lg.num_inputs + j] = o.data_ptr();
          slots[static_cast<size_t>(grp.arg_slot[lg.num_inputs + j])] = std::move(o);
        }
        for (size_t a = 0; a < lg.num_inputs; ++a) {
          const Tensor& t = slots[static_cast<size_t>(grp.arg_slot[a])];
          if (t.is_contiguous()) {
            l.ptrs[a] = t.data_ptr();
          } else {
            l.keep.push_back(t.contiguous());
            l.ptrs[a] = l.keep.back().data_ptr();
          }
        }
        st.nodes_run += grp.nodes;
        ++st.kernels_run;
      }
      const kir::LoadedKernel& kernel = *groups_[static_cast<size_t>(step.groups.front())].kernel;
      if (launches.size() == 1 && !launches[0].sums.empty()) {
        const Launch& l = launches[0];
        detail::launch_with_column_sums(kernel, l.ptrs, l.sizes.data(), l.items, l.blocks, l.sums);
      } else if (launches.size() == 1) {
        kernel.launch(launches[0].ptrs.data(), launches[0].sizes.data());
      } else {
        // One launch over the concatenated work items of every instance.
        std::vector<int64_t> start(launches.size() + 1, 0);
        int64_t max_inner = 1;
        for (size_t i = 0; i < launches.size(); ++i) {
          start[i + 1] = start[i] + launches[i].items;
          max_inner = std::max(max_inner, launches[i].sizes.back());
        }
        const int64_t grain = kernel.kernel().has_reductions()
                                  ? std::max<int64_t>(1, 16384 / max_inner)
                                  : kDefaultGrain / 2;
        parallel_for(0, start.back(), grain, [&](int64_t b, int64_t e) {
          size_t i =
              static_cast<size_t>(std::upper_bound(start.begin(), start.end(), b) - start.begin()) -
              1;
          for (; i < launches.size() && start[i] < e; ++i) {
            const int64_t lo = std::max(b, start[i]) - start[i];
            const int64_t hi = std::min(e, start[i + 1]) - start[i];
            if (lo < hi) kernel(lo, hi, launches[i].ptrs.data(), launches[i].sizes.data());
          }
        });
      }
      ++st.kernel_launches;
      launches.clear();
    }
    for (int f : step.free_after) {
      mem.drop(slots[static_cast<size_t>(f)]);
      slots[static_cast<size_t>(f)] = Tensor();
    }
    fire(s + 1);
  }
  if (args.stats) {
    st.peak_bytes = mem.peak();
    *args.stats = st;
  }
  std::vector<Tensor> result;
  result.reserve(output_slots_.size());
  for (int o : output_slots_) result.push_back(slots[static_cast<size_t>(o)]);
  return result;
}

}  // namespace kiln
