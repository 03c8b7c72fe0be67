#include "kiln/ir/generalize.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <unordered_map>

namespace kiln::ir {

namespace {

struct Fitter {
  std::span<const SymSample> syms;

  // The SymInt equal to x at the first samples and y at the second; prefers
  // the simplest fit (a bare symbol, then small coefficients).
  std::optional<SymInt> fit(int64_t x, int64_t y) const {
    if (x == y) return SymInt(x);
    std::optional<SymInt> best;
    int64_t best_cost = 0;
    for (size_t k = 0; k < syms.size(); ++k) {
      const int64_t dn = syms[k].second - syms[k].first;
      if (dn == 0 || (y - x) % dn != 0) continue;
      const int64_t a = (y - x) / dn;
      const int64_t b = x - a * syms[k].first;
      const int64_t cost = std::abs(a - 1) + std::abs(b);
      if (!best || cost < best_cost) {
        best = SymInt::symbolic(static_cast<int32_t>(k), a, b);
        best_cost = cost;
      }
    }
    return best;
  }
};

bool is_integral(double v) {
  return std::isfinite(v) && v == std::nearbyint(v) && std::abs(v) < 9e15;
}

// A double that is an integer (a*s+b) or the reciprocal of one (1/(a*s+b)).
std::optional<std::pair<SymInt, bool>> fit_double(const Fitter& f, double x, double y) {
  if (is_integral(x) && is_integral(y)) {
    if (auto s = f.fit(static_cast<int64_t>(x), static_cast<int64_t>(y))) return {{*s, false}};
  }
  if (x != 0 && y != 0) {
    const double rx = 1.0 / x, ry = 1.0 / y;
    const double nx = std::nearbyint(rx), ny = std::nearbyint(ry);
    if (std::abs(rx - nx) <= 1e-9 * std::abs(rx) && std::abs(ry - ny) <= 1e-9 * std::abs(ry)) {
      if (auto s = f.fit(static_cast<int64_t>(nx), static_cast<int64_t>(ny))) return {{*s, true}};
    }
  }
  return std::nullopt;
}

bool fit_shape(const Fitter& f, const SymShape& a, const SymShape& b, SymShape& out) {
  if (a.size() != b.size()) return false;
  out.clear();
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_static() || !b[i].is_static()) return false;
    auto s = f.fit(a[i].b, b[i].b);
    if (!s) return false;
    out.push_back(*s);
  }
  return true;
}

bool same_bytes(const Tensor& x, const Tensor& y) {
  if (x.dtype() != y.dtype() || x.shape() != y.shape()) return false;
  return std::memcmp(x.data_ptr(), y.data_ptr(),
                     static_cast<size_t>(x.numel()) * x.element_size()) == 0;
}

double constant_value(const Tensor& t) {
  return t.item<double>();
}

}  // namespace

