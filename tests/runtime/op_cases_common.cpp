// Conformance case helpers shared by the op families, and op_cases() itself.
// (Named *_test.cpp so the test glob compiles it into runtime_tests.)
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "op_cases.h"

namespace kiln::conformance {

double& Ref::at(std::span<const int64_t> idx) {
  return v[static_cast<size_t>(ravel(idx, shape))];
}
double Ref::at(std::span<const int64_t> idx) const {
  return v[static_cast<size_t>(ravel(idx, shape))];
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kContiguous:
      return "contiguous";
    case Kind::kStrided:
      return "strided";
    case Kind::kBroadcast:
      return "broadcast";
    case Kind::kZeroSize:
      return "zero-size";
    case Kind::kOther:
      return "other";
  }
  return "?";
}

namespace {
// splitmix64: a tiny deterministic generator, independent of kiln's Philox.
uint64_t mix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
double unit(uint64_t& s) {
  return static_cast<double>(mix(s) >> 11) * 0x1p-53;
}
}  // namespace

std::vector<double> gen_values(int64_t n, const Values& spec, uint64_t seed) {
  uint64_t s = seed * 7919 + 17;
  std::vector<double> v(static_cast<size_t>(n));
  if (spec.distinct) {
    // A shuffled grid: distinct values, spaced (hi - lo) / n apart.
    std::vector<int64_t> perm(static_cast<size_t>(n));
    std::iota(perm.begin(), perm.end(), 0);
    for (size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[mix(s) % i]);
    double step = (spec.hi - spec.lo) / static_cast<double>(std::max<int64_t>(n, 1));
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = spec.lo + step * (static_cast<double>(perm[i]) + 0.25 + 0.5 * unit(s));
    return v;
  }
  for (double& x : v) {
    x = spec.lo + (spec.hi - spec.lo) * unit(s);
    if (spec.integer) x = std::round(x);
    if (std::abs(x) < spec.min_abs) x = x < 0 ? -spec.min_abs - std::abs(x) : spec.min_abs + x;
  }
  return v;
}

double convert(double v, DType t) {
  switch (t) {
    case DType::f32:
      return static_cast<float>(v);
    case DType::f64:
      return v;
    case DType::f16:
      return static_cast<float>(Half(static_cast<float>(v)));
    case DType::bf16:
      return static_cast<float>(BFloat16(static_cast<float>(v)));
    case DType::i64:
      return static_cast<double>(static_cast<int64_t>(v));
    case DType::i32:
      return static_cast<double>(static_cast<int32_t>(v));
    case DType::u8:
      return static_cast<double>(static_cast<uint8_t>(static_cast<int64_t>(v)));
    case DType::b8:
      return v != 0 ? 1.0 : 0.0;
  }
  return v;
}

bool is_float_dt(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}

Tensor from_doubles(const std::vector<double>& v, const Dims& shape, DType dt) {
  Tensor t = make_tensor(shape, dt);
  if (v.empty()) return t;
  char* base = static_cast<char*>(t.data_ptr());
  visit_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    for (size_t i = 0; i < v.size(); ++i) {
      T x;
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
        x = T(static_cast<float>(v[i]));
      else if constexpr (std::is_same_v<T, bool>)
        x = v[i] != 0;
      else if constexpr (std::is_same_v<T, uint8_t>)
        x = static_cast<uint8_t>(static_cast<int64_t>(v[i]));
      else
        x = static_cast<T>(v[i]);
      std::memcpy(base + i * sizeof(T), &x, sizeof(T));
    }
  });
  return t;
}

