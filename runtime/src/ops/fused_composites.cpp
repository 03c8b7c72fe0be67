// Eager mode's fused composites (see fused_composites.h). Autograd: one node per
// call (attach_function) whose backward runs the fused backward kernel; under
// create_graph it writes the same gradient with Tensor ops instead, so double
// backward works as for the unfused composite. What the backward reads is kept
// as SavedTensors: version-checked, and dropped and recomputed inside
// kiln::checkpoint regions like any op's saved tensors.
#include "ops/fused_composites.h"

#include <atomic>
#include <cmath>
#include <numbers>

#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/functional.h"
#include "ops/fused_kernels.h"

namespace kiln {
namespace {

std::atomic<bool> g_eager_fusion{true};

// True when x and `ts` (undefined ones skipped) are real CPU tensors of x's
// dtype, f32 or f64, and nothing is being traced.
bool qualifies(const Tensor& x, std::initializer_list<const Tensor*> ts) {
  if (!g_eager_fusion.load(std::memory_order_relaxed) || current_recorder()) return false;
  if (x.dtype() != DType::f32 && x.dtype() != DType::f64) return false;
  if (x.is_symbolic() || x.device().type != DeviceType::kCPU) return false;
  for (const Tensor* t : ts)
    if (t->defined() &&
        (t->is_symbolic() || t->device().type != DeviceType::kCPU || t->dtype() != x.dtype()))
      return false;
  return true;
}

// The contiguous data of t, without autograd.
Tensor raw(const Tensor& t) {
  NoGradGuard ng;
  return t.detach().contiguous();
}

template <typename F>
void visit_float(DType dt, F&& f) {
  if (dt == DType::f32)
    f(float{});
  else
    f(double{});
}

bool needs_grad(std::initializer_list<const Tensor*> ts) {
  if (!grad_mode_enabled()) return false;
  for (const Tensor* t : ts)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

}  // namespace

void set_eager_fusion(bool enabled) {
  g_eager_fusion.store(enabled);
}
bool eager_fusion_enabled() {
  return g_eager_fusion.load();
}

namespace ops {

std::optional<Tensor> fused_softmax(const Tensor& x, int64_t dim, bool log, bool safe) {
  if (x.dim() == 0 || dim != x.dim() - 1 || !qualifies(x, {})) return std::nullopt;
  const int64_t n = x.size(-1);
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  Tensor xc = raw(x);
  Tensor y = empty(x.shape(), x.dtype());
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    fused::softmax_fwd<T>(xc.data<T>(), y.data<T>(), rows, n, log, safe && !log);
  });
  if (!needs_grad({&x})) return y;
  return attach_softmax_backward(x, y, dim, log);
}

Tensor attach_softmax_backward(const Tensor& x, const Tensor& y, int64_t dim, bool log) {
  const char* name = log ? "LogSoftmaxBackward" : "SoftmaxBackward";
  // The backward reads the output (as PyTorch's softmax does), saved once the
  // output has its history: under create_graph it is differentiated through.
  // Differentiating the primitives instead would keep exp's values and the
  // row sums too (a compiled graph saved both for backward).
  auto saved = std::make_shared<SavedTensor>();
  auto backward = [saved, dim, log, name](const std::vector<Tensor>& g) -> std::vector<Tensor> {
    if (!g[0].defined()) return {Tensor()};
    Tensor out = saved->unpack(nullptr, name);
    // create_graph, a traced or device tensor, another dim than the last:
    // Tensor ops (differentiable in y and g); else one fused pass.
    if (grad_mode_enabled() || dim != out.dim() - 1 || !qualifies(out, {})) {
      if (log) return {g[0] - exp(out) * sum(g[0], {dim}, true)};
      return {out * (g[0] - sum(g[0] * out, {dim}, true))};
    }
    const int64_t n = out.size(-1);
    const int64_t rows = n == 0 ? 0 : out.numel() / n;
    Tensor yc = raw(out), gc = raw(cast(g[0], out.dtype()));
    Tensor gx = empty(out.shape(), out.dtype());
    visit_float(out.dtype(), [&](auto tag) {
      using T = decltype(tag);
      fused::softmax_bwd<T>(yc.data<T>(), gc.data<T>(), gx.data<T>(), rows, n, log);
    });
    return {gx};
  };
  Tensor out = attach_function(name, {x}, {y}, std::move(backward))[0];
  *saved = SavedTensor(out, true);
  return out;
}

namespace {

// The layer_norm gradient as Tensor ops (create_graph).
std::vector<Tensor> layer_norm_grad_ops(const Tensor& x, size_t nd, const Tensor& w, double eps,
                                        const Tensor& g) {
  Dims dims, lead;
  for (int64_t d = 0; d < x.dim(); ++d)
    (d < x.dim() - static_cast<int64_t>(nd) ? lead : dims).push_back(d);
  Tensor xc = x - mean(x, dims, true);
  Tensor rs = rsqrt(mean(xc * xc, dims, true) + eps);
  Tensor xhat = xc * rs;
  Tensor gh = w.defined() ? g * w : g;
  Tensor gx = rs * (gh - mean(gh, dims, true) - xhat * mean(gh * xhat, dims, true));
  // sum over no dims would reduce all of them: without leading dims there is one row.
  Tensor gw = lead.empty() ? g * xhat : sum(g * xhat, lead);
  Tensor gb = lead.empty() ? g : sum(g, lead);
  return {gx, gw, gb};
}

}  // namespace

std::optional<Tensor> fused_layer_norm(const Tensor& x, size_t nd, const Tensor& weight,
                                       const Tensor& bias, double eps) {
  if (!qualifies(x, {&weight, &bias})) return std::nullopt;
  int64_t n = 1;
  for (size_t i = 0; i < nd; ++i) n *= x.size(-1 - static_cast<int64_t>(i));
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  Tensor xc = raw(x);
  Tensor w = weight.defined() ? raw(weight) : Tensor();
  Tensor b = bias.defined() ? raw(bias) : Tensor();
  Tensor y = empty(x.shape(), x.dtype());
  Tensor mu = empty({rows}, x.dtype()), rstd = empty({rows}, x.dtype());
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    fused::layer_norm_fwd<T>(xc.data<T>(), w.defined() ? w.data<T>() : nullptr,
                             b.defined() ? b.data<T>() : nullptr, y.data<T>(), mu.data<T>(),
                             rstd.data<T>(), rows, n, static_cast<T>(eps));
  });
  if (!needs_grad({&x, &weight, &bias})) return y;
  // attach_function takes defined inputs only: x, then weight and bias if given.
  std::vector<Tensor> inputs{x};
  if (weight.defined()) inputs.push_back(weight);
  if (bias.defined()) inputs.push_back(bias);
  struct Saved {
    SavedTensor x, w, mu, rstd;
  };
  auto saved = std::make_shared<Saved>();
  saved->x = SavedTensor(x, false);
  if (weight.defined()) saved->w = SavedTensor(weight, false);
  saved->mu = SavedTensor(mu, false);
  saved->rstd = SavedTensor(rstd, false);
  auto backward = [saved, has_w = weight.defined(), has_b = bias.defined(),
                   bshape = bias.defined() ? bias.shape() : Dims{}, nd, eps, rows, n,
                   wants_x = x.requires_grad(),
                   wants_w = weight.defined() && weight.requires_grad(),
                   wants_b = bias.defined() && bias.requires_grad()](
                      const std::vector<Tensor>& g) -> std::vector<Tensor> {
    const size_t count = 1 + (has_w ? 1 : 0) + (has_b ? 1 : 0);
    std::vector<Tensor> gi(count);
    if (!g[0].defined()) return gi;
    const char* name = "LayerNormBackward";
    Tensor xs = saved->x.unpack(nullptr, name);
    Tensor ws = has_w ? saved->w.unpack(nullptr, name) : Tensor();
    Tensor gx, gw, gb;
    if (grad_mode_enabled()) {  // create_graph
      auto r = layer_norm_grad_ops(xs, nd, ws, eps, g[0]);
      gx = r[0], gw = r[1], gb = r[2];
    } else {
      Tensor xc = raw(xs), wc = has_w ? raw(ws) : Tensor();
      Tensor mu = saved->mu.unpack(nullptr, name), rstd = saved->rstd.unpack(nullptr, name);
      Tensor gc = raw(cast(g[0], xs.dtype()));
      if (wants_x) gx = empty(xs.shape(), xs.dtype());
      if (wants_w) gw = empty(ws.shape(), xs.dtype());
      if (wants_b) gb = empty(bshape, xs.dtype());
      visit_float(xs.dtype(), [&](auto tag) {
        using T = decltype(tag);
        auto ptr = [](const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; };
        fused::layer_norm_bwd<T>(xc.data<T>(), gc.data<T>(), ptr(wc), mu.data<T>(), rstd.data<T>(),
                                 ptr(gx), ptr(gw), ptr(gb), rows, n);
      });
    }
    gi[0] = gx;
    if (has_w) gi[1] = gw;
    if (has_b) gi[count - 1] = gb;
    return gi;
  };
  return attach_function("LayerNormBackward", inputs, {y}, std::move(backward))[0];
}

