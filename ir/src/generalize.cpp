#include "kiln/ir/generalize.h"

#include <cmath>
#include <cstring>
#include <map>
#include <unordered_map>

#include "kiln/ir/verify.h"

namespace kiln::ir {

namespace {

enum class FitStatus : uint8_t { kOk, kNeedMore, kNone };

struct Fit {
  FitStatus status = FitStatus::kOk;
  SymInt value;
  bool reciprocal = false;
};

// Fitting limits: exponents <= 3, degree <= 4, <= 3 terms; values of a
// monomial at the traced sizes up to 2^50 (beyond, it is not a candidate).
constexpr int kMaxExp = 3;
constexpr int kMaxDegree = 4;
constexpr size_t kMaxTerms = 3;
constexpr size_t kMaxBasis = 80;
constexpr int64_t kMaxMonoValue = int64_t{1} << 50;

// Fits the numbers of several traces as polynomials in the symbols. A fit is
// taken only if it is the one polynomial with that few terms through the
// points, and there are more distinct points than terms.
class Fitter {
 public:
  explicit Fitter(std::span<const SymSample> traces) {
    num_syms_ = traces.empty() ? 0 : static_cast<int>(traces[0].syms.size());
    for (const SymSample& t : traces) {
      size_t p = 0;
      while (p < points_.size() && points_[p] != t.syms) ++p;
      if (p == points_.size()) points_.push_back(t.syms);
      point_of_.push_back(p);
    }
    // The candidate monomials, the constant first; the degree bound shrinks
    // with many symbols so that 3-term searches stay small.
    for (int deg = kMaxDegree; deg >= 1; --deg) {
      basis_.assign(1, 0);
      add_monomials(0, 0, deg, 0);
      if (basis_.size() <= kMaxBasis) break;
    }
    std::vector<uint64_t> usable;
    for (uint64_t m : basis_) {
      std::vector<int64_t> v;
      try {
        for (const auto& pt : points_) {
          const int64_t x = SymInt::monomial(1, m).eval(pt);
          if (x > kMaxMonoValue || x < -kMaxMonoValue) throw Error("large");
          v.push_back(x);
        }
      } catch (const Error&) {
        continue;
      }
      usable.push_back(m);
      values_.push_back(std::move(v));
    }
    basis_ = std::move(usable);
  }

  size_t num_points() const { return points_.size(); }

  // The fit of one number, given per trace.
  Fit fit(std::span<const int64_t> y) {
    bool same = true;
    for (int64_t v : y) same = same && v == y[0];
    if (same) return {FitStatus::kOk, SymInt(y[0]), false};
    std::vector<int64_t> yp(points_.size());
    std::vector<bool> seen(points_.size(), false);
    for (size_t t = 0; t < y.size(); ++t) {
      const size_t p = point_of_[t];
      if (seen[p] && yp[p] != y[t])
        return {FitStatus::kNone, {}, false};  // not a function of the sizes
      seen[p] = true;
      yp[p] = y[t];
    }
    auto it = memo_.find(yp);
    if (it != memo_.end()) return it->second;
    Fit f = search(yp);
    memo_.emplace(std::move(yp), f);
    return f;
  }

  // A double: an integer polynomial, or the reciprocal of one (mean's 1/n).
  Fit fit_double(std::span<const double> y) {
    bool integral = true, inverse = true;
    std::vector<int64_t> iv, rv;
    for (double v : y) {
      integral = integral && is_integral(v);
      if (integral) iv.push_back(static_cast<int64_t>(v));
      const double r = v == 0 ? 0 : 1.0 / v;
      const double n = std::nearbyint(r);
      inverse = inverse && v != 0 && is_integral(n) && std::abs(r - n) <= 1e-9 * std::abs(r);
      if (inverse) rv.push_back(static_cast<int64_t>(n));
    }
    if (integral) return fit(iv);
    if (!inverse) return {FitStatus::kNone, {}, false};
    Fit f = fit(rv);
    f.reciprocal = true;
    return f;
  }

 private:
  static bool is_integral(double v) {
    return std::isfinite(v) && v == std::nearbyint(v) && std::abs(v) < 9e15;
  }

  void add_monomials(int k, int deg, int max_deg, uint64_t mono) {
    if (k == num_syms_) {
      if (deg > 0) basis_.push_back(mono);
      return;
    }
    for (int e = 0; e <= kMaxExp && deg + e <= max_deg; ++e)
      add_monomials(k + 1, deg + e, max_deg, mono | mono_of(k, e));
  }

