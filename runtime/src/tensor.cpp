#include "kiln/tensor.h"

#include <cstring>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#include "kiln/autograd.h"
#include "kiln/device_runtime.h"
#include "kiln/dispatch.h"
#include "kiln/functional.h"
#include "tensor_storage.h"

namespace kiln {

// ---- the per-thread block cache (tensor_storage.h) ----
namespace {
// Sizes up to kPoolClasses * 64 bytes, in 64-byte classes; at most
// kPoolDepth blocks per class and thread.
constexpr size_t kPoolClasses = 8;
constexpr uint32_t kPoolDepth = 64;
struct FreeBlock {
  FreeBlock* next;
};
// Plain data, so the hot path reads it without a thread_local guard; the
// reaper (constructed when the first block is cached) empties it at thread exit.
struct BlockPool {
  FreeBlock* head[kPoolClasses];
  uint32_t count[kPoolClasses];
  uint8_t state;  // 0: no reaper yet, 1: caching, 2: torn down
};
// initial-exec: no __tls_get_addr call per block (as t_recorder in dispatch.cpp).
[[gnu::tls_model("initial-exec")]] constinit thread_local BlockPool t_pool{};
#if defined(__SANITIZE_ADDRESS__)
// Cleared first: stale pointers in a cached block would hide a leaked object
// they pointed to from LeakSanitizer (the cache is reachable from the thread).
void poison(void* p, size_t n) {
  std::memset(p, 0, n);
  ASAN_POISON_MEMORY_REGION(p, n);
}
void unpoison(void* p, size_t n) {
  ASAN_UNPOISON_MEMORY_REGION(p, n);
}
#else
void poison(void*, size_t) {}
void unpoison(void*, size_t) {}
#endif
struct PoolReaper {
  bool armed = false;
  ~PoolReaper() {
    t_pool.state = 2;
    for (size_t c = 0; c < kPoolClasses; ++c)
      while (FreeBlock* b = t_pool.head[c]) {
        t_pool.head[c] = b->next;
        unpoison(b, (c + 1) * 64);
        ::operator delete(b);
      }
  }
};
thread_local PoolReaper t_reaper;
}  // namespace

namespace detail {
void* pool_allocate(size_t n) {
  const size_t c = (n - 1) / 64;
  if (c >= kPoolClasses) return ::operator new(n);
  BlockPool& pool = t_pool;
  if (FreeBlock* b = pool.head[c]) {
    pool.head[c] = b->next;
    --pool.count[c];
    unpoison(b, (c + 1) * 64);
    return b;
  }
  return ::operator new((c + 1) * 64);
}

void pool_free(void* p, size_t n) {
  const size_t c = (n - 1) / 64;
  BlockPool& pool = t_pool;
  if (c >= kPoolClasses || pool.state == 2 || pool.count[c] >= kPoolDepth) {
    ::operator delete(p);
    return;
  }
  if (pool.state == 0) {
    t_reaper.armed = true;  // constructs this thread's reaper
    pool.state = 1;
  }
  auto* b = static_cast<FreeBlock*>(p);
  b->next = pool.head[c];
  pool.head[c] = b;
  ++pool.count[c];
  // Under ASan a cached block is poisoned past its link: a use after free of
  // a TensorImpl or StorageImpl is still reported.
  poison(b + 1, (c + 1) * 64 - sizeof(FreeBlock));
}
}  // namespace detail

StorageImpl::~StorageImpl() {
  if (allocator)
    allocator->deallocate(data, nbytes);
  else if (deleter)
    deleter(data);
}

TensorImpl::TensorImpl() : born_while_tracing(current_recorder() != nullptr) {}
TensorImpl::~TensorImpl() = default;

AutogradMeta& TensorImpl::autograd_meta() {
  if (!autograd) autograd = std::make_unique<AutogradMeta>();
  return *autograd;
}

int64_t Tensor::size(int64_t d) const {
  return shape()[wrap_dim(d, dim(), "size")];
}
int64_t Tensor::stride(int64_t d) const {
  return strides()[wrap_dim(d, dim(), "stride")];
}

bool Tensor::is_contiguous() const {
  const auto& sh = shape();
  const auto& st = strides();
  if (numel_of(sh) == 0) return true;  // no element to be out of order (as in PyTorch)
  int64_t expected = 1;
  for (size_t i = sh.size(); i-- > 0;) {
    if (sh[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= sh[i];
  }
  return true;
}

uint32_t Tensor::version() const {
  auto* s = impl()->storage.get();
  return s ? s->version : 0;
}

void* Tensor::data_ptr(std::source_location loc) const {
  TensorImpl* i = impl();
  if (!i->storage) {
    if (Recorder* r = current_recorder()) r->on_value_read("data_ptr", loc);
    throw Error(str("[data_ptr] tensor has no data (it is symbolic: created while tracing)"));
  }
  return static_cast<char*>(i->storage->data) + i->offset * static_cast<int64_t>(element_size());
}

namespace {
// Byte offset (from the tensor's first element) of row-major element i.
int64_t strided_offset(const Tensor& t, int64_t i) {
  const auto& sh = t.shape();
  const auto& st = t.strides();
  int64_t off = 0;
  for (size_t d = sh.size(); d-- > 0;) {
    int64_t idx = i % sh[d];
    i /= sh[d];
    off += idx * st[d];
  }
  return off;
}

template <typename T>
T read_as(const Tensor& t, const char* base, int64_t i) {
  return visit_dtype(t.dtype(), [&](auto tag) -> T {
    using S = decltype(tag);
    S v;
    std::memcpy(&v, base + strided_offset(t, i) * static_cast<int64_t>(sizeof(S)), sizeof(S));
    if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>) {
      return static_cast<T>(static_cast<float>(v));
    } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      return T(static_cast<float>(v));
    } else {
      return static_cast<T>(v);
    }
  });
}
}  // namespace

double element_as_double(const Tensor& t, int64_t i) {
  // A device tensor's element through the host (its memory is not the host's).
  if (!t.device().is_cpu()) return element_as_double(t.detach().cpu(), i);
  return read_as<double>(t, static_cast<const char*>(t.data_ptr()), i);
}

template <typename T>
T Tensor::item(std::source_location loc) const {
  if (is_symbolic()) {
    if (Recorder* r = current_recorder()) r->on_value_read("item", loc);
    throw Error("[item] tensor has no data (it is symbolic: created while tracing)");
  }
  KILN_CHECK(numel() == 1, "[item] a tensor with ", numel(), " elements (shape ", shape(),
             ") cannot be converted to a scalar");
  if (!device().is_cpu())
    return detach().cpu().item<T>(loc);  // reading a value is not differentiable
  return read_as<T>(*this, static_cast<const char*>(data_ptr(loc)), 0);
}

template <typename T>
std::vector<T> Tensor::to_vector(std::source_location loc) const {
  if (is_symbolic()) {
    if (Recorder* r = current_recorder()) r->on_value_read("to_vector", loc);
    throw Error("[to_vector] tensor has no data (it is symbolic: created while tracing)");
  }
  if (!device().is_cpu()) return detach().cpu().to_vector<T>(loc);
  int64_t n = numel();
  std::vector<T> out(static_cast<size_t>(n));
  if (n == 0) return out;
  const char* base = static_cast<const char*>(data_ptr(loc));
  if constexpr (!std::is_same_v<T, bool>) {
    if (dtype() == dtype_v<T> && is_contiguous()) {
      std::memcpy(static_cast<void*>(out.data()), base, static_cast<size_t>(n) * sizeof(T));
      return out;
    }
  }
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = read_as<T>(*this, base, i);
  return out;
}

#define KILN_INST(T)                                      \
  template T Tensor::item<T>(std::source_location) const; \
  template std::vector<T> Tensor::to_vector<T>(std::source_location) const;
KILN_INST(float)
KILN_INST(double)
KILN_INST(int64_t)
KILN_INST(int32_t)
KILN_INST(uint8_t)
KILN_INST(bool)
#undef KILN_INST

void check_shape(const Dims& shape, const char* op, const char* what) {
  int64_t n = 1;  // product of the dims so far, zero-size dims counted as 1
  for (int64_t s : shape) {
    KILN_CHECK(s >= 0, "[", op, "] negative dimension ", s, " in ", what, " ", shape);
    KILN_CHECK(s <= kMaxNumel / n, "[", op, "] ", what, " ", shape,
               " is too large: kiln addresses at most 2^60 elements per tensor");
    n *= std::max<int64_t>(s, 1);
  }
}

Tensor make_tensor(const Dims& shape, DType dtype, Device device) {
  check_shape(shape, "empty");
  Allocator& a =
      device.is_cpu() ? cpu_allocator() : device_runtime(device, "empty").allocator(device.index);
  const size_t nbytes = static_cast<size_t>(numel_of(shape)) * dtype_size(dtype);
  return detail::tensor_over(detail::allocate_storage(nbytes, a, device), shape, dtype);
}

Tensor as_strided(const Tensor& t, const Dims& shape, const Dims& strides, int64_t offset) {
  KILN_ASSERT(shape.size() == strides.size(), "as_strided rank mismatch");
  auto impl = detail::new_impl();
  impl->storage = t.impl()->storage;
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = t.dtype();
  impl->device = t.device();
  return Tensor(std::move(impl));
}

Tensor scalar_tensor(const Scalar& s, DType dtype, const char* op) {
  check_scalar_fits(s, dtype, op);
  Tensor t = make_tensor({}, dtype);
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T v;
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
      v = T(static_cast<float>(s.to_double()));
    else
      v = s.to<T>();
    std::memcpy(t.data_ptr(), &v, sizeof(T));
  });
  return t;
}

