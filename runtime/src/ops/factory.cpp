// Factory primitives (full, arange, rand_uniform, rand_normal) and the public
// factory functions. Factories are ops without tensor inputs so the tracer
// records them and constant folding can evaluate them.
//
// Random numbers are a pure function of the attrs (seed, offset) and the
// element index i, so eager, traced and compiled runs agree and the thread
// count never changes a value:
//   word(j)   = philox4x32(j / 4, 0, seed)[j % 4]   (the 32-bit stream of `seed`)
//   element i reads W consecutive words starting at word(offset + i * W), with
//     W = 1 for uniform f32/f16/bf16, 2 for uniform f64 and normal f32/f16/bf16,
//     4 for normal f64.
//   uniform f32:      uint_to_unit_float(w0)
//   uniform f16/bf16: (w0 >> (32 - m)) * 2^-m, m = 11 / 8 mantissa bits, so the
//                     value is exact in the dtype and stays < 1
//   uniform f64:      uint_to_unit_double(w0 << 32 | w1)
//   normal:           Box-Muller z = sqrt(-2 ln(1 - u1)) * cos(2 pi u2); f32/f16/bf16
//                     compute in float with u1, u2 = uint_to_unit_float(w0), (w1);
//                     f64 in double with u1, u2 from (w0, w1) and (w2, w3).
//                     1 - u1 lies in (0, 1], so the log is finite.
// random_rule.h holds this rule's code, shared with the CUDA backend's kernels.
// rand()/randn() reserve numel * W words of the default generator with
// Generator::advance and pass its seed and the returned offset as attrs.
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>

#include "kiln/autograd.h"
#include "kiln/device_runtime.h"
#include "kiln/random.h"
#include "ops/helpers.h"
#include "ops/registry.h"
#include "random_rule.h"
#include "tensor_storage.h"

