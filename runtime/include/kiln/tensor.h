// kiln::Tensor: a cheap handle (shared_ptr to TensorImpl) to a strided view of
// a Storage, with autograd state. Views share storage and its version counter.
#pragma once

#include <concepts>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <ostream>
#include <source_location>
#include <tuple>
#include <vector>

#include "kiln/allocator.h"
#include "kiln/device.h"
#include "kiln/dims.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/scalar.h"

namespace kiln {

class Tensor;
struct AutogradMeta;
struct Generator;
class Node;

/// Memory block shared by a tensor and all its views.
struct StorageImpl {
  void* data = nullptr;
  size_t nbytes = 0;
  Device device;
  Allocator* allocator = nullptr;      ///< owner of data; null for from_blob
  std::function<void(void*)> deleter;  ///< for from_blob memory, may be empty
  uint32_t version = 0;                ///< bumped by every in-place write

  StorageImpl() = default;
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;
  ~StorageImpl();
};

/// Opaque per-tensor state owned by the tracer (ir/), unknown to the runtime.
struct TraceState {
  virtual ~TraceState() = default;
};

/// The object behind a Tensor handle.
struct TensorImpl {
  std::shared_ptr<StorageImpl> storage;  ///< null for symbolic (traced) tensors
  Dims shape;
  Dims strides;        ///< in elements
  int64_t offset = 0;  ///< in elements
  DType dtype = DType::f32;
  Device device;
  bool wrapped_number = false;  ///< made from a Scalar: does not widen dtypes
  /// Created while a tracer was active (a temporary of the traced function, so
  /// the tracer treats it as a constant, not as captured state).
  bool born_while_tracing = false;
  std::unique_ptr<AutogradMeta> autograd;
  std::shared_ptr<TraceState> trace;  ///< set while tracing

  TensorImpl();
  ~TensorImpl();
  AutogradMeta& autograd_meta();  ///< creates it on first use
};

/// A PyTorch-like tensor handle. Copying the handle shares the tensor.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- metadata ----
  bool defined() const { return impl_ != nullptr; }
  DType dtype() const { return impl()->dtype; }
  Device device() const { return impl()->device; }
  const Dims& shape() const { return impl()->shape; }
  const Dims& strides() const { return impl()->strides; }
  int64_t dim() const { return static_cast<int64_t>(impl()->shape.size()); }
  /// Size of dimension d (negative d counts from the end).
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t offset() const { return impl()->offset; }
  int64_t numel() const { return numel_of(impl()->shape); }
  size_t element_size() const { return dtype_size(dtype()); }
  bool is_contiguous() const;
  /// True while tracing: the tensor has a shape and dtype but no data.
  bool is_symbolic() const { return impl()->storage == nullptr; }
  /// Counter bumped by every in-place write to this tensor's storage.
  uint32_t version() const;
  /// True if both handles refer to the same TensorImpl.
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  // ---- data access (raise while tracing) ----
  /// Pointer to the first element. Raises kiln::Error on a symbolic tensor.
  void* data_ptr(std::source_location loc = std::source_location::current()) const;
  template <typename T>
  T* data(std::source_location loc = std::source_location::current()) const {
    KILN_CHECK(dtype() == dtype_v<T>, "[data] tensor has dtype ", dtype(), ", asked for ",
               dtype_v<T>);
    return static_cast<T*>(data_ptr(loc));
  }
  /// The single element of a one-element tensor, converted to T.
  template <typename T>
  T item(std::source_location loc = std::source_location::current()) const;
  /// All elements in row-major order, converted to T.
  template <typename T>
  std::vector<T> to_vector(std::source_location loc = std::source_location::current()) const;

