// The random program generator (see random_program.h). Each step picks an op
// from the vocabulary, operands among the values so far (or a new input of a
// fitting shape), and runs the step once on the generator's example data, so
// every later choice sees real result shapes and dtypes.
#include "random_program.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kiln::testing {
namespace {

constexpr int64_t kMaxNumel = 64;
constexpr size_t kMaxInputs = 4;
constexpr int64_t kMaxRank = 4;

using Args = std::vector<Tensor>;

bool broadcast(const Dims& a, const Dims& b, Dims& out) {
  const size_t r = std::max(a.size(), b.size());
  out = Dims(r, 1);
  for (size_t i = 0; i < r; ++i) {
    const int64_t x = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t y = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (x != y && x != 1 && y != 1) return false;
    out[r - 1 - i] = std::max(x, y);
  }
  return true;
}

// NumPy matmul result shape; false if the shapes do not multiply.
bool matmul_shape(const Dims& a, const Dims& b, Dims& out) {
  if (a.empty() || b.empty()) return false;
  const int64_t k = a.back();
  if (b.size() == 1) {
    if (b[0] != k) return false;
    out = Dims(a.begin(), a.end() - 1);
    return true;
  }
  if (b[b.size() - 2] != k) return false;
  if (a.size() == 1) {
    out = Dims(b.begin(), b.end() - 2);
    out.push_back(b.back());
    return true;
  }
  Dims batch;
  if (!broadcast(Dims(a.begin(), a.end() - 2), Dims(b.begin(), b.end() - 2), batch)) return false;
  out = batch;
  out.push_back(a[a.size() - 2]);
  out.push_back(b.back());
  return true;
}

std::string dims_str(const Dims& d) {
  return str(d);
}

class Gen {
 public:
  Gen(uint64_t seed, bool grad) : rng_(seed), grad_(grad) {
    p_.seed = seed;
    p_.grad = grad;
    fdt_ = grad || rng_.chance(0.25) ? DType::f64 : DType::f32;
  }

  Program run() {
    NoGradGuard ng;
    new_input(random_shape());
    if (rng_.chance(0.3))
      new_input(rng_.chance(0.5) ? variant_of(vals_[0].shape()) : random_shape());
    const int64_t n = rng_.uniform(3, 14);
    for (int64_t i = 0; i < n; ++i) {
      for (int attempt = 0; attempt < 20 && !step(); ++attempt) {
      }
    }
    // The last value, plus up to two others (inputs and repeats included).
    p_.outputs.push_back(static_cast<int>(vals_.size()) - 1);
    const int64_t extra = rng_.uniform(0, 2);
    for (int64_t i = 0; i < extra; ++i)
      p_.outputs.push_back(
          static_cast<int>(rng_.uniform(0, static_cast<int64_t>(vals_.size()) - 1)));
    return std::move(p_);
  }

 private:
  Rng rng_;
  bool grad_;
  DType fdt_;
  Program p_;
  std::vector<Tensor> vals_;  // example value of each value id

  // ---- values ----
  const Tensor& val(int id) const { return vals_[static_cast<size_t>(id)]; }
  bool is_float(int id) const { return is_floating(val(id).dtype()); }
  std::string name(int id) const { return str("v", id); }

  int new_input(const Dims& shape) {
    const DType dt = fdt_;
    const int id = static_cast<int>(vals_.size());
    Tensor t = random_tensor(rng_, dt, shape, rng_.chance(0.2));
    vals_.push_back(t);
    p_.inputs.push_back(t);
    p_.input_value.push_back(id);
    p_.meta.push_back(str(t.dtype(), t.shape()));
    p_.dtypes.push_back(t.dtype());
    return id;
  }
  bool room() const { return p_.inputs.size() < kMaxInputs; }

