// Tensor's member functions: views, conversions and in-place ops, forwarded
// to the free functions (so everything still passes through dispatch).
#include "autograd_internal.h"
#include "kiln/device_runtime.h"
#include "kiln/functional.h"
#include "ops/helpers.h"
#include "tensor_storage.h"

namespace kiln {

Tensor Tensor::to(DType t) const {
  return cast(*this, t);
}

namespace {

// An uninitialized contiguous CPU tensor in memory from `pinned` (a device
// runtime's page-locked allocator).
Tensor pinned_empty(const Dims& shape, DType dtype, Allocator& pinned) {
  const size_t nbytes = static_cast<size_t>(numel_of(shape)) * dtype_size(dtype);
  return detail::tensor_over(detail::allocate_storage(nbytes, pinned, Device::cpu()), shape, dtype);
}

}  // namespace

Tensor Tensor::to(Device d, bool non_blocking) const {
  if (device() == d) return *this;
  KILN_CHECK(!is_symbolic(), "[to] moving a traced tensor from ", device(), " to ", d,
             " is not supported inside kiln::compile");
  // Asynchronous between the host and a device; to the host into pinned
  // memory, which the device writes while the host goes on (PyTorch's rule).
  const bool async = non_blocking && numel() > 0 && (device().is_cpu() || d.is_cpu());
  DeviceRuntime* rt = async ? &device_runtime(device().is_cpu() ? d : device(), "to") : nullptr;
  Allocator* pinned = async && d.is_cpu() ? rt->pinned_allocator() : nullptr;
  Tensor out = pinned ? pinned_empty(shape(), dtype(), *pinned) : make_tensor(shape(), dtype(), d);
  if (async)
    rt->copy_non_blocking(out, *this);
  else
    ops::copy_into(out, *this);
  if (!(grad_mode_enabled() && requires_grad())) return out;
  // Differentiable like PyTorch's: the gradient moves back to this device.
  const Device from = device();
  return attach_function("ToDeviceBackward", {*this}, {out}, [from](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].defined() ? g[0].to(from) : Tensor()};
  })[0];
}
Tensor Tensor::pin_memory() const {
  KILN_CHECK(defined() && !is_symbolic(), "[pin_memory] needs a tensor with memory");
  KILN_CHECK(device().is_cpu(), "[pin_memory] only CPU tensors can be pinned, got one on ",
             device());
  if (is_pinned()) return *this;
  Allocator* a = device_runtime(Device::cuda(), "pin_memory").pinned_allocator();
  KILN_CHECK(a != nullptr, "[pin_memory] the CUDA backend has no pinned memory");
  Tensor out = pinned_empty(shape(), dtype(), *a);
  ops::copy_into(out, *this);
  return out;
}
bool Tensor::is_pinned() const {
  return defined() && !is_symbolic() && is_pinned_allocator(impl()->storage->allocator);
}
Tensor Tensor::cpu() const {
  return to(Device::cpu());
}
Tensor Tensor::cuda(int index) const {
  return to(Device::cuda(index));
}
Tensor Tensor::clone() const {
  return copy(*this);
}
Tensor Tensor::contiguous() const {
  return is_contiguous() ? *this : copy(*this);
}

Tensor& Tensor::copy_(const Tensor& src) {
  KILN_CHECK(src.defined(), "[copy_] source is an undefined tensor");
  broadcast_shapes(src.shape(), shape(), "copy_");
  Tensor v = kiln::expand(cast(src, dtype()), shape());
  autograd::commit_inplace(*this, v, "copy_");
  return *this;
}