Tensor scalar_tensor(const Scalar& s) {
  Tensor t = scalar_tensor(s, s.kind());
  t.impl()->wrapped_number = true;
  return t;
}

// ---------------- autograd accessors ----------------
bool Tensor::requires_grad() const {
  auto* m = impl()->autograd.get();
  return m && (m->requires_grad || m->grad_fn);
}

Tensor& Tensor::requires_grad_(bool r) {
  KILN_CHECK(is_leaf() || r, "[requires_grad_] only leaf tensors can be set to not require grad");
  KILN_CHECK(!r || is_floating(dtype()),
             "[requires_grad_] only floating tensors can require "
             "gradients, got ",
             dtype());
  if (!r && !impl()->autograd) return *this;
  impl()->autograd_meta().requires_grad = r;
  return *this;
}

Tensor Tensor::grad() const {
  auto* m = impl()->autograd.get();
  return m ? m->grad : Tensor();
}

void Tensor::set_grad(const Tensor& g) const {
  if (Recorder* r = current_recorder()) r->on_grad_change(*this);
  if (g.defined())
    KILN_CHECK(g.shape() == shape(), "[set_grad] gradient shape ", g.shape(),
               " does not match tensor shape ", shape());
  impl()->autograd_meta().grad = g;
}

std::shared_ptr<Node> Tensor::grad_fn() const {
  auto* m = impl()->autograd.get();
  return m ? m->grad_fn : nullptr;
}

