#include "driver/partition.h"

#include <unordered_map>
#include <unordered_set>

#include "kiln/passes/remat.h"

namespace kiln::detail {

namespace {

// The backward's nodes in joint order, each node the backward computes again
// (`moved`) placed just before its first reader there, so a recomputed value
// is not alive from the backward's start.
std::vector<const ir::Node*> backward_order(const ir::Graph& joint,
                                            const std::vector<bool>& tainted_live,
                                            const std::vector<char>& moved,
                                            const std::vector<bool>& is_bwd_output) {
  const auto nodes = joint.nodes();
  std::vector<const ir::Node*> order;
  std::vector<char> emitted(nodes.size(), 0);
  // Moved ancestors first (iteratively: recompute chains can be long).
  auto emit = [&](size_t s) {
    std::vector<std::pair<size_t, size_t>> stack{{s, 0}};
    while (!stack.empty()) {
      auto& [at, next] = stack.back();
      const ir::Node* n = nodes[at];
      if (next < n->inputs.size()) {
        const ir::Node* p = n->inputs[next++]->producer;
        if (p) {
          const size_t q = joint.position(p);
          if (moved[q] && !emitted[q]) {
            emitted[q] = 1;
            stack.push_back({q, 0});
          }
        }
        continue;
      }
      order.push_back(n);
      stack.pop_back();
    }
  };
  for (size_t s = 0; s < nodes.size(); ++s)
    if (tainted_live[s]) {
      emitted[s] = 1;
      emit(s);
    }
  // A backward output no backward node reads (made from forward values only).
  for (size_t o = 0; o < joint.outputs().size(); ++o) {
    const ir::Node* p = joint.outputs()[o]->producer;
    if (!is_bwd_output[o] || !p) continue;
    const size_t q = joint.position(p);
    if (moved[q] && !emitted[q]) {
      emitted[q] = 1;
      emit(q);
    }
  }
  return order;
}

}  // namespace

Split partition(const ir::Graph& joint, const std::vector<bool>& is_grad_input,
                const std::vector<bool>& is_bwd_output, bool recompute, int64_t memory_budget) {
  const auto nodes = joint.nodes();
  // Tainted: depends on a gradient input (must run in the backward).
  std::unordered_set<const ir::Value*> tainted;
  for (size_t i = 0; i < joint.inputs().size(); ++i)
    if (is_grad_input[i]) tainted.insert(joint.inputs()[i]);
  std::vector<bool> node_tainted(nodes.size(), false);
  for (size_t s = 0; s < nodes.size(); ++s) {
    bool t = false;
    for (const ir::Value* v : nodes[s]->inputs) t = t || tainted.count(v) > 0;
    node_tainted[s] = t;
    if (t)
      for (const ir::Value* o : nodes[s]->outputs) tainted.insert(o);
  }
  // Live: ancestors of some output.
  std::unordered_set<const ir::Value*> needed(joint.outputs().begin(), joint.outputs().end());
  std::vector<bool> live(nodes.size(), false);
  for (size_t s = nodes.size(); s-- > 0;) {
    for (const ir::Value* o : nodes[s]->outputs) live[s] = live[s] || needed.count(o) > 0;
    if (live[s])
      for (const ir::Value* v : nodes[s]->inputs) needed.insert(v);
  }
  Split sp;
  sp.fwd = std::make_unique<ir::Graph>();
  sp.bwd = std::make_unique<ir::Graph>();
  sp.fwd->num_syms = sp.bwd->num_syms = joint.num_syms;
  sp.fwd->rng_advance = joint.rng_advance;
  std::unordered_map<const ir::Value*, ir::Value*> in_fwd, in_bwd;
  for (size_t i = 0; i < joint.inputs().size(); ++i) {
    const ir::Value* v = joint.inputs()[i];
    if (is_grad_input[i]) continue;
    ir::Value* nv = sp.fwd->add_input(v->dtype, v->shape, v->name);
    nv->wrapped_number = v->wrapped_number;
    in_fwd[v] = nv;
    sp.fwd_inputs.push_back(i);
  }
  auto copy_node = [](ir::Graph& g, const ir::Node* n, std::vector<ir::Value*> ins) {
    std::vector<ir::OutSpec> outs;
    for (const ir::Value* o : n->outputs) outs.push_back({o->dtype, o->shape});
    ir::Node* m = g.add_op(n->op, std::move(ins), n->attrs, std::move(outs));
    m->kind = n->kind;
    m->sym_attrs = n->sym_attrs;
    m->constant = n->constant;
    for (size_t k = 0; k < n->outputs.size(); ++k)
      m->outputs[k]->wrapped_number = n->outputs[k]->wrapped_number;
    return m;
  };
  for (size_t s = 0; s < nodes.size(); ++s) {
    if (!live[s] || node_tainted[s]) continue;
    std::vector<ir::Value*> ins;
    for (const ir::Value* v : nodes[s]->inputs) ins.push_back(in_fwd.at(v));
    ir::Node* m = copy_node(*sp.fwd, nodes[s], std::move(ins));
    for (size_t k = 0; k < m->outputs.size(); ++k) in_fwd[nodes[s]->outputs[k]] = m->outputs[k];
  }
  // Forward outputs, then the saved values in first-use order.
  for (size_t o = 0; o < joint.outputs().size(); ++o) {
    if (is_bwd_output[o]) continue;
    sp.fwd->add_output(in_fwd.at(joint.outputs()[o]), joint.output_names()[o],
                       joint.output_roles()[o]);
    sp.fwd_outputs.push_back(o);
  }
  auto bwd_value = [&](const ir::Value* v) -> ir::Value* {
    auto it = in_bwd.find(v);
    if (it != in_bwd.end()) return it->second;
    // A forward value (or forward input) the backward reads: save it.
    ir::Value* nv = sp.bwd->add_input(v->dtype, v->shape, str("saved", sp.num_saved));
    nv->wrapped_number = v->wrapped_number;
    sp.fwd->add_output(in_fwd.at(v), str("saved", sp.num_saved));
    ++sp.num_saved;
    in_bwd[v] = nv;
    return nv;
  };
  // Forward nodes the backward computes again instead of the forward saving
  // their values (remat's min cut at its default rate: AOTAutograd's partitioner).
  std::vector<bool> tainted_live(nodes.size(), false);
  for (size_t s = 0; s < nodes.size(); ++s) tainted_live[s] = live[s] && node_tainted[s];
  std::vector<char> moved(nodes.size(), 0);
  if (recompute) {
    std::vector<char> backward(nodes.size(), 0), fwd_output(joint.outputs().size(), 0);
    for (size_t s = 0; s < nodes.size(); ++s) backward[s] = tainted_live[s];
    for (size_t o = 0; o < fwd_output.size(); ++o) fwd_output[o] = !is_bwd_output[o];
    moved = passes::backward_recompute(joint, backward, fwd_output, memory_budget);
  }
  std::unordered_set<const ir::Value*> made_in_bwd(tainted);
  for (size_t s = 0; s < nodes.size(); ++s)
    if (moved[s])
      for (const ir::Value* o : nodes[s]->outputs) made_in_bwd.insert(o);
  // Gradient inputs come after the saved values: collect the saved ones first.
  const std::vector<const ir::Node*> bwd_nodes =
      backward_order(joint, tainted_live, moved, is_bwd_output);
  for (const ir::Node* n : bwd_nodes)
    for (const ir::Value* v : n->inputs)
      if (!made_in_bwd.count(v)) bwd_value(v);
  for (size_t o = 0; o < joint.outputs().size(); ++o)
    if (is_bwd_output[o] && !made_in_bwd.count(joint.outputs()[o])) bwd_value(joint.outputs()[o]);
  for (size_t i = 0; i < joint.inputs().size(); ++i) {
    if (!is_grad_input[i]) continue;
    const ir::Value* v = joint.inputs()[i];
    ir::Value* nv = sp.bwd->add_input(v->dtype, v->shape, v->name);
    in_bwd[v] = nv;
    sp.grad_inputs.push_back(i);
  }
  for (const ir::Node* n : bwd_nodes) {
    std::vector<ir::Value*> ins;
    for (const ir::Value* v : n->inputs) ins.push_back(in_bwd.at(v));
    ir::Node* m = copy_node(*sp.bwd, n, std::move(ins));
    for (size_t k = 0; k < m->outputs.size(); ++k) in_bwd[n->outputs[k]] = m->outputs[k];
  }
  for (size_t o = 0; o < joint.outputs().size(); ++o) {
    if (!is_bwd_output[o]) continue;
    sp.bwd->add_output(in_bwd.at(joint.outputs()[o]), joint.output_names()[o],
                       joint.output_roles()[o]);
    sp.bwd_outputs.push_back(o);
  }
  return sp;
}

}  // namespace kiln::detail