Tensor Tensor::view(const Dims& s) const {
  Tensor r = kiln::reshape(*this, s);
  if (!is_symbolic())
    KILN_CHECK(numel() == 0 || r.impl()->storage == impl()->storage, "[view] shape ", s,
               " is not compatible with the input's shape ", shape(), " and strides ", strides(),
               "; use reshape (which copies) instead");
  return r;
}
Tensor Tensor::reshape(const Dims& s) const {
  return kiln::reshape(*this, s);
}
Tensor Tensor::permute(const Dims& d) const {
  return kiln::permute(*this, d);
}
Tensor Tensor::transpose(int64_t a, int64_t b) const {
  return kiln::transpose(*this, a, b);
}
Tensor Tensor::t() const {
  KILN_CHECK(dim() <= 2, "[t] expects a tensor of rank <= 2, got shape ", shape());
  return dim() < 2 ? *this : kiln::transpose(*this, 0, 1);
}
Tensor Tensor::expand(const Dims& s) const {
  return kiln::expand(*this, s);
}
Tensor Tensor::slice(int64_t d, int64_t s, int64_t e, int64_t st) const {
  return kiln::slice(*this, d, s, e, st);
}
Tensor Tensor::narrow(int64_t d, int64_t s, int64_t l) const {
  return kiln::narrow(*this, d, s, l);
}
Tensor Tensor::select(int64_t d, int64_t i) const {
  return kiln::select(*this, d, i);
}
Tensor Tensor::squeeze() const {
  return kiln::squeeze(*this);
}
Tensor Tensor::squeeze(int64_t d) const {
  return kiln::squeeze(*this, d);
}
Tensor Tensor::unsqueeze(int64_t d) const {
  return kiln::unsqueeze(*this, d);
}
Tensor Tensor::flatten(int64_t s, int64_t e) const {
  return kiln::flatten(*this, s, e);
}

namespace {
Tensor& commit(Tensor& self, const Tensor& r, const char* op) {
  autograd::commit_inplace(self, r, op);
  return self;
}
// In-place results keep self's dtype; PyTorch refuses to narrow float to int.
void check_inplace_dtype(const Tensor& self, const Tensor& r, const char* op) {
  KILN_CHECK(dtype_category(r.dtype()) <= dtype_category(self.dtype()), "[", op, "] result dtype ",
             r.dtype(), " cannot be cast to the in-place output dtype ", self.dtype());
}
Tensor& inplace(Tensor& self, const Tensor& r, const char* op) {
  check_inplace_dtype(self, r, op);
  return commit(self, r, op);
}
}  // namespace

Tensor& Tensor::add_(const Tensor& o, const Scalar& alpha) {
  Tensor r = (alpha.to_double() == 1.0) ? *this + o : *this + o * alpha;
  return inplace(*this, r, "add_");
}
Tensor& Tensor::sub_(const Tensor& o, const Scalar& alpha) {
  Tensor r = (alpha.to_double() == 1.0) ? *this - o : *this - o * alpha;
  return inplace(*this, r, "sub_");
}
Tensor& Tensor::mul_(const Tensor& o) {
  return inplace(*this, *this * o, "mul_");
}
Tensor& Tensor::div_(const Tensor& o) {
  return inplace(*this, *this / o, "div_");
}
Tensor& Tensor::add_(const Scalar& s) {
  return inplace(*this, *this + s, "add_");
}
Tensor& Tensor::sub_(const Scalar& s) {
  return inplace(*this, *this - s, "sub_");
}
Tensor& Tensor::mul_(const Scalar& s) {
  return inplace(*this, *this * s, "mul_");
}
Tensor& Tensor::div_(const Scalar& s) {
  return inplace(*this, *this / s, "div_");
}
Tensor& Tensor::zero_() {
  return fill_(0);
}
Tensor& Tensor::fill_(const Scalar& v) {
  return commit(*this, kiln::expand(scalar_tensor(v, dtype(), "fill_"), shape()), "fill_");
}
Tensor& Tensor::clamp_(const Scalar& lo, const Scalar& hi) {
  return inplace(*this, kiln::clamp(*this, lo, hi), "clamp_");
}

// ---- methods forwarding to the free functions (kiln:: qualified: the
// member names hide them) ----
Tensor Tensor::neg() const {
  return kiln::neg(*this);
}
Tensor Tensor::abs() const {
  return kiln::abs(*this);
}
Tensor Tensor::exp() const {
  return kiln::exp(*this);
}
Tensor Tensor::log() const {
  return kiln::log(*this);
}
Tensor Tensor::log1p() const {
  return kiln::log1p(*this);
}
Tensor Tensor::sqrt() const {
  return kiln::sqrt(*this);
}
Tensor Tensor::rsqrt() const {
  return kiln::rsqrt(*this);
}
Tensor Tensor::tanh() const {
  return kiln::tanh(*this);
}
Tensor Tensor::sigmoid() const {
  return kiln::sigmoid(*this);
}
Tensor Tensor::relu() const {
  return kiln::relu(*this);
}
Tensor Tensor::sin() const {
  return kiln::sin(*this);
}
Tensor Tensor::cos() const {
  return kiln::cos(*this);
}
Tensor Tensor::erf() const {
  return kiln::erf(*this);
}
Tensor Tensor::sign() const {
  return kiln::sign(*this);
}
Tensor Tensor::logical_not() const {
  return kiln::logical_not(*this);
}
Tensor Tensor::square() const {
  return kiln::square(*this);
}
Tensor Tensor::reciprocal() const {
  return kiln::reciprocal(*this);
}
Tensor Tensor::isnan() const {
  return kiln::isnan(*this);
}
Tensor Tensor::isinf() const {
  return kiln::isinf(*this);
}
Tensor Tensor::isfinite() const {
  return kiln::isfinite(*this);
}
Tensor Tensor::nan_to_num(std::optional<double> n, std::optional<double> p,
                          std::optional<double> m) const {
  return kiln::nan_to_num(*this, n, p, m);
}

