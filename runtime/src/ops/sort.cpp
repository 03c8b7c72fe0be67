// Ordering and sampling (the "sort" family of ops.def): argsort (the order
// along a dim, or its first k entries: topk) and multinomial (categories chosen
// by given uniforms). Both are index-valued (kNonDiff) and not fused: compiled
// plans run these eager kernels. sort/topk take their values with gather, whose
// derivative scatters the gradient back through the indices.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kiln/device_runtime.h"
#include "kiln/random.h"
#include "ops/along_dim.h"
#include "ops/helpers.h"
#include "ops/registry.h"
#include "ops/sample_rule.h"

namespace kiln {
namespace ops {
namespace {

// ---- argsort ----
// attrs: dim, descending, k (-1: the whole order; k >= 0: topk's first k).
const char* order_name(const Attrs& at) {
  return at.i("k") >= 0 ? "topk" : "argsort";
}

void infer_argsort(std::span<const Tensor> in, const Attrs& at, std::vector<TensorMeta>& out) {
  const Tensor& x = in[0];
  const char* name = order_name(at);
  const int64_t dim = wrap_dim(at.i("dim"), x.dim(), name);
  const int64_t k = at.i("k"), len = x.dim() == 0 ? 1 : x.size(dim);
  KILN_CHECK(k <= len, "[", name, "] k = ", k, " is out of range for dimension ", dim, " of size ",
             len, " (shape ", x.shape(), ")");
  Dims shape = x.shape();
  if (k >= 0 && x.dim() > 0) shape[static_cast<size_t>(dim)] = k;
  out.push_back({DType::i64, shape});
}

// Total order of the positions of one row: by value (NaN above every number,
// as PyTorch), then by position, so equal values keep their input order.
template <typename C>
struct RowOrder {
  const C* v;
  bool desc;
  bool operator()(int64_t a, int64_t b) const {
    const C va = v[a], vb = v[b];
    if constexpr (std::is_floating_point_v<C>) {
      const bool na = va != va, nb = vb != vb;
      if (na || nb) return na && nb ? a < b : (desc ? na : nb);
    }
    if (va != vb) return desc ? va > vb : va < vb;
    return a < b;
  }
};

void kernel_argsort(std::span<const Tensor> in, const Attrs& at, std::span<Tensor> out) {
  const Tensor& x = in[0];
  const Tensor& y = out[0];
  if (y.numel() == 0) return;
  const int64_t dim = wrap_dim(at.i("dim"), x.dim(), order_name(at));
  const bool desc = at.b("descending");
  const AlongDim xr(x, dim), yr(y, dim);
  const int64_t K = xr.len, k = at.i("k") >= 0 ? at.i("k") : K;
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    // Bools compare as bytes (std::vector<bool> has no data()).
    using C = std::conditional_t<std::is_same_v<T, bool>, uint8_t, compute_t<T>>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    int64_t* yp = y.data<int64_t>();
    const int64_t grain = std::max<int64_t>(1, kDefaultGrain / (8 * K));
    parallel_for(0, xr.rows, grain, [&](int64_t b, int64_t e) {
      std::vector<C> vals(static_cast<size_t>(K));
      std::vector<int64_t> pos(static_cast<size_t>(K));
      for (int64_t r = b; r < e; ++r) {
        const T* xs = xp + xr.offset(r);
        for (int64_t i = 0; i < K; ++i) vals[static_cast<size_t>(i)] = C(xs[i * xr.stride]);
        std::iota(pos.begin(), pos.end(), int64_t{0});
        const RowOrder<C> order{vals.data(), desc};
        if (k < K)
          std::partial_sort(pos.begin(), pos.begin() + k, pos.end(), order);
        else
          std::sort(pos.begin(), pos.end(), order);
        int64_t* ys = yp + yr.offset(r);
        for (int64_t i = 0; i < k; ++i) ys[i * yr.stride] = pos[static_cast<size_t>(i)];
      }
    });
  });
}

// ---- multinomial(probs, u) ----
// attrs: num_samples, replacement. u is f64: [N?, num_samples] with
// replacement (one uniform per sample), [N?, C] without (one per category).
void check_multinomial_args(const Tensor& probs, int64_t n, bool replacement) {
  KILN_CHECK(is_floating(probs.dtype()),
             "[multinomial] probs must be a floating tensor, got dtype ", probs.dtype());
  KILN_CHECK(probs.dim() == 1 || probs.dim() == 2,
             "[multinomial] probs must be 1-D or 2-D, got shape ", probs.shape());
  const int64_t C = probs.size(-1);
  KILN_CHECK(C > 0, "[multinomial] probs has no categories (shape ", probs.shape(), ")");
  KILN_CHECK(n > 0, "[multinomial] num_samples must be positive, got ", n);
  KILN_CHECK(replacement || n <= C, "[multinomial] cannot draw ", n,
             " samples without replacement from ", C, " categories (shape ", probs.shape(), ")");
}

Dims uniforms_shape(const Tensor& probs, int64_t n, bool replacement) {
  Dims s = probs.shape();
  s.back() = replacement ? n : probs.size(-1);
  return s;
}

void infer_multinomial(std::span<const Tensor> in, const Attrs& at, std::vector<TensorMeta>& out) {
  const Tensor &probs = in[0], &u = in[1];
  const int64_t n = at.i("num_samples");
  const bool repl = at.b("replacement");
  check_multinomial_args(probs, n, repl);
  KILN_CHECK(u.dtype() == DType::f64 && u.shape() == uniforms_shape(probs, n, repl),
             "[multinomial] uniforms must be f64 of shape ", uniforms_shape(probs, n, repl),
             ", got ", u.dtype(), u.shape());
  Dims shape = probs.shape();
  shape.back() = n;
  out.push_back({DType::i64, shape});
}

// Row r of probs as doubles; kiln::Error naming the first bad weight or sum.
void read_weights(const Tensor& probs, const AlongDim& pr, int64_t r, int64_t n, bool repl,
                  std::vector<double>& w) {
  const int64_t C = pr.len;
  const std::string row = probs.dim() == 2 ? str(" in row ", r) : std::string();
  visit_dtype(probs.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(probs.data_ptr()) + pr.offset(r);
    for (int64_t c = 0; c < C; ++c)
      w[static_cast<size_t>(c)] = static_cast<double>(compute_t<T>(p[c * pr.stride]));
  });
  double total = 0;
  int64_t nonzero = 0;
  for (int64_t c = 0; c < C; ++c) {
    const double v = w[static_cast<size_t>(c)];
    KILN_CHECK(std::isfinite(v) && v >= 0,
               "[multinomial] probabilities must be finite and "
               "non-negative, got ",
               v, " at category ", c, row);
    total += v;
    nonzero += v > 0;
  }
  KILN_CHECK(total > 0, "[multinomial] the probabilities", row,
             " sum to 0: no category can be "
             "drawn");
  KILN_CHECK(std::isfinite(total), "[multinomial] the probabilities", row, " sum to ", total);
  KILN_CHECK(repl || n <= nonzero, "[multinomial] cannot draw ", n,
             " samples without "
             "replacement",
             row, ": only ", nonzero, " categories have nonzero probability");
}