  // Runs fn on the example values and records the step "vN = op(operands, extra)".
  bool emit(std::vector<int> in, const std::string& op, const std::string& extra, Program::Fn fn) {
    Args args;
    for (int i : in) args.push_back(val(i));
    Tensor out;
    std::string call = op + "(";
    for (size_t i = 0; i < in.size(); ++i) call += str(i ? ", " : "", name(in[i]));
    call += str(extra.empty() || in.empty() ? "" : ", ", extra, ")");
    try {
      out = fn(args);
    } catch (const Error& e) {
      p_.gen_errors.push_back(str(call, ": ", e.what()));
      return false;
    }
    if (out.numel() > kMaxNumel || out.dim() > kMaxRank) return false;
    const int id = static_cast<int>(vals_.size());
    vals_.push_back(out);
    p_.meta.push_back(str(out.dtype(), out.shape()));
    p_.dtypes.push_back(out.dtype());
    p_.steps.push_back({std::move(in), std::move(fn), id, str(name(id), " = ", call)});
    return true;
  }
  bool emit(std::vector<int> in, const std::string& op, Program::Fn fn) {
    return emit(std::move(in), op, "", std::move(fn));
  }

  // A value satisfying pred: often the newest (long chains), else any; -1 if none.
  template <typename Pred>
  int choose(Pred pred) {
    std::vector<int> ok;
    for (int i = 0; i < static_cast<int>(vals_.size()); ++i)
      if (pred(i)) ok.push_back(i);
    if (ok.empty()) return -1;
    return rng_.chance(0.5) ? ok.back() : rng_.pick(ok);
  }
  int choose_float() {
    return choose([&](int i) { return is_float(i); });
  }
  int choose_any() {
    return choose([](int) { return true; });
  }

  // ---- shapes ----
  Dims random_shape() {
    const int64_t r = rng_.chance(0.05) ? 0 : rng_.uniform(1, kMaxRank);
    Dims s;
    for (int64_t i = 0; i < r; ++i) s.push_back(rng_.uniform(1, 4));
    while (numel_of(s) > kMaxNumel)
      for (auto& d : s) d = std::max<int64_t>(1, d - 1);
    return s;
  }
  // A shape that broadcasts with s: leading dims dropped, some dims set to 1,
  // or a new leading dim.
  Dims variant_of(const Dims& s) {
    Dims v(s.begin() + rng_.uniform(0, static_cast<int64_t>(s.size())), s.end());
    for (auto& d : v)
      if (rng_.chance(0.3)) d = 1;
    if (rng_.chance(0.2) && static_cast<int64_t>(s.size()) < kMaxRank) {
      const int64_t n = rng_.uniform(2, 3);
      if (numel_of(s) * n <= kMaxNumel && v.size() == s.size()) v.insert(0, n);
    }
    return v;
  }
  // Random shape with numel n and rank r (r > 0 or n == 1).
  Dims factor(int64_t n, int64_t r) {
    Dims s(static_cast<size_t>(r), 1);
    if (r == 0) return s;
    for (int64_t p = 2; n > 1;) {
      if (n % p == 0) {
        s[static_cast<size_t>(rng_.uniform(0, r - 1))] *= p;
        n /= p;
      } else {
        ++p;
      }
    }
    return s;
  }
  int64_t rand_dim(int64_t rank) {  // a dim of a tensor of rank >= 1, sometimes negative
    const int64_t d = rng_.uniform(0, rank - 1);
    return rng_.chance(0.3) ? d - rank : d;
  }
  double scalar() {
    if (rng_.chance(0.25)) return rng_.pick(std::vector<double>{1.0, 0.0, -0.0, 2.0});
    double s = 0;
    while (s == 0) s = static_cast<double>(rng_.uniform(-8, 8)) / 4;
    return s;
  }

  // A partner for a binary op with x: an existing value that broadcasts (same
  // dtype family when `float_only`) or a new input of a broadcast variant shape.
  int partner(int x, bool float_only) {
    const Dims& s = val(x).shape();
    int y = choose([&](int i) {
      Dims out;
      return (!float_only || is_float(i)) && broadcast(s, val(i).shape(), out) &&
             numel_of(out) <= kMaxNumel;
    });
    if (room() && (y < 0 || rng_.chance(0.3))) y = new_input(variant_of(s));
    return y;
  }

  bool step() {
    const int64_t r = rng_.uniform(0, 99);
    if (r < 16) return unary();
    if (r < 28) return binary();
    if (r < 33) return scalar_binary();
    if (r < 37) return where_op();
    if (r < 40) return cast_op();
    if (r < 50) return reduce();
    if (r < 72) return movement();
    if (r < 77) return matmul_op();
    if (r < 83) return composite();
    if (r < 89) return constant_op();
    if (r < 92) return identity_chain();
    if (r < 94) return commuted_pair();
    if (r < 97) return repeat_step();
    return random_op();
  }

