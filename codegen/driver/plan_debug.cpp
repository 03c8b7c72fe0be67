// The debugging side of plans: snapshots for KILN_CHECK_COMPILED (the eager
// replay restores captured state), the comparison of compiled against eager
// results with rounding bounds, and the KILN_DUMP files.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "driver/compile_internal.h"
#include "kiln/autograd.h"
#include "kiln/functional.h"
#include "kiln/ir/dot.h"
#include "kiln/ir/text.h"
#include "kiln/nn/module.h"
#include "kiln/passes/remat.h"

namespace kiln::detail {

namespace {
// Why compiled may differ where rounding does not explain it.
constexpr const char* kBakedHint =
    ". If the function reads C++ variables (ints, bools, doubles) that changed since it was "
    "traced, their old values were baked in: pass them as arguments instead";
}  // namespace

Snapshot snapshot(const Plan& p, const std::vector<Tensor>& args) {
  NoGradGuard ng;
  Snapshot s;
  for (const auto& c : p.captures) {
    Tensor t(c.tensor.lock());
    s.data.push_back(t.defined() ? t.detach().clone() : Tensor());
    s.grads.push_back(t.defined() && t.grad().defined() ? t.grad().detach().clone() : Tensor());
  }
  for (const auto& o : p.outputs)
    if (o.kind == ir::OutputBinding::kArgWrite)
      s.args.push_back(args[static_cast<size_t>(o.index)].detach().clone());
  return s;
}

void restore(const Plan& p, const std::vector<Tensor>& args, const Snapshot& s) {
  NoGradGuard ng;
  for (size_t k = 0; k < p.captures.size(); ++k) {
    Tensor t(p.captures[k].tensor.lock());
    if (!t.defined()) continue;
    t.copy_(s.data[k]);
    Tensor g = t.grad();
    if (s.grads[k].defined() && g.defined() && g.shape() == s.grads[k].shape())
      g.copy_(s.grads[k]);
    else
      t.set_grad(s.grads[k].defined() ? s.grads[k].clone() : Tensor());
  }
  size_t a = 0;
  for (const auto& o : p.outputs)
    if (o.kind == ir::OutputBinding::kArgWrite) {
      Tensor t = args[static_cast<size_t>(o.index)];
      t.copy_(s.args[a++]);
    }
}

namespace {

// The most terms any one value of the graph sums (reductions, matmul's inner
// dim, conv's window): rounding differences grow with it.
int64_t largest_reduction(const ir::Graph& g) {
  int64_t n = 1;
  for (const ir::Node* node : g.nodes()) {
    if (node->is_constant() || node->inputs.empty()) continue;
    const ir::SymShape& in = node->inputs[0]->shape;
    if (!is_static(in) || !is_static(node->outputs[0]->shape)) continue;
    const int64_t in_n = numel_of(ir::eval_shape(in, {}));
    const int64_t out_n =
        std::max<int64_t>(1, numel_of(ir::eval_shape(node->outputs[0]->shape, {})));
    if (node->info().has(kReduction)) {
      n = std::max(n, in_n / out_n);
    } else if (node->op == OpId::matmul && !in.empty()) {
      n = std::max(n, in.back().b);
    } else if (node->op == OpId::conv2d && node->inputs.size() > 1) {
      const ir::SymShape& w = node->inputs[1]->shape;
      if (w.size() == 4) n = std::max(n, w[1].b * w[2].b * w[3].b);
    }
  }
  return n;
}

double unit_roundoff(DType t) {
  switch (t) {
    case DType::f16:
      return 9.77e-4;
    case DType::bf16:
      return 7.81e-3;
    case DType::f32:
      return 1.19e-7;
    default:
      return 2.22e-16;
  }
}

// "" if a and b agree, else the largest errors. Floats: |a - b| <= rel * |b| +
// rel * sqrt(terms) * scale, scale = max(max|b|, the arguments' magnitude: a sum
// that cancels to ~0 rounds like its terms); NaN matches NaN, an infinity
// itself; others exactly.
std::string diff_tensors(const Tensor& a, const Tensor& b, int64_t terms, double input_scale) {
  if (a.defined() != b.defined())
    return a.defined() ? "eager is undefined" : "compiled is undefined";
  if (!a.defined()) return "";
  if (a.dtype() != b.dtype() || a.shape() != b.shape())
    return str("compiled is ", a.dtype(), a.shape(), ", eager is ", b.dtype(), b.shape());
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  if (!is_floating(a.dtype())) {
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i] != y[i]) return str("element ", i, ": compiled ", x[i], ", eager ", y[i]);
    return "";
  }
  double scale = input_scale;
  for (double v : y)
    if (std::isfinite(v)) scale = std::max(scale, std::abs(v));
  // 64 units of roundoff per element (transcendental approximations, fused
  // orders), and the reassociated sums' error over the tensor's magnitude.
  const double rel = 64 * unit_roundoff(a.dtype());
  const double abs_tol = rel * std::sqrt(static_cast<double>(terms)) * scale;
  size_t worst = x.size();
  double worst_excess = 0, max_abs = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) && std::isnan(y[i])) continue;
    if (x[i] == y[i]) continue;  // equal infinities too
    const double err = std::abs(x[i] - y[i]);
    max_abs = std::isnan(err) ? err : std::max(max_abs, err);
    const double excess = std::isnan(err) ? INFINITY : err / (rel * std::abs(y[i]) + abs_tol);
    if (!(excess <= 1) && (worst == x.size() || excess > worst_excess)) {
      worst = i;
      worst_excess = excess;
    }
  }
  if (worst == x.size()) return "";
  return str("max abs error ", max_abs, " (", scale > 0 ? max_abs / scale : max_abs,
             " of the tensor's largest magnitude ", scale, "); worst at element ", worst,
             ": compiled ", x[worst], ", eager ", y[worst], " (tolerance ", abs_tol, " + ", rel,
             " x |eager|)");
}