  Fit search(const std::vector<int64_t>& yp) const {
    const size_t n = basis_.size();
    const size_t max_terms = std::min(kMaxTerms, points_.size() - 1);
    for (size_t k = 1; k <= max_terms; ++k) {
      int found = 0;
      SymInt first;
      std::vector<size_t> sup(k);
      // Every k-subset of the basis (indices ascending).
      for (size_t i = 0; i < k; ++i) sup[i] = i;
      while (found < 2) {
        SymInt s;
        if (solve(sup, yp, s)) {
          if (found == 0) first = s;
          ++found;
        }
        size_t i = k;
        while (i > 0 && sup[i - 1] == n - k + i - 1) --i;
        if (i == 0) break;
        ++sup[i - 1];
        for (size_t j = i; j < k; ++j) sup[j] = sup[j - 1] + 1;
      }
      if (found == 1) return {FitStatus::kOk, first, false};
      if (found > 1) return {FitStatus::kNeedMore, {}, false};  // ambiguous
    }
    return {max_terms < kMaxTerms ? FitStatus::kNeedMore : FitStatus::kNone, {}, false};
  }

  // The integer coefficients of `sup` through every point, all nonzero; false
  // if there are none or the points do not determine them.
  bool solve(const std::vector<size_t>& sup, const std::vector<int64_t>& yp, SymInt& out) const {
    const size_t k = sup.size(), np = points_.size();
    if (k == 1 && basis_[sup[0]] == 0) return false;  // a constant: the numbers differ
    std::vector<std::vector<long double>> a(np, std::vector<long double>(k + 1));
    for (size_t p = 0; p < np; ++p) {
      for (size_t j = 0; j < k; ++j) a[p][j] = static_cast<long double>(values_[sup[j]][p]);
      a[p][k] = static_cast<long double>(yp[p]);
    }
    // Gauss-Jordan with partial pivoting; a pivot column without a clear
    // nonzero means the points do not determine the coefficients.
    std::vector<size_t> piv(k);
    std::vector<bool> used(np, false);
    for (size_t j = 0; j < k; ++j) {
      long double scale = 0, best = 0;
      size_t r = np;
      for (size_t p = 0; p < np; ++p) {
        scale = std::max(scale, std::abs(static_cast<long double>(values_[sup[j]][p])));
        if (!used[p] && std::abs(a[p][j]) > best) {
          best = std::abs(a[p][j]);
          r = p;
        }
      }
      if (r == np || best <= 1e-9L * scale) return false;
      used[r] = true;
      piv[j] = r;
      for (size_t p = 0; p < np; ++p) {
        if (p == r || a[p][j] == 0) continue;
        const long double f = a[p][j] / a[r][j];
        for (size_t c = j; c <= k; ++c) a[p][c] -= f * a[r][c];
      }
    }
    std::vector<int64_t> coef(k);
    for (size_t j = 0; j < k; ++j) {
      const long double x = std::nearbyint(a[piv[j]][k] / a[piv[j]][j]);
      if (x == 0 || std::abs(x) > 9e15L) return false;
      coef[j] = static_cast<int64_t>(x);
    }
    // Exact check at every point.
    for (size_t p = 0; p < np; ++p) {
      __int128 sum = 0;
      for (size_t j = 0; j < k; ++j) sum += static_cast<__int128>(coef[j]) * values_[sup[j]][p];
      if (sum != yp[p]) return false;
    }
    SymInt s;
    for (size_t j = 0; j < k; ++j) s = s + SymInt::monomial(coef[j], basis_[sup[j]]);
    out = std::move(s);
    return true;
  }

  int num_syms_ = 0;
  std::vector<std::vector<int64_t>> points_;  // distinct symbol values
  std::vector<size_t> point_of_;              // trace -> point
  std::vector<uint64_t> basis_;               // candidate monomials (0: the constant)
  std::vector<std::vector<int64_t>> values_;  // [basis][point]
  std::map<std::vector<int64_t>, Fit> memo_;
};

bool same_bytes(const Tensor& x, const Tensor& y) {
  if (x.dtype() != y.dtype() || x.shape() != y.shape()) return false;
  // Device constants' bytes through the host.
  const Tensor a = x.cpu().contiguous(), b = y.cpu().contiguous();
  return std::memcmp(a.data_ptr(), b.data_ptr(),
                     static_cast<size_t>(a.numel()) * a.element_size()) == 0;
}

// Points beyond the traced sizes (each symbol a different value) at which the
// generalized graph's op rules must still hold.
std::vector<std::vector<int64_t>> extra_points(std::span<const SymSample> traces) {
  const size_t ns = traces[0].syms.size();
  std::vector<int64_t> hi(ns, 1);
  for (const SymSample& t : traces)
    for (size_t k = 0; k < ns; ++k) hi[k] = std::max(hi[k], t.syms[k]);
  std::vector<std::vector<int64_t>> pts;
  for (int64_t m : {1, 2, 3}) {
    std::vector<int64_t> p;
    for (size_t k = 0; k < ns; ++k)
      p.push_back(m * hi[k] + 2 * m + 1 + static_cast<int64_t>(k) * (m + 2));
    pts.push_back(std::move(p));
  }
  return pts;
}

// Builds the symbolic graph, node by node, from traces of one structure.
class Builder {
 public:
  explicit Builder(std::span<const SymSample> traces) : tr_(traces), f_(traces) {}