  // ---- what the passes look for ----
  // A constant tensor made inside the program (ones, zeros, -0.0, arange) of a
  // broadcasting shape and any dtype: neutral elements, promotion, folding.
  bool constant_op() {
    const int x = choose_any();
    if (x < 0) return false;
    const Tensor t = val(x);
    const Dims s = variant_of(t.shape());
    Dims out;
    if (!broadcast(t.shape(), s, out) || numel_of(out) > kMaxNumel) return false;
    const DType dt = rng_.pick(
        std::vector<DType>{DType::f32, DType::f64, DType::i64, DType::i32, DType::b8, fdt_, fdt_});
    const std::string extra = str(s, ", ", dt);
    switch (rng_.uniform(0, 6)) {
      case 0:
        return emit({x}, "mul_ones", extra, [=](const Args& a) { return a[0] * ones(s, dt); });
      case 1:
        return emit({x}, "div_ones", extra, [=](const Args& a) { return a[0] / ones(s, dt); });
      case 2:
        return emit({x}, "add_zeros", extra, [=](const Args& a) { return a[0] + zeros(s, dt); });
      case 3:
        return emit({x}, "sub_zeros", extra, [=](const Args& a) { return a[0] - zeros(s, dt); });
      case 4:
        return emit({x}, "add_full(-0.0)", extra,
                    [=](const Args& a) { return a[0] + full(s, -0.0, dt); });
      case 5:
        return emit({x}, "mul_full(2.5)", extra,
                    [=](const Args& a) { return a[0] * full(s, 2.5, dt); });
      default:
        return emit({x}, "add_arange", extra,
                    [=](const Args& a) { return a[0] + arange(0, numel_of(s)).reshape(s).to(dt); });
    }
  }

  // Chains that compute their input again (or 0): what simplify removes.
  bool identity_chain() {
    const int x = choose_any();
    if (x < 0) return false;
    const Tensor t = val(x);
    const int64_t rank = t.dim();
    switch (rng_.uniform(0, 5)) {
      case 0:
        return emit({x}, "neg(neg)", [](const Args& a) { return neg(neg(a[0])); });
      case 1: {
        if (rank < 2) return false;
        std::vector<int64_t> p(static_cast<size_t>(rank)), inv(p.size());
        std::iota(p.begin(), p.end(), 0);
        for (size_t i = p.size(); i > 1; --i)
          std::swap(p[i - 1], p[static_cast<size_t>(rng_.uniform(0, static_cast<int64_t>(i) - 1))]);
        for (size_t i = 0; i < p.size(); ++i)
          inv[static_cast<size_t>(p[i])] = static_cast<int64_t>(i);
        const Dims dp(p), di(inv);
        return emit({x}, "permute_and_back", dims_str(dp),
                    [=](const Args& a) { return a[0].permute(dp).permute(di); });
      }
      case 2: {
        const Dims s = factor(t.numel(), rng_.uniform(1, kMaxRank)), back = t.shape();
        return emit({x}, "reshape_and_back", dims_str(s),
                    [=](const Args& a) { return a[0].reshape(s).reshape(back); });
      }
      case 3: {
        const DType wide = is_floating(t.dtype()) ? DType::f64 : DType::i64;
        return emit({x}, "cast_wide_and_back",
                    [wide](const Args& a) { return cast(cast(a[0], wide), a[0].dtype()); });
      }
      case 4:
        return emit({x}, "expand_expand", [](const Args& a) {
          Dims mid = a[0].shape();
          mid.insert(0, 2);
          Dims fin = mid;
          fin[0] = -1;
          fin.insert(0, 1);
          return a[0].expand(mid).expand(fin);
        });
      default:
        return emit({x}, "x-x", [](const Args& a) { return a[0] - a[0]; });
    }
  }

