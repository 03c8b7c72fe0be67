// The optimizers' fused eager steps (see fused_step.h).
//
// Bit-exact with the per-op form needs every product rounded before its sum:
// no contraction into fma (GCC contracts by default, even in ISO C++ mode).
// GCC only if-converts (and so vectorizes) amsgrad's NaN-aware maximum with
// -fno-trapping-math, and sqrt without errno (-fno-math-errno, set for this
// file in runtime/CMakeLists.txt: GCC's optimize pragma cannot): nothing here
// tests floating-point exception flags or errno.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("no-trapping-math", "fp-contract=off")
#endif

#include "optim/fused_step.h"

#include <algorithm>
#include <cmath>

#include "kiln/dispatch.h"
#include "kiln/thread_pool.h"

namespace kiln::optim::detail {
namespace {

// Runs body(job, begin, end) over the elements of all jobs as one parallel
// range, so small parameters share a task and large ones split.
template <typename Job, typename F>
void multi_tensor(const std::vector<Job>& jobs, F&& body) {
  std::vector<int64_t> start(jobs.size() + 1, 0);
  for (size_t j = 0; j < jobs.size(); ++j) start[j + 1] = start[j] + jobs[j].p.numel();
  parallel_for(0, start.back(), 1 << 15, [&](int64_t b, int64_t e) {
    size_t j =
        static_cast<size_t>(std::upper_bound(start.begin(), start.end(), b) - start.begin()) - 1;
    for (; b < e && j < jobs.size(); ++j) {
      const int64_t end = std::min(e, start[j + 1]);
      if (end > b) body(jobs[j], b - start[j], end - start[j]);
      b = std::max(b, end);
    }
  });
}

void bump(const Tensor& t) {
  if (t.defined() && t.impl()->storage) ++t.impl()->storage->version;
}

template <typename T>
T maximum(T a, T b) {  // as the primitive: NaN from either side
  return (a != a || b != b) ? (a != a ? a : b) : (a > b ? a : b);
}

// Adam's update of elements [b, e): the per-op form's steps in order, each
// rounded to T. Flags are template parameters so each variant's loop is branch-free.
template <typename T, bool Small, bool Ams, int Decay, bool Max>
void adam_range(const AdamConfig& c, const AdamJob& j, int64_t b, int64_t e) {
  T* __restrict p = j.p.data<T>();
  const T* __restrict g = j.grad.data<T>();
  T* __restrict m = j.exp_avg.data<T>();
  T* __restrict v = j.exp_avg_sq.data<T>();
  T* __restrict vmax = Ams ? j.max_exp_avg_sq.data<T>() : nullptr;
  const T w1 = static_cast<T>(Small ? c.one_minus_beta1 : c.beta1_again);
  const T b2 = static_cast<T>(c.beta2), omb2 = static_cast<T>(c.one_minus_beta2);
  const T eps = static_cast<T>(c.eps), decay = static_cast<T>(c.decay);
  const T step = static_cast<T>(j.neg_step_size), bc2 = static_cast<T>(j.bias_correction2_sqrt);
  for (int64_t i = b; i < e; ++i) {
    T gi = Max ? -g[i] : g[i];
    T pi = p[i];
    if constexpr (Decay == 1) gi = gi + pi * decay;  // Adam: L2 term in the gradient
    if constexpr (Decay == 2) pi = pi * decay;       // AdamW: decoupled
    T mi = m[i];
    mi = Small ? mi + (gi - mi) * w1 : gi - (gi - mi) * w1;
    T vi = v[i] * b2;
    vi = vi + gi * omb2 * gi;
    T second = vi;
    if constexpr (Ams) {
      second = maximum(vmax[i], vi);
      vmax[i] = second;
    }
    const T denom = std::sqrt(second) / bc2 + eps;
    p[i] = pi + mi * step / denom;
    m[i] = mi;
    v[i] = vi;
  }
}

template <typename T, bool Small, bool Ams, int Decay>
void adam_dispatch_max(const AdamConfig& c, const std::vector<AdamJob>& jobs) {
  auto run = [&]<bool Max>() {
    multi_tensor(jobs, [&](const AdamJob& j, int64_t b, int64_t e) {
      adam_range<T, Small, Ams, Decay, Max>(c, j, b, e);
    });
  };
  if (c.maximize)
    run.template operator()<true>();
  else
    run.template operator()<false>();
}

template <typename T>
void adam_typed(const AdamConfig& c, const std::vector<AdamJob>& jobs) {
  const int decay = !c.has_decay ? 0 : (c.decoupled ? 2 : 1);
  auto with = [&]<bool Small, bool Ams>() {
    if (decay == 0) adam_dispatch_max<T, Small, Ams, 0>(c, jobs);
    if (decay == 1) adam_dispatch_max<T, Small, Ams, 1>(c, jobs);
    if (decay == 2) adam_dispatch_max<T, Small, Ams, 2>(c, jobs);
  };
  if (c.small && c.amsgrad) with.template operator()<true, true>();
  if (c.small && !c.amsgrad) with.template operator()<true, false>();
  if (!c.small && c.amsgrad) with.template operator()<false, true>();
  if (!c.small && !c.amsgrad) with.template operator()<false, false>();
}

// Calls f.template operator()<B...>() with the runtime flags as template
// arguments, so each combination gets its own branch-free loop.
template <bool... Bs, typename F>
void with_flags(F&& f) {
  f.template operator()<Bs...>();
}
template <bool... Bs, typename F, typename... Rest>
void with_flags(F&& f, bool b, Rest... rest) {
  if (b)
    with_flags<Bs..., true>(f, rest...);
  else
    with_flags<Bs..., false>(f, rest...);
}

// SGD's update of elements [b, e). The flags are template parameters and the
// numbers locals: with them read through `c` in the loop, GCC could not prove
// that the stores to p and buf leave them alone, reloaded them every element
// and ran the loop scalar (1.9x slower than PyTorch's two-pass step on a 1.9M-
// parameter MLP). Without dampening `keep` is 1: d * 1 is d, bit for bit.
template <typename T, bool Decay, bool Mom, bool Nesterov, bool Max, bool First>
void sgd_range(const SgdConfig& c, const SgdJob& j, int64_t b, int64_t e) {
  const T wd = static_cast<T>(c.weight_decay), mom = static_cast<T>(c.momentum);
  const T keep = static_cast<T>(c.keep), neg_lr = static_cast<T>(c.neg_lr);
  T* __restrict p = j.p.data<T>();
  const T* __restrict g = j.grad.data<T>();
  T* __restrict buf = Mom ? j.buf.data<T>() : nullptr;
  for (int64_t i = b; i < e; ++i) {
    T d = Max ? -g[i] : g[i];
    if constexpr (Decay) d = d + p[i] * wd;
    if constexpr (Mom) {
      const T bi = First ? d : buf[i] * mom + d * keep;
      buf[i] = bi;
      d = Nesterov ? d + bi * mom : bi;
    }
    p[i] = p[i] + d * neg_lr;
  }
}

template <typename T>
void sgd_typed(const SgdConfig& c, const std::vector<SgdJob>& jobs) {
  with_flags(
      [&]<bool Decay, bool Mom, bool Nesterov, bool Max>() {
        multi_tensor(jobs, [&](const SgdJob& j, int64_t b, int64_t e) {
          if (Mom && j.first)
            sgd_range<T, Decay, Mom, Nesterov, Max, true>(c, j, b, e);
          else
            sgd_range<T, Decay, Mom, Nesterov, Max, false>(c, j, b, e);
        });
      },
      c.has_decay, c.has_momentum, c.nesterov, c.maximize);
}

template <typename T, bool Decay, bool Centered, bool Small, bool Mom, bool Max>
void rmsprop_range(const RmspropConfig& c, const RmspropJob& j, int64_t b, int64_t e) {
  const T wd = static_cast<T>(c.weight_decay), alpha = static_cast<T>(c.alpha);
  const T oma = static_cast<T>(c.one_minus_alpha), again = static_cast<T>(c.alpha_again);
  const T eps = static_cast<T>(c.eps), mom = static_cast<T>(c.momentum);
  const T neg_lr = static_cast<T>(c.neg_lr);
  T* __restrict p = j.p.data<T>();
  const T* __restrict g = j.grad.data<T>();
  T* __restrict sq = j.square_avg.data<T>();
  T* __restrict ga = Centered ? j.grad_avg.data<T>() : nullptr;
  T* __restrict buf = Mom ? j.buf.data<T>() : nullptr;
  for (int64_t i = b; i < e; ++i) {
    T gi = Max ? -g[i] : g[i];
    if constexpr (Decay) gi = gi + p[i] * wd;
    T si = sq[i] * alpha;
    si = si + gi * oma * gi;
    sq[i] = si;
    T avg;
    if constexpr (Centered) {
      T a = ga[i];
      a = Small ? a + (gi - a) * oma : gi - (gi - a) * again;
      ga[i] = a;
      avg = std::sqrt(si - a * a);
    } else {
      avg = std::sqrt(si);
    }
    avg = avg + eps;
    if constexpr (Mom) {
      const T bi = buf[i] * mom + gi * T(1) / avg;
      buf[i] = bi;
      p[i] = p[i] + bi * neg_lr;
    } else {
      p[i] = p[i] + gi * neg_lr / avg;
    }
  }
}

template <typename T>
void rmsprop_typed(const RmspropConfig& c, const std::vector<RmspropJob>& jobs) {
  with_flags(
      [&]<bool Decay, bool Centered, bool Small, bool Mom, bool Max>() {
        multi_tensor(jobs, [&](const RmspropJob& j, int64_t b, int64_t e) {
          rmsprop_range<T, Decay, Centered, Small, Mom, Max>(c, j, b, e);
        });
      },
      c.has_decay, c.centered, c.small, c.has_momentum, c.maximize);
}

}  // namespace

bool fusable(const Tensor& p, std::initializer_list<const Tensor*> others) {
  if (current_recorder() || p.is_symbolic() || p.device().type != DeviceType::kCPU) return false;
  if ((p.dtype() != DType::f32 && p.dtype() != DType::f64) || !p.is_contiguous()) return false;
  for (const Tensor* t : others)
    if (t->defined() && (t->is_symbolic() || t->device().type != DeviceType::kCPU ||
                         t->dtype() != p.dtype() || !t->is_contiguous() || t->shape() != p.shape()))
      return false;
  return true;
}

void adam_step(const AdamConfig& c, const std::vector<AdamJob>& jobs) {
  if (jobs.empty()) return;
  // One launch per dtype present (a group may mix f32 and f64 parameters).
  for (DType dt : {DType::f32, DType::f64}) {
    std::vector<AdamJob> part;
    for (const AdamJob& j : jobs)
      if (j.p.dtype() == dt) part.push_back(j);
    if (part.empty()) continue;
    if (dt == DType::f32)
      adam_typed<float>(c, part);
    else
      adam_typed<double>(c, part);
  }
  for (const AdamJob& j : jobs) {
    bump(j.p);
    bump(j.exp_avg);
    bump(j.exp_avg_sq);
    if (c.amsgrad) bump(j.max_exp_avg_sq);
  }
}

void sgd_step(const SgdConfig& c, const std::vector<SgdJob>& jobs) {
  if (jobs.empty()) return;
  for (DType dt : {DType::f32, DType::f64}) {
    std::vector<SgdJob> part;
    for (const SgdJob& j : jobs)
      if (j.p.dtype() == dt) part.push_back(j);
    if (part.empty()) continue;
    if (dt == DType::f32)
      sgd_typed<float>(c, part);
    else
      sgd_typed<double>(c, part);
  }
  for (const SgdJob& j : jobs) {
    bump(j.p);
    if (c.has_momentum && !j.first) bump(j.buf);
  }
}

void rmsprop_step(const RmspropConfig& c, const std::vector<RmspropJob>& jobs) {
  if (jobs.empty()) return;
  for (DType dt : {DType::f32, DType::f64}) {
    std::vector<RmspropJob> part;
    for (const RmspropJob& j : jobs)
      if (j.p.dtype() == dt) part.push_back(j);
    if (part.empty()) continue;
    if (dt == DType::f32)
      rmsprop_typed<float>(c, part);
    else
      rmsprop_typed<double>(c, part);
  }
  for (const RmspropJob& j : jobs) {
    bump(j.p);
    bump(j.square_avg);
    if (c.centered) bump(j.grad_avg);
    if (c.has_momentum) bump(j.buf);
  }
}

}  // namespace kiln::optim::detail