void kernel_multinomial(std::span<const Tensor> in, const Attrs& at, std::span<Tensor> out) {
  const Tensor &probs = in[0], &u = in[1];
  const Tensor& y = out[0];
  const int64_t n = at.i("num_samples");
  const bool repl = at.b("replacement");
  const int64_t last = probs.dim() - 1;
  const AlongDim pr(probs, last), ur(u, last), yr(y, last);
  const int64_t C = pr.len;
  // Every row is checked before any is drawn: errors come from this thread.
  std::vector<double> w(static_cast<size_t>(C));
  for (int64_t r = 0; r < pr.rows; ++r) read_weights(probs, pr, r, n, repl, w);
  const double* up = u.data<double>();
  int64_t* yp = y.data<int64_t>();
  parallel_for(0, pr.rows, 1, [&](int64_t b, int64_t e) {
    std::vector<double> cdf(static_cast<size_t>(C)), key(static_cast<size_t>(C));
    std::vector<int64_t> pos(static_cast<size_t>(C));
    for (int64_t r = b; r < e; ++r) {
      read_weights(probs, pr, r, n, repl, cdf);
      const double* us = up + ur.offset(r);
      int64_t* ys = yp + yr.offset(r);
      if (repl) {
        // Inverse CDF: the first category whose running sum exceeds u * total.
        int64_t last_nonzero = 0;
        for (int64_t c = 0; c < C; ++c) {
          if (cdf[static_cast<size_t>(c)] > 0) last_nonzero = c;
          if (c > 0) cdf[static_cast<size_t>(c)] += cdf[static_cast<size_t>(c - 1)];
        }
        const double total = cdf.back();
        for (int64_t s = 0; s < n; ++s) {
          const double t = us[s * ur.stride] * total;
          const int64_t c = std::upper_bound(cdf.begin(), cdf.end(), t) - cdf.begin();
          ys[s * yr.stride] = std::min(c, last_nonzero);  // u * total rounding up to total
        }
      } else {
        // Exponential race: the n largest log(1 - u) / p (u^(1/p) with u in (0, 1]);
        // zero weights never win (-inf); ties go to the lower category. The log is
        // sample_rule.h's, which the CUDA kernel prints: the same keys there.
        for (int64_t c = 0; c < C; ++c) {
          const double p = cdf[static_cast<size_t>(c)];
          key[static_cast<size_t>(c)] = p > 0 ? kiln_race_log(1.0 - us[c * ur.stride]) / p
                                              : -std::numeric_limits<double>::infinity();
        }
        std::iota(pos.begin(), pos.end(), int64_t{0});
        std::partial_sort(pos.begin(), pos.begin() + n, pos.end(),
                          RowOrder<double>{key.data(), true});
        for (int64_t s = 0; s < n; ++s) ys[s * yr.stride] = pos[static_cast<size_t>(s)];
      }
    }
  });
}

