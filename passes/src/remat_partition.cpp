// The partition choice of a joint forward+backward graph (backward_recompute
// in remat.h): which forward values the backward computes again instead of
// the forward saving them, AOTAutograd's min-cut partitioner in the terms of
// remat.cpp's rules 3 and 4.
//
// Rules, and why:
// 1. Needed: the forward values backward nodes read (and backward outputs the
//    forward makes). Graph inputs, constants, their views and the forward's
//    own outputs are free: alive anyway, available to both sides.
// 2. The network: each needed value's forward ancestors, value v split into
//    in -> out with capacity 2 * bytes (+1 unless needed: ties save what is
//    read); data edges and needed -> sink infinite; src -> in(v) at 2 * cost
//    of recomputing v's producer at rate 1 (cheap elementwise 1 per element,
//    costly math 16, matmuls K/4), infinite if it may never be recomputed
//    (random ops, collectives, multi-output ops). A node no forward output
//    needs is only moved, not duplicated: it costs nothing (the gradient
//    formulas' forward-only terms, GELU's exp(-x^2/2), go to the backward
//    instead of being saved).
// 3. Nodes whose in side is on the sink side of the minimum cut run in the
//    backward; the forward keeps what its outputs need (DCE drops the rest).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "kiln/env.h"
#include "kiln/error.h"
#include "kiln/passes/remat.h"
#include "remat_internal.h"