namespace kiln {
namespace ops {
namespace {

// Elements per parallel chunk of the random kernels: Philox costs far more than
// a store, so chunks smaller than the elementwise grain already pay off.
constexpr int64_t kRandGrain = 4096;

// Missing attrs come from hand-built IR, so they are user errors, not asserts.
void require(const Attrs& at, const char* op, std::initializer_list<const char*> names) {
  for (const char* n : names) KILN_CHECK(at.has(n), "[", op, "] missing attribute '", n, "'");
}

// Integer range a value must fit to be stored in an integer dtype. u8 accepts
// negatives down to -255 that wrap, like PyTorch's overflow check.
void int_range(DType dt, double& lo, double& hi) {
  switch (dt) {
    case DType::i32:
      lo = -2147483648.0;
      hi = 2147483647.0;
      break;
    case DType::u8:
      lo = -255.0;
      hi = 255.0;
      break;
    default:
      lo = -0x1p63;
      hi = 0x1p63;
      break;  // i64: hi is exclusive, checked below
  }
}

// Largest finite value of a floating dtype.
double float_max(DType dt) {
  switch (dt) {
    case DType::f16:
      return 65504.0;
    case DType::bf16:
      return 3.3895313892515355e38;
    case DType::f32:
      return std::numeric_limits<float>::max();
    default:
      return std::numeric_limits<double>::max();
  }
}

}  // namespace
}  // namespace ops

void check_scalar_fits(const Scalar& s, DType dt, const char* op) {
  if (is_integral(dt)) {
    double lo, hi;
    ops::int_range(dt, lo, hi);
    if (!s.is_floating()) {
      const int64_t iv = s.to_int();
      const double d = static_cast<double>(iv);
      KILN_CHECK(dt == DType::i64 || (d >= lo && d <= hi), "[", op, "] value ", iv,
                 " cannot be converted to ", dt, " without overflow");
    } else {
      const double v = s.to_double(), t = std::trunc(v);
      const bool ok = std::isfinite(v) && t >= lo && (dt == DType::i64 ? t < hi : t <= hi);
      KILN_CHECK(ok, "[", op, "] value ", v, " cannot be converted to ", dt, " without overflow");
    }
  } else if (is_floating(dt)) {
    const double v = s.to_double();
    KILN_CHECK(!std::isfinite(v) || std::fabs(v) <= ops::float_max(dt), "[", op, "] value ", v,
               " cannot be converted to ", dt, " without overflow");
  }
}

namespace ops {
namespace {

// ---------------- full ----------------
void infer_full(std::span<const Tensor>, const Attrs& at, std::vector<TensorMeta>& out) {
  require(at, "full", {"shape", "value", "dtype"});
  DType dt = at.dtype("dtype");
  const Dims& shape = at.dims("shape");
  check_shape(shape, "full");
  check_scalar_fits(full_scalar(at), dt, "full");
  out.push_back({dt, shape});
}

template <typename T>
T full_value(const Attrs& at) {
  double v = at.f("value");
  if constexpr (std::is_same_v<T, bool>) {
    return at.has("ivalue") ? at.i("ivalue") != 0 : v != 0;
  } else if constexpr (std::is_integral_v<T>) {
    // Integers come from "ivalue" when present so large i64 values stay exact.
    return static_cast<T>(at.has("ivalue") ? at.i("ivalue") : static_cast<int64_t>(v));
  } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return T(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

void kernel_full(std::span<const Tensor>, const Attrs& at, std::span<Tensor> out) {
  const Tensor& o = out[0];
  visit_dtype(o.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T v = full_value<T>(at);
    std::array<char*, 1> base{static_cast<char*>(o.data_ptr())};
    std::array<Dims, 1> st{broadcast_byte_strides(o, o.shape())};
    strided_loop<1>(o.shape(), base, st, [&](char** p, const int64_t* s, int64_t n) {
      if (s[0] == sizeof(T)) {
        T* d = reinterpret_cast<T*>(p[0]);
        for (int64_t i = 0; i < n; ++i) d[i] = v;
      } else {
        for (int64_t i = 0; i < n; ++i) std::memcpy(p[0] + i * s[0], &v, sizeof(T));
      }
    });
  });
}

// Runs `fill(T* data, n)` on out's buffer, through a contiguous temporary when
// the caller preallocated a strided output.
template <typename F>
void fill_contiguous(const Tensor& out, F&& fill) {
  Tensor dst = out.is_contiguous() ? out : make_tensor(out.shape(), out.dtype());
  visit_dtype(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    fill(static_cast<T*>(dst.data_ptr()), dst.numel());
  });
  if (!dst.is_same(out)) copy_into(out, dst);
}

// ---------------- arange ----------------
// Geometry of an arange call after validation. Integer dtypes use truncated
// int64 bounds (exact arithmetic); floating dtypes use double.
struct ArangeSpec {
  int64_t n = 0;
  int64_t istart = 0, istep = 0;
  double start = 0, step = 0;
};

ArangeSpec arange_spec(const Attrs& at) {
  require(at, "arange", {"start", "end", "step", "dtype"});
  DType dt = at.dtype("dtype");
  double start = at.f("start"), end = at.f("end"), step = at.f("step");
  KILN_CHECK(dt != DType::b8, "[arange] dtype bool is not supported");
  KILN_CHECK(std::isfinite(start) && std::isfinite(end), "[arange] unsupported range: ", start,
             " -> ", end, " (bounds must be finite)");
  KILN_CHECK(!std::isnan(step), "[arange] step must not be nan");
  ArangeSpec sp;
  double size_d;
  if (is_integral(dt)) {
    auto to_i64 = [&](double v, const char* what) {
      KILN_CHECK(std::isfinite(v) && v >= -0x1p63 && v < 0x1p63, "[arange] ", what, " ", v,
                 " does not fit ", dt);
      return static_cast<int64_t>(v);
    };
    int64_t s = to_i64(start, "start"), e = to_i64(end, "end"), st = to_i64(step, "step");
    KILN_CHECK(st != 0, "[arange] step must be nonzero (step ", step, " is 0 as ", dt, ")");
    KILN_CHECK((st > 0 && e >= s) || (st < 0 && e <= s),
               "[arange] upper bound and lower bound "
               "inconsistent with step sign (start=",
               s, ", end=", e, ", step=", st, ")");
    // Exact ceil((e - s) / st) in 128 bits (e - s can overflow int64).
    __int128 sgn = st > 0 ? 1 : -1;
    __int128 n = (static_cast<__int128>(e) - s + st - sgn) / st;
    size_d = static_cast<double>(n);
    sp.istart = s;
    sp.istep = st;
    if (n > 0 && dt != DType::i64) {
      double lo, hi;
      int_range(dt, lo, hi);
      if (dt == DType::u8) lo = 0;
      __int128 last = static_cast<__int128>(s) + (n - 1) * st;
      KILN_CHECK(static_cast<double>(s) >= lo && static_cast<double>(s) <= hi &&
                     static_cast<double>(last) >= lo && static_cast<double>(last) <= hi,
                 "[arange] values from ", s, " to ", static_cast<int64_t>(last),
                 " do not fit dtype ", dt);
    }
  } else {
    KILN_CHECK(step != 0, "[arange] step must be nonzero");
    KILN_CHECK((step > 0 && end >= start) || (step < 0 && end <= start),
               "[arange] upper bound "
               "and lower bound inconsistent with step sign (start=",
               start, ", end=", end, ", step=", step, ")");
    size_d = std::ceil((end - start) / step);
  }
  KILN_CHECK(size_d >= 0 && size_d < 0x1p62, "[arange] invalid size ", size_d, " for start=", start,
             ", end=", end, ", step=", step, " (possible overflow)");
  sp.n = static_cast<int64_t>(size_d);
  sp.start = start;
  sp.step = step;
  check_shape({sp.n}, "arange");
  return sp;
}

void infer_arange(std::span<const Tensor>, const Attrs& at, std::vector<TensorMeta>& out) {
  ArangeSpec sp = arange_spec(at);
  out.push_back({at.dtype("dtype"), Dims{sp.n}});
}

void kernel_arange(std::span<const Tensor>, const Attrs& at, std::span<Tensor> out) {
  ArangeSpec sp = arange_spec(at);
  fill_contiguous(out[0], [&](auto* d, int64_t n) {
    using T = std::remove_pointer_t<decltype(d)>;
    parallel_for(0, n, kDefaultGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        if constexpr (std::is_integral_v<T>) {
          // Computed in uint64 so the (validated) i64 sequence never overflows.
          uint64_t v = static_cast<uint64_t>(sp.istart) +
                       static_cast<uint64_t>(i) * static_cast<uint64_t>(sp.istep);
          d[i] = static_cast<T>(static_cast<int64_t>(v));
        } else {
          double v = sp.start + static_cast<double>(i) * sp.step;
          if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
            d[i] = T(static_cast<float>(v));
          else
            d[i] = static_cast<T>(v);
        }
      }
    });
  });
}

// ---------------- rand_uniform / rand_normal ----------------
// Philox words one element consumes (see the top of the file).
int64_t words_per_element(bool normal, DType dt) {
  int64_t w = dt == DType::f64 ? 2 : 1;
  return normal ? 2 * w : w;
}

template <bool Normal>
void infer_random(std::span<const Tensor>, const Attrs& at, std::vector<TensorMeta>& out) {
  const char* op = Normal ? "rand_normal" : "rand_uniform";
  require(at, op, {"shape", "dtype", "seed", "offset"});
  DType dt = at.dtype("dtype");
  KILN_CHECK(is_floating(dt), "[", op, "] expects a floating dtype, got ", dt);
  check_shape(at.dims("shape"), op);
  out.push_back({dt, at.dims("shape")});
}

// Element values from their Philox words: the shared rule (random_rule.h),
// which the CUDA backend prints into its random kernels too.
template <typename T, bool Normal>
T random_value(const uint32_t* w) {
  if constexpr (std::is_same_v<T, double>) {
    if constexpr (Normal)
      return rng::kiln_rand_normal_f64(w[0], w[1], w[2], w[3]);
    else
      return rng::kiln_rand_unit_f64(w[0], w[1]);
  } else if constexpr (Normal) {
    return T(rng::kiln_rand_normal_f32(w[0], w[1]));
  } else if constexpr (std::is_same_v<T, Half>) {
    return T(rng::kiln_rand_unit_f16(w[0]));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return T(rng::kiln_rand_unit_bf16(w[0]));
  } else {
    return T(rng::kiln_rand_unit_f32(w[0]));
  }
}

template <bool Normal>
void kernel_random(std::span<const Tensor>, const Attrs& at, std::span<Tensor> out) {
  const uint64_t seed = static_cast<uint64_t>(at.i("seed"));
  const uint64_t offset = static_cast<uint64_t>(at.i("offset"));
  fill_contiguous(out[0], [&](auto* d, int64_t n) {
    using T = std::remove_pointer_t<decltype(d)>;
    if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, Half> ||
                  std::is_same_v<T, BFloat16>) {
      constexpr int W = (std::is_same_v<T, double> ? 2 : 1) * (Normal ? 2 : 1);
      parallel_for(0, n, kRandGrain, [&](int64_t b, int64_t e) {
        // Each chunk regenerates the blocks it needs: no state crosses chunks.
        uint64_t cached = ~uint64_t{0};
        std::array<uint32_t, 4> block{};
        uint32_t w[W];
        for (int64_t i = b; i < e; ++i) {
          uint64_t j = offset + static_cast<uint64_t>(i) * W;
          for (int k = 0; k < W; ++k, ++j) {
            if ((j >> 2) != cached) {
              cached = j >> 2;
              block = philox4x32(cached, 0, seed);
            }
            w[k] = block[j & 3];
          }
          d[i] = random_value<T, Normal>(w);
        }
      });
    } else {
      KILN_ASSERT(false, "random kernel on non-floating dtype");
    }
  });
}