  // Signed zeros (x * ±0.0 keeps x's signs), then a commutative op on two
  // values in both operand orders: what CSE may merge only when bit-exact.
  bool commuted_pair() {
    const int x = choose_any();
    if (x < 0) return false;
    if (is_float(x) && rng_.chance(0.5)) {
      const double z = rng_.chance(0.5) ? 0.0 : -0.0;
      return emit({x}, "signed_zeros", str(z == 0 && std::signbit(z) ? "-0.0" : "0.0"),
                  [z](const Args& a) { return a[0] * z; });
    }
    const int y = partner(x, false);
    if (y < 0) return false;
    using F = Tensor (*)(const Tensor&, const Tensor&);
    static const std::vector<std::pair<const char*, F>> ops = {
        {"add", [](const Tensor& a, const Tensor& b) { return a + b; }},
        {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }},
        {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
        {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
        {"i64(eq)", [](const Tensor& a, const Tensor& b) { return cast(eq(a, b), DType::i64); }},
    };
    const auto& [nm, f] = rng_.pick(ops);
    if (is_float(x) && is_float(y) && rng_.chance(0.5)) {
      // On zeros of opposite signs: every tie is a signed-zero tie.
      return emit({x, y}, str(nm, "(a*0.0,b*-0.0)"),
                  [f](const Args& a) { return f(a[0] * 0.0, a[1] * -0.0); }) &&
             emit({y, x}, str(nm, "(a*-0.0,b*0.0)"),
                  [f](const Args& a) { return f(a[0] * -0.0, a[1] * 0.0); });
    }
    return emit({x, y}, nm, [f](const Args& a) { return f(a[0], a[1]); }) &&
           emit({y, x}, nm, [f](const Args& a) { return f(a[0], a[1]); });
  }

  // A step computed again on the same operands (common subexpressions).
  bool repeat_step() {
    if (p_.steps.empty()) return false;
    const Program::Step st = rng_.pick(p_.steps);
    return emit(st.in, str("again[", st.text.substr(0, st.text.find(' ')), "]"), st.fn);
  }

  // Draws from the default generator: never merged or folded.
  bool random_op() {
    const int x = choose_float();
    if (x < 0) return false;
    p_.uses_rng = true;
    switch (rng_.uniform(0, 2)) {
      case 0:
        return emit({x}, "dropout(0.5)", [](const Args& a) { return dropout(a[0], 0.5); });
      case 1:
        return emit({x}, "add_rand_like", [](const Args& a) { return a[0] + rand_like(a[0]); });
      default:
        return emit({x}, "mul_randn_like", [](const Args& a) { return a[0] * randn_like(a[0]); });
    }
  }

  // ---- elementwise ----
  bool unary() {
    using F = Tensor (*)(const Tensor&);
    static const std::vector<std::pair<const char*, F>> ops = {
        {"neg", [](const Tensor& x) { return neg(x); }},
        {"abs", [](const Tensor& x) { return abs(x); }},
        {"exp(tanh)", [](const Tensor& x) { return exp(tanh(x)); }},
        {"log(abs+1)", [](const Tensor& x) { return log(abs(x) + 1); }},
        {"log1p(abs)", [](const Tensor& x) { return log1p(abs(x)); }},
        {"sqrt(abs+0.1)", [](const Tensor& x) { return sqrt(abs(x) + 0.1); }},
        {"rsqrt(abs+0.5)", [](const Tensor& x) { return rsqrt(abs(x) + 0.5); }},
        {"tanh", [](const Tensor& x) { return tanh(x); }},
        {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
        {"relu", [](const Tensor& x) { return relu(x); }},
        {"sin", [](const Tensor& x) { return sin(x); }},
        {"cos", [](const Tensor& x) { return cos(x); }},
        {"erf", [](const Tensor& x) { return erf(x); }},
        {"sign", [](const Tensor& x) { return sign(x); }},
        {"square", [](const Tensor& x) { return square(x); }},
        {"reciprocal(abs+0.5)", [](const Tensor& x) { return reciprocal(abs(x) + 0.5); }},
        {"gelu", [](const Tensor& x) { return gelu(x); }},
        {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }},
        {"silu", [](const Tensor& x) { return silu(x); }},
        {"clamp(-1,1)", [](const Tensor& x) { return clamp(x, -1.0, 1.0); }},
        {"pow(x,2)", [](const Tensor& x) { return pow(x, 2); }},
        {"masked_fill(x>0,0.5)", [](const Tensor& x) { return masked_fill(x, gt(x, 0.0), 0.5); }},
        {"copy", [](const Tensor& x) { return copy(x); }},
    };
    const int x = choose_float();
    if (x < 0) return false;
    const auto& [nm, f] = rng_.pick(ops);
    return emit({x}, nm, [f](const Args& a) { return f(a[0]); });
  }

  bool binary() {
    using F = Tensor (*)(const Tensor&, const Tensor&);
    struct Op {
      const char* name;
      F fn;
      bool float_only;
    };
    static const std::vector<Op> ops = {
        {"add", [](const Tensor& a, const Tensor& b) { return a + b; }, false},
        {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }, false},
        {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }, false},
        {"div(a,abs(b)+0.5)", [](const Tensor& a, const Tensor& b) { return a / (abs(b) + 0.5); },
         false},
        {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, false},
        {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, false},
        {"pow(abs(a)+0.5,tanh(b))",
         [](const Tensor& a, const Tensor& b) { return pow(abs(a) + 0.5, tanh(b)); }, true},
    };
    const Op& op = rng_.pick(ops);
    const int x = op.float_only ? choose_float() : choose_any();
    if (x < 0) return false;
    const int y = partner(x, op.float_only);
    if (y < 0) return false;
    F f = op.fn;
    return emit({x, y}, op.name, [f](const Args& a) { return f(a[0], a[1]); });
  }