// alpha scales the other operand, as torch.add(x, o, alpha=...).
Tensor Tensor::add(const Tensor& o, const Scalar& alpha) const {
  return alpha.to_double() == 1.0 ? kiln::add(*this, o) : kiln::add(*this, kiln::mul(o, alpha));
}
Tensor Tensor::add(const Scalar& o) const {
  return kiln::add(*this, o);
}
Tensor Tensor::sub(const Tensor& o, const Scalar& alpha) const {
  return alpha.to_double() == 1.0 ? kiln::sub(*this, o) : kiln::sub(*this, kiln::mul(o, alpha));
}
Tensor Tensor::sub(const Scalar& o) const {
  return kiln::sub(*this, o);
}
Tensor Tensor::mul(const Tensor& o) const {
  return kiln::mul(*this, o);
}
Tensor Tensor::mul(const Scalar& o) const {
  return kiln::mul(*this, o);
}
Tensor Tensor::div(const Tensor& o) const {
  return kiln::div(*this, o);
}
Tensor Tensor::div(const Scalar& o) const {
  return kiln::div(*this, o);
}
Tensor Tensor::pow(const Tensor& e) const {
  return kiln::pow(*this, e);
}
Tensor Tensor::pow(const Scalar& e) const {
  return kiln::pow(*this, e);
}
Tensor Tensor::maximum(const Tensor& o) const {
  return kiln::maximum(*this, o);
}
Tensor Tensor::minimum(const Tensor& o) const {
  return kiln::minimum(*this, o);
}
Tensor Tensor::eq(const Tensor& o) const {
  return kiln::eq(*this, o);
}
Tensor Tensor::eq(const Scalar& o) const {
  return kiln::eq(*this, o);
}
Tensor Tensor::ne(const Tensor& o) const {
  return kiln::ne(*this, o);
}
Tensor Tensor::ne(const Scalar& o) const {
  return kiln::ne(*this, o);
}
Tensor Tensor::lt(const Tensor& o) const {
  return kiln::lt(*this, o);
}
Tensor Tensor::lt(const Scalar& o) const {
  return kiln::lt(*this, o);
}
Tensor Tensor::le(const Tensor& o) const {
  return kiln::le(*this, o);
}
Tensor Tensor::le(const Scalar& o) const {
  return kiln::le(*this, o);
}
Tensor Tensor::gt(const Tensor& o) const {
  return kiln::gt(*this, o);
}
Tensor Tensor::gt(const Scalar& o) const {
  return kiln::gt(*this, o);
}
Tensor Tensor::ge(const Tensor& o) const {
  return kiln::ge(*this, o);
}
Tensor Tensor::ge(const Scalar& o) const {
  return kiln::ge(*this, o);
}
Tensor Tensor::logical_and(const Tensor& o) const {
  return kiln::logical_and(*this, o);
}
Tensor Tensor::logical_or(const Tensor& o) const {
  return kiln::logical_or(*this, o);
}
Tensor Tensor::where(const Tensor& c, const Tensor& o) const {
  return kiln::where(c, *this, o);
}
Tensor Tensor::where(const Tensor& c, const Scalar& o) const {
  return kiln::where(c, *this, o);
}
Tensor Tensor::masked_fill(const Tensor& m, const Scalar& v) const {
  return kiln::masked_fill(*this, m, v);
}
Tensor Tensor::clamp(const Scalar& lo, const Scalar& hi) const {
  return kiln::clamp(*this, lo, hi);
}
Tensor Tensor::clamp(const Tensor& lo, const Tensor& hi) const {
  return kiln::clamp(*this, lo, hi);
}
Tensor Tensor::clamp_min(const Scalar& lo) const {
  return kiln::clamp_min(*this, lo);
}
Tensor Tensor::clamp_min(const Tensor& lo) const {
  return kiln::clamp_min(*this, lo);
}
Tensor Tensor::clamp_max(const Scalar& hi) const {
  return kiln::clamp_max(*this, hi);
}
Tensor Tensor::clamp_max(const Tensor& hi) const {
  return kiln::clamp_max(*this, hi);
}
Tensor Tensor::clip(const Scalar& lo, const Scalar& hi) const {
  return kiln::clip(*this, lo, hi);
}
Tensor Tensor::clip(const Tensor& lo, const Tensor& hi) const {
  return kiln::clip(*this, lo, hi);
}

