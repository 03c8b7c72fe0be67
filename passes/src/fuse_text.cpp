// The fusion plan as text and its structural check (fuse.h): to_string for
// KILN_DUMP and tests, check_plan for tests and KILN_VERIFY.
#include <unordered_map>
#include <unordered_set>

#include "kiln/passes/fuse.h"

namespace kiln::passes {
namespace {

using ir::Node;
using ir::Value;

std::string dims_text(const FusionGroup& grp) {
  std::string s = "[";
  for (size_t d = 0; d < grp.dims.size(); ++d) {
    if (d) s += grp.reduces() && d + 1 == grp.dims.size() ? " | " : ", ";
    if (grp.dims[d].empty()) s += "1";
    for (size_t k = 0; k < grp.dims[d].size(); ++k)
      s += str(k ? "*" : "", ir::to_string(grp.dims[d][k]));
  }
  s += "]";
  return s;
}

const char* kind_name(GroupKind k) {
  switch (k) {
    case GroupKind::kPointwise:
      return "pointwise";
    case GroupKind::kReduction:
      return "reduction";
    case GroupKind::kEpilogue:
      return "epilogue";
  }
  return "?";
}

}  // namespace

std::string to_string(const FusionPlan& plan, const ir::Graph& g) {
  std::unordered_map<const Value*, int> num;
  int next = 0;
  for (const Value* v : g.inputs()) num[v] = next++;
  for (const Node* n : g.nodes())
    for (const Value* v : n->outputs) num[v] = next++;
  auto name = [&](const Value* v) { return str("%", num.count(v) ? num.at(v) : -1); };
  std::string s;
  for (size_t i = 0; i < plan.groups.size(); ++i) {
    const FusionGroup& grp = plan.groups[i];
    s += str("group ", i, " ", kind_name(grp.kind), " ", dims_text(grp), ":");
    for (size_t k = 0; k < grp.nodes.size(); ++k)
      s += str(k ? ", " : " ", op_name(grp.nodes[k]->op), " ", name(grp.nodes[k]->output()));
    for (const Node* n : grp.column_sums) s += str(", sum ", name(n->output()), " (column)");
    s += " ; in";
    for (const Value* v : grp.inputs) s += str(" ", name(v));
    s += " ; out";
    for (const Value* v : grp.outputs) s += str(" ", name(v));
    s += "\n";
  }
  return s;
}

std::string check_plan(const FusionPlan& plan, const ir::Graph& g) {
  const auto nodes = g.nodes();
  if (plan.group_of.size() != nodes.size()) return "group_of has the wrong size";
  std::unordered_map<const Node*, int> gid;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const int k = plan.group_of[i];
    if (k < -1 || k >= static_cast<int>(plan.groups.size())) return str("node ", i, ": bad group");
    if (k >= 0) gid[nodes[i]] = k;
  }
  for (size_t k = 0; k < plan.groups.size(); ++k)
    for (const Node* n : plan.groups[k].nodes)
      if (!gid.count(n) || gid.at(n) != static_cast<int>(k))
        return str("group ", k, " lists a node that group_of puts elsewhere");
  // Condensed graph: units are groups and unfused nodes; it must be acyclic.
  std::unordered_map<const Node*, int> pos;
  for (size_t i = 0; i < nodes.size(); ++i) pos[nodes[i]] = static_cast<int>(i);
  const int ng = static_cast<int>(plan.groups.size());
  auto unit = [&](const Node* n) { return gid.count(n) ? gid.at(n) : ng + pos.at(n); };
  const size_t nu = static_cast<size_t>(ng) + nodes.size();
  std::vector<std::unordered_set<int>> succ(nu);
  std::vector<int> indeg(nu, 0);
  for (const Node* n : nodes)
    for (const Value* v : n->outputs)
      for (const Node* u : v->users) {
        const int a = unit(n), b = unit(u);
        if (a != b && succ[static_cast<size_t>(a)].insert(b).second)
          ++indeg[static_cast<size_t>(b)];
      }
  std::vector<int> ready;
  for (size_t u = 0; u < nu; ++u)
    if (indeg[u] == 0) ready.push_back(static_cast<int>(u));
  size_t visited = 0;
  while (!ready.empty()) {
    const int u = ready.back();
    ready.pop_back();
    ++visited;
    for (int s : succ[static_cast<size_t>(u)])
      if (--indeg[static_cast<size_t>(s)] == 0) ready.push_back(s);
  }
  if (visited != nu) return "the groups are not convex or form a cycle";
  return "";
}

}  // namespace kiln::passes