Attrs order_attrs(int64_t dim, bool descending, int64_t k) {
  return Attrs().set("dim", dim).set("descending", descending).set("k", k);
}

// sort/topk values: x's entries at `idx` (gather carries the gradient).
std::tuple<Tensor, Tensor> values_at(const Tensor& x, int64_t dim, const Tensor& idx) {
  if (x.dim() == 0) return {copy(x), idx};
  return {gather(x, dim, idx), idx};
}

}  // namespace

void register_sort(OpTable& t) {
  OpInfo& a = t[OpId::argsort];
  a.infer = infer_argsort;
  a.kernel = kernel_argsort;
  a.saves = kSaveNone;
  OpInfo& m = t[OpId::multinomial];
  m.infer = infer_multinomial;
  m.kernel = kernel_multinomial;
  m.saves = kSaveNone;
}

}  // namespace ops

Tensor argsort(const Tensor& x, int64_t dim, bool descending, bool /*stable: always*/) {
  return dispatch1(OpId::argsort, {x}, ops::order_attrs(dim, descending, -1));
}

std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  return ops::values_at(x, dim, argsort(x, dim, descending, stable));
}

std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest,
                                bool /*sorted: always*/) {
  KILN_CHECK(k >= 0, "[topk] k must be non-negative, got ", k);
  return ops::values_at(x, dim, dispatch1(OpId::argsort, {x}, ops::order_attrs(dim, largest, k)));
}

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement,
                   Generator* generator) {
  ops::check_multinomial_args(probs, num_samples, replacement);  // before drawing anything
  const Dims shape = ops::uniforms_shape(probs, num_samples, replacement);
  // The uniforms on the probabilities' device (the same numbers as on the CPU).
  const Device device = probs.device();
  Tensor u;
  if (generator == nullptr || generator == &default_generator()) {
    u = rand(shape, DType::f64, device);
  } else {
    // A generator of the caller's: its (seed, offset) would be fixed in a
    // traced graph, repeating the same draws every call.
    KILN_CHECK(current_recorder() == nullptr,
               "[multinomial] an explicit generator is not "
               "supported inside kiln::compile (its draws would repeat every call); use the "
               "default generator");
    const uint64_t offset = generator->advance(static_cast<uint64_t>(numel_of(shape)) * 2);
    Attrs at;
    at.set("shape", shape)
        .set("dtype", DType::f64)
        .set("seed", AttrValue(static_cast<int64_t>(generator->seed)))
        .set("offset", AttrValue(static_cast<int64_t>(offset)));
    if (device.is_cpu()) {
      u = dispatch1(OpId::rand_uniform, std::span<const Tensor>(), at);
    } else {
      Tensor drawn[] = {make_tensor(shape, DType::f64, device)};
      device_runtime(device, "multinomial").run(OpId::rand_uniform, {}, at, drawn);
      u = drawn[0];
    }
  }
  return dispatch1(OpId::multinomial, {probs, u},
                   Attrs().set("num_samples", num_samples).set("replacement", replacement));
}

}  // namespace kiln
