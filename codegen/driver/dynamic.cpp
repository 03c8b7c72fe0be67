// Dynamic dims: which traces a new trace generalizes with, the symbols (one per
// varying dynamic dim), and the run-time check of a symbolic plan's sizes.
#include <algorithm>
#include <type_traits>

#include "driver/compile_internal.h"
#include "kiln/ir/verify.h"

namespace kiln::detail {

namespace {

// Traces kept per plan to generalize from (the newest): enough for 3-term fits
// with a trace to spare, and bounded memory for functions that never generalize.
constexpr size_t kMaxEvidence = 8;
// Size tuples a symbolic plan remembers as checked (each kind), then forgets.
constexpr size_t kMaxCheckedSizes = 256;

bool is_dynamic(const CompileOptions& opts, size_t arg, size_t dim) {
  for (const DynamicDim& dd : opts.dynamic)
    if (dd.arg == static_cast<int>(arg) && dd.dim == static_cast<int>(dim)) return true;
  return false;
}

// Which arguments the graph reads as tensors: only their dims can bind a symbol.
std::vector<bool> args_in_graph(const Plan& p) {
  std::vector<bool> in(p.args.size(), false);
  for (const auto& b : p.inputs)
    if (b.kind == ir::InputBinding::kArg && static_cast<size_t>(b.index) < in.size())
      in[static_cast<size_t>(b.index)] = true;
  return in;
}

// What a traced guard returned: whether it holds, or why not ("" if it holds).
template <typename R>
bool holds(const R& r) {
  if constexpr (std::is_same_v<R, bool>)
    return r;
  else
    return r.empty();
}

// A hash of the op sequence: traces that differ in it never generalize together.
uint64_t structure_key(const ir::Graph& g) {
  uint64_t h = 0x9e3779b97f4a7c15ULL ^ g.inputs().size();
  auto mix = [&](uint64_t v) { h = (h ^ v) * 0x100000001b3ULL + (h >> 29); };
  for (const ir::Node* n : g.nodes()) {
    mix(n->is_constant() ? 0xffff : static_cast<uint64_t>(n->op));
    mix(n->inputs.size());
  }
  return h;
}

}  // namespace

void check_dynamic_options(const CompileOptions& opts, const std::vector<Tensor>& args) {
  for (size_t j = 0; j < opts.dynamic.size(); ++j) {
    const DynamicDim& dd = opts.dynamic[j];
    KILN_CHECK(dd.arg >= 0 && static_cast<size_t>(dd.arg) < args.size(), "[compile] ", opts.name,
               ": CompileOptions::dynamic[", j, "] = {", dd.arg, ", ", dd.dim,
               "} names tensor argument ", dd.arg, ", but the function was called with ",
               args.size(), " tensor argument", args.size() == 1 ? "" : "s");
    const int64_t rank = args[static_cast<size_t>(dd.arg)].dim();
    KILN_CHECK(dd.dim >= 0 && dd.dim < rank, "[compile] ", opts.name, ": CompileOptions::dynamic[",
               j, "] = {", dd.arg, ", ", dd.dim, "} names dim ", dd.dim, " of tensor argument ",
               dd.arg, ", which has ", rank, " dim", rank == 1 ? "" : "s");
  }
}

bool same_but_dynamic(const Plan& a, const Plan& b, const CompileOptions& opts) {
  if (a.args.size() != b.args.size() || a.statics != b.statics || a.grad_mode != b.grad_mode)
    return false;
  const std::vector<bool> in_a = args_in_graph(a), in_b = args_in_graph(b);
  if (in_a != in_b) return false;
  for (size_t i = 0; i < a.args.size(); ++i) {
    const ArgSig& x = a.args[i];
    const ArgSig& y = b.args[i];
    if (x.dtype != y.dtype || x.shape.size() != y.shape.size() ||
        x.requires_grad != y.requires_grad || x.wrapped_number != y.wrapped_number ||
        x.grad_defined != y.grad_defined)
      return false;
    for (size_t d = 0; d < x.shape.size(); ++d) {
      if (x.shape[d] == y.shape[d]) continue;
      // Only a dynamic dim of an argument the graph reads may differ: the size
      // of one it does not read could not be bound to its symbol at run time.
      if (!is_dynamic(opts, i, d) || !in_b[i]) return false;
    }
  }
  if (a.captures.size() != b.captures.size() || a.hosts.size() != b.hosts.size() ||
      a.guards.size() != b.guards.size())
    return false;
  for (size_t k = 0; k < a.captures.size(); ++k)
    if (a.captures[k].tensor.lock() != b.captures[k].tensor.lock()) return false;
  // Host state a's trace depended on (module flags...) as it is now, when b
  // was traced: a trace under other flags is no evidence about sizes.
  for (const auto& guard : a.guards)
    if (!holds(guard())) return false;
  return true;
}

void make_args_symbolic(Plan& p, const ir::Graph& g) {
  p.num_syms = g.num_syms;
  for (size_t j = 0; j < p.inputs.size() && j < g.inputs().size(); ++j)
    if (p.inputs[j].kind == ir::InputBinding::kArg)
      p.args[static_cast<size_t>(p.inputs[j].index)].shape = g.inputs()[j]->shape;
}

DynamicResult generalize_plans(Plan& p, const std::shared_ptr<ir::Graph>& raw,
                               const std::vector<Tensor>& args,
                               std::vector<std::shared_ptr<Plan>>& plans,
                               const CompileOptions& opts) {
  DynamicResult res;
  res.graph = raw;
  std::vector<int64_t> sizes;
  for (const DynamicDim& dd : opts.dynamic)
    sizes.push_back(args[static_cast<size_t>(dd.arg)].size(dd.dim));
  const uint64_t key = structure_key(*raw);
  p.evidence = {{raw, sizes, key}};
  // The evidence: this trace, then the traces behind the plans it differs
  // from only in dynamic dims (newest first), one per size tuple.
  std::vector<size_t> sources;  // plans whose every trace is in the evidence
  for (size_t i = plans.size(); i-- > 0;) {
    const Plan& q = *plans[i];
    if (q.eager || q.evidence.empty() || !same_but_dynamic(q, p, opts)) continue;
    bool all = true;
    for (const DynTrace& e : q.evidence) {
      if (e.structure != key) {
        all = false;
        continue;
      }
      bool seen = false;
      for (const DynTrace& f : p.evidence) seen = seen || f.sizes == e.sizes;
      if (seen) continue;
      if (p.evidence.size() == kMaxEvidence) {
        all = false;
        continue;
      }
      p.evidence.push_back(e);
    }
    if (all) sources.push_back(i);
  }
  if (p.evidence.size() < 2) return res;
  // One symbol per dynamic dim whose size varies over the evidence (dims that
  // vary in step share one; the guards then keep them equal).
  const size_t nd = opts.dynamic.size();
  std::vector<std::vector<int64_t>> sym_cols;
  for (size_t j = 0; j < nd; ++j) {
    std::vector<int64_t> col;
    for (const DynTrace& e : p.evidence) col.push_back(e.sizes[j]);
    if (std::all_of(col.begin(), col.end(), [&](int64_t v) { return v == col[0]; })) continue;
    if (std::find(sym_cols.begin(), sym_cols.end(), col) == sym_cols.end()) sym_cols.push_back(col);
  }
  if (sym_cols.empty()) return res;
  if (sym_cols.size() > static_cast<size_t>(ir::SymInt::kMaxSyms)) {
    res.why = str("more than ", ir::SymInt::kMaxSyms, " dynamic dims vary");
    return res;
  }
  std::vector<ir::SymSample> samples;
  for (size_t t = 0; t < p.evidence.size(); ++t) {
    ir::SymSample s{p.evidence[t].raw.get(), {}};
    for (const auto& col : sym_cols) s.syms.push_back(col[t]);
    samples.push_back(std::move(s));
  }
  ir::Generalized g = ir::generalize(samples);
  if (!g.graph) {
    res.why = str(g.need_more ? "not yet: " : "", g.why, " (from ", samples.size(), " traces)");
    return res;
  }
  res.graph = std::shared_ptr<ir::Graph>(std::move(g.graph));
  res.generalized = true;
  make_args_symbolic(p, *res.graph);
  p.symbolic = res.graph;
  // The plans whose traces it was made from are covered by it.
  for (size_t i : sources) plans.erase(plans.begin() + static_cast<std::ptrdiff_t>(i));
  return res;
}

bool symbolic_sizes_hold(const Plan& p, const std::vector<int64_t>& syms, std::string* why) {
  if (!p.symbolic) return true;
  if (std::find(p.sizes_ok.begin(), p.sizes_ok.end(), syms) != p.sizes_ok.end()) return true;
  for (const auto& [s, msg] : p.sizes_bad)
    if (s == syms) {
      if (why) *why = msg;
      return false;
    }
  const std::string bad = ir::check_sizes_at(*p.symbolic, syms);
  if (bad.empty()) {
    if (p.sizes_ok.size() == kMaxCheckedSizes) p.sizes_ok.clear();
    p.sizes_ok.push_back(syms);
    return true;
  }
  if (p.sizes_bad.size() == kMaxCheckedSizes) p.sizes_bad.clear();
  p.sizes_bad.emplace_back(syms, bad);
  if (why) *why = bad;
  return false;
}

}  // namespace kiln::detail
