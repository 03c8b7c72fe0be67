// The order a fusion plan runs in (unit_steps in fuse.h): the executor's
// schedule (codegen/executor/executor.cpp, top) and the one the fused
// schedule's peak model follows (remat_model.cpp), one definition for both, so
// that the predicted peak sees the batching the executor does (two ready
// copies of one kernel run in one step; modelled one at a time, the
// randomized remat test's seeds 351 and 399 measured 16 and 40 bytes above
// the prediction).
#include <algorithm>
#include <set>
#include <unordered_set>

#include "kiln/error.h"
#include "kiln/passes/fuse.h"

namespace kiln::passes {

std::vector<std::vector<size_t>> unit_steps(const ir::Graph& g, const FusionPlan& plan) {
  const auto nodes = g.nodes();
  const size_t ng = plan.groups.size();
  auto unit_of = [&](const ir::Node* n) {
    const size_t p = g.position(n);
    const int gi = plan.group_of[p];
    return gi >= 0 ? static_cast<size_t>(gi) : ng + p;
  };
  const size_t nu = ng + nodes.size();
  std::vector<size_t> first_pos(nu, 0);
  std::vector<char> live(nu, 0);
  for (size_t p = 0; p < nodes.size(); ++p) {
    const size_t u = unit_of(nodes[p]);
    if (!live[u]) first_pos[u] = p;
    live[u] = 1;
  }
  std::vector<std::vector<size_t>> succ(nu);
  std::vector<int> indeg(nu, 0);
  auto depend = [&](size_t from, size_t to) {
    // The edges into one unit are added one after another, so a repeated edge
    // is always the last one added (no scan of a hub's successor list).
    if (from == to) return;
    auto& s = succ[from];
    if (!s.empty() && s.back() == to) return;
    s.push_back(to);
    ++indeg[to];
  };
  // A group waits for what its kernel reads, not for the scalar constants it
  // has inlined (which may come later in the order).
  for (size_t gi = 0; gi < ng; ++gi)
    for (const ir::Value* v : plan.groups[gi].inputs)
      if (v->producer) depend(unit_of(v->producer), gi);
  for (size_t p = 0; p < nodes.size(); ++p) {
    if (plan.group_of[p] >= 0) continue;
    for (const ir::Value* v : nodes[p]->inputs)
      if (v->producer) depend(unit_of(v->producer), ng + p);
  }
  const bool batch = !plan.kernel.empty();
  KILN_CHECK(!batch || plan.kernel.size() == ng, "unit_steps: ", plan.kernel.size(),
             " kernel ids for ", ng, " groups");
  const size_t num_kernels =
      batch ? static_cast<size_t>(*std::max_element(plan.kernel.begin(), plan.kernel.end()) + 1)
            : 0;
  auto kernel_of = [&](size_t gi) { return static_cast<size_t>(plan.kernel[gi]); };
  // Sinks that may wait for the other instances of their kernel; not one that
  // frees a computed buffer (an update whose gradient dies in it, placed early
  // by remat to lower the peak: waiting would keep them all).
  std::unordered_set<const ir::Value*> gradients, outputs(g.outputs().begin(), g.outputs().end());
  for (size_t o = 0; o < g.outputs().size(); ++o)
    if (g.is_gradient_output(o)) gradients.insert(g.outputs()[o]);
  std::vector<char> sink(ng, 0);
  std::vector<int> remaining(num_kernels, 0);
  for (size_t gi = 0; batch && gi < ng; ++gi) {
    const FusionGroup& grp = plan.groups[gi];
    ++remaining[kernel_of(gi)];
    // Each loop stops at its first answer: an optimizer's shared scalars
    // (learning rate, bias corrections) have a user per parameter.
    auto only_here = [&](const ir::Value* v) {
      return std::all_of(v->users.begin(), v->users.end(),
                         [&](const ir::Node* u) { return unit_of(u) == gi; });
    };
    bool s = true;
    for (size_t a = 0; s && a < grp.outputs.size(); ++a)
      s = only_here(grp.outputs[a]) && !gradients.count(grp.outputs[a]);
    for (size_t a = 0; s && a < grp.inputs.size(); ++a) {
      const ir::Value* v = grp.inputs[a];
      s = !(v->producer && !v->producer->is_constant() && !outputs.count(v) && only_here(v));
    }
    sink[gi] = s;
  }
  // Ready units by first position (unique per unit, so the order is total):
  // those that may run now, and sinks whose kernel still has instances that
  // are not ready (`remaining[k]` counts those; it only decreases, so each
  // sink moves from `waiting` to `avail` at most once). Each step takes the
  // earliest unit that may run (else the earliest waiting one) and every
  // ready instance of its kernel: O(units log units) in all.
  using Entry = std::pair<size_t, size_t>;  // (first position, unit)
  auto entry = [&](size_t u) { return Entry{first_pos[u], u}; };
  std::set<Entry> avail, waiting;
  std::vector<std::set<Entry>> ready_of(num_kernels);
  auto make_ready = [&](size_t u) {
    if (u >= ng || !batch) {
      avail.insert(entry(u));
      return;
    }
    const size_t k = kernel_of(u);
    ready_of[k].insert(entry(u));
    if (--remaining[k] == 0)
      for (const Entry& e : ready_of[k])
        if (waiting.erase(e)) avail.insert(e);
    (sink[u] && remaining[k] > 0 ? waiting : avail).insert(entry(u));
  };
  for (size_t u = 0; u < nu; ++u)
    if (live[u] && indeg[u] == 0) make_ready(u);
  // A kernel with column sums launches alone (its blocks own the partials); a
  // recomputation (remat, checkpoint) runs at its own position, never early
  // with another instance of its kernel: its inputs are ready since the forward.
  std::vector<char> alone(ng, 0), recomputes(ng, 0);
  for (size_t gi = 0; gi < ng; ++gi) {
    alone[gi] = !plan.groups[gi].column_sums.empty();
    for (const ir::Node* n : plan.groups[gi].nodes)
      recomputes[gi] |= n->attrs.has("recompute") ? 1 : 0;
  }
  std::vector<std::vector<size_t>> order;  // units per step
  while (!avail.empty() || !waiting.empty()) {
    const size_t best = (avail.empty() ? *waiting.begin() : *avail.begin()).second;
    std::vector<size_t> step{best};
    if (best < ng && batch && !alone[best])
      for (const Entry& e : ready_of[kernel_of(best)])
        if (e.second != best && !recomputes[e.second]) step.push_back(e.second);
    std::sort(step.begin(), step.end(),
              [&](size_t a, size_t b) { return first_pos[a] < first_pos[b]; });
    for (size_t u : step) {
      avail.erase(entry(u));
      waiting.erase(entry(u));
      if (u < ng && batch) ready_of[kernel_of(u)].erase(entry(u));
    }
    for (size_t u : step)
      for (size_t s : succ[u])
        if (--indeg[s] == 0) make_ready(s);
    order.push_back(std::move(step));
  }
  size_t scheduled = 0;
  for (const auto& units : order) scheduled += units.size();
  KILN_ASSERT(scheduled == static_cast<size_t>(std::count(live.begin(), live.end(), 1)),
              "unit_steps: the fusion groups form a cycle");
  return order;
}

}  // namespace kiln::passes