// "captured tensor 3 (stem.0.weight)".
std::string capture_name(const Plan& p, size_t k) {
  const std::string path = nn::tensor_path(Tensor(p.captures[k].tensor.lock()));
  return path.empty() ? str("captured tensor ", k, " ", p.captures[k].dtype, p.captures[k].shape)
                      : str("captured tensor ", k, " (", path, ")");
}

}  // namespace

std::string compare_runs(const Plan& p, const std::vector<Tensor>& compiled,
                         const std::vector<Tensor>& eager, const Snapshot& after_compiled,
                         const Snapshot& after_eager, const std::vector<Tensor>& args) {
  NoGradGuard ng;
  double input_scale = 0;
  for (const Tensor& a : args)
    if (a.defined() && is_floating(a.dtype()) && a.numel() > 0) {
      const double m = amax(abs(a.detach().to(DType::f64))).item<double>();
      if (std::isfinite(m)) input_scale = std::max(input_scale, m);
    }
  if (compiled.size() != eager.size())
    return str("compiled returned ", compiled.size(), " results, eager ", eager.size());
  const int64_t terms = largest_reduction(*p.graph);
  for (size_t i = 0; i < compiled.size(); ++i) {
    std::string d = diff_tensors(compiled[i], eager[i], terms, input_scale);
    if (d.empty()) continue;
    std::string node;
    for (size_t o = 0; o < p.outputs.size(); ++o)
      if (p.outputs[o].kind == ir::OutputBinding::kResult &&
          p.outputs[o].index == static_cast<int>(i)) {
        const int s = p.exec->producer_of_output(o);
        if (s >= 0) {
          const ir::Node* n = p.graph->nodes()[static_cast<size_t>(s)];
          node = str(" (computed by node #", s, ", ",
                     n->is_constant() ? "constant" : n->info().name, ")");
        }
      }
    return str("result ", i, " differs", node, ": ", d, kBakedHint);
  }
  for (size_t k = 0; k < after_compiled.data.size(); ++k) {
    std::string d = diff_tensors(after_compiled.data[k], after_eager.data[k], terms, input_scale);
    if (!d.empty()) return str(capture_name(p, k), " after the call differs: ", d, kBakedHint);
    d = diff_tensors(after_compiled.grads[k], after_eager.grads[k], terms, input_scale);
    if (!d.empty()) return str("the .grad of ", capture_name(p, k), " differs: ", d, kBakedHint);
  }
  for (size_t a = 0; a < after_compiled.args.size(); ++a) {
    std::string d = diff_tensors(after_compiled.args[a], after_eager.args[a], terms, input_scale);
    if (!d.empty()) return str("an argument written in place differs: ", d, kBakedHint);
  }
  return "";
}

namespace {

// Writes text files <dir>/<name>.<plan>.<stage><ext> (temporary name, then rename).
void dump_files(const std::string& dir, const std::string& name, int plan, const char* stage,
                const std::vector<std::pair<const char*, std::string>>& files) {
  std::string safe = name;
  for (char& c : safe)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) c = '_';
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  KILN_CHECK(!ec, "[KILN_DUMP] cannot create directory ", dir, ": ", ec.message());
  const std::string stem = str(dir, "/", safe, ".", plan, ".", stage);
  for (const auto& [ext, text] : files) {
    const std::string path = stem + ext;
    const std::string tmp = path + ".tmp";
    {
      std::ofstream f(tmp, std::ios::binary);
      KILN_CHECK(f.good(), "[KILN_DUMP] cannot write ", tmp);
      f << text;
    }
    std::filesystem::rename(tmp, path, ec);
    KILN_CHECK(!ec, "[KILN_DUMP] cannot rename ", tmp, ": ", ec.message());
  }
}

}  // namespace

void dump_remat(const std::string& dir, const std::string& name, const Plan& p) {
  if (dir.empty()) return;
  dump_files(dir, name, p.id, "remat",
             {{".txt", str("predicted peak ", p.predicted_peak, " bytes (executor schedule); ",
                           "node order: ", p.remat_before, " before remat, ", p.remat_after,
                           " after\n", p.remat_log)}});
}

void dump(const std::string& dir, const std::string& name, int plan, const char* stage,
          const ir::Graph& g) {
  if (dir.empty()) return;
  dump_files(dir, name, plan, stage, {{".kir", ir::print(g)}, {".dot", ir::to_dot(g)}});
}

void dump_kernels(const std::string& dir, const std::string& name, int plan, const char* stage,
                  const Executor& ex) {
  if (dir.empty()) return;
  std::string text = str("# fusion groups\n", passes::to_string(ex.fusion_plan(), ex.graph()),
                         "\n# schedule\n", ex.schedule_text(), "\n# kernels\n", ex.kernels_text());
  dump_files(dir, name, plan, stage, {{".fusion.txt", text}});
}

}  // namespace kiln::detail