Tensor Tensor::sum(const Dims& d, bool k) const {
  return kiln::sum(*this, d, k);
}
Tensor Tensor::mean(const Dims& d, bool k) const {
  return kiln::mean(*this, d, k);
}
Tensor Tensor::amax(const Dims& d, bool k) const {
  return kiln::amax(*this, d, k);
}
Tensor Tensor::amin(const Dims& d, bool k) const {
  return kiln::amin(*this, d, k);
}
Tensor Tensor::max() const {
  return kiln::amax(*this);
}
std::tuple<Tensor, Tensor> Tensor::max(int64_t d, bool k) const {
  return kiln::max(*this, d, k);
}
Tensor Tensor::max(const Tensor& o) const {
  return kiln::maximum(*this, o);
}
Tensor Tensor::min() const {
  return kiln::amin(*this);
}
std::tuple<Tensor, Tensor> Tensor::min(int64_t d, bool k) const {
  return kiln::min(*this, d, k);
}
Tensor Tensor::min(const Tensor& o) const {
  return kiln::minimum(*this, o);
}
Tensor Tensor::argmax(std::optional<int64_t> d, bool k) const {
  return kiln::argmax(*this, d, k);
}
Tensor Tensor::argmin(std::optional<int64_t> d, bool k) const {
  return kiln::argmin(*this, d, k);
}
Tensor Tensor::var(const Dims& d, int64_t c, bool k) const {
  return kiln::var(*this, d, c, k);
}
Tensor Tensor::std(const Dims& d, int64_t c, bool k) const {
  return kiln::std(*this, d, c, k);
}
Tensor Tensor::logsumexp(const Dims& d, bool k) const {
  return kiln::logsumexp(*this, d, k);
}
Tensor Tensor::norm(double p, const Dims& d, bool k) const {
  return kiln::norm(*this, p, d, k);
}
Tensor Tensor::softmax(int64_t d) const {
  return kiln::softmax(*this, d);
}
Tensor Tensor::log_softmax(int64_t d) const {
  return kiln::log_softmax(*this, d);
}

Tensor Tensor::cumsum(int64_t d) const {
  return kiln::cumsum(*this, d);
}
Tensor Tensor::cumprod(int64_t d) const {
  return kiln::cumprod(*this, d);
}
std::tuple<Tensor, Tensor> Tensor::sort(int64_t d, bool desc, bool stable) const {
  return kiln::sort(*this, d, desc, stable);
}
Tensor Tensor::argsort(int64_t d, bool desc, bool stable) const {
  return kiln::argsort(*this, d, desc, stable);
}
std::tuple<Tensor, Tensor> Tensor::topk(int64_t k, int64_t d, bool largest, bool sorted) const {
  return kiln::topk(*this, k, d, largest, sorted);
}
Tensor Tensor::multinomial(int64_t n, bool replacement, Generator* g) const {
  return kiln::multinomial(*this, n, replacement, g);
}

Tensor Tensor::matmul(const Tensor& o) const {
  return kiln::matmul(*this, o);
}
Tensor Tensor::bmm(const Tensor& o) const {
  return kiln::bmm(*this, o);
}
Tensor Tensor::baddbmm(const Tensor& b1, const Tensor& b2, const Scalar& beta,
                       const Scalar& alpha) const {
  return kiln::baddbmm(*this, b1, b2, beta, alpha);
}
Tensor Tensor::outer(const Tensor& o) const {
  return kiln::outer(*this, o);
}