  bool scalar_binary() {
    const int x = choose_any();
    if (x < 0) return false;
    const double s = scalar();
    const bool int_scalar = rng_.chance(0.3) && s == std::floor(s) && !std::signbit(s);
    const Scalar sc = int_scalar ? Scalar(static_cast<int64_t>(s)) : Scalar(s);
    const std::string ss = int_scalar ? str(static_cast<int64_t>(s))
                                      : str(s == 0 && std::signbit(s) ? "-0.0" : str(s));
    switch (rng_.uniform(0, 5)) {
      case 0:
        return emit({x}, "add_scalar", ss, [sc](const Args& a) { return a[0] + sc; });
      case 1:
        return emit({x}, "sub_scalar", ss, [sc](const Args& a) { return a[0] - sc; });
      case 2:
        return emit({x}, "rsub_scalar", ss, [sc](const Args& a) { return sc - a[0]; });
      case 3:
        return emit({x}, "mul_scalar", ss, [sc](const Args& a) { return a[0] * sc; });
      case 4:
        if (s == 0) return false;
        return emit({x}, "div_scalar", ss, [sc](const Args& a) { return a[0] / sc; });
      default:
        return emit({x}, "maximum_scalar", ss, [sc](const Args& a) { return maximum(a[0], sc); });
    }
  }

  bool where_op() {
    const int x = choose_any();
    if (x < 0) return false;
    const int y = partner(x, false);
    if (y < 0) return false;
    const double s = scalar();
    switch (rng_.uniform(0, 4)) {
      case 0:
        return emit({x, y}, "where(a>b,a,b)",
                    [](const Args& a) { return where(gt(a[0], a[1]), a[0], a[1]); });
      case 1:
        return emit({x, y}, "where(a<0,b,s)", str(s),
                    [s](const Args& a) { return where(lt(a[0], 0.0), a[1], s); });
      case 2:
        return emit({x, y}, "where(!(a>=b),s,a)", str(s),
                    [s](const Args& a) { return where(logical_not(ge(a[0], a[1])), s, a[0]); });
      case 3:
        return emit({x, y}, "where(a>0&&b<0.5,b,a)", [](const Args& a) {
          return where(logical_and(gt(a[0], 0.0), lt(a[1], 0.5)), a[1], a[0]);
        });
      default:
        return emit({x, y}, "where(a!=b||a>1,a+b,a*b)", [](const Args& a) {
          return where(logical_or(ne(a[0], a[1]), gt(a[0], 1.0)), a[0] + a[1], a[0] * a[1]);
        });
    }
  }