namespace {

using fused::Pointwise;

// f'(x) as Tensor ops (create_graph).
Tensor pointwise_grad_ops(Pointwise f, const Tensor& x) {
  switch (f) {
    case Pointwise::kGeluTanh: {
      const double k2 = 2.0 * std::sqrt(2.0 / std::numbers::pi), c = 0.044715;
      Tensor s = sigmoid((x + x * x * x * c) * k2);
      return s + x * s * (1.0 - s) * ((x * x * (3.0 * c) + 1.0) * k2);
    }
    case Pointwise::kGeluErf:
      return (erf(x * (std::numbers::sqrt2 / 2.0)) + 1.0) * 0.5 +
             x * exp(x * x * -0.5) * (1.0 / std::sqrt(2.0 * std::numbers::pi));
    case Pointwise::kSilu: {
      Tensor s = sigmoid(x);
      return s * (x * (1.0 - s) + 1.0);
    }
  }
  return Tensor();
}

const char* pointwise_name(Pointwise f) {
  return f == Pointwise::kSilu ? "SiluBackward" : "GeluBackward";
}

std::optional<Tensor> fused_pointwise(const Tensor& x, Pointwise f) {
  if (!qualifies(x, {})) return std::nullopt;
  Tensor xc = raw(x);
  Tensor y = empty(x.shape(), x.dtype());
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    fused::pointwise_fwd<T>(f, xc.data<T>(), y.data<T>(), x.numel());
  });
  if (!needs_grad({&x})) return y;
  auto saved = std::make_shared<SavedTensor>(x, false);
  auto backward = [saved, f](const std::vector<Tensor>& g) -> std::vector<Tensor> {
    if (!g[0].defined()) return {Tensor()};
    Tensor xs = saved->unpack(nullptr, pointwise_name(f));
    if (grad_mode_enabled()) return {g[0] * pointwise_grad_ops(f, xs)};
    Tensor xc = raw(xs), gc = raw(cast(g[0], xs.dtype()));
    Tensor gx = empty(xs.shape(), xs.dtype());
    visit_float(xs.dtype(), [&](auto tag) {
      using T = decltype(tag);
      fused::pointwise_bwd<T>(f, xc.data<T>(), gc.data<T>(), gx.data<T>(), xs.numel());
    });
    return {gx};
  };
  return attach_function(pointwise_name(f), {x}, {y}, std::move(backward))[0];
}

}  // namespace

