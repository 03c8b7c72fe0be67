// Tensor's member functions: views, conversions and in-place ops, forwarded
// to the free functions (so everything still passes through dispatch).
#include "autograd_internal.h"
#include "kiln/functional.h"
#include "ops/helpers.h"

namespace kiln {

Tensor Tensor::to(DType t) const { return cast(*this, t); }

Tensor Tensor::to(Device d) const {
  if (device() == d) return *this;
  KILN_CHECK(!is_symbolic(), "[to] moving a traced tensor from ", device(), " to ", d,
             " is not supported inside kiln::compile");
  Tensor out = make_tensor(shape(), dtype(), d);
  ops::copy_into(out, *this);
  if (!(grad_mode_enabled() && requires_grad())) return out;
  // Differentiable like PyTorch's: the gradient moves back to this device.
  const Device from = device();
  return attach_function("ToDeviceBackward", {*this}, {out}, [from](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].defined() ? g[0].to(from) : Tensor()};
  })[0];
}
Tensor Tensor::cpu() const {
  return to(Device::cpu());
}
Tensor Tensor::cuda(int index) const {
  return to(Device::cuda(index));
}
Tensor Tensor::clone() const { return copy(*this); }
Tensor Tensor::contiguous() const { return is_contiguous() ? *this : copy(*this); }

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
    KILN_CHECK(numel() == 0 || r.impl()->storage == impl()->storage,
               "[view] shape ", s, " is not compatible with the input's shape ", shape(),
               " and strides ", strides(), "; use reshape (which copies) instead");
  return r;
}
Tensor Tensor::reshape(const Dims& s) const { return kiln::reshape(*this, s); }
Tensor Tensor::permute(const Dims& d) const { return kiln::permute(*this, d); }
Tensor Tensor::transpose(int64_t a, int64_t b) const { return kiln::transpose(*this, a, b); }
Tensor Tensor::t() const {
  KILN_CHECK(dim() <= 2, "[t] expects a tensor of rank <= 2, got shape ", shape());
  return dim() < 2 ? *this : kiln::transpose(*this, 0, 1);
}
Tensor Tensor::expand(const Dims& s) const { return kiln::expand(*this, s); }
Tensor Tensor::slice(int64_t d, int64_t s, int64_t e, int64_t st) const {
  return kiln::slice(*this, d, s, e, st);
}
Tensor Tensor::narrow(int64_t d, int64_t s, int64_t l) const { return kiln::narrow(*this, d, s, l); }
Tensor Tensor::select(int64_t d, int64_t i) const { return kiln::select(*this, d, i); }
Tensor Tensor::squeeze() const { return kiln::squeeze(*this); }
Tensor Tensor::squeeze(int64_t d) const { return kiln::squeeze(*this, d); }
Tensor Tensor::unsqueeze(int64_t d) const { return kiln::unsqueeze(*this, d); }
Tensor Tensor::flatten(int64_t s, int64_t e) const { return kiln::flatten(*this, s, e); }

namespace {
Tensor& commit(Tensor& self, const Tensor& r, const char* op) {
  autograd::commit_inplace(self, r, op);
  return self;
}
// In-place results keep self's dtype; PyTorch refuses to narrow float to int.
void check_inplace_dtype(const Tensor& self, const Tensor& r, const char* op) {
  KILN_CHECK(dtype_category(r.dtype()) <= dtype_category(self.dtype()), "[", op,
             "] result dtype ", r.dtype(), " cannot be cast to the in-place output dtype ",
             self.dtype());
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
Tensor& Tensor::mul_(const Tensor& o) { return inplace(*this, *this * o, "mul_"); }
Tensor& Tensor::div_(const Tensor& o) { return inplace(*this, *this / o, "div_"); }
Tensor& Tensor::add_(const Scalar& s) { return inplace(*this, *this + s, "add_"); }
Tensor& Tensor::sub_(const Scalar& s) { return inplace(*this, *this - s, "sub_"); }
Tensor& Tensor::mul_(const Scalar& s) { return inplace(*this, *this * s, "mul_"); }
Tensor& Tensor::div_(const Scalar& s) { return inplace(*this, *this / s, "div_"); }
Tensor& Tensor::zero_() { return fill_(0); }
Tensor& Tensor::fill_(const Scalar& v) {
  return commit(*this, kiln::expand(scalar_tensor(v, dtype(), "fill_"), shape()), "fill_");
}
Tensor& Tensor::clamp_(const Scalar& lo, const Scalar& hi) {
  return inplace(*this, kiln::clamp(*this, lo, hi), "clamp_");
}

Tensor Tensor::sum(const Dims& d, bool k) const { return kiln::sum(*this, d, k); }
Tensor Tensor::mean(const Dims& d, bool k) const { return kiln::mean(*this, d, k); }
Tensor Tensor::max() const { return kiln::amax(*this); }
Tensor Tensor::min() const { return kiln::amin(*this); }
Tensor Tensor::matmul(const Tensor& o) const { return kiln::matmul(*this, o); }
Tensor Tensor::exp() const { return kiln::exp(*this); }
Tensor Tensor::log() const { return kiln::log(*this); }
Tensor Tensor::sqrt() const { return kiln::sqrt(*this); }
Tensor Tensor::abs() const { return kiln::abs(*this); }
Tensor Tensor::pow(const Scalar& e) const { return kiln::pow(*this, e); }

}  // namespace kiln
