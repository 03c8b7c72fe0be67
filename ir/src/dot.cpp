// Graphviz export. Graph inputs are ellipses (in<i>, labelled with their
// names), ops are boxes (n<position>, op name and short attrs), constants grey
// boxes, graph outputs bold ellipses (out<i>). Edges carry the value's
// dtype[shape]. Output depends only on the graph's structure and names (node
// positions, not pointers), so it is deterministic. Values that no node of the
// graph defines (a broken graph) get a red "undefined" node instead of crashing.
#include "kiln/ir/dot.h"

#include <cstring>
#include <sstream>
#include <unordered_map>

namespace kiln::ir {
namespace {

constexpr size_t kMaxAttrText = 60;  // longer attribute lines are cut with "..."

// Text is built with kiln::str / ostringstream rather than `"lit" + string`,
// on which GCC 12 at -O3 gives a false -Wrestrict.
std::string sym_attr_str(const SymAttr& s) {
  return s.reciprocal ? str("1/(", to_string(s.expr), ")") : to_string(s.expr);
}

std::string type_str(const Value* v) {
  return str(dtype_name(v->dtype), to_string(v->shape));
}

// Escapes text for a double-quoted DOT string; newlines become \n.
std::string esc(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    if (c == '\n') {
      r += "\\n";
      continue;
    }
    r += c;
  }
  return r;
}

// Attributes as "k=v, k=v", symbolic entries shown as expressions.
std::string attrs_str(const Node* n) {
  std::ostringstream os;
  bool first = true;
  for (const auto& [key, val] : n->attrs.items()) {
    os << (first ? "" : ", ") << key << '=';
    first = false;
    const Dims* d = std::get_if<Dims>(&val);
    std::vector<std::string> elems;
    if (d)
      for (int64_t x : *d) elems.push_back(std::to_string(x));
    std::string scalar;
    for (const SymAttr& s : n->sym_attrs) {
      if (s.name == nullptr || std::strcmp(s.name, key) != 0) continue;
      if (s.index >= 0 && static_cast<size_t>(s.index) < elems.size())
        elems[static_cast<size_t>(s.index)] = to_string(s.expr);
      else if (s.index < 0)
        scalar = sym_attr_str(s);
    }
    if (!scalar.empty()) {
      os << scalar;
    } else if (d) {
      os << '[';
      for (size_t i = 0; i < elems.size(); ++i) os << (i ? ", " : "") << elems[i];
      os << ']';
    } else {
      os << val;
    }
  }
  std::string r = os.str();
  if (r.size() > kMaxAttrText) r = str(r.substr(0, kMaxAttrText - 3), "...");
  return r;
}

std::string constant_label(const Node* n) {
  std::string r = "constant ";
  const Tensor& t = n->constant;
  if (!n->outputs.empty() && n->outputs[0]->wrapped_number) r += "wrapped ";
  if (!n->outputs.empty()) r += type_str(n->outputs[0]);
  for (const SymAttr& s : n->sym_attrs)
    if (s.name != nullptr && std::strcmp(s.name, "value") == 0) {
      r += str("\n= ", sym_attr_str(s));
      return r;
    }
  if (t.defined() && !t.is_symbolic() && t.numel() == 1) {
    std::ostringstream os;
    os << t.item<double>();
    r += str("\n= ", os.str());
  }
  return r;
}

}  // namespace

std::string to_dot(const Graph& g) {
  std::ostringstream os;
  os << "digraph kiln {\n  rankdir=TB;\n  node [fontname=\"monospace\"];\n"
     << "  edge [fontname=\"monospace\", fontsize=10];\n";
  std::unordered_map<const Value*, std::string> src;  // value -> DOT node defining it
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const Value* v = g.inputs()[i];
    std::string id = str("in", i);
    src.emplace(v, id);
    os << "  " << id << " [shape=ellipse, label=\"" << esc(v->name) << "\"];\n";
  }
  const std::vector<Node*> nodes = g.nodes();
  for (size_t p = 0; p < nodes.size(); ++p) {
    const Node* n = nodes[p];
    std::string id = str("n", p);
    for (const Value* o : n->outputs) src.emplace(o, id);
    if (n->is_constant()) {
      os << "  " << id << " [shape=box, style=filled, fillcolor=lightgrey, label=\""
         << esc(constant_label(n)) << "\"];\n";
      continue;
    }
    std::string label = static_cast<int>(n->op) < kNumOps ? op_name(n->op) : "<bad op>";
    std::string attrs = attrs_str(n);
    if (!attrs.empty()) label += str("\n", attrs);
    os << "  " << id << " [shape=box, label=\"" << esc(label) << "\"];\n";
  }
  // Edges, consumer by consumer in order; dangling values get their own node.
  int undefined = 0;
  auto edge = [&](const Value* v, const std::string& to) {
    auto it = src.find(v);
    const bool defined = it != src.end();
    if (!defined) {
      std::string id = str("undef", undefined++);
      std::string what = v ? str("undefined %", v->id()) : std::string("null");
      os << "  " << id << " [shape=octagon, color=red, label=\"" << esc(what) << "\"];\n";
      it = src.emplace(v, id).first;
    }
    std::string label = v ? type_str(v) : "?";
    if (defined && v && v->producer && v->producer->outputs.size() > 1)
      label = str("#", v->index, " ", label);
    os << "  " << it->second << " -> " << to << " [label=\"" << esc(label) << "\"];\n";
  };
  for (size_t p = 0; p < nodes.size(); ++p)
    for (const Value* v : nodes[p]->inputs) edge(v, str("n", p));
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    std::string id = str("out", i);
    const std::string& name = i < g.output_names().size() ? g.output_names()[i] : "";
    os << "  " << id << " [shape=ellipse, style=bold, label=\"" << esc(name) << "\"];\n";
    edge(g.outputs()[i], id);
  }
  os << "}\n";
  return os.str();
}

}  // namespace kiln::ir