std::unique_ptr<Graph> generalize(const Graph& a, const Graph& b, std::span<const SymSample> syms,
                                  std::string* why) {
  auto fail = [&](const std::string& m) -> std::unique_ptr<Graph> {
    if (why) *why = m;
    return nullptr;
  };
  if (a.num_syms != 0 || b.num_syms != 0) return fail("a trace is already symbolic");
  Fitter f{syms};
  auto g = std::make_unique<Graph>();
  g->num_syms = static_cast<int>(syms.size());
  if (!a.rng_advance.is_static() || !b.rng_advance.is_static()) return fail("symbolic rng_advance");
  auto adv = f.fit(a.rng_advance.b, b.rng_advance.b);
  if (!adv) return fail("the random-number use is not affine in a dynamic size");
  g->rng_advance = *adv;
  if (a.inputs().size() != b.inputs().size()) return fail("different number of inputs");
  std::unordered_map<const Value*, Value*> map_a, map_b;
  for (size_t i = 0; i < a.inputs().size(); ++i) {
    const Value* x = a.inputs()[i];
    const Value* y = b.inputs()[i];
    SymShape s;
    if (x->dtype != y->dtype || x->name != y->name || !fit_shape(f, x->shape, y->shape, s))
      return fail(str("input ", i, " (", y->name, ") differs beyond a dynamic size"));
    Value* v = g->add_input(y->dtype, s, y->name);
    v->wrapped_number = y->wrapped_number;
    map_a[x] = v;
    map_b[y] = v;
  }
  auto na = a.nodes();
  auto nb = b.nodes();
  if (na.size() != nb.size()) return fail("the traces have different numbers of nodes");
  for (size_t i = 0; i < na.size(); ++i) {
    const Node* x = na[i];
    const Node* y = nb[i];
    const std::string where =
        str("node ", i, " (", x->is_constant() ? "constant" : x->info().name, ")");
    if (x->kind != y->kind || (!x->is_constant() && x->op != y->op) ||
        x->inputs.size() != y->inputs.size() || x->outputs.size() != y->outputs.size())
      return fail(where + ": the traces differ in structure");
    std::vector<Value*> ins;
    for (size_t k = 0; k < x->inputs.size(); ++k) {
      auto ia = map_a.find(x->inputs[k]);
      auto ib = map_b.find(y->inputs[k]);
      if (ia == map_a.end() || ib == map_b.end() || ia->second != ib->second)
        return fail(where + ": the traces are wired differently");
      ins.push_back(ia->second);
    }
    std::vector<OutSpec> outs;
    for (size_t k = 0; k < x->outputs.size(); ++k) {
      SymShape s;
      if (x->outputs[k]->dtype != y->outputs[k]->dtype ||
          !fit_shape(f, x->outputs[k]->shape, y->outputs[k]->shape, s))
        return fail(where + ": an output shape is not affine in a dynamic size");
      outs.push_back({y->outputs[k]->dtype, s});
    }
    std::vector<SymAttr> sym_attrs;
    if (x->attrs.items().size() != y->attrs.items().size())
      return fail(where + ": different attributes");
    for (size_t k = 0; k < x->attrs.items().size(); ++k) {
      const auto& [ka, va] = x->attrs.items()[k];
      const auto& [kb, vb] = y->attrs.items()[k];
      if (std::strcmp(ka, kb) != 0 || va.index() != vb.index())
        return fail(where + ": different attributes");
      if (va == vb) continue;
      const char* name = intern_attr_name(kb);
      if (auto* ia = std::get_if<int64_t>(&va)) {
        auto s = f.fit(*ia, std::get<int64_t>(vb));
        if (!s) return fail(where + ": attribute " + kb + " is not affine in a dynamic size");
        sym_attrs.push_back({name, -1, *s, false});
      } else if (auto* da = std::get_if<double>(&va)) {
        auto s = fit_double(f, *da, std::get<double>(vb));
        if (!s) return fail(where + ": attribute " + kb + " is not affine in a dynamic size");
        sym_attrs.push_back({name, -1, s->first, s->second});
      } else if (auto* dda = std::get_if<Dims>(&va)) {
        const Dims& ddb = std::get<Dims>(vb);
        if (dda->size() != ddb.size()) return fail(where + ": attribute " + kb + " changes rank");
        for (size_t e = 0; e < dda->size(); ++e) {
          if ((*dda)[e] == ddb[e]) continue;
          auto s = f.fit((*dda)[e], ddb[e]);
          if (!s) return fail(where + ": attribute " + kb + " is not affine in a dynamic size");
          sym_attrs.push_back({name, static_cast<int32_t>(e), *s, false});
        }
      } else {
        return fail(where + ": attribute " + kb + " differs between the traces");
      }
    }
    Node* n = nullptr;
    if (x->is_constant()) {
      if (!same_bytes(x->constant, y->constant)) {
        // Only a number (mean's count, a scale) may depend on the size.
        if (x->constant.numel() != 1 || x->constant.dim() != 0)
          return fail(where + ": a constant tensor depends on a dynamic size");
        auto s = fit_double(f, constant_value(x->constant), constant_value(y->constant));
        if (!s) return fail(where + ": a constant is not affine in a dynamic size");
        sym_attrs.push_back({intern_attr_name("value"), -1, s->first, s->second});
      }
      n = g->add_constant(y->constant);
      n->sym_attrs = std::move(sym_attrs);
    } else {
      // Symbolic entries hold 0 in attrs (what the parser stores): the graph's
      // text, hash and equality then do not depend on the sample sizes.
      Attrs at = y->attrs;
      for (const SymAttr& sa : sym_attrs) {
        for (const auto& [k, v] : y->attrs.items()) {
          if (std::strcmp(k, sa.name) != 0) continue;
          if (sa.index >= 0) {
            Dims d = std::get<Dims>(v);
            d[static_cast<size_t>(sa.index)] = 0;
            at.set(sa.name, d);
          } else if (std::holds_alternative<double>(v)) {
            at.set(sa.name, 0.0);
          } else {
            at.set(sa.name, AttrValue(int64_t{0}));
          }
        }
      }
      n = g->add_op(y->op, std::move(ins), std::move(at), std::move(outs));
      n->sym_attrs = std::move(sym_attrs);
    }
    for (size_t k = 0; k < y->outputs.size(); ++k) {
      map_a[x->outputs[k]] = n->outputs[k];
      map_b[y->outputs[k]] = n->outputs[k];
    }
  }
  if (a.outputs().size() != b.outputs().size()) return fail("different number of outputs");
  for (size_t i = 0; i < b.outputs().size(); ++i) {
    Value* va = map_a.at(a.outputs()[i]);
    Value* vb = map_b.at(b.outputs()[i]);
    if (va != vb || a.output_names()[i] != b.output_names()[i])
      return fail(str("output ", i, " differs between the traces"));
    g->add_output(vb, b.output_names()[i]);
  }
  // Every symbol must be bound by a graph input dim that is exactly the symbol.
  for (int k = 0; k < g->num_syms; ++k) {
    bool bound = false;
    for (const Value* in : g->inputs())
      for (const SymInt& d : in->shape) bound = bound || (d.sym == k && d.a == 1 && d.b == 0);
    if (!bound) return fail(str("dynamic size s", k, " is not a dim of any input"));
  }
  return g;
}

}  // namespace kiln::ir
