// IR text printer (format: ir/README.md; parser.cpp reads it back). It must
// not crash on invalid graphs either: those are the ones people print to debug.
#include <charconv>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "kiln/ir/text.h"

namespace kiln::ir {
namespace {

void put_int(std::string& out, int64_t v) {
  out += std::to_string(v);
}

// Doubles always carry '.', 'e', inf or nan so that they never read back as
// ints. to_chars is locale-independent (printf's decimal point is not).
void put_double(std::string& out, double v, int digits) {
  if (std::isnan(v)) {
    out += std::signbit(v) ? "-nan" : "nan";  // x86's default NaN is negative
    return;
  }
  if (std::isinf(v)) {
    out += v < 0 ? "-inf" : "inf";
    return;
  }
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, digits);
  std::string_view s(buf, static_cast<size_t>(r.ptr - buf));
  out += s;
  if (s.find_first_of(".e") == std::string_view::npos) out += ".0";
}

void put_symint(std::string& out, const SymInt& s) {
  out += to_string(s);
}

// A scalar entry: `1/(e)` and `1.0*(e)` are doubles (eval_attrs keeps the
// stored value's type, so a double equal to e must not read back as an int).
void put_sym_attr(std::string& out, const SymAttr& s, bool is_double) {
  if (s.index < 0 && (s.reciprocal || is_double)) {
    out += s.reciprocal ? "1/(" : "1.0*(";
    put_symint(out, s.expr);
    out += ')';
  } else {
    put_symint(out, s.expr);
  }
}

void put_string(std::string& out, const std::string& s) {
  static const char kHex[] = "0123456789abcdef";
  out += '"';
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (u < 0x20 || u == 0x7f) {
          out += "\\x";
          out += kHex[u >> 4];
          out += kHex[u & 15];
        } else {
          out += c;  // UTF-8 passes through
        }
    }
  }
  out += '"';
}

void put_type(std::string& out, const Value& v) {
  if (v.wrapped_number) out += "wrapped ";
  out += dtype_name(v.dtype);
  out += '[';
  for (size_t i = 0; i < v.shape.size(); ++i) {
    if (i) out += ", ";
    put_symint(out, v.shape[i]);
  }
  out += ']';
}

// The symbolic entry for (name, index) of a node, if any.
const SymAttr* find_sym(const Node& n, const char* name, int32_t index) {
  for (const SymAttr& s : n.sym_attrs)
    if (s.name && std::strcmp(s.name, name) == 0 && s.index == index) return &s;
  return nullptr;
}

void put_attr_value(std::string& out, const Node& n, const char* name, const AttrValue& v) {
  if (const Dims* d = std::get_if<Dims>(&v)) {
    // One scan of sym_attrs per attribute, not one per element.
    std::vector<const SymAttr*> entry(d->size(), nullptr);
    for (const SymAttr& s : n.sym_attrs)
      if (s.name && std::strcmp(s.name, name) == 0 && s.index >= 0 &&
          static_cast<size_t>(s.index) < d->size())
        entry[static_cast<size_t>(s.index)] = &s;
    out += '[';
    for (size_t i = 0; i < d->size(); ++i) {
      if (i) out += ", ";
      if (entry[i])
        put_symint(out, entry[i]->expr);
      else
        put_int(out, (*d)[i]);
    }
    out += ']';
    return;
  }
  if (const SymAttr* s = find_sym(n, name, -1)) {
    put_sym_attr(out, *s, std::holds_alternative<double>(v));
    return;
  }
  if (const int64_t* i = std::get_if<int64_t>(&v)) {
    put_int(out, *i);
  } else if (const double* f = std::get_if<double>(&v)) {
    put_double(out, *f, 17);
  } else if (const bool* b = std::get_if<bool>(&v)) {
    out += *b ? "true" : "false";
  } else if (const DType* t = std::get_if<DType>(&v)) {
    out += dtype_name(*t);
  }
}