  Generalized run() {
    for (const SymSample& t : tr_)
      if (t.graph->num_syms != 0) return fail("a trace is already symbolic");
    g_ = std::make_unique<Graph>();
    g_->num_syms = static_cast<int>(tr_[0].syms.size());
    std::vector<int64_t> adv;
    for (const SymSample& t : tr_) {
      if (!t.graph->rng_advance.is_static()) return fail("symbolic rng_advance");
      adv.push_back(t.graph->rng_advance.b);
    }
    if (!take(f_.fit(adv), "the random-number use", g_->rng_advance)) return result();
    if (!inputs() || !nodes() || !outputs() || !why_.empty()) return result();
    // Every symbol must be bound by a graph input dim that is exactly the symbol.
    for (int k = 0; k < g_->num_syms; ++k) {
      bool bound = false;
      for (const Value* in : g_->inputs())
        for (const SymInt& d : in->shape) bound = bound || d.as_symbol() == k;
      if (!bound) return fail(str("dynamic size s", k, " is not a dim of any input"));
    }
    try {
      const auto pts = extra_points(tr_);
      verify(*g_, pts);
    } catch (const Error& e) {
      return fail(str("the fitted sizes do not hold beyond the traced ones: ", e.what()));
    }
    Generalized r;
    r.graph = std::move(g_);
    return r;
  }

 private:
  // Records why the traces do not generalize (the first reason, or the first
  // that more traces cannot fix); false.
  bool bad(const std::string& why, bool need_more = false) {
    if (why_.empty() || (need_more_ && !need_more)) {
      why_ = why;
      need_more_ = need_more;
    }
    return false;
  }
  Generalized fail(const std::string& why) {
    bad(why);
    return result();
  }
  Generalized result() {
    Generalized r;
    r.need_more = need_more_;
    r.why = why_;
    return r;
  }
  // Takes a fit into `out`; false (with the reason recorded) if it is not one.
  bool take(const Fit& f, const std::string& what, SymInt& out) {
    if (f.status == FitStatus::kOk) {
      out = f.value;
      return true;
    }
    if (f.status == FitStatus::kNeedMore) {
      // Go on: a later number may fit no polynomial at all, which more traces
      // would not change.
      bad(str(what, " is not yet determined by the ", f_.num_points(),
              " traced sizes (another size is needed)"),
          true);
      out = SymInt(0);
      return true;
    }
    return bad(str(what, " is not a polynomial in the dynamic sizes"));
  }

  bool fit_shape(const std::vector<const SymShape*>& shapes, const std::string& what,
                 SymShape& out) {
    out.clear();
    for (const SymShape* s : shapes)
      if (s->size() != shapes[0]->size()) return bad(what + " changes rank");
    std::vector<int64_t> y(shapes.size());
    for (size_t d = 0; d < shapes[0]->size(); ++d) {
      for (size_t t = 0; t < shapes.size(); ++t) {
        if (!(*shapes[t])[d].is_static()) return bad(what + " is symbolic");
        y[t] = (*shapes[t])[d].b;
      }
      SymInt s;
      if (!take(f_.fit(y), str(what, " dim ", d), s)) return false;
      out.push_back(std::move(s));
    }
    return true;
  }