  // ---- autograd ----
  bool requires_grad() const;
  /// Marks a leaf as needing a gradient (PyTorch's requires_grad_).
  Tensor& requires_grad_(bool r = true);
  /// Accumulated gradient of a leaf (undefined until backward reaches it).
  Tensor grad() const;
  void set_grad(const Tensor& g) const;
  /// Node that produced this tensor (null for leaves and non-differentiable results).
  std::shared_ptr<Node> grad_fn() const;
  bool is_leaf() const;
  /// Computes gradients of this tensor w.r.t. graph leaves (see autograd.h).
  void backward(const Tensor& gradient = {}, bool retain_graph = false,
                bool create_graph = false) const;
  /// A new tensor sharing storage, cut from the autograd graph.
  Tensor detach() const;
  /// Makes a non-leaf keep its .grad during backward.
  void retain_grad() const;
  /// Runs `hook(grad)` when this tensor's gradient is computed; a returned
  /// defined tensor replaces the gradient.
  void register_hook(std::function<Tensor(const Tensor&)> hook) const;
  /// For leaves: runs `hook(*this)` after the gradient was accumulated into .grad.
  /// A compiled step calls it when it writes the real gradient back. A `traceable`
  /// hook instead also runs while tracing, recording its ops into the graph
  /// (DDP's all-reduce nodes), and compiled runs do not call it again.
  void register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook,
                                          bool traceable = false) const;

  // ---- conversion and copying ----
  Tensor to(DType t) const;
  /// A copy on device `d` (this tensor when already there); differentiable,
  /// the gradient moving back. `non_blocking` (PyTorch's): pinned memory to a
  /// device, or a device to new pinned host memory (valid once the current
  /// stream is synchronized, or an event recorded after is waited for).
  Tensor to(Device d, bool non_blocking = false) const;
  /// A copy of this CPU tensor in page-locked (pinned) host memory, which CUDA
  /// copies read asynchronously; this tensor if already pinned.
  Tensor pin_memory() const;
  /// Whether this tensor's memory is pinned (pin_memory).
  bool is_pinned() const;
  /// to(Device::cpu()) and to(Device::cuda(index)).
  Tensor cpu() const;
  Tensor cuda(int index = 0) const;
  Tensor clone() const;
  Tensor contiguous() const;
  /// Copies src (broadcast, cast) into this tensor in place.
  Tensor& copy_(const Tensor& src);

  // ---- views ----
  Tensor view(const Dims& shape) const;
  Tensor reshape(const Dims& shape) const;
  Tensor permute(const Dims& dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;  ///< transpose of a 2-D tensor
  Tensor expand(const Dims& shape) const;
  /// Python's x[start:end:step] along dim (libtorch's defaults: to the end).
  Tensor slice(int64_t dim, int64_t start = 0, int64_t end = std::numeric_limits<int64_t>::max(),
               int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor operator[](int64_t index) const { return select(0, index); }

  // ---- in-place (bump the version counter) ----
  Tensor& add_(const Tensor& o, const Scalar& alpha = 1);
  Tensor& sub_(const Tensor& o, const Scalar& alpha = 1);
  Tensor& mul_(const Tensor& o);
  Tensor& div_(const Tensor& o);
  Tensor& add_(const Scalar& s);
  Tensor& sub_(const Scalar& s);
  Tensor& mul_(const Scalar& s);
  Tensor& div_(const Scalar& s);
  Tensor& zero_();
  Tensor& fill_(const Scalar& v);
  Tensor& clamp_(const Scalar& lo, const Scalar& hi);

  // ---- methods: the free functions of functional.h that PyTorch also offers
  // as Tensor methods, with its argument order and defaults ----
  // unary
  Tensor neg() const;
  Tensor abs() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor log1p() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor erf() const;
  Tensor sign() const;
  Tensor logical_not() const;
  Tensor square() const;
  Tensor reciprocal() const;
  Tensor isnan() const;
  Tensor isinf() const;
  Tensor isfinite() const;
  Tensor nan_to_num(std::optional<double> nan = 0.0, std::optional<double> posinf = std::nullopt,
                    std::optional<double> neginf = std::nullopt) const;
  // binary (broadcasting, promoting)
  Tensor add(const Tensor& o, const Scalar& alpha = 1) const;
  Tensor add(const Scalar& o) const;
  Tensor sub(const Tensor& o, const Scalar& alpha = 1) const;
  Tensor sub(const Scalar& o) const;
  Tensor mul(const Tensor& o) const;
  Tensor mul(const Scalar& o) const;
  Tensor div(const Tensor& o) const;
  Tensor div(const Scalar& o) const;
  Tensor pow(const Tensor& e) const;
  Tensor pow(const Scalar& e) const;
  Tensor maximum(const Tensor& o) const;
  Tensor minimum(const Tensor& o) const;
  Tensor eq(const Tensor& o) const;
  Tensor eq(const Scalar& o) const;
  Tensor ne(const Tensor& o) const;
  Tensor ne(const Scalar& o) const;
  Tensor lt(const Tensor& o) const;
  Tensor lt(const Scalar& o) const;
  Tensor le(const Tensor& o) const;
  Tensor le(const Scalar& o) const;
  Tensor gt(const Tensor& o) const;
  Tensor gt(const Scalar& o) const;
  Tensor ge(const Tensor& o) const;
  Tensor ge(const Scalar& o) const;
  Tensor logical_and(const Tensor& o) const;
  Tensor logical_or(const Tensor& o) const;
  /// condition ? *this : other (torch.Tensor.where).
  Tensor where(const Tensor& condition, const Tensor& other) const;
  Tensor where(const Tensor& condition, const Scalar& other) const;
  Tensor masked_fill(const Tensor& mask, const Scalar& value) const;
  Tensor clamp(const Scalar& lo, const Scalar& hi) const;
  Tensor clamp(const Tensor& lo, const Tensor& hi) const;
  Tensor clamp_min(const Scalar& lo) const;
  Tensor clamp_min(const Tensor& lo) const;
  Tensor clamp_max(const Scalar& hi) const;
  Tensor clamp_max(const Tensor& hi) const;
  Tensor clip(const Scalar& lo, const Scalar& hi) const;
  Tensor clip(const Tensor& lo, const Tensor& hi) const;
  // reductions (empty dims: all dims)
  Tensor sum(const Dims& dims = {}, bool keepdim = false) const;
  Tensor mean(const Dims& dims = {}, bool keepdim = false) const;
  Tensor amax(const Dims& dims = {}, bool keepdim = false) const;
  Tensor amin(const Dims& dims = {}, bool keepdim = false) const;
  /// The largest element (0-d).
  Tensor max() const;
  /// (values, i64 indices) of the maxima along dim (torch.max(x, dim)).
  std::tuple<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;
  /// Elementwise maximum (torch.max(x, other)).
  Tensor max(const Tensor& other) const;
  Tensor min() const;
  std::tuple<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;
  Tensor min(const Tensor& other) const;
  Tensor argmax(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor argmin(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor var(const Dims& dims = {}, int64_t correction = 1, bool keepdim = false) const;
  Tensor std(const Dims& dims = {}, int64_t correction = 1, bool keepdim = false) const;
  /// PyTorch's `unbiased` spelling (only a bool selects it; an integer is a correction).
  template <std::same_as<bool> B>
  Tensor var(const Dims& dims, B unbiased, bool keepdim = false) const {
    return var(dims, int64_t{unbiased ? 1 : 0}, keepdim);
  }
  template <std::same_as<bool> B>
  Tensor var(B unbiased) const {
    return var(Dims{}, int64_t{unbiased ? 1 : 0}, false);
  }
  template <std::same_as<bool> B>
  Tensor std(const Dims& dims, B unbiased, bool keepdim = false) const {
    return std(dims, int64_t{unbiased ? 1 : 0}, keepdim);
  }
  template <std::same_as<bool> B>
  Tensor std(B unbiased) const {
    return std(Dims{}, int64_t{unbiased ? 1 : 0}, false);
  }
  Tensor logsumexp(const Dims& dims, bool keepdim = false) const;
  /// One-dim spellings (x.sum(1), x.amax(-1, true), x.var(0)); braced lists
  /// such as x.sum({0, 1}) still take the Dims overloads.
  template <std::integral I>
  requires(!std::same_as<I, bool>) Tensor sum(I dim, bool keepdim = false)
  const { return sum(Dims{static_cast<int64_t>(dim)}, keepdim); }
  template <std::integral I>
  requires(!std::same_as<I, bool>) Tensor mean(I dim, bool keepdim = false)
  const { return mean(Dims{static_cast<int64_t>(dim)}, keepdim); }
  template <std::integral I>
  requires(!std::same_as<I, bool>) Tensor amax(I dim, bool keepdim = false)
  const { return amax(Dims{static_cast<int64_t>(dim)}, keepdim); }
  template <std::integral I>
  requires(!std::same_as<I, bool>) Tensor amin(I dim, bool keepdim = false)
  const { return amin(Dims{static_cast<int64_t>(dim)}, keepdim); }
  template <std::integral I>
  requires(!std::same_as<I, bool>) Tensor logsumexp(I dim, bool keepdim = false)
  const { return logsumexp(Dims{static_cast<int64_t>(dim)}, keepdim); }
  template <std::integral I>
  requires(!std::same_as<I, bool>) Tensor var(I dim, int64_t correction = 1, bool keepdim = false)
  const { return var(Dims{static_cast<int64_t>(dim)}, correction, keepdim); }
  template <std::integral I>
  requires(!std::same_as<I, bool>) Tensor std(I dim, int64_t correction = 1, bool keepdim = false)
  const { return std(Dims{static_cast<int64_t>(dim)}, correction, keepdim); }
  Tensor norm(double p = 2.0, const Dims& dims = {}, bool keepdim = false) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  // scans, ordering, sampling
  Tensor cumsum(int64_t dim) const;
  Tensor cumprod(int64_t dim) const;
  std::tuple<Tensor, Tensor> sort(int64_t dim = -1, bool descending = false,
                                  bool stable = false) const;
  Tensor argsort(int64_t dim = -1, bool descending = false, bool stable = false) const;
  std::tuple<Tensor, Tensor> topk(int64_t k, int64_t dim = -1, bool largest = true,
                                  bool sorted = true) const;
  Tensor multinomial(int64_t num_samples, bool replacement = false,
                     Generator* generator = nullptr) const;
  // linear algebra
  Tensor matmul(const Tensor& o) const;
  Tensor bmm(const Tensor& o) const;
  Tensor baddbmm(const Tensor& batch1, const Tensor& batch2, const Scalar& beta = 1,
                 const Scalar& alpha = 1) const;
  Tensor outer(const Tensor& o) const;
  // indexing and movement (copies)
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor masked_select(const Tensor& mask) const;
  Tensor nonzero() const;
  Tensor tril(int64_t diagonal = 0) const;
  Tensor triu(int64_t diagonal = 0) const;
  Tensor repeat(const Dims& repeats) const;
  Tensor tile(const Dims& reps) const;
  Tensor roll(const Dims& shifts, const Dims& dims = {}) const;
  Tensor flip(const Dims& dims) const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> split(const Dims& split_sizes, int64_t dim = 0) const;
  std::vector<Tensor> split_with_sizes(const Dims& split_sizes, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  std::vector<Tensor> unbind(int64_t dim = 0) const;
  Tensor expand_as(const Tensor& other) const;
  Tensor reshape_as(const Tensor& other) const;
  Tensor view_as(const Tensor& other) const;
  /// This tensor converted to other's dtype.
  Tensor type_as(const Tensor& other) const;
  /// In-place masked_fill (bumps the version counter).
  Tensor& masked_fill_(const Tensor& mask, const Scalar& value);
  // indexing by tensors (libtorch's spelling; see kiln::index / index_put)
  /// x[mask] (bool: eager only) or x[idx] (integer, along dim 0).
  Tensor index(const std::vector<Tensor>& indices) const;
  Tensor operator[](const Tensor& index) const;
  Tensor index_put(const std::vector<Tensor>& indices, const Tensor& values) const;
  Tensor index_put(const std::vector<Tensor>& indices, const Scalar& value) const;
  /// x[mask] = values in place (PyTorch's x[mask] = v; bumps the version counter).
  Tensor& index_put_(const std::vector<Tensor>& indices, const Tensor& values);
  Tensor& index_put_(const std::vector<Tensor>& indices, const Scalar& value);
  // comparisons of whole tensors
  Tensor isclose(const Tensor& other, double rtol = 1e-5, double atol = 1e-8,
                 bool equal_nan = false) const;
  bool allclose(const Tensor& other, double rtol = 1e-5, double atol = 1e-8,
                bool equal_nan = false) const;
  bool equal(const Tensor& other) const;

  TensorImpl* impl() const {
    KILN_CHECK(impl_ != nullptr, "[tensor] operation on an undefined tensor");
    return impl_.get();
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

/// Prints like PyTorch: tensor([[1., 2.], [3., 4.]], dtype=f64, requires_grad=true).
std::ostream& operator<<(std::ostream& os, const Tensor& t);

/// Creates a contiguous, uninitialised CPU tensor (the allocation primitive).
Tensor make_tensor(const Dims& shape, DType dtype, Device device = Device::cpu());
/// Creates a view of t's storage with the given geometry (internal; no autograd).
Tensor as_strided(const Tensor& t, const Dims& shape, const Dims& strides, int64_t offset);
/// Strides that view a (shape, strides) layout as new_shape without copying, in
/// `out`; false when only a copy can (reshape's rule).
bool view_strides(const Dims& shape, const Dims& strides, const Dims& new_shape, Dims& out);
/// Tensor from a Scalar as a 0-d "wrapped number" (f64, i64 or bool).
Tensor scalar_tensor(const Scalar& s);
/// Tensor from a Scalar as a 0-d tensor of the given dtype (not wrapped);
/// kiln::Error naming `op` if the value does not fit it (check_scalar_fits).
Tensor scalar_tensor(const Scalar& s, DType dtype, const char* op = "scalar_tensor");
/// kiln::Error "[op] value v cannot be converted to dt without overflow" unless
/// s fits dt: integers in range (floats truncate; NaN/inf refused), floats
/// within the dtype's finite range (inf and NaN pass), as PyTorch checks.
void check_scalar_fits(const Scalar& s, DType dt, const char* op);

/// Reads element i (row-major over t's shape) converted to double (helper for tests/printing).
double element_as_double(const Tensor& t, int64_t i);

extern template float Tensor::item<float>(std::source_location) const;
extern template double Tensor::item<double>(std::source_location) const;
extern template int64_t Tensor::item<int64_t>(std::source_location) const;
extern template int32_t Tensor::item<int32_t>(std::source_location) const;
extern template uint8_t Tensor::item<uint8_t>(std::source_location) const;
extern template bool Tensor::item<bool>(std::source_location) const;
extern template std::vector<float> Tensor::to_vector<float>(std::source_location) const;
extern template std::vector<double> Tensor::to_vector<double>(std::source_location) const;
extern template std::vector<int64_t> Tensor::to_vector<int64_t>(std::source_location) const;
extern template std::vector<int32_t> Tensor::to_vector<int32_t>(std::source_location) const;
extern template std::vector<uint8_t> Tensor::to_vector<uint8_t>(std::source_location) const;
extern template std::vector<bool> Tensor::to_vector<bool>(std::source_location) const;

}  // namespace kiln
