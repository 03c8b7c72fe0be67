// Placement planning (see placement.h). The plan is static (which matmul, which
// host, which chain); the layouts depend on sizes and are computed per run.
#include "executor/placement.h"

#include "kiln/functional.h"
#include "kiln/ir/layout.h"
#include "ops/blas_layout.h"

namespace kiln::detail {

namespace {

bool movement(const ir::Node* n) {
  return n->is_op(OpId::permute) || n->is_op(OpId::reshape);
}

// Every use of v reads a strided view without copying it: unfused movement
// nodes, cats and matmuls. And v is not a graph output (a caller could write
// into it and so into the host's other parts).
bool chain_value(const ir::Graph& g, const ir::Value* v,
                 const std::function<bool(const ir::Node*)>& fused) {
  if (g.is_output(v)) return false;
  for (const ir::Node* u : v->users)
    if (fused(u) || !(movement(u) || u->is_op(OpId::cat) || u->is_op(OpId::matmul))) return false;
  return true;
}

using Links = std::vector<std::pair<const ir::Node*, int>>;

// A host below v: the first cat reached, else the deepest reshape (nullopt if
// none). `up` holds the links from v's producer chain so far, matmul first.
std::optional<Placement> find_host(const ir::Graph& g, const ir::Value* v, Links& up,
                                   const std::function<bool(const ir::Node*)>& fused) {
  if (!chain_value(g, v, fused)) return std::nullopt;
  auto placement = [&](const ir::Node* host, int input) {
    Placement p;
    p.host = host;
    p.links.emplace_back(host, input);
    for (auto it = up.rbegin(); it != up.rend(); ++it) p.links.push_back(*it);
    return p;
  };
  for (const ir::Node* u : v->users)
    if (u->is_op(OpId::cat))
      for (size_t i = 0; i < u->inputs.size(); ++i)
        if (u->inputs[i] == v) return placement(u, static_cast<int>(i));
  std::optional<Placement> reshape_host;
  for (const ir::Node* u : v->users) {
    if (!movement(u)) continue;
    up.emplace_back(u, 0);
    std::optional<Placement> below = find_host(g, u->output(), up, fused);
    up.pop_back();
    if (below && below->host->is_op(OpId::cat)) return below;
    if (!reshape_host) reshape_host = below;
    if (!reshape_host && u->is_op(OpId::reshape)) reshape_host = placement(u, 0);
  }
  return reshape_host;
}

Dims inverse(const Dims& perm) {
  Dims inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inv[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  return inv;
}

Dims permutation(const ir::Node& n) {
  Dims p = n.attrs.dims("dims");
  for (int64_t& d : p) d = wrap_dim(d, static_cast<int64_t>(p.size()), "permute");
  return p;
}

// Whether BLAS writes a [.., M, N] layout in place, as the matmul kernel decides.
bool blas_writable(const Layout& l) {
  const size_t r = l.shape.size();
  bool trans = false;
  int64_t ld = 0;
  return r >= 2 && ops::blas_layout(l.shape[r - 2], l.shape[r - 1], l.strides[r - 2],
                                    l.strides[r - 1], trans, ld);
}

// Whether a contiguous matmul output reaches the host as views only (then
// placing it saves nothing). A cat host always copies.
bool host_views_anyway(const Placement& p, std::span<const int64_t> syms) {
  if (p.host->is_op(OpId::cat)) return false;
  const ir::Value* out = p.links.back().first->inputs[static_cast<size_t>(p.links.back().second)];
  Layout l{ir::eval_shape(out->shape, syms), {}, 0};
  l.strides = contiguous_strides(l.shape);
  for (auto it = p.links.rbegin(); it != p.links.rend(); ++it) {
    const ir::Node& n = *it->first;
    const Dims shape = ir::eval_shape(n.output()->shape, syms);
    std::optional<Dims> st = ir::view_output_strides(n, n.attrs, l.shape, l.strides, shape);
    if (!st) return false;
    l.strides = std::move(*st);
    l.shape = shape;
  }
  return true;
}

}  // namespace

std::unordered_map<const ir::Node*, Placement> plan_placements(
    const ir::Graph& g, const std::function<bool(const ir::Node*)>& fused) {
  std::unordered_map<const ir::Node*, Placement> r;
  for (const ir::Node* n : g.nodes()) {
    if (!n->is_op(OpId::matmul) || fused(n)) continue;
    Links up;
    std::optional<Placement> p = find_host(g, n->output(), up, fused);
    if (p && p->host->output()->dtype == n->output()->dtype) r.emplace(n, std::move(*p));
  }
  return r;
}

std::optional<Layout> placed_layout(const Placement& p, std::span<const int64_t> syms) {
  if (host_views_anyway(p, syms)) return std::nullopt;
  Layout l{ir::eval_shape(p.host->output()->shape, syms), {}, 0};
  l.strides = contiguous_strides(l.shape);
  for (const auto& [node, input] : p.links) {
    const ir::Node& n = *node;
    const Dims shape = ir::eval_shape(n.inputs[static_cast<size_t>(input)]->shape, syms);
    if (n.is_op(OpId::cat)) {
      const int64_t d = wrap_dim(n.attrs.i("dim"), static_cast<int64_t>(l.shape.size()), "cat");
      for (int j = 0; j < input; ++j) {
        const Dims s = ir::eval_shape(n.inputs[static_cast<size_t>(j)]->shape, syms);
        if (s.size() == l.shape.size())
          l.offset += s[static_cast<size_t>(d)] * l.strides[static_cast<size_t>(d)];
      }
    } else if (n.is_op(OpId::permute)) {
      const Dims inv = inverse(permutation(n));
      Dims st(inv.size());
      for (size_t k = 0; k < inv.size(); ++k) st[k] = l.strides[static_cast<size_t>(inv[k])];
      l.strides = st;
    } else {
      Dims st;
      if (!view_strides(l.shape, l.strides, shape, st)) return std::nullopt;
      l.strides = st;
    }
    l.shape = shape;
  }
  if (!blas_writable(l)) return std::nullopt;
  return l;
}

}  // namespace kiln::detail