namespace kiln::passes {
namespace {

// Rule 4's model: the predicted peak of the joint graph as the partitioned
// plan runs it: the forward (less the moved nodes no forward output needs),
// then each backward node with the moved nodes it reads just before it; a
// moved node the forward needs too runs twice, the backward reading its copy.
int64_t joint_peak(const ir::Graph& g, const std::vector<char>& backward,
                   const std::vector<char>& moved, const std::vector<char>& fwd_required) {
  const auto orig = g.nodes();
  std::unique_ptr<ir::Graph> c = g.clone();
  const auto nodes = c->nodes();  // the same order
  const size_t n = nodes.size();
  auto required = [&](size_t p) {
    bool req = false;
    for (const ir::Value* v : orig[p]->outputs)
      req = req || fwd_required[static_cast<size_t>(v->id())];
    return req;
  };
  std::vector<ir::Node*> copy(n, nullptr);
  for (size_t p = 0; p < n; ++p) {
    if (!moved[p] || !required(p)) continue;
    std::vector<ir::Value*> ins;
    for (ir::Value* u : nodes[p]->inputs) {
      const ir::Node* q = u->producer;
      const size_t at = q && !q->is_constant() ? c->position(q) : n;
      ins.push_back(at < n && copy[at] ? copy[at]->output() : u);
    }
    std::vector<ir::OutSpec> outs;
    for (const ir::Value* v : nodes[p]->outputs) outs.push_back({v->dtype, v->shape});
    copy[p] = c->add_op(nodes[p]->op, std::move(ins), nodes[p]->attrs, std::move(outs));
  }
  // Backward readers read the copies.
  for (size_t s = 0; s < n; ++s) {
    if (!backward[s]) continue;
    for (size_t i = 0; i < nodes[s]->inputs.size(); ++i) {
      const ir::Node* q = nodes[s]->inputs[i]->producer;
      if (!q || q->is_constant()) continue;
      const size_t at = c->position(q);
      if (at < n && copy[at]) c->set_input(nodes[s], i, copy[at]->output());
    }
  }
  // In the backward: copies and moved nodes the forward does not need.
  std::vector<char> in_bwd(c->num_nodes(), 0), done(c->num_nodes(), 0);
  std::vector<ir::Node*> order;
  for (size_t p = 0; p < n; ++p) {
    if (copy[p]) in_bwd[c->position(copy[p])] = 1;
    if (moved[p] && !copy[p]) in_bwd[p] = 1;
    if (!backward[p] && !in_bwd[p]) order.push_back(nodes[p]);
  }
  for (size_t s = 0; s < n; ++s) {
    if (!backward[s]) continue;
    std::vector<std::pair<ir::Node*, size_t>> stack{{nodes[s], 0}};  // moved ancestors first
    while (!stack.empty()) {
      auto& [at, next] = stack.back();
      if (next < at->inputs.size()) {
        ir::Node* q = at->inputs[next++]->producer;
        if (q && !q->is_constant() && in_bwd[c->position(q)] && !done[c->position(q)]) {
          done[c->position(q)] = 1;
          stack.push_back({q, 0});
        }
        continue;
      }
      order.push_back(at);
      stack.pop_back();
    }
  }
  return detail::simulate(*c, {}, std::move(order)).peak;
}

}  // namespace

std::vector<char> backward_recompute(const ir::Graph& g, const std::vector<char>& backward,
                                     const std::vector<char>& forward_output,
                                     int64_t memory_budget) {
  using ir::Node;
  using ir::Value;
  const auto nodes = g.nodes();
  KILN_CHECK(backward.size() == nodes.size() && forward_output.size() == g.outputs().size(),
             "backward_recompute: ", backward.size(), " node marks for ", nodes.size(), " nodes, ",
             forward_output.size(), " output marks for ", g.outputs().size());
  std::vector<char> moved(nodes.size(), 0);
  const detail::Model m = detail::simulate(g, {});
  const size_t ids = m.root.size();
  std::vector<char> fwd_value(ids, 0), fwd_out(ids, 0);
  for (size_t p = 0; p < nodes.size(); ++p)
    if (!backward[p])
      for (const Value* v : nodes[p]->outputs) fwd_value[static_cast<size_t>(v->id())] = 1;
  for (size_t o = 0; o < g.outputs().size(); ++o)
    if (forward_output[o]) fwd_out[static_cast<size_t>(g.outputs()[o]->id())] = 1;
  auto is_free = [&](const Value* v) {
    const auto id = static_cast<size_t>(v->id());
    return m.root[id] < 0 || fwd_out[id] || fwd_out[static_cast<size_t>(m.root[id])];
  };
  // Rule 1.
  std::vector<char> needed(ids, 0);
  std::vector<Value*> needs;
  auto need = [&](Value* v) {
    const auto id = static_cast<size_t>(v->id());
    if (!fwd_value[id] || is_free(v) || needed[id]) return;
    needed[id] = 1;
    needs.push_back(v);
  };
  for (size_t p = 0; p < nodes.size(); ++p)
    if (backward[p])
      for (Value* v : nodes[p]->inputs) need(v);
  for (size_t o = 0; o < g.outputs().size(); ++o)
    if (!forward_output[o]) need(g.outputs()[o]);
  if (needs.empty()) return moved;
  // What the forward's outputs need (moving anything else costs nothing).
  std::vector<char> fwd_required(ids, 0);
  for (size_t o = 0; o < g.outputs().size(); ++o)
    if (forward_output[o]) fwd_required[static_cast<size_t>(g.outputs()[o]->id())] = 1;
  for (size_t p = nodes.size(); p-- > 0;) {
    if (backward[p]) continue;
    bool req = false;
    for (const Value* v : nodes[p]->outputs)
      req = req || fwd_required[static_cast<size_t>(v->id())];
    if (req)
      for (const Value* u : nodes[p]->inputs) fwd_required[static_cast<size_t>(u->id())] = 1;
  }
  // Rule 2 (rule 4 under a budget: opaque ops pinned but at the tier's depth).
  std::vector<int> opaque_rank(ids, 0);
  int opaque = 0;
  for (size_t p = 0; p < nodes.size(); ++p)
    if (!backward[p] && !nodes[p]->is_constant() && nodes[p]->info().has(kOpaque))
      for (const Value* v : nodes[p]->outputs) opaque_rank[static_cast<size_t>(v->id())] = opaque++;
  auto cut = [&](const detail::Tier& t, bool budgeted) {
    const auto c = detail::min_value_cut(m, needs, needed, is_free, [&](Value* v) -> int64_t {
      const Node* n = v->producer;
      const double cost = detail::recompute_cost(*n);
      if (cost < 0) return detail::ValueCut::kPinned;
      const int rank = opaque_rank[static_cast<size_t>(v->id())];
      if (budgeted && n->info().has(kOpaque) && t.pins(rank)) return detail::ValueCut::kPinned;
      bool required = false;
      for (const Value* o : n->outputs)
        required = required || fwd_required[static_cast<size_t>(o->id())];
      const double scaled = std::ldexp(2 * cost, -t.shift);
      return required && scaled > 0 ? std::min<int64_t>(detail::kInf, std::llround(scaled)) : 0;
    });
    // Rule 3.
    std::vector<char> mv(nodes.size(), 0);
    for (Value* v : c.values)
      if (c.recomputed(v)) mv[g.position(v->producer)] = 1;
    return mv;
  };
  moved = cut(detail::kBudgetTiers[0], false);
  if (memory_budget <= 0) return moved;
  // Rule 4: lower rates until the joint peak fits, else the lowest peak.
  auto peak = [&](const std::vector<char>& mv) {
    return joint_peak(g, backward, mv, fwd_required);
  };
  int64_t best = peak(moved);
  const int64_t first = best;
  const char* chosen = detail::kBudgetTiers[0].name;
  for (const detail::Tier& t : detail::kBudgetTiers) {
    if (best <= memory_budget) break;
    std::vector<char> mv = cut(t, true);
    if (const int64_t pk = peak(mv); pk < best) {
      best = pk;
      moved = std::move(mv);
      chosen = t.name;
    }
  }
  if (env::get_int("KILN_DEBUG", 0) >= 1)
    std::fprintf(
        stderr, "[kiln] partition under memory_budget %lld: [%s] joint peak %lld -> %lld bytes%s\n",
        static_cast<long long>(memory_budget), chosen, static_cast<long long>(first),
        static_cast<long long>(best), best <= memory_budget ? "" : " (not met)");
  return moved;
}

}  // namespace kiln::passes
