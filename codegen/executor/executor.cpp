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
#include "kiln/functional.h"
#include "kiln/ir/verify.h"
#include "kiln/profiler.h"
#include "kiln/thread_pool.h"

namespace kiln {

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
  // The GPU printer has no column sums (cross-block partials): on a device such
  // sums stay unfused and run as the device's reduction.
  if (!opts_.device.is_cpu()) opts_.fusion.column_sums = false;
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
  int64_t current() const { return cur_; }
  // Whether t's buffer is counted now (held, and not a graph input's).
  bool counts(const Tensor& t) const {
    return t.defined() && t.impl()->storage && live_.count(t.impl()->storage.get());
  }

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

void Executor::note_peak(PeakReport& r, size_t step, const std::vector<Tensor>& slots,
                         int64_t bytes, const std::function<bool(const Tensor&)>& counts) const {
  // Slots are numbered as the schedule numbers them: inputs, then each node's outputs.
  std::vector<const ir::Value*> value_of(static_cast<size_t>(num_slots_), nullptr);
  size_t k = 0;
  for (const ir::Value* v : graph_->inputs()) value_of[k++] = v;
  for (const ir::Node* n : graph_->nodes())
    for (const ir::Value* v : n->outputs) value_of[k++] = v;
  const Step& st = steps_[step];
  r.peak_bytes = bytes;
  r.step =
      st.node ? str("node ", st.node->info().name)
              : str("kernel ", groups_[static_cast<size_t>(st.groups.front())].lowered.kernel.name);
  r.values.clear();
  std::unordered_set<const StorageImpl*> seen;
  for (size_t sl = 0; sl < slots.size(); ++sl) {
    const Tensor& t = slots[sl];
    if (!counts(t) || !seen.insert(t.impl()->storage.get()).second) continue;
    const ir::Value* v = value_of[sl];
    PeakValue pv;
    pv.value = v && !v->name.empty() ? v->name : str("%", v ? v->id() : -1);
    pv.op = v && v->producer ? v->producer->info().name : "input";
    if (v && v->producer && plan_.group_of[graph_->position(v->producer)] >= 0)
      pv.op = str("fused kernel ",
                  groups_[static_cast<size_t>(plan_.group_of[graph_->position(v->producer)])]
                      .lowered.kernel.name);
    pv.type = str(t.dtype(), t.shape());
    pv.bytes = static_cast<int64_t>(t.impl()->storage->nbytes);
    r.values.push_back(std::move(pv));
  }
  std::stable_sort(r.values.begin(), r.values.end(),
                   [](const PeakValue& a, const PeakValue& b) { return a.bytes > b.bytes; });
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
    KILN_CHECK(t.device() == opts_.device || (t.dim() == 0 && t.device().is_cpu()),
               "[executor] input ", i, " (", v->name, ") is on ", t.device(),
               ", the graph runs on ", opts_.device, " (move every tensor to one device)");
    slots[i] = t;
  }
  NoGradGuard no_grad;
  const Device dev = opts_.device;
  // A new buffer on the graph's device.
  auto fresh = [&](const Dims& shape, DType dt) {
    return dev.is_cpu() ? empty(shape, dt) : make_tensor(shape, dt, dev);
  };
  // A node's eager kernel into preallocated outputs: the CPU's, or the device
  // runtime's (CPU scalars, such as constants, moved to the device first).
  auto run_kernel = [&](const ir::Node& n, std::vector<Tensor>& in, const Attrs& attrs,
                        std::vector<Tensor>& out) {
    if (dev.is_cpu()) return n.info().kernel(in, attrs, out);
    for (Tensor& t : in)
      if (t.defined() && t.device() != dev) t = t.to(dev);
    device_runtime(dev, n.info().name).run(n.op, in, attrs, out);
  };
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
    return d ? shaped(*d, shape) : fresh(shape, dt);
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
  // A profile recording memory gets the values alive at this run's peak.
  const bool peak_report = profiler::enabled() && profiler::profile_memory();
  PeakReport peak;
  Liveness mem(args.stats != nullptr || peak_report);
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
      profiler::Span nspan("node", n.info().name);  // an unfused node (BLAS, eager kernel)
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
        run_kernel(n, ins, attrs, outs);
        ++st.placed;
      } else if (d) {
        // The eager kernel, writing its one output into the destination.
        std::vector<TensorMeta> metas;
        info.infer(ins, attrs, metas);
        outs.push_back(shaped(*d, metas[0].shape));
        run_kernel(n, ins, attrs, outs);
        ++st.in_place;
      } else {
        outs = dispatch(n.op, ins, attrs);
        // Factories (full, arange, random draws) make their tensors on the CPU.
        if (!dev.is_cpu())
          for (Tensor& o : outs)
            if (o.device() != dev) o = o.to(dev);
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
          if (!o.defined()) o = fresh(shape, v->dtype);
          mem.hold(o);
          l.ptrs[lg.num_inputs + j] = o.data_ptr();
          slots[static_cast<size_t>(grp.arg_slot[lg.num_inputs + j])] = std::move(o);
        }
        for (size_t a = 0; a < lg.num_inputs; ++a) {
          const Tensor& t = slots[static_cast<size_t>(grp.arg_slot[a])];
          if (t.device() != dev) {  // a CPU scalar (a constant) read by a device kernel
            l.keep.push_back(t.to(dev).contiguous());
            l.ptrs[a] = l.keep.back().data_ptr();
          } else if (t.is_contiguous()) {
            l.ptrs[a] = t.data_ptr();
          } else {
            l.keep.push_back(t.contiguous());
            l.ptrs[a] = l.keep.back().data_ptr();
          }
        }
        st.nodes_run += grp.nodes;
        ++st.kernels_run;
      }
      const Group& first = groups_[static_cast<size_t>(step.groups.front())];
      profiler::Span kspan("kernel", first.lowered.kernel.name);
      if (kspan.active()) [[unlikely]] {
        // Iteration space and bytes read + written (every argument once); on a
        // device the span is the launch's queueing, not the kernel's run.
        int64_t bytes = 0, items = 0;
        for (size_t i = 0; i < launches.size(); ++i) {
          items += launches[i].items;
          for (int sl : groups_[static_cast<size_t>(step.groups[i])].arg_slot)
            if (const Tensor& t = slots[static_cast<size_t>(sl)]; t.defined())
              bytes += t.numel() * static_cast<int64_t>(dtype_size(t.dtype()));
        }
        kspan.arg("instances", static_cast<int64_t>(launches.size()));
        kspan.arg("work_items", items);
        kspan.arg("sizes", str(launches.front().sizes));
        kspan.set_bytes(bytes);
      }
      if (first.device_kernel) {
        // On a device: one launch per instance, queued in order.
        for (const Launch& l : launches) first.device_kernel->launch(l.ptrs.data(), l.sizes.data());
      } else if (launches.size() == 1 && !launches[0].sums.empty()) {
        const kir::LoadedKernel& kernel = *first.kernel;
        const Launch& l = launches[0];
        detail::launch_with_column_sums(kernel, l.ptrs, l.sizes.data(), l.items, l.blocks, l.sums);
      } else if (launches.size() == 1) {
        first.kernel->launch(launches[0].ptrs.data(), launches[0].sizes.data());
      } else {
        // One launch over the concatenated work items of every instance.
        const kir::LoadedKernel& kernel = *first.kernel;
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
    if (peak_report && mem.current() > peak.peak_bytes) [[unlikely]]
      note_peak(peak, s, slots, mem.current(), [&](const Tensor& t) { return mem.counts(t); });
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
  if (peak_report && peak.peak_bytes > 0) {
    peak.plan = opts_.name;
    profiler::record_peak_report(std::move(peak));
  }
  std::vector<Tensor> result;
  result.reserve(output_slots_.size());
  for (int o : output_slots_) result.push_back(slots[static_cast<size_t>(o)]);
  return result;
}

}  // namespace kiln