void reg(OpTable& t, OpId id, InferFn infer, KernelFn kernel) {
  OpInfo& e = t[id];
  e.infer = infer;
  e.kernel = kernel;
  e.vjp = nullptr;  // kNonDiff
  e.saves = kSaveNone;
}

std::mutex& generator_mutex() {
  static std::mutex m;
  return m;
}

Tensor call_factory(OpId op, const Attrs& at) {
  return dispatch1(op, std::span<const Tensor>(), at);
}

// A draw on `device`: CUDA devices run the same rule in their own kernel
// (random_rule.h), so no host buffer is copied; traced draws stay CPU factory
// ops moved to the device, as before.
Tensor random_tensor(bool normal, const Dims& shape, DType dtype, const char* name,
                     Device device = Device::cpu()) {
  KILN_CHECK(is_floating(dtype), "[", name, "] expects a floating dtype, got ", dtype);
  check_shape(shape, name);
  if (!device.is_cpu()) (void)device_runtime(device, name);  // no draw reserved if unusable
  uint64_t words = static_cast<uint64_t>(numel_of(shape) * words_per_element(normal, dtype));
  uint64_t seed, offset;
  {
    std::lock_guard<std::mutex> lock(generator_mutex());
    Generator& g = default_generator();
    seed = g.seed;
    offset = g.advance(words);
  }
  Attrs at;
  at.set("shape", shape)
      .set("dtype", dtype)
      .set("seed", AttrValue(static_cast<int64_t>(seed)))
      .set("offset", AttrValue(static_cast<int64_t>(offset)));
  const OpId op = normal ? OpId::rand_normal : OpId::rand_uniform;
  if (device.is_cpu()) return call_factory(op, at);
  // Traced: recorded as the CPU's; the plan makes it on the device it runs on
  // (a traced value has no device of its own: moving it would raise).
  if (current_recorder() != nullptr) return call_factory(op, at);
  Tensor out[] = {make_tensor(shape, dtype, device)};
  if (out[0].numel() > 0) device_runtime(device, name).run(op, {}, at, out);
  return out[0];
}

}  // namespace

