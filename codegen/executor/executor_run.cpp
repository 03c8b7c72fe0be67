// Executor::run: one call of a built schedule. The per-call state (slots,
// destinations, live-memory counts) lives in Executor::Run, whose steps are
// named: binding inputs, constants, unfused nodes, preparing and launching
// fused kernels. Schedule-time decisions are in executor_schedule.cpp.
#include <algorithm>
#include <climits>
#include <span>
#include <unordered_map>
#include <unordered_set>

#include "executor/column_sums.h"
#include "executor/device_timeline.h"
#include "executor/executor.h"
#include "executor/executor_internal.h"
#include "executor/placement.h"
#include "kernels/device_kernels.h"
#include "kernels/kernel_cache.h"
#include "kernels/lower.h"
#include "kiln/autograd.h"
#include "kiln/device_runtime.h"
#include "kiln/dispatch.h"
#include "kiln/functional.h"
#include "kiln/profiler.h"
#include "kiln/thread_pool.h"

namespace kiln {

using detail::kNoSlot;
using detail::pos;
using detail::Slot;
using detail::slot_at;
using detail::SlotVec;

namespace {

// Buffers alive during one run (counted once per storage), for RunStats::peak_bytes.
// Storages are counted in an open-addressing table sized for the run (every
// buffer a slot can hold, plus the inputs): no allocation per buffer. An entry
// whose count drops to 0 stays (a later storage at that address reuses it).
class Liveness {
 public:
  Liveness(bool on, size_t capacity) : on_(on) {
    if (!on_) return;
    size_t n = 16;
    while (n < 2 * capacity) n *= 2;
    table_.assign(n, Entry{});
  }
  // A buffer that existed before the run (a graph input): its views and the
  // outputs written into it are not intermediate buffers.
  void exclude(const Tensor& t) {
    if (on_ && t.defined() && t.impl()->storage) find(t.impl()->storage.get()).count = kExcluded;
  }
  // A free destination (captured state the run writes an output into): its
  // buffer counts as the bytes of the first tensor held in it, the output,
  // not as the whole buffer it may be a slice of (a gradient returned as a
  // view of a cat's; the predicted peak counts the output, remat_model.cpp).
  void count_view(const Tensor& d) {
    if (on_ && d.defined() && d.impl()->storage) find(d.impl()->storage.get()).view_sized = true;
  }
  void hold(const Tensor& t) {
    if (!on_ || !t.defined() || !t.impl()->storage) return;
    Entry& e = find(t.impl()->storage.get());
    if (e.count == kExcluded) return;
    if (e.count++ == 0) {
      e.bytes = e.view_sized ? t.numel() * static_cast<int64_t>(dtype_size(t.dtype()))
                             : static_cast<int64_t>(t.impl()->storage->nbytes);
      cur_ += e.bytes;
    }
    peak_ = std::max(peak_, cur_);
  }
  void drop(const Tensor& t) {
    if (!on_ || !t.defined() || !t.impl()->storage) return;
    Entry& e = find(t.impl()->storage.get());
    if (e.count > 0 && --e.count == 0) cur_ -= e.bytes;
  }
  int64_t peak() const { return peak_; }
  int64_t current() const { return cur_; }
  // Whether t's buffer is counted now (held, and not a graph input's).
  bool counts(const Tensor& t) const {
    if (!on_ || !t.defined() || !t.impl()->storage) return false;
    const Entry* e = lookup(t.impl()->storage.get());
    return e && e->count > 0;
  }