  bool inputs() {
    const size_t n = tr_[0].graph->inputs().size();
    for (const SymSample& t : tr_)
      if (t.graph->inputs().size() != n) return bad("different number of inputs");
    for (size_t i = 0; i < n; ++i) {
      const Value* x = tr_[0].graph->inputs()[i];
      std::vector<const SymShape*> shapes;
      for (const SymSample& t : tr_) {
        const Value* y = t.graph->inputs()[i];
        if (y->dtype != x->dtype || y->name != x->name || y->wrapped_number != x->wrapped_number)
          return bad(str("input ", i, " (", x->name, ") differs beyond a dynamic size"));
        shapes.push_back(&y->shape);
      }
      SymShape s;
      if (!fit_shape(shapes, str("input ", i, " (", x->name, ")"), s)) return false;
      Value* v = g_->add_input(x->dtype, s, x->name);
      v->wrapped_number = x->wrapped_number;
      for (size_t t = 0; t < tr_.size(); ++t) map(t, tr_[t].graph->inputs()[i], v);
    }
    return true;
  }

  void map(size_t t, const Value* from, Value* to) {
    if (maps_.size() <= t) maps_.resize(t + 1);
    maps_[t][from] = to;
  }
  Value* mapped(size_t t, const Value* from) const {
    auto it = maps_[t].find(from);
    return it == maps_[t].end() ? nullptr : it->second;
  }

  // The symbolic entries of attribute k of the nodes xs (one per trace).
  bool fit_attr(const std::vector<const Node*>& xs, size_t k, const std::string& where,
                std::vector<SymAttr>& out) {
    const auto& [key, v0] = xs[0]->attrs.items()[k];
    for (const Node* x : xs) {
      const auto& [kb, vb] = x->attrs.items()[k];
      if (std::strcmp(kb, key) != 0 || vb.index() != v0.index())
        return bad(where + ": different attributes");
    }
    bool same = true;
    for (const Node* x : xs) same = same && x->attrs.items()[k].second == v0;
    if (same) return true;
    const char* name = intern_attr_name(key);
    const std::string what = str(where, ": attribute ", key);
    if (std::holds_alternative<int64_t>(v0)) {
      std::vector<int64_t> y;
      for (const Node* x : xs) y.push_back(std::get<int64_t>(x->attrs.items()[k].second));
      SymInt s;
      if (!take(f_.fit(y), what, s)) return false;
      out.push_back({name, -1, s, false});
    } else if (std::holds_alternative<double>(v0)) {
      std::vector<double> y;
      for (const Node* x : xs) y.push_back(std::get<double>(x->attrs.items()[k].second));
      const Fit f = f_.fit_double(y);
      SymInt s;
      if (!take(f, what, s)) return false;
      out.push_back({name, -1, s, f.reciprocal});
    } else if (const Dims* d0 = std::get_if<Dims>(&v0)) {
      for (const Node* x : xs)
        if (std::get<Dims>(x->attrs.items()[k].second).size() != d0->size())
          return bad(what + " changes rank");
      std::vector<int64_t> y(xs.size());
      for (size_t e = 0; e < d0->size(); ++e) {
        for (size_t t = 0; t < xs.size(); ++t)
          y[t] = std::get<Dims>(xs[t]->attrs.items()[k].second)[e];
        SymInt s;
        if (!take(f_.fit(y), str(what, "[", e, "]"), s)) return false;
        if (!s.is_static()) out.push_back({name, static_cast<int32_t>(e), s, false});
      }
    } else {
      return bad(what + " differs between the traces");
    }
    return true;
  }