Tensor make_input(const Dims& shape, DType dt, const Values& spec0, uint64_t seed, Layout layout) {
  Values spec = spec0;
  if (!is_float_dt(dt)) spec.integer = true;
  if (dt == DType::b8) spec = Values{0.0, 1.0, 0.0, true, false};
  if (dt == DType::u8) {
    spec.lo = std::max(spec.lo, 0.0);
    spec.hi = std::max(spec.hi, spec.lo + 1);
  }
  auto values = [&](const Dims& s) {
    std::vector<double> v = gen_values(numel_of(s), spec, seed);
    if (!is_float_dt(dt) && spec.distinct)
      for (double& x : v) x = std::round(x);
    return from_doubles(v, s, dt);
  };
  const size_t r = shape.size();
  if (layout == Layout::kTransposed && r < 2) layout = Layout::kSliced;
  if (layout == Layout::kSliced && r < 1) layout = Layout::kContiguous;
  if (layout == Layout::kExpanded && (r < 1 || shape[0] == 1)) layout = Layout::kSliced;
  switch (layout) {
    case Layout::kContiguous:
      return values(shape);
    case Layout::kTransposed: {
      Dims s = shape;
      std::swap(s[r - 1], s[r - 2]);
      return transpose(values(s), -1, -2);
    }
    case Layout::kSliced: {
      Dims s = shape;
      s[r - 1] = 2 * shape[r - 1] + 1;
      return slice(values(s), -1, 1, s[r - 1], 2);
    }
    case Layout::kOffset: {
      if (r == 0) return reshape(slice(values({2}), 0, 1, 2), {});
      Dims s = shape;
      s[0] += 1;
      return slice(values(s), 0, 1, s[0]);
    }
    case Layout::kExpanded: {
      Dims s = shape;
      s[0] = 1;
      return expand(values(s), shape);
    }
  }
  return values(shape);
}

Ref to_ref(const Tensor& t) {
  return Ref{t.dtype(), t.shape(), t.to_vector<double>()};
}

Ref make_ref(DType dt, const Dims& shape, double fill) {
  return Ref{dt, shape, std::vector<double>(static_cast<size_t>(numel_of(shape)), fill)};
}

std::vector<int64_t> unravel(int64_t lin, const Dims& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] == 0 ? 0 : lin % shape[d];
    if (shape[d] != 0) lin /= shape[d];
  }
  return idx;
}

int64_t ravel(std::span<const int64_t> idx, const Dims& shape) {
  int64_t lin = 0;
  for (size_t d = 0; d < shape.size(); ++d) lin = lin * shape[d] + idx[d];
  return lin;
}

Dims bshape(const Dims& a, const Dims& b) {
  size_t n = std::max(a.size(), b.size());
  Dims out(n, 1);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i + a.size() >= n ? a[i + a.size() - n] : 1;
    int64_t db = i + b.size() >= n ? b[i + b.size() - n] : 1;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

double bcast_at(const Ref& r, std::span<const int64_t> out_idx) {
  const size_t off = out_idx.size() - r.shape.size();
  int64_t lin = 0;
  for (size_t d = 0; d < r.shape.size(); ++d)
    lin = lin * r.shape[d] + (r.shape[d] == 1 ? 0 : out_idx[off + d]);
  return r.v[static_cast<size_t>(lin)];
}

Ref map_n(const std::vector<Ref>& in, DType out, const std::function<double(const double*)>& f) {
  Dims shape;
  for (const Ref& r : in) shape = bshape(shape, r.shape);
  Ref o = make_ref(out, shape);
  std::vector<double> args(in.size());
  for (int64_t i = 0; i < o.numel(); ++i) {
    std::vector<int64_t> idx = unravel(i, shape);
    for (size_t k = 0; k < in.size(); ++k) args[k] = bcast_at(in[k], idx);
    o.v[static_cast<size_t>(i)] = f(args.data());
  }
  return o;
}

OpCase make_case(std::string name, Kind kind, std::vector<Tensor> inputs, Attrs attrs, RefFn ref,
                 bool grad) {
  OpCase c;
  c.name = std::move(name);
  c.kind = kind;
  c.inputs = std::move(inputs);
  c.attrs = std::move(attrs);
  c.ref = std::move(ref);
  c.grad = grad;
  return c;
}

std::vector<OpCase> op_cases(OpId op) {
  const std::string fam = op_info(op).family;
  if (fam == "unary") return unary_cases(op);
  if (fam == "binary") return binary_cases(op);
  if (fam == "reduce") return reduce_cases(op);
  if (fam == "linalg") return linalg_cases(op);
  if (fam == "conv") return conv_cases(op);
  if (fam == "movement") return movement_cases(op);
  if (fam == "factory") return factory_cases(op);
  if (fam == "scan") return scan_cases(op);
  if (fam == "sort") return sort_cases(op);
  return {};
}

}  // namespace kiln::conformance