 private:
  static constexpr int kExcluded = -1;
  struct Entry {
    const StorageImpl* key = nullptr;
    int count = 0;
    bool view_sized = false;  // count_view
    int64_t bytes = 0;        // counted while count > 0
  };
  static size_t hash(const StorageImpl* p) {
    auto h = reinterpret_cast<uintptr_t>(p);
    h ^= h >> 17;
    h *= 0x9E3779B97F4A7C15ull;
    return static_cast<size_t>(h ^ (h >> 29));
  }
  const Entry* lookup(const StorageImpl* p) const {
    const size_t mask = table_.size() - 1;
    for (size_t i = hash(p) & mask;; i = (i + 1) & mask) {
      if (table_[i].key == p) return &table_[i];
      if (table_[i].key == nullptr) return nullptr;
    }
  }
  Entry& find(const StorageImpl* p) {
    const size_t mask = table_.size() - 1;
    for (size_t i = hash(p) & mask;; i = (i + 1) & mask) {
      if (table_[i].key == p) return table_[i];
      if (table_[i].key == nullptr) {
        if (++used_ * 4 > table_.size() * 3) {  // more buffers than planned for: grow
          grow();
          return find(p);
        }
        table_[i].key = p;
        return table_[i];
      }
    }
  }
  void grow() {
    std::vector<Entry> old = std::move(table_);
    table_.assign(old.size() * 2, Entry{});
    used_ = 0;
    for (const Entry& e : old)
      if (e.key) {
        ++used_;
        const size_t mask = table_.size() - 1;
        size_t i = hash(e.key) & mask;
        while (table_[i].key) i = (i + 1) & mask;
        table_[i] = e;
      }
  }
  bool on_;
  std::vector<Entry> table_;
  size_t used_ = 0;
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

class Executor::Run {
 public:
  Run(const Executor& e, const RunArgs& args)
      : e_(e),
        args_(args),
        dev_(e.opts_.device),
        peak_report_(profiler::enabled() && profiler::profile_memory()),
        mem_(args.stats != nullptr || peak_report_, pos(e.num_slots_) + args.inputs.size()) {}
  std::vector<Tensor> run();

 private:
  void bind_inputs();
  // A new buffer on the graph's device.
  Tensor fresh(const Dims& shape, DType dt) const {
    return dev_.is_cpu() ? empty(shape, dt) : make_tensor(shape, dt, dev_);
  }
  void run_kernel(const ir::Node& n, std::vector<Tensor>& in, const Attrs& attrs,
                  std::vector<Tensor>& out) const;
  // The shape of the value in slot `sl` (v): precomputed for a static graph.
  // The reference is valid until the next call.
  const Dims& shape_of(Slot sl, const ir::Value* v) {
    if (!e_.static_shape_.empty()) return e_.static_shape_[sl];
    shape_ = ir::eval_shape(v->shape, syms_);
    return shape_;
  }
  void fire(size_t at);
  const Tensor* free_dest_for(Slot sl, DType dt, const Dims& shape) const;
  // Output slot `sl`'s free destination viewed with `shape`, else a new tensor.
  Tensor dest_or_new(Slot sl, DType dt, const Dims& shape) const {
    const Tensor* d = free_dest_for(sl, dt, shape);
    return d ? shaped(*d, shape) : fresh(shape, dt);
  }
  Slot dest_input(const Group& grp, size_t j, const Dims& shape, DType dt) const;
  Tensor placed_output(const Step& step);
  void run_constant(const Step& step);
  void run_node(const Step& step);
  void run_gemm_epilogue(const Step& step);
  void fill_cat_host(Tensor& host, const std::vector<Tensor>& ins, const Attrs& attrs);
  void prepare_launch(const Group& grp, Launch& l);
  void kernel_output(const Group& grp, Launch& l, size_t j);
  void launch(const Step& step);
  void profile_launch(const Step& step, profiler::Span& kspan) const;
  std::string step_label(const Step& step) const;