void register_factory(OpTable& t) {
  reg(t, OpId::full, infer_full, kernel_full);
  reg(t, OpId::arange, infer_arange, kernel_arange);
  reg(t, OpId::rand_uniform, infer_random<false>, kernel_random<false>);
  reg(t, OpId::rand_normal, infer_random<true>, kernel_random<true>);
}

}  // namespace ops

// ---------------- public factories ----------------
Tensor empty(const Dims& shape, DType dtype) {
  // While tracing, an uninitialised buffer must still be a recorded op.
  if (current_recorder()) return full(shape, 0, dtype);
  check_shape(shape, "empty");
  return make_tensor(shape, dtype);
}

Tensor zeros(const Dims& shape, DType dtype) {
  return full(shape, 0, dtype);
}
Tensor ones(const Dims& shape, DType dtype) {
  return full(shape, 1, dtype);
}

Tensor full(const Dims& shape, const Scalar& value, DType dtype) {
  Attrs at;
  // AttrValue(...) spelled out: Attrs::set(const char*, int) would otherwise
  // win overload resolution for double and int64_t and truncate them.
  at.set("shape", shape).set("value", AttrValue(value.to_double()));
  if (!value.is_floating()) at.set("ivalue", AttrValue(value.to_int()));
  at.set("dtype", dtype);
  return ops::call_factory(OpId::full, at);
}

