#include "driver/partition.h"

#include <unordered_map>
#include <unordered_set>

namespace kiln::detail {

Split partition(const ir::Graph& joint, const std::vector<bool>& is_grad_input,
                const std::vector<bool>& is_bwd_output) {
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
  // Gradient inputs come after the saved values: collect the saved ones first.
  std::vector<const ir::Node*> bwd_nodes;
  for (size_t s = 0; s < nodes.size(); ++s)
    if (live[s] && node_tainted[s]) bwd_nodes.push_back(nodes[s]);
  for (const ir::Node* n : bwd_nodes)
    for (const ir::Value* v : n->inputs)
      if (!tainted.count(v)) bwd_value(v);
  for (size_t o = 0; o < joint.outputs().size(); ++o)
    if (is_bwd_output[o] && !tainted.count(joint.outputs()[o])) bwd_value(joint.outputs()[o]);
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