bool Tensor::is_leaf() const {
  return grad_fn() == nullptr;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  kiln::backward({*this}, {gradient}, retain_graph, create_graph);
}

Tensor Tensor::detach() const {
  if (Recorder* r = current_recorder(); r && !is_symbolic()) {
    Tensor t = r->on_detach(*this);
    if (t.defined()) return t;
  }
  auto impl = detail::new_impl();
  const TensorImpl* s = this->impl();
  impl->storage = s->storage;
  impl->shape = s->shape;
  impl->strides = s->strides;
  impl->offset = s->offset;
  impl->dtype = s->dtype;
  impl->device = s->device;
  impl->trace = s->trace;
  return Tensor(std::move(impl));
}

void Tensor::retain_grad() const {
  KILN_CHECK(requires_grad(), "[retain_grad] called on a tensor that does not require grad");
  auto fn = grad_fn();
  if (!fn) return;  // leaves keep .grad anyway
  fn->retained.emplace_back(impl()->autograd->output_nr, impl_ptr());
}

void Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  KILN_CHECK(requires_grad(),
             "[register_hook] cannot register a hook on a tensor that does not "
             "require grad");
  auto fn = grad_fn();
  if (fn)
    fn->pre_hooks.emplace_back(impl()->autograd->output_nr, std::move(hook));
  else
    impl()->autograd_meta().leaf_hooks.push_back(std::move(hook));
}

void Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook,
                                                bool traceable) const {
  KILN_CHECK(is_leaf() && requires_grad(),
             "[register_post_accumulate_grad_hook] only leaf "
             "tensors that require grad accept post-accumulate-grad hooks");
  AutogradMeta& m = impl()->autograd_meta();
  (traceable ? m.traceable_post_accumulate_hooks : m.post_accumulate_hooks)
      .push_back(std::move(hook));
}

}  // namespace kiln
