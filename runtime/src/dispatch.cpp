#include "kiln/dispatch.h"

#include "autograd_internal.h"
#include "kiln/autograd.h"
#include "kiln/device_runtime.h"
#include "kiln/profiler.h"

namespace kiln {
namespace {
thread_local Recorder* t_recorder = nullptr;
thread_local HostScalarReplay* t_replay = nullptr;
}  // namespace

HostScalarReplay::HostScalarReplay(std::vector<double> values)
    : values_(std::move(values)), prev_(t_replay) {
  t_replay = this;
}

HostScalarReplay::~HostScalarReplay() {
  t_replay = prev_;
}

Recorder* current_recorder() {
  return t_recorder;
}

Recorder* set_recorder(Recorder* r) {
  Recorder* prev = t_recorder;
  t_recorder = r;
  return prev;
}

Tensor Recorder::host_scalar(const std::function<double()>& fn) {
  UntracedGuard g;
  return scalar_tensor(Scalar(fn()));
}

void Recorder::on_grad_change(const Tensor&) {}

Tensor Recorder::on_detach(const Tensor&) {
  return {};
}

void Recorder::add_guard(std::function<std::string()>) {}

void Recorder::host_action(const std::function<void()>& fn) {
  fn();
}

void trace_guard(std::function<std::string()> check) {
  if (Recorder* rec = t_recorder) rec->add_guard(std::move(check));
}

void trace_guard(std::function<bool()> check, std::string what) {
  if (Recorder* rec = t_recorder)
    rec->add_guard([check = std::move(check), what = std::move(what)] {
      return check() ? std::string() : what + " no longer holds";
    });
}

void host_action(const std::function<void()>& fn) {
  if (Recorder* rec = t_recorder) return rec->host_action(fn);
  if (HostScalarReplay* r = t_replay) {  // the compiled call already ran it
    KILN_CHECK(r->pos_ < r->values_.size(), "[host_action] the eager run has more host steps (",
               r->pos_ + 1, ") than the compiled call ran (", r->values_.size(), ")");
    ++r->pos_;
    return;
  }
  fn();
}

Tensor host_scalar(const std::function<double()>& fn) {
  if (Recorder* rec = t_recorder) return rec->host_scalar(fn);
  if (HostScalarReplay* r = t_replay) {
    KILN_CHECK(r->pos_ < r->values_.size(),
               "[host_scalar] the eager run asked for more host "
               "numbers (",
               r->pos_ + 1, ") than the compiled call computed (", r->values_.size(), ")");
    return scalar_tensor(Scalar(r->values_[r->pos_++]));
  }
  return scalar_tensor(Scalar(fn()));
}

namespace {
// Every shape an op produces is addressable (kMaxNumel); the error names the
// op, the result and its inputs' shapes.
void check_result(const OpInfo& info, const Dims& shape, std::span<const Tensor> inputs) {
  try {
    check_shape(shape, info.name, "result shape");
  } catch (const Error& e) {
    std::vector<Dims> in;
    for (const Tensor& t : inputs) in.push_back(t.shape());
    throw Error(str(e.what(), in.empty() ? "" : " (input shapes ", in, in.empty() ? "" : ")"));
  }
}

// The device an op runs on: the CPU unless an input lives elsewhere. All
// inputs must share it, except CPU 0-d tensors (Scalars, like PyTorch), which
// `moved` holds copied to that device.
Device op_device(const OpInfo& info, std::span<const Tensor> inputs, std::vector<Tensor>& moved) {
  Device dev = Device::cpu();
  for (const Tensor& t : inputs)
    if (!t.device().is_cpu()) dev = t.device();
  if (dev.is_cpu()) return dev;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (t.device() == dev) continue;
    KILN_CHECK(t.device().is_cpu() && t.dim() == 0, "[", info.name,
               "] expected all tensors on one device, but input ", i, " is on ", t.device(),
               " and another on ", dev, " (move them with .to(device))");
    if (moved.empty()) moved.assign(inputs.begin(), inputs.end());
    moved[i] = t.to(dev);
  }
  return dev;
}

std::vector<Tensor> dispatch_unprofiled(OpId op, std::span<const Tensor> inputs,
                                        const Attrs& attrs);

// The profiled path: a span named after the op (its inputs' shapes and dtypes
// when asked), kept off dispatch's own body so the fast path has no span.
[[gnu::noinline]] std::vector<Tensor> dispatch_profiled(OpId op, std::span<const Tensor> inputs,
                                                        const Attrs& attrs) {
  profiler::Span span("op", op_info(op).name);
  if (span.active() && profiler::record_shapes()) {
    std::string shapes, dtypes;  // "[4, 16], [16, 8]" and "f32, f32" (no streams: hot when on)
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Tensor& t = inputs[i];
      if (i) shapes += ", ", dtypes += ", ";
      if (!t.defined()) {
        shapes += "undefined", dtypes += "-";
        continue;
      }
      shapes += '[';
      for (size_t d = 0; d < t.shape().size(); ++d) {
        if (d) shapes += ", ";
        shapes += std::to_string(t.shape()[d]);
      }
      shapes += ']';
      dtypes += dtype_name(t.dtype());
    }
    span.arg("shapes", shapes);
    span.arg("dtypes", dtypes);
  }
  return dispatch_unprofiled(op, inputs, attrs);
}
}  // namespace