template <typename T>
void put_element(std::string& out, const void* data, int64_t i) {
  const T* p = static_cast<const T*>(data) + i;
  if constexpr (std::is_same_v<T, bool>) {
    // Read the byte: a bool object holding anything but 0/1 would be UB.
    out += *reinterpret_cast<const uint8_t*>(p) ? "true" : "false";
  } else if constexpr (std::is_same_v<T, double>) {
    put_double(out, *p, 17);
  } else if constexpr (std::is_integral_v<T>) {
    put_int(out, static_cast<int64_t>(*p));
  } else {
    put_double(out, static_cast<double>(static_cast<float>(*p)), 9);  // f32, f16, bf16
  }
}

void put_constant_data(std::string& out, const Tensor& t) {
  if (!t.defined() || t.is_symbolic()) {
    out += "?";  // invalid graph; the parser rejects it
    return;
  }
  Tensor c = t.cpu().contiguous();  // a device constant's values through the host
  const void* data = c.numel() > 0 ? c.data_ptr() : nullptr;
  auto one = [&](int64_t i) {
    visit_dtype(c.dtype(), [&](auto tag) { put_element<decltype(tag)>(out, data, i); });
  };
  if (c.dim() == 0) {
    one(0);
    return;
  }
  out += '[';
  for (int64_t i = 0; i < c.numel(); ++i) {
    if (i) out += ", ";
    one(i);
  }
  out += ']';
}

}  // namespace

std::string print(const Graph& g) {
  // Values are numbered up front so that a use before its definition (an
  // invalid order) still prints a name the reader can follow.
  std::unordered_map<const Value*, int> ids;
  int next = 0;
  for (const Value* v : g.inputs()) ids.emplace(v, next++);
  const std::vector<Node*> nodes = g.nodes();
  for (const Node* n : nodes)
    for (const Value* o : n->outputs) ids.emplace(o, next++);
  std::string out;
  auto ref = [&](const Value* v) {
    auto it = ids.find(v);
    if (it == ids.end()) {
      out += "%?";
    } else {
      out += '%';
      put_int(out, it->second);
    }
  };

  out += "graph(";
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const Value* v = g.inputs()[i];
    if (i) out += ", ";
    ref(v);
    out += ": ";
    put_type(out, *v);
    out += ' ';
    put_string(out, v->name);
  }
  out += ')';
  if (g.num_syms != 0) {
    out += " syms=";
    put_int(out, g.num_syms);
  }
  if (!(g.rng_advance == SymInt(0))) {
    out += " rng_advance=";
    put_symint(out, g.rng_advance);
  }
  out += " {\n";

  for (const Node* n : nodes) {
    out += "  ";
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      if (i) out += ", ";
      ref(n->outputs[i]);
    }
    if (!n->outputs.empty()) out += " = ";
    if (n->is_constant()) {
      out += "constant ";
      if (n->outputs.empty()) {
        out += "?";
      } else {
        put_type(out, *n->outputs[0]);
      }
      out += ' ';
      put_constant_data(out, n->constant);
      bool first = true;
      for (const SymAttr& s : n->sym_attrs) {
        if (!s.name || s.index >= 0) continue;
        out += first ? " {" : ", ";
        first = false;
        out += s.name;
        out += '=';
        put_sym_attr(out, s, false);  // the constant's dtype says int or float
      }
      if (!first) out += '}';
    } else {
      out += op_name(n->op);
      out += '(';
      for (size_t i = 0; i < n->inputs.size(); ++i) {
        if (i) out += ", ";
        ref(n->inputs[i]);
      }
      out += ')';
      if (!n->attrs.empty()) {
        out += " {";
        bool first = true;
        for (const auto& [name, v] : n->attrs.items()) {
          if (!first) out += ", ";
          first = false;
          out += name;
          out += '=';
          put_attr_value(out, *n, name, v);
        }
        out += '}';
      }
      for (size_t i = 0; i < n->outputs.size(); ++i) {
        out += i ? ", " : " : ";
        put_type(out, *n->outputs[i]);
      }
    }
    out += '\n';
  }

  out += "  return";
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    out += i ? ", " : " ";
    ref(g.outputs()[i]);
    out += ' ';
    put_string(out, i < g.output_names().size() ? g.output_names()[i] : std::string());
    if (g.is_gradient_output(i)) out += " gradient";
  }
  out += "\n}\n";
  return out;
}

}  // namespace kiln::ir