Tensor full(const Dims& shape, const Scalar& value, DType dtype, Device device) {
  if (device.is_cpu()) return full(shape, value, dtype);
  check_shape(shape, "full");
  Tensor t = make_tensor(shape, dtype, device);
  t.fill_(value);
  return t;
}
Tensor zeros(const Dims& shape, DType dtype, Device device) {
  return full(shape, 0, dtype, device);
}
Tensor ones(const Dims& shape, DType dtype, Device device) {
  return full(shape, 1, dtype, device);
}

Tensor empty_like(const Tensor& t) {
  if (t.device().is_cpu()) return empty(t.shape(), t.dtype());
  check_shape(t.shape(), "empty_like");
  return make_tensor(t.shape(), t.dtype(), t.device());
}
// On t's device, as PyTorch's *_like (autograd seeds and zero gradients with
// them: a CUDA graph must get CUDA tensors).
Tensor zeros_like(const Tensor& t) {
  return zeros(t.shape(), t.dtype(), t.device());
}
Tensor ones_like(const Tensor& t) {
  return ones(t.shape(), t.dtype(), t.device());
}
Tensor full_like(const Tensor& t, const Scalar& value) {
  return full(t.shape(), value, t.dtype(), t.device());
}

Tensor arange(const Scalar& end) {
  return arange(0, end, 1);
}

Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step) {
  bool fl = start.is_floating() || end.is_floating() || step.is_floating();
  return arange(start, end, step, fl ? kDefaultFloat : DType::i64);
}

Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, DType dtype) {
  Attrs at;
  at.set("start", AttrValue(start.to_double()))
      .set("end", AttrValue(end.to_double()))
      .set("step", AttrValue(step.to_double()))
      .set("dtype", dtype);
  return ops::call_factory(OpId::arange, at);
}

Tensor linspace(double start, double end, int64_t steps, DType dtype) {
  KILN_CHECK(steps >= 0, "[linspace] number of steps must be non-negative, got ", steps);
  KILN_CHECK(std::isfinite(start) && std::isfinite(end),
             "[linspace] start and end must be "
             "finite, got ",
             start, " and ", end);
  if (steps <= 1) return full({steps}, start, dtype);
  // PyTorch's symmetric form: the first half counts up from start, the second
  // down from end, so both endpoints are exact.
  double step = (end - start) / static_cast<double>(steps - 1);
  Tensor idx = arange(0, steps, 1, DType::f64);
  Tensor up = idx * step + start;
  Tensor down = end - (static_cast<double>(steps - 1) - idx) * step;
  return cast(where(lt(idx, static_cast<double>(steps / 2)), up, down), dtype);
}

Tensor eye(int64_t n, int64_t m, DType dtype) {
  KILN_CHECK(n >= 0, "[eye] n must be non-negative, got ", n);
  if (m == -1) m = n;
  KILN_CHECK(m >= 0, "[eye] m must be non-negative, got ", m);
  Tensor rows = reshape(arange(0, n, 1, DType::i64), {n, 1});
  return cast(eq(rows, arange(0, m, 1, DType::i64)), dtype);
}

template <typename T>
Tensor from_vector(const std::vector<T>& values, const Dims& shape) {
  const int64_t nv = static_cast<int64_t>(values.size());
  Dims sh = shape.empty() ? Dims{nv} : shape;
  check_shape(sh, "from_vector");
  KILN_CHECK(numel_of(sh) == nv, "[from_vector] ", nv, " values cannot fill shape ", sh, " (",
             numel_of(sh), " elements)");
  Tensor t = make_tensor(sh, dtype_v<T>);
  if (nv == 0) return t;
  T* d = t.data<T>();
  if constexpr (std::is_same_v<T, bool>) {
    // vector<bool> is packed: copy element by element.
    for (int64_t i = 0; i < nv; ++i) d[i] = values[static_cast<size_t>(i)];
  } else {
    std::memcpy(d, values.data(), values.size() * sizeof(T));
  }
  return t;
}