namespace {

// The batch_norm gradient as Tensor ops (create_graph), reduced over every dim
// but the channel's. With batch statistics they are recomputed from x, so the
// gradient differentiates through them; running ones are constants.
std::vector<Tensor> batch_norm_grad_ops(const Tensor& x, const Tensor& w, const Tensor& run_mean,
                                        const Tensor& run_rstd, bool batch_stats, double eps,
                                        const Tensor& g) {
  Dims red{0}, bshape(static_cast<size_t>(x.dim()), 1);
  bshape[1] = x.size(1);
  for (int64_t d = 2; d < x.dim(); ++d) red.push_back(d);
  Tensor xc, rs;
  if (batch_stats) {
    xc = x - mean(x, red, true);
    rs = rsqrt(mean(xc * xc, red, true) + eps);
  } else {
    xc = x - reshape(run_mean, bshape);
    rs = reshape(run_rstd, bshape);
  }
  Tensor xhat = xc * rs;
  Tensor gh = w.defined() ? g * reshape(w, bshape) : g;
  Tensor gx =
      batch_stats ? rs * (gh - mean(gh, red, true) - xhat * mean(gh * xhat, red, true)) : gh * rs;
  return {gx, sum(g * xhat, red), sum(g, red)};
}

}  // namespace

std::optional<FusedBatchNorm> fused_batch_norm(const Tensor& x, const Tensor& running_mean,
                                               const Tensor& running_var, const Tensor& weight,
                                               const Tensor& bias, bool batch_stats, double eps) {
  const Tensor none;
  const Tensor& rm = batch_stats ? none : running_mean;
  const Tensor& rv = batch_stats ? none : running_var;
  if (x.dim() < 2 || !qualifies(x, {&weight, &bias, &rm, &rv})) return std::nullopt;
  // The running statistics are constants here (the composite differentiates them).
  if (grad_mode_enabled() &&
      ((rm.defined() && rm.requires_grad()) || (rv.defined() && rv.requires_grad())))
    return std::nullopt;
  const int64_t N = x.size(0), C = x.size(1);
  const int64_t S = N * C == 0 ? 0 : x.numel() / (N * C);
  Tensor xc = raw(x);
  Tensor w = weight.defined() ? raw(weight) : Tensor();
  Tensor b = bias.defined() ? raw(bias) : Tensor();
  Tensor y = empty(x.shape(), x.dtype());
  Tensor mean = batch_stats ? empty({C}, x.dtype()) : raw(rm);
  Tensor var = batch_stats ? empty({C}, x.dtype()) : raw(rv);
  Tensor rstd = empty({C}, x.dtype());
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    auto ptr = [](const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; };
    fused::batch_norm_fwd<T>(xc.data<T>(), ptr(w), ptr(b), y.data<T>(), mean.data<T>(),
                             var.data<T>(), rstd.data<T>(), N, C, S, static_cast<T>(eps),
                             batch_stats);
  });
  FusedBatchNorm r{y, batch_stats ? mean : Tensor(), batch_stats ? var : Tensor()};
  if (!needs_grad({&x, &weight, &bias})) return r;
  std::vector<Tensor> inputs{x};
  if (weight.defined()) inputs.push_back(weight);
  if (bias.defined()) inputs.push_back(bias);
  struct Saved {
    SavedTensor x, w;
    Tensor mean, rstd;  // made here, never visible to the caller: not versioned
  };
  auto saved = std::make_shared<Saved>();
  saved->x = SavedTensor(x, false);
  if (weight.defined()) saved->w = SavedTensor(weight, false);
  saved->mean = batch_stats ? mean : mean.clone();  // the running mean changes in place
  saved->rstd = rstd;
  auto backward = [saved, has_w = weight.defined(), has_b = bias.defined(), batch_stats, eps,
                   wants_x = x.requires_grad(),
                   wants_w = weight.defined() && weight.requires_grad(),
                   wants_b = bias.defined() && bias.requires_grad()](
                      const std::vector<Tensor>& g) -> std::vector<Tensor> {
    const size_t count = 1 + (has_w ? 1 : 0) + (has_b ? 1 : 0);
    std::vector<Tensor> gi(count);
    if (!g[0].defined()) return gi;
    const char* name = "BatchNormBackward";
    Tensor xs = saved->x.unpack(nullptr, name);
    Tensor ws = has_w ? saved->w.unpack(nullptr, name) : Tensor();
    Tensor gx, gw, gb;
    if (grad_mode_enabled()) {  // create_graph
      auto r = batch_norm_grad_ops(xs, ws, saved->mean, saved->rstd, batch_stats, eps, g[0]);
      gx = r[0], gw = r[1], gb = r[2];
    } else {
      Tensor xc = raw(xs), wc = has_w ? raw(ws) : Tensor();
      Tensor gc = raw(cast(g[0], xs.dtype()));
      const int64_t N = xs.size(0), C = xs.size(1);
      const int64_t S = N * C == 0 ? 0 : xs.numel() / (N * C);
      if (wants_x) gx = empty(xs.shape(), xs.dtype());
      if (wants_w) gw = empty({C}, xs.dtype());
      if (wants_b) gb = empty({C}, xs.dtype());
      visit_float(xs.dtype(), [&](auto tag) {
        using T = decltype(tag);
        auto ptr = [](const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; };
        fused::batch_norm_bwd<T>(xc.data<T>(), gc.data<T>(), ptr(wc), saved->mean.data<T>(),
                                 saved->rstd.data<T>(), ptr(gx), ptr(gw), ptr(gb), N, C, S,
                                 batch_stats);
      });
    }
    gi[0] = gx;
    if (has_w) gi[1] = gw;
    if (has_b) gi[count - 1] = gb;
    return gi;
  };
  r.y = attach_function("BatchNormBackward", inputs, {y}, std::move(backward))[0];
  return r;
}

std::optional<Tensor> fused_relu_grad(const Tensor& y, const Tensor& g) {
  if (grad_mode_enabled() || !qualifies(y, {&g}) || y.shape() != g.shape()) return std::nullopt;
  Tensor yc = raw(y), gc = raw(g);
  Tensor gx = empty(y.shape(), y.dtype());
  visit_float(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    fused::relu_bwd<T>(yc.data<T>(), gc.data<T>(), gx.data<T>(), y.numel());
  });
  return gx;
}

std::optional<Tensor> fused_gelu(const Tensor& x, bool tanh) {
  return fused_pointwise(x, tanh ? Pointwise::kGeluTanh : Pointwise::kGeluErf);
}

std::optional<Tensor> fused_silu(const Tensor& x) {
  return fused_pointwise(x, Pointwise::kSilu);
}

}  // namespace ops
}  // namespace kiln