  bool cast_op() {
    const int x = choose_any();
    if (x < 0) return false;
    if (!is_float(x)) {
      const DType to = fdt_;
      return emit({x}, "cast", str(to), [to](const Args& a) { return cast(a[0], to); });
    }
    std::vector<DType> to = {DType::f32, DType::f64, DType::i64, DType::i32};
    if (!grad_) to.push_back(DType::bf16);
    const DType t = rng_.pick(to);
    if (t == DType::bf16) {
      // A round trip through a narrow float (exact in both runs).
      const DType back = val(x).dtype();
      return emit({x}, "cast_bf16_and_back",
                  [back](const Args& a) { return cast(cast(a[0], DType::bf16), back); });
    }
    if (rng_.chance(0.2))
      return emit({x}, "cast(cast(x,b8),f)",
                  [](const Args& a) { return cast(cast(a[0], DType::b8), a[0].dtype()); });
    return emit({x}, "cast", str(t), [t](const Args& a) { return cast(a[0], t); });
  }

  // ---- reductions ----
  Dims random_dims(int64_t rank) {
    Dims d;
    if (rank == 0) return d;
    for (int64_t i = 0; i < rank; ++i)
      if (rng_.chance(0.4)) d.push_back(rng_.chance(0.3) ? i - rank : i);
    return d;
  }

  bool reduce() {
    const int x = choose_any();
    if (x < 0) return false;
    const int64_t rank = val(x).dim();
    const Dims dims = random_dims(rank);
    const bool keep = rng_.chance(0.5);
    const std::string extra = str(dims, ", keepdim=", keep);
    const int64_t kind = is_float(x) ? rng_.uniform(0, 6) : rng_.uniform(0, 2);
    switch (kind) {
      case 0:
        return emit({x}, "sum", extra, [=](const Args& a) { return sum(a[0], dims, keep); });
      case 1:
        return emit({x}, "amax", extra, [=](const Args& a) { return amax(a[0], dims, keep); });
      case 2:
        return emit({x}, "amin", extra, [=](const Args& a) { return amin(a[0], dims, keep); });
      case 3:
        return emit({x}, "mean", extra, [=](const Args& a) { return mean(a[0], dims, keep); });
      case 4: {
        int64_t count = 1;
        for (int64_t d = 0; d < rank; ++d)
          if (dims.empty() || std::find(dims.begin(), dims.end(), d) != dims.end() ||
              std::find(dims.begin(), dims.end(), d - rank) != dims.end())
            count *= val(x).size(d);
        const int64_t corr = count >= 2 ? rng_.uniform(0, 1) : 0;
        if (count < 2 || rng_.chance(0.5))
          return emit({x}, "var", str(extra, ", correction=", corr),
                      [=](const Args& a) { return var(a[0], dims, corr, keep); });
        // std's derivative at zero variance is infinite: keep it off constant slices.
        return emit({x}, "std(a+arange)", str(extra, ", correction=", corr), [=](const Args& a) {
          Tensor ramp = arange(0.0, static_cast<double>(a[0].numel()), 1.0, a[0].dtype());
          return kiln::std(a[0] + ramp.reshape(a[0].shape()), dims, corr, keep);
        });
      }
      default:
        if (rank == 0) return false;
        return emit({x}, "logsumexp", extra, [=](const Args& a) {
          return logsumexp(a[0], dims.empty() ? Dims{0} : dims, keep);
        });
    }
  }