Tensor Tensor::gather(int64_t d, const Tensor& i) const {
  return kiln::gather(*this, d, i);
}
Tensor Tensor::index_select(int64_t d, const Tensor& i) const {
  return kiln::index_select(*this, d, i);
}
Tensor Tensor::scatter_add(int64_t d, const Tensor& i, const Tensor& src) const {
  return kiln::scatter_add(*this, d, i, src);
}
Tensor Tensor::masked_select(const Tensor& m) const {
  return kiln::masked_select(*this, m);
}
Tensor Tensor::nonzero() const {
  return kiln::nonzero(*this);
}
Tensor Tensor::tril(int64_t d) const {
  return kiln::tril(*this, d);
}
Tensor Tensor::triu(int64_t d) const {
  return kiln::triu(*this, d);
}
Tensor Tensor::repeat(const Dims& r) const {
  return kiln::repeat(*this, r);
}
Tensor Tensor::tile(const Dims& r) const {
  return kiln::tile(*this, r);
}
Tensor Tensor::roll(const Dims& s, const Dims& d) const {
  return kiln::roll(*this, s, d);
}
Tensor Tensor::flip(const Dims& d) const {
  return kiln::flip(*this, d);
}
std::vector<Tensor> Tensor::split(int64_t s, int64_t d) const {
  return kiln::split(*this, s, d);
}
std::vector<Tensor> Tensor::split(const Dims& s, int64_t d) const {
  return kiln::split_with_sizes(*this, s, d);
}
std::vector<Tensor> Tensor::split_with_sizes(const Dims& s, int64_t d) const {
  return kiln::split_with_sizes(*this, s, d);
}
std::vector<Tensor> Tensor::chunk(int64_t c, int64_t d) const {
  return kiln::chunk(*this, c, d);
}
std::vector<Tensor> Tensor::unbind(int64_t d) const {
  return kiln::unbind(*this, d);
}
Tensor Tensor::expand_as(const Tensor& o) const {
  return kiln::expand(*this, o.shape());
}
Tensor Tensor::reshape_as(const Tensor& o) const {
  return kiln::reshape(*this, o.shape());
}
Tensor Tensor::view_as(const Tensor& o) const {
  return view(o.shape());
}
Tensor Tensor::type_as(const Tensor& o) const {
  return kiln::cast(*this, o.dtype());
}
namespace {
// The input of an in-place op that is computed out of place and written back:
// a copy when autograd records it, since where() saves its inputs and the
// write-back would otherwise invalidate them (PyTorch allows x.masked_fill_
// on a non-leaf that requires grad).
Tensor recorded_input(const Tensor& self) {
  return grad_mode_enabled() && self.requires_grad() ? self.clone() : self;
}
}  // namespace

Tensor& Tensor::masked_fill_(const Tensor& m, const Scalar& v) {
  return commit(*this, kiln::masked_fill(recorded_input(*this), m, v), "masked_fill_");
}
Tensor Tensor::index(const std::vector<Tensor>& i) const {
  return kiln::index(*this, i);
}
Tensor Tensor::operator[](const Tensor& i) const {
  return kiln::index(*this, {i});
}
Tensor Tensor::index_put(const std::vector<Tensor>& i, const Tensor& v) const {
  return kiln::index_put(*this, i, v);
}
Tensor Tensor::index_put(const std::vector<Tensor>& i, const Scalar& v) const {
  return kiln::index_put(*this, i, v);
}
Tensor& Tensor::index_put_(const std::vector<Tensor>& i, const Tensor& v) {
  return commit(*this, kiln::index_put(recorded_input(*this), i, v), "index_put_");
}
Tensor& Tensor::index_put_(const std::vector<Tensor>& i, const Scalar& v) {
  return commit(*this, kiln::index_put(recorded_input(*this), i, v), "index_put_");
}
Tensor Tensor::isclose(const Tensor& o, double rtol, double atol, bool equal_nan) const {
  return kiln::isclose(*this, o, rtol, atol, equal_nan);
}
bool Tensor::allclose(const Tensor& o, double rtol, double atol, bool equal_nan) const {
  return kiln::allclose(*this, o, rtol, atol, equal_nan);
}
bool Tensor::equal(const Tensor& o) const {
  return kiln::equal(*this, o);
}

}  // namespace kiln