std::vector<Tensor> dispatch(OpId op, std::span<const Tensor> inputs, const Attrs& attrs) {
  if (profiler::enabled()) [[unlikely]]
    return dispatch_profiled(op, inputs, attrs);
  return dispatch_unprofiled(op, inputs, attrs);
}

namespace {
std::vector<Tensor> dispatch_unprofiled(OpId op, std::span<const Tensor> inputs,
                                        const Attrs& attrs) {
  const OpInfo& info = op_info(op);
  if (info.arity >= 0) {
    KILN_ASSERT(static_cast<int>(inputs.size()) == info.arity, info.name, " expects ", info.arity,
                " inputs, got ", inputs.size());
  }
  for (size_t i = 0; i < inputs.size(); ++i)
    KILN_CHECK(inputs[i].defined(), "[", info.name, "] input ", i, " is an undefined tensor");

  // The result metadata, in a buffer this thread reuses (one heap allocation
  // less per op); a nested dispatch meanwhile finds it taken and makes its own.
  thread_local std::vector<TensorMeta> t_metas;
  std::vector<TensorMeta> metas = std::move(t_metas);
  metas.clear();
  info.infer(inputs, attrs, metas);
  for (const TensorMeta& m : metas) check_result(info, m.shape, inputs);

  std::vector<Tensor> outs;
  if (Recorder* rec = t_recorder) {
    outs = rec->record(op, inputs, attrs, metas);
  } else {
    for (const Tensor& t : inputs)
      KILN_CHECK(!t.is_symbolic(), "[", info.name,
                 "] got a symbolic (traced) tensor outside "
                 "of tracing");
    outs.resize(metas.size());
    std::vector<Tensor> moved;
    const Device dev = op_device(info, inputs, moved);
    const std::span<const Tensor> in = moved.empty() ? inputs : std::span<const Tensor>(moved);
    if (!info.has(kView))
      for (size_t i = 0; i < metas.size(); ++i)
        outs[i] = make_tensor(metas[i].shape, metas[i].dtype, dev);
    t_metas = std::move(metas);
    // View kernels only make aliases (their rare copies go through copy_into,
    // which serves devices too); every other kernel runs where its inputs are.
    if (dev.is_cpu() || info.has(kView))
      info.kernel(in, attrs, outs);
    else
      device_runtime(dev, info.name).run(op, in, attrs, outs);
  }

  if (!info.has(kNonDiff) && grad_mode_enabled()) {
    bool any = false;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (!info.nondiff_input(i) && inputs[i].requires_grad()) any = true;
    if (any) autograd::record_op(op, inputs, attrs, outs);
  }
  return outs;
}
}  // namespace

Tensor dispatch1(OpId op, std::span<const Tensor> inputs, const Attrs& attrs) {
  auto outs = dispatch(op, inputs, attrs);
  KILN_ASSERT(outs.size() == 1, op_name(op), " has ", outs.size(), " outputs");
  return std::move(outs[0]);
}

}  // namespace kiln
