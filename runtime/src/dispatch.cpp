#include "kiln/dispatch.h"

#include <atomic>
#include <cstring>

#include "autograd_internal.h"
#include "dense_dispatch.h"
#include "kiln/autograd.h"
#include "kiln/device_runtime.h"
#include "kiln/profiler.h"
#include "kiln/thread_pool.h"
#include "ops/loops.h"
#include "tensor_storage.h"

namespace kiln {
namespace {
// initial-exec: read on every op, so without a __tls_get_addr call (the
// library is linked, not dlopen'ed; a few bytes of static TLS).
[[gnu::tls_model("initial-exec")]] thread_local Recorder* t_recorder = nullptr;
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
// `moved` holds on that device: the device's shared constant (kernels only
// write their outputs), a copy for a view op (its result would alias it).
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
    moved[i] = info.has(kView) ? t.to(dev) : device_runtime(dev, info.name).scalar_operand(t, dev);
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

// ---- the dense elementwise fast path (dense_dispatch.h) ----
struct DenseRun {
  // Written once while the op table is built (fn last, with release), so a
  // thread that sees fn also sees the rest; null: the general path.
  std::atomic<detail::DenseRunFn> fn{nullptr};
  DType out = DType::f32;
  uint8_t in_size = 0, out_size = 0;  // element sizes in bytes
};
DenseRun g_dense[kNumOps][kNumDTypes];
std::atomic<bool> g_dense_enabled{true};

// t can be read as n consecutive elements: a CPU tensor with data, contiguous
// (Tensor::is_contiguous's rule, inline), not a wrapped number.
inline bool dense_operand(const TensorImpl& t) {
  if (!t.storage || !t.device.is_cpu() || t.wrapped_number) return false;
  int64_t expected = 1;
  for (size_t i = t.shape.size(); i-- > 0;) {
    const int64_t s = t.shape[i];
    if (s == 1) continue;
    if (t.strides[i] != expected) return numel_of(t.shape) == 0;
    expected *= s;
  }
  return true;
}

inline bool same_shape(const Dims& a, const Dims& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}

// Tensor::requires_grad, inline.
inline bool needs_grad(const TensorImpl& t) {
  const AutogradMeta* m = t.autograd.get();
  return m != nullptr && (m->requires_grad || m->grad_fn != nullptr);
}

// A wrapped number (a Scalar operand) that leaves the other operand's dtype
// `d` as the result type: not of a higher category (result_type's rule; a
// wrapped f64 counts as the default float). Its value, converted to d as
// to_dtype_raw converts (copy_run), goes to `buf`.
bool wrapped_scalar_as(const TensorImpl& w, DType d, char* buf) {
  if (!w.wrapped_number || !w.storage || !w.device.is_cpu() || !w.shape.empty()) return false;
  if (dtype_category(w.dtype) > dtype_category(d)) return false;
  const char* src = static_cast<const char*>(w.storage->data) + w.offset * dtype_size(w.dtype);
  auto convert = [&](auto s) {
    using S = decltype(s);
    std::memcpy(&s, src, sizeof(S));
    visit_dtype(d, [&](auto tag) {
      using D = decltype(tag);
      D r;
      if constexpr (std::is_same_v<D, bool>)
        r = static_cast<ops::compute_t<S>>(s) != 0;
      else
        r = static_cast<D>(static_cast<ops::compute_t<S>>(s));
      std::memcpy(buf, &r, sizeof(D));
    });
  };
  switch (w.dtype) {  // scalar_tensor makes f64, i64 or bool
    case DType::f64:
      convert(double{});
      return true;
    case DType::i64:
      convert(int64_t{});
      return true;
    case DType::b8:
      convert(bool{});
      return true;
    default:
      return false;
  }
}

// The call of op on a (and b, unless null) on the fast path into `out` if it
// qualifies (see dense_dispatch.h); false sends it to the general path.
bool dense_call(OpId op, const Tensor& a, const Tensor* b, Tensor& out) {
  const TensorImpl* x = a.impl_ptr().get();
  const TensorImpl* y = b ? b->impl_ptr().get() : x;
  if (x == nullptr || y == nullptr) return false;
  // The dense operand (a Scalar operand may come first: 1.0 - t).
  const TensorImpl* d = x->wrapped_number && b ? y : x;
  const DenseRun& run = g_dense[static_cast<int>(op)][static_cast<int>(d->dtype)];
  const detail::DenseRunFn fn = run.fn.load(std::memory_order_acquire);
  if (fn == nullptr || !dense_operand(*d)) return false;
  int64_t st[3] = {run.out_size, run.in_size, run.in_size};
  alignas(8) char scalar[8];  // a wrapped operand's value in d's dtype
  if (y != x) {
    const TensorImpl* o = d == x ? y : x;  // the other operand
    if (o->wrapped_number) {
      if (!wrapped_scalar_as(*o, d->dtype, scalar)) return false;
      st[d == x ? 2 : 1] = 0;  // broadcast, as map_binary_dense's single element
    } else if (o->dtype != d->dtype || !same_shape(o->shape, d->shape) || !dense_operand(*o)) {
      return false;
    }
  }
  if (t_recorder != nullptr || !g_dense_enabled.load(std::memory_order_relaxed) ||
      profiler::enabled())
    return false;

  const int64_t n = numel_of(d->shape);
  out = detail::cpu_tensor_unchecked(d->shape, run.out, n, run.out_size);
  auto data = [&](const TensorImpl* t, int i) {
    if (st[i] == 0) return scalar;
    return static_cast<char*>(t->storage->data) + t->offset * st[i];
  };
  char* base[3] = {static_cast<char*>(out.impl()->storage->data), data(x, 1), data(y, 2)};
  if (n <= kDefaultGrain) {
    fn(base, st, n);
  } else {
    parallel_for(0, n, kDefaultGrain, [&](int64_t lo, int64_t hi) {
      char* p[3] = {base[0] + lo * st[0], base[1] + lo * st[1], base[2] + lo * st[2]};
      fn(p, st, hi - lo);
    });
  }

  // Autograd as on the general path; the op's entry (and an inputs array)
  // only when an input needs a gradient at all.
  if (needs_grad(*x) || needs_grad(*y)) {
    const OpInfo& info = op_info(op);
    const Tensor in[2] = {a, b ? *b : Tensor()};
    const std::span<const Tensor> inputs(in, b ? 2 : 1);
    bool any = false;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (!info.nondiff_input(i) && needs_grad(*inputs[i].impl_ptr())) any = true;
    if (any && !info.has(kNonDiff) && grad_mode_enabled())
      autograd::record_op(op, inputs, Attrs(), {&out, 1});
  }
  return true;
}

// dense_call for dispatch()'s arguments.
bool dispatch_dense(OpId op, std::span<const Tensor> inputs, const Attrs& attrs, Tensor& out) {
  if (inputs.empty() || inputs.size() > 2 || !attrs.empty()) return false;
  return dense_call(op, inputs[0], inputs.size() == 2 ? &inputs[1] : nullptr, out);
}
}  // namespace

namespace detail {
void register_dense_run(OpId op, DType in, DType out, DenseRunFn fn) {
  DenseRun& r = g_dense[static_cast<int>(op)][static_cast<int>(in)];
  r.out = out;
  r.in_size = static_cast<uint8_t>(dtype_size(in));
  r.out_size = static_cast<uint8_t>(dtype_size(out));
  r.fn.store(fn, std::memory_order_release);
}

bool set_dense_fast_path(bool enabled) {
  return g_dense_enabled.exchange(enabled);
}
}  // namespace detail

std::vector<Tensor> dispatch(OpId op, std::span<const Tensor> inputs, const Attrs& attrs) {
  if (Tensor out; dispatch_dense(op, inputs, attrs, out)) return {std::move(out)};
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
      for (size_t i = 0; i < metas.size(); ++i)  // in backward: maybe a leaf's gradient buffer
        if (!autograd::claim_grad_destination(info, metas[i], dev, outs[i]))
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

namespace {
// dispatch1 past the fast path.
Tensor dispatch1_general(OpId op, std::span<const Tensor> inputs, const Attrs& attrs) {
  auto outs = profiler::enabled() ? dispatch_profiled(op, inputs, attrs)
                                  : dispatch_unprofiled(op, inputs, attrs);
  KILN_ASSERT(outs.size() == 1, op_name(op), " has ", outs.size(), " outputs");
  return std::move(outs[0]);
}
}  // namespace

Tensor dispatch1(OpId op, std::span<const Tensor> inputs, const Attrs& attrs) {
  if (Tensor out; dispatch_dense(op, inputs, attrs, out)) return out;
  return dispatch1_general(op, inputs, attrs);
}

namespace detail {
Tensor dispatch_elementwise(OpId op, const Tensor& a) {
  if (Tensor out; dense_call(op, a, nullptr, out)) return out;
  const Tensor in[1] = {a};
  return dispatch1_general(op, in, Attrs());
}

Tensor dispatch_elementwise(OpId op, const Tensor& a, const Tensor& b) {
  if (Tensor out; dense_call(op, a, &b, out)) return out;
  const Tensor in[2] = {a, b};
  return dispatch1_general(op, in, Attrs());
}
}  // namespace detail

}  // namespace kiln