template Tensor from_vector<float>(const std::vector<float>&, const Dims&);
template Tensor from_vector<double>(const std::vector<double>&, const Dims&);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Dims&);
template Tensor from_vector<int32_t>(const std::vector<int32_t>&, const Dims&);
template Tensor from_vector<uint8_t>(const std::vector<uint8_t>&, const Dims&);
template Tensor from_vector<bool>(const std::vector<bool>&, const Dims&);

Tensor from_blob(void* data, const Dims& shape, DType dtype, std::function<void(void*)> deleter) {
  // On error the deleter is not called: the caller still owns the memory.
  check_shape(shape, "from_blob");
  int64_t n = numel_of(shape);
  KILN_CHECK(data != nullptr || n == 0, "[from_blob] data is null for shape ", shape);
  auto st = std::make_shared<StorageImpl>();
  st->data = data;
  st->nbytes = static_cast<size_t>(n) * dtype_size(dtype);
  st->allocator = nullptr;
  st->deleter = std::move(deleter);
  st->device = Device::cpu();
  return detail::tensor_over(std::move(st), shape, dtype);
}

// ---------------- random ----------------
void manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(ops::generator_mutex());
  default_generator().seed = seed;
  default_generator().offset = 0;
}

Tensor rand(const Dims& shape, DType dtype) {
  return ops::random_tensor(false, shape, dtype, "rand");
}
Tensor randn(const Dims& shape, DType dtype) {
  return ops::random_tensor(true, shape, dtype, "randn");
}
Tensor rand(const Dims& shape, DType dtype, Device device) {
  return ops::random_tensor(false, shape, dtype, "rand", device);
}
Tensor randn(const Dims& shape, DType dtype, Device device) {
  return ops::random_tensor(true, shape, dtype, "randn", device);
}
// On t's device: the same numbers as on the CPU (one Philox stream).
Tensor rand_like(const Tensor& t) {
  return ops::random_tensor(false, t.shape(), t.dtype(), "rand_like", t.device());
}
Tensor randn_like(const Tensor& t) {
  return ops::random_tensor(true, t.shape(), t.dtype(), "randn_like", t.device());
}

Tensor randint(int64_t low, int64_t high, const Dims& shape, DType dtype) {
  KILN_CHECK(low < high, "[randint] low must be less than high, got low=", low, ", high=", high);
  __int128 range = static_cast<__int128>(high) - low;
  KILN_CHECK(range <= std::numeric_limits<int64_t>::max(), "[randint] range [", low, ", ", high,
             ") is too large");
  if (!is_floating(dtype)) {
    double lo = 0, hi = 1;
    if (is_integral(dtype)) ops::int_range(dtype, lo, hi);
    if (dtype == DType::u8) lo = 0;
    bool ok = dtype == DType::i64 ||
              (static_cast<double>(low) >= lo && static_cast<double>(high - 1) <= hi);
    KILN_CHECK(ok, "[randint] range [", low, ", ", high, ") does not fit dtype ", dtype);
  }
  check_shape(shape, "randint");
  const int64_t r = static_cast<int64_t>(range);
  // floor(u * r) + low; u * r can round up to r when r > 2^53, hence the clamp.
  Tensor k = cast(rand(shape, DType::f64) * static_cast<double>(r), DType::i64);
  k = minimum(k, r - 1);
  return cast(k + low, dtype);
}

Tensor bernoulli(const Tensor& p) {
  KILN_CHECK(is_floating(p.dtype()), "[bernoulli] p must be a floating tensor, got dtype ",
             p.dtype());
  if (!p.is_symbolic()) {  // while tracing, values are unknown (README: Known limits)
    NoGradGuard ng;
    Tensor bad = reshape(logical_not(logical_and(ge(p, 0.0), le(p, 1.0))), {-1});  // NaN too
    if (p.numel() > 0 && sum(bad).item<int64_t>() > 0) {
      const int64_t i = argmax(cast(bad, DType::i32)).item<int64_t>();
      throw Error(str("[bernoulli] p must hold probabilities in [0, 1], got ",
                      element_as_double(p, i), " at flat index ", i, " (shape ", p.shape(), ")"));
    }
  }
  // u < p with u uniform in [0, 1).
  return cast(lt(rand_like(p), p), p.dtype());
}

}  // namespace kiln