  const Executor& e_;
  const RunArgs& args_;
  const Device dev_;
  const bool peak_report_;  // a profile recording memory gets the values alive at the peak
  Liveness mem_;
  std::vector<int64_t> syms_;
  SlotVec<Tensor> slots_;
  Destinations dst_;
  PeakReport peak_;
  RunStats st_;
  // Host buffers (by the host's output slot) allocated by their first placed
  // matmul, until the host step takes them.
  SlotVec<Tensor> hosted_;
  std::vector<Tensor> ins_;
  std::vector<Launch> launches_;
  std::vector<Slot> claimed_;  // input slots a kernel of this step writes over
  SlotVec<char> is_claimed_;   // the same by slot
  int at_ = 0;                 // the step running now
  size_t num_launches_ = 0;    // launches_ in use by this step (the rest keep capacity)
  Dims shape_;                 // shape_of's result for a graph with symbols
  void claim(Slot sl) {
    claimed_.push_back(sl);
    is_claimed_[sl] = 1;
  }
};

void Executor::Run::bind_inputs() {
  const ir::Graph& g = *e_.graph_;
  KILN_CHECK(args_.inputs.size() == g.inputs().size(), "[executor] the graph takes ",
             g.inputs().size(), " inputs, got ", args_.inputs.size());
  syms_ = args_.syms.empty() ? e_.bind_symbols(args_.inputs)
                             : std::vector<int64_t>(args_.syms.begin(), args_.syms.end());
  slots_.assign(e_.num_slots_, Tensor());
  for (size_t i = 0; i < args_.inputs.size(); ++i) {
    const ir::Value* v = g.inputs()[i];
    const Tensor& t = args_.inputs[i];
    KILN_CHECK(t.defined() && !t.is_symbolic(), "[executor] input ", i, " (", v->name,
               ") is undefined or symbolic");
    const Slot sl = slot_at(i);  // graph input i is slot i
    const Dims& want = shape_of(sl, v);
    KILN_CHECK(t.dtype() == v->dtype && t.shape() == want, "[executor] input ", i, " (", v->name,
               ") is ", t.dtype(), t.shape(), ", the graph expects ", v->dtype, want);
    // Promotion differs for wrapped numbers (C++ scalars): the graph's dtypes
    // hold only for the kind of input it was built for.
    KILN_CHECK(t.impl()->wrapped_number == v->wrapped_number, "[executor] input ", i, " (", v->name,
               ") is ", t.impl()->wrapped_number ? "" : "not ",
               "a wrapped number (a 0-d tensor made from a C++ scalar), the graph declares it ",
               v->wrapped_number ? "wrapped" : "an ordinary tensor");
    KILN_CHECK(t.device() == dev_ || (t.dim() == 0 && t.device().is_cpu()), "[executor] input ", i,
               " (", v->name, ") is on ", t.device(), ", the graph runs on ", dev_,
               " (move every tensor to one device)");
    slots_[sl] = t;
  }
}

// A node's eager kernel into preallocated outputs: the CPU's, or the device
// runtime's (CPU scalars, such as constants, moved to the device first).
void Executor::Run::run_kernel(const ir::Node& n, std::vector<Tensor>& in, const Attrs& attrs,
                               std::vector<Tensor>& out) const {
  if (dev_.is_cpu()) return n.info().kernel(in, attrs, out);
  for (Tensor& t : in)
    if (t.defined() && t.device() != dev_) t = t.to(dev_);
  device_runtime(dev_, n.info().name).run(n.op, in, attrs, out);
}

void Executor::Run::fire(size_t at) {
  if (!args_.on_ready) return;
  for (size_t o : e_.outputs_at_step_[at]) (*args_.on_ready)(o, slots_[e_.output_slots_[o]]);
}

// The free destination of output slot `sl` if it fits (dtype, element count).
const Tensor* Executor::Run::free_dest_for(Slot sl, DType dt, const Dims& shape) const {
  if (dst_.free.empty()) return nullptr;
  const Tensor* d = dst_.free[sl];
  return d && d->dtype() == dt && d->numel() == numel_of(shape) ? d : nullptr;
}

// The graph-input slot a kernel output of this step may overwrite as its
// destination, or kNoSlot.
Slot Executor::Run::dest_input(const Group& grp, size_t j, const Dims& shape, DType dt) const {
  if (dst_.input.empty()) return kNoSlot;
  const Slot out_slot = grp.arg_slot[grp.lowered.num_inputs + j];
  for (int a : grp.lowered.in_place[j]) {
    const Slot sl = grp.arg_slot[static_cast<size_t>(a)];
    const Tensor* d = dst_.input[sl];
    if (d == nullptr || d->dtype() != dt || d->numel() != numel_of(shape)) continue;
    // dying_input_at_ lists only graph-input slots, so sl indexes input_alias_until_.
    if (e_.dying_input_at_[sl] != at_ || e_.input_alias_until_[sl] >= at_ || is_claimed_[sl])
      continue;
    // Every graph output this value is must be that destination (not also a
    // result or a value saved for backward, which would alias the state).
    const auto& outs = e_.outputs_of_slot_[out_slot];
    bool all = !outs.empty();
    for (size_t o : outs) all = all && args_.dests[o].is_same(*d);
    if (all) return sl;
  }
  return kNoSlot;
}

// The view of its host's buffer a placed matmul writes, or undefined.
Tensor Executor::Run::placed_output(const Step& step) {
  if (step.place < 0) return {};
  const detail::Placement& p = e_.placements_[static_cast<size_t>(step.place)];
  const std::optional<detail::Layout> l = detail::placed_layout(p, syms_);
  if (!l) return {};
  Tensor& h = hosted_[step.host_slot];
  if (!h.defined()) {
    const ir::Value* hv = p.host->output();
    h = dest_or_new(step.host_slot, hv->dtype, shape_of(step.host_slot, hv));
    mem_.hold(h);
  }
  return as_strided(h, l->shape, l->strides, h.offset() + l->offset);
}

void Executor::Run::run_constant(const Step& step) {
  const ir::Node& n = *step.node;
  if (!n.sym_attrs.empty()) {
    // A number that depends on a dynamic size (mean's count).
    const ir::SymAttr& sa = n.sym_attrs.front();
    const double e = static_cast<double>(sa.expr.eval(syms_));
    const double v = sa.reciprocal ? 1.0 / e : e;
    Tensor c = scalar_tensor(Scalar(v), n.constant.dtype());
    c.impl()->wrapped_number = n.constant.impl()->wrapped_number;
    slots_[step.out[0]] = c;
  } else {
    slots_[step.out[0]] = step.constant;
  }
  ++st_.nodes_run;
}

// A cat whose host buffer matmuls already wrote parts of: copy in the rest.
void Executor::Run::fill_cat_host(Tensor& host, const std::vector<Tensor>& ins,
                                  const Attrs& attrs) {
  const int64_t dim = wrap_dim(attrs.i("dim"), host.dim(), "cat");
  int64_t at = 0;
  for (const Tensor& t : ins) {
    if (t.dim() != host.dim()) continue;  // an empty 1-D input, which cat skips
    Dims shape = host.shape();
    shape[static_cast<size_t>(dim)] = t.size(dim);
    Tensor part = as_strided(host, shape, host.strides(), host.offset() + at * host.stride(dim));
    if (t.impl()->storage != part.impl()->storage || t.offset() != part.offset() ||
        t.strides() != part.strides())
      part.copy_(t);
    at += t.size(dim);
  }
}

// A matmul with its bias (+ relu) epilogue group (gemm_epilogue.h), through
// the device runtime's matmul with a bias input: into the group output's free
// destination or a new buffer.
void Executor::Run::run_gemm_epilogue(const Step& step) {
  const ir::Node& n = *step.node;
  profiler::Span nspan("node", step.gemm_relu ? "matmul+bias+relu" : "matmul+bias");
  ins_.clear();
  for (Slot i : step.in) ins_.push_back(slots_[i]);
  const ir::Value* ov = n.output();
  std::vector<Tensor> outs{dest_or_new(step.out[0], ov->dtype, shape_of(step.out[0], ov))};
  Attrs attrs;
  attrs.set("relu", step.gemm_relu);
  run_kernel(n, ins_, attrs, outs);
  ins_.clear();
  mem_.hold(outs[0]);
  slots_[step.out[0]] = std::move(outs[0]);
  st_.nodes_run += step.gemm_relu ? 3 : 2;
}

// An unfused node (BLAS, an eager kernel, a view): into a placed host buffer,
// a free destination, or new tensors.
void Executor::Run::run_node(const Step& step) {
  if (step.gemm_epilogue) return run_gemm_epilogue(step);
  const ir::Node& n = *step.node;
  profiler::Span nspan("node", n.info().name);
  ins_.clear();
  for (Slot i : step.in) ins_.push_back(slots_[i]);
  // The node's own attributes, copied only when a run-time value goes in (a
  // dynamic size, the generator's seed and offset).
  const bool random = n.info().has(kRandom) && !n.attrs.has("fixed_seed");
  Attrs evaluated;
  if (!n.sym_attrs.empty() || random) {
    evaluated = n.sym_attrs.empty() ? n.attrs : n.eval_attrs(syms_);
    if (random)
      evaluated.set("seed", AttrValue(static_cast<int64_t>(args_.rng_seed)))
          .set("offset", AttrValue(static_cast<int64_t>(args_.rng_base) + n.attrs.i("offset")));
  }
  const Attrs& attrs = n.sym_attrs.empty() && !random ? n.attrs : evaluated;
  std::vector<Tensor> outs;
  const OpInfo& info = n.info();
  const ir::Value* ov = n.outputs.size() == 1 ? n.outputs[0] : nullptr;
  const Tensor* d = nullptr;
  if (ov && !info.has(kView) && !info.has(kCollective) && info.kernel)
    d = free_dest_for(step.out[0], ov->dtype, shape_of(step.out[0], ov));
  Tensor host;
  if (!hosted_.empty() && !step.out.empty()) host = std::move(hosted_[step.out[0]]);
  if (host.defined() && n.is_op(OpId::cat)) {
    fill_cat_host(host, ins_, attrs);  // copy in the inputs no matmul wrote in place
    outs.push_back(host);
  } else if (Tensor placed = d ? Tensor() : placed_output(step); placed.defined()) {
    outs.push_back(placed);
    run_kernel(n, ins_, attrs, outs);
    ++st_.placed;
  } else if (d) {
    // The eager kernel, writing its one output into the destination.
    std::vector<TensorMeta> metas;
    info.infer(ins_, attrs, metas);
    outs.push_back(shaped(*d, metas[0].shape));
    run_kernel(n, ins_, attrs, outs);
    ++st_.in_place;
  } else if (!dev_.is_cpu() && info.has(kFactory)) {
    // Made on the device by its runtime (a fill uploads one element, a draw
    // runs the CPU's Philox rule there), not on the host and uploaded: an
    // [8192, 1000] zeros took 4.8 ms that way on an H200's host.
    std::vector<TensorMeta> metas;
    info.infer(ins_, attrs, metas);
    for (const TensorMeta& m : metas) outs.push_back(fresh(m.shape, m.dtype));
    run_kernel(n, ins_, attrs, outs);
  } else {
    outs = dispatch(n.op, ins_, attrs);
    // An op of CPU scalars only (constants) computes on the CPU.
    if (!dev_.is_cpu())
      for (Tensor& o : outs)
        if (o.device() != dev_) o = o.to(dev_);
  }
  ins_.clear();
  for (size_t k = 0; k < outs.size(); ++k) {
    mem_.hold(outs[k]);
    slots_[step.out[k]] = std::move(outs[k]);
  }
  mem_.drop(host);  // the host's buffer now lives in its slot (or its views')
  ++st_.nodes_run;
}

// Kernel output j's buffer: a column sum's partials, a graph input it may
// overwrite, a dying input, a free destination, or a new tensor.
void Executor::Run::kernel_output(const Group& grp, Launch& l, size_t j) {
  const detail::LoweredGroup& lg = grp.lowered;
  const ir::Value* v = lg.args[lg.num_inputs + j];
  const Slot out_slot = grp.arg_slot[lg.num_inputs + j];
  const Dims& shape = shape_of(out_slot, v);
  Tensor o;
  if (lg.column_sum[j]) {
    // The sum's value, and the f64 partials the kernel writes instead (a
    // device kernel keeps its own partials and writes the sum).
    o = dest_or_new(out_slot, v->dtype, shape);
    if (grp.device_kernel) {
      l.ptrs[lg.num_inputs + j] = o.data_ptr();
      l.sums.push_back({lg.num_inputs + j, o, Tensor()});
    } else {
      if (l.blocks == 0) l.blocks = detail::column_blocks(l.items, numel_of(l.sizes));
      Tensor part = detail::column_partials(l.blocks, l.sizes.back());
      l.ptrs[lg.num_inputs + j] = part.data_ptr();
      l.sums.push_back({lg.num_inputs + j, o, std::move(part)});
    }
    mem_.hold(o);
    slots_[out_slot] = std::move(o);
    return;
  }
  if (const Slot sl = dest_input(grp, j, shape, v->dtype); sl != kNoSlot) {
    o = shaped(*dst_.input[sl], shape);
    claim(sl);
    ++st_.in_place;
  }
  static const std::vector<int> kNone;
  for (int a : e_.opts_.in_place && !o.defined() ? lg.in_place[j] : kNone) {
    const Slot sl = grp.arg_slot[static_cast<size_t>(a)];
    if (e_.overwritable_at_[sl] != at_ || is_claimed_[sl]) continue;
    const Tensor& t = slots_[sl];
    if (!exclusive(t, v->dtype, numel_of(shape))) continue;
    o = shaped(t, shape);
    claim(sl);
    ++st_.in_place;
    break;
  }
  if (!o.defined())
    if (const Tensor* d = free_dest_for(out_slot, v->dtype, shape)) {
      o = shaped(*d, shape);
      ++st_.in_place;
    }
  if (!o.defined()) o = fresh(shape, v->dtype);
  mem_.hold(o);
  l.ptrs[lg.num_inputs + j] = o.data_ptr();
  slots_[out_slot] = std::move(o);
}

// One kernel instance's sizes and argument pointers.
void Executor::Run::prepare_launch(const Group& grp, Launch& l) {
  const detail::LoweredGroup& lg = grp.lowered;
  if (e_.static_shape_.empty()) {
    l.sizes = detail::kernel_sizes(lg, syms_);
    l.items = kir::work_items(lg.kernel, l.sizes.data());
  } else {
    l.sizes.assign(grp.static_sizes.begin(), grp.static_sizes.end());
    l.items = grp.static_items;
  }
  // Eager's rule for amax/amin (a dynamic dim may reach 0 after tracing).
  for (const kir::Reduction& r : lg.kernel.reductions)
    KILN_CHECK(r.op == OpId::sum || l.sizes.back() != 0, "[", r.op == OpId::max ? "amax" : "amin",
               "] cannot reduce over a zero-size dimension (fused kernel ", lg.kernel.name,
               ", run-time sizes ", l.sizes, ")");
  l.ptrs.resize(lg.args.size());
  // Outputs first: the in-place test needs the slots' handle counts untouched.
  for (size_t j = 0; j + lg.num_inputs < lg.args.size(); ++j) kernel_output(grp, l, j);
  for (size_t a = 0; a < lg.num_inputs; ++a) {
    const Tensor& t = slots_[grp.arg_slot[a]];
    if (t.device() != dev_) {  // a CPU scalar (a constant) read by a device kernel
      const bool scalar = t.dim() == 0 && t.device().is_cpu();  // the device's shared copy
      l.keep.push_back(scalar ? device_runtime(dev_, "compile").scalar_operand(t, dev_)
                              : t.to(dev_).contiguous());
      l.ptrs[a] = l.keep.back().data_ptr();
    } else if (t.is_contiguous()) {
      l.ptrs[a] = t.data_ptr();
    } else {
      l.keep.push_back(t.contiguous());
      l.ptrs[a] = l.keep.back().data_ptr();
    }
  }
  st_.nodes_run += grp.nodes;
  ++st_.kernels_run;
}

// Iteration space and bytes read + written (every argument once); on a device
// the span is the launch's queueing, not the kernel's run.
void Executor::Run::profile_launch(const Step& step, profiler::Span& kspan) const {
  const std::span<const Launch> ls(launches_.data(), num_launches_);
  int64_t bytes = 0, items = 0;
  for (size_t i = 0; i < ls.size(); ++i) {
    items += ls[i].items;
    for (Slot sl : e_.groups_[step.groups[i]].arg_slot)
      if (const Tensor& t = slots_[sl]; t.defined())
        bytes += t.numel() * static_cast<int64_t>(dtype_size(t.dtype()));
  }
  kspan.arg("instances", static_cast<int64_t>(ls.size()));
  kspan.arg("work_items", items);
  kspan.arg("sizes", str(ls.front().sizes));
  kspan.set_bytes(bytes);
}

// A step of fused kernels: every instance prepared, then launched together.
void Executor::Run::launch(const Step& step) {
  // Launches keep their vectors' capacity from step to step.
  num_launches_ = step.groups.size();
  if (launches_.size() < num_launches_) launches_.resize(num_launches_);
  const std::span<Launch> ls(launches_.data(), num_launches_);
  for (Launch& l : ls) {
    l.ptrs.clear();
    l.keep.clear();
    l.sums.clear();
    l.items = l.blocks = 0;
  }
  for (Slot sl : claimed_) is_claimed_[sl] = 0;
  claimed_.clear();
  for (size_t i = 0; i < step.groups.size(); ++i) prepare_launch(e_.groups_[step.groups[i]], ls[i]);
  const Group& first = e_.groups_[step.groups.front()];
  profiler::Span kspan("kernel", first.lowered.kernel.name);
  if (kspan.active()) [[unlikely]]
    profile_launch(step, kspan);
  if (first.device_kernel && ls.size() > 1 &&
      std::ranges::all_of(ls, [](const Launch& l) { return l.sums.empty(); })) {
    // On a device: the instances in as few launches as the backend can.
    std::vector<void* const*> ptrs;
    std::vector<const int64_t*> sizes;
    ptrs.reserve(ls.size());
    sizes.reserve(ls.size());
    for (const Launch& l : ls) {
      ptrs.push_back(l.ptrs.data());
      sizes.push_back(l.sizes.data());
    }
    first.device_kernel->launch_batch(ptrs, sizes);
  } else if (first.device_kernel) {
    // One instance, or instances with column sums: a launch each, in order.
    std::vector<DType> sum_dtypes;
    for (const Launch& l : ls) {
      sum_dtypes.clear();
      for (const detail::ColumnPartial& s : l.sums) sum_dtypes.push_back(s.out.dtype());
      first.device_kernel->launch(l.ptrs.data(), l.sizes.data(), sum_dtypes);
    }
  } else if (ls.size() == 1 && !ls[0].sums.empty()) {
    const Launch& l = ls[0];
    detail::launch_with_column_sums(*first.kernel, l.ptrs, l.sizes.data(), l.items, l.blocks,
                                    l.sums);
  } else if (ls.size() == 1) {
    first.kernel->launch(ls[0].ptrs.data(), ls[0].sizes.data());
  } else {
    // One launch over the concatenated work items of every instance.
    const kir::LoadedKernel& kernel = *first.kernel;
    std::vector<int64_t> start(ls.size() + 1, 0);
    int64_t max_inner = 1;
    for (size_t i = 0; i < ls.size(); ++i) {
      start[i + 1] = start[i] + ls[i].items;
      max_inner = std::max(max_inner, ls[i].sizes.back());
    }
    const int64_t grain = kernel.kernel().has_reductions() ? std::max<int64_t>(1, 16384 / max_inner)
                                                           : kDefaultGrain / 2;
    parallel_for(0, start.back(), grain, [&](int64_t b, int64_t e) {
      size_t i =
          static_cast<size_t>(std::upper_bound(start.begin(), start.end(), b) - start.begin()) - 1;
      for (; i < ls.size() && start[i] < e; ++i) {
        const int64_t lo = std::max(b, start[i]) - start[i];
        const int64_t hi = std::min(e, start[i + 1]) - start[i];
        if (lo < hi) kernel(lo, hi, ls[i].ptrs.data(), ls[i].sizes.data());
      }
    });
  }
  ++st_.kernel_launches;
  for (Launch& l : ls) {  // release copies and partials now
    l.keep.clear();
    l.sums.clear();
  }
}

// A step's name in traces: its node's (matmul+bias for an epilogue), or its
// kernel's.
std::string Executor::Run::step_label(const Step& step) const {
  if (step.gemm_epilogue) return step.gemm_relu ? "matmul+bias+relu" : "matmul+bias";
  if (step.node) return step.node->info().name;
  return e_.groups_[step.groups.front()].lowered.kernel.name;
}

std::vector<Tensor> Executor::Run::run() {
  bind_inputs();
  NoGradGuard no_grad;
  UntracedGuard untraced;
  dst_ = e_.destinations(args_);
  for (const Tensor& t : args_.inputs) mem_.exclude(t);
  for (const Tensor* d : dst_.free)
    if (d) mem_.count_view(*d);
  if (!e_.placements_.empty()) hosted_.resize(e_.num_slots_);
  is_claimed_.assign(e_.num_slots_, 0);
  fire(0);
  // Device time per step while a profile records (device_timeline.h).
  const std::unique_ptr<detail::DeviceTimeline> timeline =
      dev_.is_cpu() ? nullptr : detail::device_timeline(dev_);
  for (size_t s = 0; s < e_.steps_.size(); ++s) {
    const Step& step = e_.steps_[s];
    at_ = static_cast<int>(s);
    if (timeline) [[unlikely]]
      timeline->begin();
    if (step.node && step.node->is_constant())
      run_constant(step);
    else if (step.node)
      run_node(step);
    else
      launch(step);
    if (timeline) [[unlikely]]
      timeline->end(step_label(step),
                    step.node ? std::string() : str("\"instances\":", step.groups.size()));
    if (peak_report_ && mem_.current() > peak_.peak_bytes) [[unlikely]]
      e_.note_peak(peak_, s, slots_, mem_.current(),
                   [&](const Tensor& t) { return mem_.counts(t); });
    for (Slot f : step.free_after) {
      mem_.drop(slots_[f]);
      slots_[f] = Tensor();
    }
    fire(s + 1);
  }
  if (timeline) timeline->flush();
  if (args_.stats) {
    st_.peak_bytes = mem_.peak();
    *args_.stats = st_;
  }
  if (peak_report_ && peak_.peak_bytes > 0) {
    peak_.plan = e_.opts_.name;
    profiler::record_peak_report(std::move(peak_));
  }
  std::vector<Tensor> result;
  result.reserve(e_.output_slots_.size());
  for (Slot o : e_.output_slots_) result.push_back(slots_[o]);
  return result;
}

std::vector<Tensor> Executor::run(const RunArgs& args) const {
  if (!opts_.device.is_cpu())  // replayed from a captured device graph (device_graph.h)?
    if (auto r = detail::run_device_graph(device_graph_, opts_.device, *this, args,
                                          [this](const RunArgs& a) { return Run(*this, a).run(); }))
      return std::move(*r);
  return Run(*this, args).run();
}

}  // namespace kiln
