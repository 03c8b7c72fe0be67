// Rule 0 of remat.cpp: each parameter's update runs as soon as its gradient
// is complete (PyTorch's optimizer-in-backward, a fused backward+step), so a
// training step whose gradients are not results (zero_grad(set_to_none)
// after step()) never holds them all at once.
//
// Rules, and why:
// 1. Families: the nodes whose every use leads only to the state writes of
//    one parameter (its new value, its momentum buffer: writes that feed each
//    other merge). A node read by a value that is not a state write (a
//    result, a gradient returned) or by two families (the backward's dX,
//    which every earlier layer's gradient needs) is in none and stays put.
//    Random ops and collectives are in none (the IR never reorders them).
// 2. Anchor: a family's nodes move, in their order, to just after the latest
//    node outside the family that they read, or that reads the input a write
//    of theirs replaces (the old parameter's readers: the backward's dX reads
//    W), so the executor can still write the update in place.
// 3. The caller accepts the new order or not, by its node-order peak, before
//    the graph changes (remat() checks the fused schedule's peak at its end,
//    as for its cuts).
#include <algorithm>
#include <functional>
#include <span>

#include "kiln/error.h"
#include "remat_internal.h"

namespace kiln::passes::detail {
namespace {

using ir::Node;
using ir::Value;

// Union-find over families.
int family_root(std::vector<int>& up, int a) {
  while (up[static_cast<size_t>(a)] != a)
    a = up[static_cast<size_t>(a)] = up[static_cast<size_t>(up[static_cast<size_t>(a)])];
  return a;
}

// Re-creates `n` before `before` (null: at the end) and removes the original.
void move_before(ir::Graph& g, Node* n, Node* before) {
  std::vector<ir::OutSpec> outs;
  for (const Value* v : n->outputs) outs.push_back({v->dtype, v->shape});
  Node* m = g.add_op(n->op, n->inputs, n->attrs, std::move(outs), before);
  m->sym_attrs = n->sym_attrs;
  m->kind = n->kind;
  for (size_t i = 0; i < n->outputs.size(); ++i) {
    m->outputs[i]->name = n->outputs[i]->name;
    m->outputs[i]->wrapped_number = n->outputs[i]->wrapped_number;
    g.replace_all_uses(n->outputs[i], m->outputs[i]);
  }
  g.erase(n);
}

}  // namespace

bool schedule_updates(ir::Graph& g, std::span<const StateWrite> writes,
                      const std::function<bool(std::vector<ir::Node*>)>& accept,
                      bool early_gradients) {
  if (writes.empty()) return false;
  const std::vector<Node*> nodes = g.nodes();
  const int ids = g.value_id_bound();
  const std::vector<int> into = write_targets(g, writes, ids);
  std::vector<char> result(static_cast<size_t>(ids), 0);  // a graph output but no state write
  for (const Value* o : g.outputs())
    if (into[static_cast<size_t>(o->id())] < 0) result[static_cast<size_t>(o->id())] = 1;
  // Rule 1, from the end: fam[p] is the family of node p, -1 none.
  std::vector<int> fam(nodes.size(), -1), up;
  for (size_t p = nodes.size(); p-- > 0;) {
    const Node* n = nodes[p];
    if (n->is_constant() || n->info().has(kRandom) || n->info().has(kCollective)) continue;
    int f = -1;
    bool ok = true;
    for (const Value* v : n->outputs) {
      const auto id = static_cast<size_t>(v->id());
      if (result[id]) ok = false;
      if (into[id] >= 0) {  // a state write: its own family, merged with its readers'
        const int mine = static_cast<int>(up.size());
        up.push_back(mine);
        f = f < 0 ? mine : (up[static_cast<size_t>(family_root(up, mine))] = family_root(up, f));
      }
    }
    // Readers: one family for all (a write merges with them; else they must agree).
    const bool writes_here = f >= 0;
    for (const Value* v : n->outputs)
      for (const Node* u : v->users) {
        const int fu = fam[g.position(u)];
        if (fu < 0) {
          ok = false;
          break;
        }
        if (f < 0)
          f = family_root(up, fu);
        else if (family_root(up, fu) != family_root(up, f)) {
          if (writes_here)
            up[static_cast<size_t>(family_root(up, fu))] = family_root(up, f);
          else
            ok = false;
        }
      }
    if (ok && f >= 0) fam[p] = f;
  }
  if (up.empty()) return false;
  // The graph input each value is (through views), -1 none.
  std::vector<int> origin(static_cast<size_t>(ids), -1);
  for (const Value* v : g.inputs()) origin[static_cast<size_t>(v->id())] = v->id();
  for (const Node* n : nodes)
    if (!n->is_constant() && n->info().has(kView) && !n->inputs.empty())
      for (const Value* o : n->outputs)
        origin[static_cast<size_t>(o->id())] = origin[static_cast<size_t>(n->inputs[0]->id())];
  // A family reading an input another family writes (the last layer's dX,
  // only the first layer's gradient needs, reads that layer's weight) runs
  // with it as one, in their order, which has the reader first.
  std::vector<int> written_by(static_cast<size_t>(ids), -1);  // input id -> family writing it
  for (size_t p = 0; p < nodes.size(); ++p)
    for (const Value* v : nodes[p]->outputs)
      if (const int x = into[static_cast<size_t>(v->id())]; x >= 0 && fam[p] >= 0)
        written_by[static_cast<size_t>(x)] = fam[p];
  for (size_t p = 0; p < nodes.size(); ++p)
    for (const Value* in : nodes[p]->inputs)
      if (const int x = origin[static_cast<size_t>(in->id())]; x >= 0 && fam[p] >= 0)
        if (const int w = written_by[static_cast<size_t>(x)]; w >= 0)
          up[static_cast<size_t>(family_root(up, w))] = family_root(up, fam[p]);
  for (int& f : fam)
    if (f >= 0) f = family_root(up, f);
  // Rule 2: anchors: the latest outside producer, and the latest reader
  // outside the family of an input it writes.
  std::vector<int> anchor(up.size(), -1);
  auto raise = [&](int f, size_t p) {
    anchor[static_cast<size_t>(f)] = std::max(anchor[static_cast<size_t>(f)], static_cast<int>(p));
  };
  for (size_t p = 0; p < nodes.size(); ++p) {
    const int f = fam[p];
    for (const Value* in : nodes[p]->inputs) {
      if (f >= 0 && in->producer && fam[g.position(in->producer)] != f)
        raise(f, g.position(in->producer));  // outside every family (families are disjoint)
      if (const int x = origin[static_cast<size_t>(in->id())]; x >= 0 && f < 0)
        if (const int w = written_by[static_cast<size_t>(x)]; w >= 0) raise(family_root(up, w), p);
    }
  }
  // Rule 2b: the family's gradient part (nodes that write no state and read
  // no input a family writes, nor a member that does: dW's matmul and the
  // operands recomputed for it) goes after its own latest outside producer
  // instead, so the backward's dX, which the anchor waits for, does not hold
  // its output while dW's operands are made.
  std::vector<char> early(nodes.size(), 0);
  std::vector<int> early_anchor(up.size(), -1);
  for (size_t p = 0; p < nodes.size(); ++p) {
    const int f = fam[p];
    if (f < 0) continue;
    bool e = true;
    for (const Value* v : nodes[p]->outputs) e = e && into[static_cast<size_t>(v->id())] < 0;
    int a = -1;
    for (const Value* in : nodes[p]->inputs) {
      if (const int x = origin[static_cast<size_t>(in->id())]; x >= 0)
        e = e && written_by[static_cast<size_t>(x)] < 0;
      if (!in->producer) continue;
      const size_t q = g.position(in->producer);
      if (fam[q] == f)
        e = e && early[q];
      else
        a = std::max(a, static_cast<int>(q));
    }
    early[p] = e;
    if (e) early_anchor[static_cast<size_t>(f)] = std::max(early_anchor[static_cast<size_t>(f)], a);
  }
  // The new order: the nodes outside families as they were, each family's
  // nodes (in their order) just after its anchor, its gradient part just
  // after its own; a family with no anchor (it reads graph inputs only)
  // stays where it is.
  std::vector<std::vector<size_t>> members(2 * up.size());  // 2f: gradient part, 2f + 1: rest
  std::vector<std::vector<size_t>> at(nodes.size());        // position -> parts, first first
  for (size_t p = 0; p < nodes.size(); ++p) {
    const int f = fam[p];
    if (f < 0 || anchor[static_cast<size_t>(f)] < 0) continue;
    const int ea = early_anchor[static_cast<size_t>(f)];
    const bool split =
        early_gradients && early[p] && ea >= 0 && ea < anchor[static_cast<size_t>(f)];
    const size_t part = 2 * static_cast<size_t>(f) + (split ? 0 : 1);
    if (members[part].empty())
      at[static_cast<size_t>(split ? ea : anchor[static_cast<size_t>(f)])].push_back(part);
    members[part].push_back(p);
  }
  std::vector<size_t> order;
  for (size_t p = 0; p < nodes.size(); ++p) {
    if (fam[p] < 0 || anchor[static_cast<size_t>(fam[p])] < 0) order.push_back(p);
    for (size_t part : at[p]) order.insert(order.end(), members[part].begin(), members[part].end());
  }
  bool same = true;
  for (size_t k = 0; k < order.size() && same; ++k) same = order[k] == k;
  if (same) return false;
  std::vector<Node*> proposed;
  for (size_t p : order) proposed.push_back(nodes[p]);
  if (accept && !accept(std::move(proposed))) return false;
  // Each moved node goes before the next unmoved node of the new order.
  Node* before = nullptr;
  std::vector<std::pair<Node*, Node*>> plan;  // (moved node, the unmoved node it precedes)
  for (size_t k = order.size(); k-- > 0;) {
    const size_t p = order[k];
    if (fam[p] >= 0 && anchor[static_cast<size_t>(fam[p])] >= 0)
      plan.emplace_back(nodes[p], before);
    else
      before = nodes[p];
  }
  for (auto it = plan.rbegin(); it != plan.rend(); ++it) move_before(g, it->first, it->second);
  return true;
}

}  // namespace kiln::passes::detail