  // ---- movement ----
  bool movement() {
    const int x = choose_any();
    if (x < 0) return false;
    const Tensor t = val(x);
    const int64_t rank = t.dim();
    switch (rng_.uniform(0, 11)) {
      case 0: {  // reshape
        const int64_t n = t.numel();
        const int64_t r = n == 1 && rng_.chance(0.3) ? 0 : rng_.uniform(1, kMaxRank);
        Dims s = factor(n, r);
        if (r > 0 && rng_.chance(0.3)) s[static_cast<size_t>(rng_.uniform(0, r - 1))] = -1;
        return emit({x}, "reshape", dims_str(s), [s](const Args& a) { return a[0].reshape(s); });
      }
      case 1: {  // permute
        if (rank < 2) return false;
        std::vector<int64_t> p(static_cast<size_t>(rank));
        std::iota(p.begin(), p.end(), 0);
        for (size_t i = p.size(); i > 1; --i)
          std::swap(p[i - 1], p[static_cast<size_t>(rng_.uniform(0, static_cast<int64_t>(i) - 1))]);
        if (rng_.chance(0.3)) p[0] -= rank;
        const Dims d(p);
        return emit({x}, "permute", dims_str(d), [d](const Args& a) { return a[0].permute(d); });
      }
      case 2: {  // transpose
        if (rank < 2) return false;
        const int64_t d0 = rand_dim(rank), d1 = rand_dim(rank);
        return emit({x}, "transpose", str(d0, ", ", d1),
                    [=](const Args& a) { return a[0].transpose(d0, d1); });
      }
      case 3: {  // expand
        Dims s = t.shape();
        for (auto& d : s)
          if (d == 1 && rng_.chance(0.6)) d = rng_.uniform(2, 3);
        if (rank < kMaxRank && rng_.chance(0.4)) s.insert(0, rng_.uniform(1, 3));
        if (numel_of(s) > kMaxNumel) return false;
        if (rng_.chance(0.3))
          for (size_t i = s.size() - static_cast<size_t>(rank); i < s.size(); ++i)
            if (s[i] == t.size(static_cast<int64_t>(i) - static_cast<int64_t>(s.size())) &&
                rng_.chance(0.5))
              s[i] = -1;
        return emit({x}, "expand", dims_str(s), [s](const Args& a) { return a[0].expand(s); });
      }
      case 4: {  // slice
        if (rank == 0) return false;
        const int64_t d = rand_dim(rank), n = t.size(d);
        if (n == 0) return false;
        const int64_t start = rng_.uniform(0, n - 1), end = rng_.uniform(start + 1, n);
        const int64_t st = rng_.uniform(1, 2);
        return emit({x}, "slice", str(d, ", ", start, ", ", end, ", ", st),
                    [=](const Args& a) { return a[0].slice(d, start, end, st); });
      }
      case 5: {  // narrow or select
        if (rank == 0) return false;
        const int64_t d = rand_dim(rank), n = t.size(d);
        const int64_t start = rng_.uniform(0, n - 1);
        if (rng_.chance(0.4))
          return emit({x}, "select", str(d, ", ", start),
                      [=](const Args& a) { return a[0].select(d, start); });
        const int64_t len = rng_.uniform(1, n - start);
        return emit({x}, "narrow", str(d, ", ", start, ", ", len),
                    [=](const Args& a) { return a[0].narrow(d, start, len); });
      }
      case 6:
        return cat_op(x);
      case 7: {  // unsqueeze
        if (rank >= kMaxRank) return false;
        const int64_t d = rng_.uniform(-rank - 1, rank);
        return emit({x}, "unsqueeze", str(d), [d](const Args& a) { return a[0].unsqueeze(d); });
      }
      case 8: {  // squeeze
        std::vector<int64_t> ones;
        for (int64_t d = 0; d < rank; ++d)
          if (t.size(d) == 1) ones.push_back(d);
        if (ones.empty() || rng_.chance(0.3))
          return emit({x}, "squeeze", [](const Args& a) { return a[0].squeeze(); });
        const int64_t d = rng_.pick(ones);
        return emit({x}, "squeeze", str(d), [d](const Args& a) { return a[0].squeeze(d); });
      }
      case 9: {  // flatten
        if (rank == 0) return false;
        const int64_t s = rng_.uniform(0, rank - 1), e = rng_.uniform(s, rank - 1);
        return emit({x}, "flatten", str(s, ", ", e),
                    [=](const Args& a) { return a[0].flatten(s, e); });
      }
      case 10: {  // pad (negative entries crop)
        if (rank == 0) return false;
        Dims pads;
        const int64_t k = rng_.uniform(1, std::min<int64_t>(rank, 2));
        for (int64_t i = 0; i < k; ++i) {
          const int64_t n = t.size(rank - 1 - i);
          pads.push_back(rng_.uniform(n > 1 ? -1 : 0, 2));
          pads.push_back(rng_.uniform(0, 1));
        }
        const double v = scalar();
        return emit({x}, "pad", str(pads, ", ", v),
                    [=](const Args& a) { return pad(a[0], pads, v); });
      }
      default: {  // stack with itself or a same-shaped value
        if (rank >= kMaxRank) return false;
        const int y = choose(
            [&](int i) { return val(i).shape() == t.shape() && val(i).dtype() == t.dtype(); });
        const int64_t d = rng_.uniform(0, rank);
        return emit({x, y}, "stack", str("dim=", d), [d](const Args& a) {
          return stack({a[0], a[1]}, d);
        });
      }
    }
  }