  bool nodes() {
    std::vector<std::vector<Node*>> ns;
    for (const SymSample& t : tr_) ns.push_back(t.graph->nodes());
    for (const auto& n : ns)
      if (n.size() != ns[0].size()) return bad("the traces have different numbers of nodes");
    for (size_t i = 0; i < ns[0].size(); ++i) {
      std::vector<const Node*> xs;
      for (const auto& n : ns) xs.push_back(n[i]);
      const Node* x = xs[0];
      const std::string where =
          str("node ", i, " (", x->is_constant() ? "constant" : x->info().name, ")");
      for (const Node* y : xs)
        if (y->kind != x->kind || (!x->is_constant() && y->op != x->op) ||
            y->inputs.size() != x->inputs.size() || y->outputs.size() != x->outputs.size() ||
            y->attrs.items().size() != x->attrs.items().size())
          return bad(where + ": the traces differ in structure");
      std::vector<Value*> ins;
      for (size_t k = 0; k < x->inputs.size(); ++k) {
        Value* v = mapped(0, x->inputs[k]);
        for (size_t t = 1; t < xs.size(); ++t)
          if (mapped(t, xs[t]->inputs[k]) != v) v = nullptr;
        if (v == nullptr) return bad(where + ": the traces are wired differently");
        ins.push_back(v);
      }
      std::vector<OutSpec> outs;
      for (size_t k = 0; k < x->outputs.size(); ++k) {
        std::vector<const SymShape*> shapes;
        for (const Node* y : xs) {
          if (y->outputs[k]->dtype != x->outputs[k]->dtype)
            return bad(where + ": output dtypes differ");
          shapes.push_back(&y->outputs[k]->shape);
        }
        SymShape s;
        if (!fit_shape(shapes, str(where, " output ", k), s)) return false;
        outs.push_back({x->outputs[k]->dtype, s});
      }
      std::vector<SymAttr> sym_attrs;
      for (size_t k = 0; k < x->attrs.items().size(); ++k)
        if (!fit_attr(xs, k, where, sym_attrs)) return false;
      const Node* last = xs.back();
      Node* n = nullptr;
      if (x->is_constant()) {
        bool same = true;
        for (const Node* y : xs) same = same && same_bytes(x->constant, y->constant);
        if (!same) {
          // Only a number (mean's count, a scale) may depend on the size.
          std::vector<double> y;
          for (const Node* c : xs) {
            if (c->constant.numel() != 1 || c->constant.dim() != 0 ||
                c->constant.dtype() != x->constant.dtype())
              return bad(where + ": a constant tensor depends on a dynamic size");
            y.push_back(c->constant.item<double>());
          }
          const Fit f = f_.fit_double(y);
          SymInt s;
          if (!take(f, where + ": the constant", s)) return false;
          sym_attrs.push_back({intern_attr_name("value"), -1, s, f.reciprocal});
        }
        n = g_->add_constant(last->constant);
      } else {
        // Symbolic entries hold 0 in attrs (what the parser stores): the graph's
        // text, hash and equality then do not depend on the sample sizes.
        Attrs at = zeroed(last->attrs, sym_attrs);
        n = g_->add_op(x->op, std::move(ins), std::move(at), std::move(outs));
      }
      n->sym_attrs = std::move(sym_attrs);
      for (size_t t = 0; t < xs.size(); ++t)
        for (size_t k = 0; k < xs[t]->outputs.size(); ++k) map(t, xs[t]->outputs[k], n->outputs[k]);
    }
    return true;
  }

  static Attrs zeroed(const Attrs& attrs, const std::vector<SymAttr>& sym_attrs) {
    Attrs at = attrs;
    for (const SymAttr& sa : sym_attrs) {
      for (const auto& [k, v] : attrs.items()) {
        if (std::strcmp(k, sa.name) != 0) continue;
        if (sa.index >= 0) {
          Dims d = at.dims(sa.name);
          d[static_cast<size_t>(sa.index)] = 0;
          at.set(sa.name, d);
        } else if (std::holds_alternative<double>(v)) {
          at.set(sa.name, 0.0);
        } else {
          at.set(sa.name, AttrValue(int64_t{0}));
        }
      }
    }
    return at;
  }

  bool outputs() {
    const Graph& a = *tr_[0].graph;
    for (const SymSample& t : tr_) {
      if (t.graph->outputs().size() != a.outputs().size())
        return bad("different number of outputs");
      for (size_t i = 0; i < a.outputs().size(); ++i)
        if (t.graph->output_names()[i] != a.output_names()[i] ||
            t.graph->output_roles()[i] != a.output_roles()[i])
          return bad(str("output ", i, " differs between the traces"));
    }
    for (size_t i = 0; i < a.outputs().size(); ++i) {
      Value* v = mapped(0, a.outputs()[i]);
      for (size_t t = 1; t < tr_.size(); ++t)
        if (mapped(t, tr_[t].graph->outputs()[i]) != v) v = nullptr;
      if (v == nullptr) return bad(str("output ", i, " differs between the traces"));
      g_->add_output(v, a.output_names()[i], a.output_roles()[i]);
    }
    return true;
  }

  std::span<const SymSample> tr_;
  Fitter f_;
  std::unique_ptr<Graph> g_;
  std::vector<std::unordered_map<const Value*, Value*>> maps_;
  std::string why_;
  bool need_more_ = false;
};

}  // namespace

Generalized generalize(std::span<const SymSample> traces) {
  Generalized r;
  if (traces.size() < 2) {
    r.need_more = true;
    r.why = "one trace";
    return r;
  }
  for (const SymSample& t : traces)
    if (t.graph == nullptr || t.syms.size() != traces[0].syms.size() ||
        t.syms.size() > static_cast<size_t>(SymInt::kMaxSyms)) {
      r.why = "the traces do not have the same symbols";
      return r;
    }
  return Builder(traces).run();
}

}  // namespace kiln::ir