  bool cat_op(int x) {
    const Tensor t = val(x);
    const int64_t rank = t.dim();
    if (rank == 0) return false;
    const int64_t d = rand_dim(rank);
    const int64_t dd = d < 0 ? d + rank : d;
    auto fits = [&](int i) {
      const Tensor& u = val(i);
      if (u.dim() != rank || u.dtype() != t.dtype()) return false;
      for (int64_t k = 0; k < rank; ++k)
        if (k != dd && u.size(k) != t.size(k)) return false;
      return true;
    };
    int y = choose(fits);
    if (room() && rng_.chance(0.4)) {
      Dims s = t.shape();
      s[static_cast<size_t>(dd)] = rng_.uniform(1, 3);
      y = new_input(s);
      if (val(y).dtype() != t.dtype()) return false;
    }
    if (rng_.chance(0.3)) {
      const int z = choose(fits);
      return emit({x, y, z}, "cat", str("dim=", d), [d](const Args& a) {
        return cat({a[0], a[1], a[2]}, d);
      });
    }
    return emit({x, y}, "cat", str("dim=", d), [d](const Args& a) { return cat({a[0], a[1]}, d); });
  }

  // ---- matmul ----
  bool matmul_op() {
    const int x = choose_float();
    if (x < 0) return false;
    const Tensor t = val(x);
    if (t.dim() == 0) return false;
    const int y = choose([&](int i) {
      Dims out;
      return val(i).dtype() == t.dtype() && matmul_shape(t.shape(), val(i).shape(), out) &&
             numel_of(out) <= kMaxNumel;
    });
    if (room() && (y < 0 || rng_.chance(0.4))) {
      Dims s;
      const int64_t k = t.size(-1);
      if (rng_.chance(0.2))
        s = {k};
      else if (rng_.chance(0.2) && t.dim() >= 3)
        s = {t.size(-3), k, rng_.uniform(1, 4)};
      else
        s = {k, rng_.uniform(1, 4)};
      const int z = new_input(s);
      Dims out;
      if (val(z).dtype() == t.dtype() && matmul_shape(t.shape(), s, out) &&
          numel_of(out) <= kMaxNumel)
        return emit({x, z}, "matmul", [](const Args& a) { return matmul(a[0], a[1]); });
    }
    if (y >= 0) return emit({x, y}, "matmul", [](const Args& a) { return matmul(a[0], a[1]); });
    if (t.dim() == 1)
      return emit({x}, "matmul(a,a)", [](const Args& a) { return matmul(a[0], a[0]); });
    return emit({x}, "matmul(a,a^T)",
                [](const Args& a) { return matmul(a[0], a[0].transpose(-1, -2)); });
  }

  // ---- composites ----
  bool composite() {
    const int x = choose_float();
    if (x < 0) return false;
    const Tensor t = val(x);
    const int64_t rank = t.dim();
    if (rank == 0) return false;
    const int64_t d = rand_dim(rank);
    switch (rng_.uniform(0, 2)) {
      case 0:
        return emit({x}, "softmax", str(d), [d](const Args& a) { return softmax(a[0], d); });
      case 1:
        return emit({x}, "log_softmax", str(d),
                    [d](const Args& a) { return log_softmax(a[0], d); });
      default: {
        const int64_t k = rng_.uniform(1, std::min<int64_t>(rank, 2));
        const Dims ns(t.shape().end() - k, t.shape().end());
        std::vector<int> in = {x};
        if (room() && rng_.chance(0.5)) in.push_back(new_input(ns));
        if (room() && in.size() == 2 && rng_.chance(0.5)) in.push_back(new_input(ns));
        for (size_t i = 1; i < in.size(); ++i)
          if (val(in[i]).dtype() != t.dtype()) return false;
        const double eps = rng_.pick(std::vector<double>{1e-5, 1e-3});
        return emit(in, "layer_norm", str(ns, ", eps=", eps), [ns, eps](const Args& a) {
          return layer_norm(a[0], ns, a.size() > 1 ? a[1] : Tensor(),
                            a.size() > 2 ? a[2] : Tensor(), eps);
        });
      }
    }
  }
};

}  // namespace

Program generate_program(uint64_t seed, bool grad) {
  return Gen(seed, grad).run();
}

}  // namespace kiln::testing
