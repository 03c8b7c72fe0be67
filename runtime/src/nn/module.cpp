// nn::Module: registration, traversal, modes, dtype conversion, state dicts and
// printing.
#include "kiln/nn/module.h"

#include <cxxabi.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <typeinfo>
#include <unordered_map>
#include <unordered_set>

#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/functional.h"

namespace kiln::nn {
namespace {

// "kiln::nn::Linear" -> "Linear", "(anonymous namespace)::Net" -> "Net"; template
// arguments keep their namespaces.
std::string demangled_type_name(const std::type_info& ti) {
  int status = 0;
  char* raw = abi::__cxa_demangle(ti.name(), nullptr, nullptr, &status);
  std::string full = (status == 0 && raw) ? raw : ti.name();
  std::free(raw);
  int depth = 0;
  size_t cut = 0;
  for (size_t i = 0; i + 1 < full.size(); ++i) {
    char c = full[i];
    if (c == '<' || c == '(') ++depth;
    if (c == '>' || c == ')') --depth;
    if (depth == 0 && c == ':' && full[i + 1] == ':') cut = i + 2;
  }
  return full.substr(cut);
}

// Replaces the data behind t's TensorImpl with v's (same impl, new storage).
void swap_in(const Tensor& t, const Tensor& v) {
  TensorImpl* d = t.impl();
  const TensorImpl* s = v.impl();
  d->storage = s->storage;
  d->shape = s->shape;
  d->strides = s->strides;
  d->offset = s->offset;
  d->dtype = s->dtype;
  d->device = s->device;
}

// PyTorch's _addindent: every line but the first gets `n` more spaces.
std::string add_indent(const std::string& s, int n) {
  std::string out;
  std::string pad(static_cast<size_t>(n), ' ');
  for (char c : s) {
    out += c;
    if (c == '\n') out += pad;
  }
  return out;
}

std::string quoted_list(const std::vector<std::string>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", \"" : "\"") + v[i] + "\"";
  return s + "]";
}

}  // namespace

namespace detail {
std::string py_bool(bool b) {
  return b ? "True" : "False";
}

std::string py_tuple(const Dims& d) {
  std::string s = "(";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + (d.size() == 1 ? ",)" : ")");
}

std::string py_float(double v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, res.ptr);
  // Python always shows a float marker: 1.0, not 1.
  if (s.find_first_of(".eni") == std::string::npos) s += ".0";
  return s;
}
}  // namespace detail

namespace {
// Every live module, for tensor_path (diagnostics only).
std::mutex& live_mutex() {
  static std::mutex mu;
  return mu;
}
std::unordered_set<const Module*>& live_modules() {
  static auto* live = new std::unordered_set<const Module*>;  // leaked: static modules outlive it
  return *live;
}
}  // namespace

Module::Module(std::string name) : name_(std::move(name)) {
  std::lock_guard<std::mutex> lock(live_mutex());
  live_modules().insert(this);
}

Module::~Module() {
  std::lock_guard<std::mutex> lock(live_mutex());
  live_modules().erase(this);
}

std::string tensor_path(const Tensor& t) {
  if (!t.defined()) return "";
  std::lock_guard<std::mutex> lock(live_mutex());
  std::string best;  // the longest dotted name: the path from the outermost module
  for (const Module* m : live_modules()) {
    NamedTensors params;
    try {
      params = m->named_parameters(true);
    } catch (const Error&) {
      continue;  // a member holding a computed tensor: diagnostics must not throw
    }
    for (const auto& list : {params, m->named_buffers(true)})
      for (const auto& [name, p] : list)
        if (p.impl() == t.impl() && name.size() > best.size()) best = name;
  }
  return best;
}

std::string Module::name() const {
  return name_.empty() ? demangled_type_name(typeid(*this)) : name_;
}

void Module::check_new_name(const std::string& name, const char* what) const {
  KILN_CHECK(!name.empty(), "[Module] ", this->name(), ": ", what, " name must not be empty");
  KILN_CHECK(name.find('.') == std::string::npos, "[Module] ", this->name(), ": ", what, " name \"",
             name, "\" must not contain '.'");
  auto taken = [&](const auto& v) {
    return std::any_of(v.begin(), v.end(), [&](const auto& e) {
      if constexpr (requires { e.name; })
        return e.name == name;
      else
        return e.first == name;
    });
  };
  KILN_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_), "[Module] ", this->name(),
             ": cannot register ", what, " \"", name,
             "\": the name is already used by a parameter, buffer or submodule (to change a "
             "parameter's tensor, e.g. to tie weights, use replace_parameter)");
}

Module::Entry& Module::add_parameter(const std::string& name, Tensor t, bool requires_grad) {
  check_new_name(name, "parameter");
  if (t.defined()) {
    // Like nn.Parameter(t): a parameter is always a leaf.
    if (!t.is_leaf()) t = t.detach();
    KILN_CHECK(!requires_grad || is_floating(t.dtype()), "[Module] ", this->name(),
               ": parameter \"", name, "\" requires grad but has dtype ", t.dtype(),
               " (only floating tensors can)");
    t.requires_grad_(requires_grad);
  }
  params_.push_back({name, t, nullptr, true});
  return params_.back();
}

Registered Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  add_parameter(name, std::move(t), requires_grad);
  return {};
}

Tensor& Module::register_parameter(const std::string& name, Tensor& slot, Tensor t,
                                   bool requires_grad) {
  Entry& e = add_parameter(name, std::move(t), requires_grad);
  slot = std::move(e.tensor);
  e.tensor = Tensor();
  e.slot = &slot;
  return slot;
}

Tensor Module::replace_parameter(const std::string& name, const Tensor& t) {
  auto it =
      std::find_if(params_.begin(), params_.end(), [&](const Entry& e) { return e.name == name; });
  KILN_CHECK(it != params_.end(), "[Module] ", this->name(), ".replace_parameter: there is no ",
             "parameter named \"", name, "\"");
  KILN_CHECK(!t.defined() || t.is_leaf(), "[Module] ", this->name(), ".replace_parameter(\"", name,
             "\"): expected a parameter (a leaf tensor) or an undefined tensor, got a tensor "
             "computed by ops (pass the parameter itself, or a detached tensor)");
  it->value() = t;
  return t;
}

Module::Entry& Module::add_buffer(const std::string& name, Tensor t, bool persistent) {
  check_new_name(name, "buffer");
  buffers_.push_back({name, std::move(t), nullptr, persistent});
  return buffers_.back();
}

Registered Module::register_buffer(const std::string& name, Tensor t, bool persistent) {
  add_buffer(name, std::move(t), persistent);
  return {};
}

Tensor& Module::register_buffer(const std::string& name, Tensor& slot, Tensor t, bool persistent) {
  Entry& e = add_buffer(name, std::move(t), persistent);
  slot = std::move(e.tensor);
  e.tensor = Tensor();
  e.slot = &slot;
  return slot;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_new_name(name, "submodule");
  KILN_CHECK(m != nullptr, "[Module] ", this->name(), ": submodule \"", name, "\" is null");
  KILN_CHECK(m.get() != this, "[Module] ", this->name(),
             ": cannot register a module as its own submodule \"", name, "\"");
  children_.emplace_back(name, std::move(m));
}

void Module::set_child(const std::string& name, std::shared_ptr<Module> m) {
  KILN_CHECK(m != nullptr, "[Module] ", this->name(), ": submodule \"", name, "\" is null");
  for (auto& [n, c] : children_)
    if (n == name) {
      c = std::move(m);
      return;
    }
  throw Error(str("[Module] ", this->name(), ": replace_module: there is no submodule named \"",
                  name, "\""));
}

void Module::collect(const std::string& prefix, bool recurse, bool buffers, NamedTensors& out,
                     std::vector<const TensorImpl*>& seen) const {
  for (const Entry& e : buffers ? buffers_ : params_) {
    const Tensor& t = e.value();
    if (!t.defined()) continue;
    // A member assigned a computed tensor (`weight = other * 2`) is no parameter:
    // training it would update nothing (PyTorch refuses the assignment).
    KILN_CHECK(buffers || t.is_leaf(), "[Module] ", name(), ": parameter \"", prefix + e.name,
               "\" holds a tensor computed by ops, not a leaf: assign a parameter (tying: "
               "head->weight = wte->weight) or a detached tensor");
    const TensorImpl* p = t.impl();
    // A tensor shared by two modules (tied weights) is listed once, like PyTorch.
    if (std::find(seen.begin(), seen.end(), p) != seen.end()) continue;
    seen.push_back(p);
    out.emplace_back(prefix + e.name, t);
  }
  if (!recurse) return;
  for (const auto& [n, c] : children_) c->collect(prefix + n + ".", true, buffers, out, seen);
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  std::vector<const TensorImpl*> seen;
  collect("", recurse, false, out, seen);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  std::vector<const TensorImpl*> seen;
  collect("", recurse, true, out, seen);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

NamedModules Module::named_children() const {
  return children_;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [n, c] : children_) out.push_back(c);
  return out;
}

void Module::collect_modules(const std::string& prefix, NamedModules& out,
                             std::vector<const Module*>& seen) {
  if (std::find(seen.begin(), seen.end(), this) != seen.end()) return;
  seen.push_back(this);
  // A module not owned by a shared_ptr (on the stack) is listed with a
  // non-owning pointer rather than failing.
  std::shared_ptr<Module> self = weak_from_this().lock();
  if (!self) self = std::shared_ptr<Module>(std::shared_ptr<Module>(), this);
  out.emplace_back(prefix, self);
  for (auto& [n, c] : children_)
    c->collect_modules(prefix.empty() ? n : prefix + "." + n, out, seen);
}

NamedModules Module::named_modules() {
  NamedModules out;
  std::vector<const Module*> seen;
  collect_modules("", out, seen);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::modules() {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [n, m] : named_modules()) out.push_back(m);
  return out;
}

bool Module::is_training() const {
  if (current_recorder()) {
    // Modules outlive the functions compiled over them (the lambda refers to them).
    trace_guard([this, v = training_] {
      return training_ == v ? std::string()
                            : str(name(), ".training changed (", v ? "true" : "false", " -> ",
                                  training_ ? "true" : "false", "): train()/eval() switch");
    });
  }
  return training_;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

Module& Module::to(DType dtype) {
  KILN_CHECK(is_floating(dtype), "[Module] ", name(), ".to: expected a floating dtype, got ", dtype,
             " (integer buffers are never converted)");
  NoGradGuard ng;
  auto convert = [&](const Tensor& t) {
    if (!is_floating(t.dtype()) || t.dtype() == dtype) return;
    swap_in(t, cast(t, dtype));
    Tensor g = t.grad();
    if (g.defined()) t.set_grad(cast(g, dtype));
  };
  for (auto& [n, t] : named_parameters()) convert(t);
  for (auto& [n, t] : named_buffers()) convert(t);
  return *this;
}

Module& Module::to(Device device) {
  NoGradGuard ng;
  auto move = [&](const Tensor& t) {
    if (t.device() == device) return;
    swap_in(t, t.detach().to(device));
    Tensor g = t.grad();
    if (g.defined()) t.set_grad(g.detach().to(device));
  };
  for (auto& [n, t] : named_parameters()) move(t);
  for (auto& [n, t] : named_buffers()) move(t);
  return *this;
}

void Module::zero_grad(bool set_to_none) {
  for (auto& [n, p] : named_parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      p.set_grad({});
      continue;
    }
    // A gradient built with create_graph has history: cut it, as PyTorch does.
    if (g.grad_fn()) {
      g = g.detach();
      p.set_grad(g);
    }
    NoGradGuard ng;
    g.zero_();
  }
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& [n, c] : children_) c->apply(fn);
  fn(*this);
  return *this;
}

void Module::collect_state(const std::string& prefix, StateDict& out) const {
  for (const Entry& e : params_)
    if (e.value().defined()) out.set(prefix + e.name, e.value().detach());
  for (const Entry& e : buffers_)
    if (e.value().defined() && e.persistent) out.set(prefix + e.name, e.value().detach());
  for (const auto& [n, c] : children_) c->collect_state(prefix + n + ".", out);
}

StateDict Module::state_dict() const {
  StateDict sd;
  collect_state("", sd);
  return sd;
}

LoadStateDictResult Module::load_state_dict(const StateDict& sd, bool strict) {
  StateDict own = state_dict();
  LoadStateDictResult res;
  std::vector<std::string> mismatches;
  for (const auto& [k, t] : own) {
    const Tensor* src = sd.find(k);
    if (!src) {
      res.missing_keys.push_back(k);
    } else if (!src->defined() || src->shape() != t.shape()) {
      mismatches.push_back(str("size mismatch for ", k, ": copying a param with shape ",
                               src->defined() ? src->shape() : Dims{},
                               " from checkpoint, the shape in current model is ", t.shape()));
    }
  }
  for (const auto& [k, t] : sd)
    if (!own.contains(k)) res.unexpected_keys.push_back(k);

  bool fail = !mismatches.empty() ||
              (strict && (!res.missing_keys.empty() || !res.unexpected_keys.empty()));
  if (fail) {
    std::string msg = str("[load_state_dict] error(s) in loading state_dict for ", name(), ":");
    if (strict && !res.missing_keys.empty())
      msg += "\n  missing keys: " + quoted_list(res.missing_keys);
    if (strict && !res.unexpected_keys.empty())
      msg += "\n  unexpected keys: " + quoted_list(res.unexpected_keys);
    for (const std::string& m : mismatches) msg += "\n  " + m;
    throw Error(msg);
  }
  NoGradGuard ng;
  for (const auto& [k, t] : own) {
    const Tensor* src = sd.find(k);
    // own holds detached aliases: writing into them writes the module's storage.
    if (src) Tensor(t).copy_(*src);
  }
  return res;
}

Tensor Module::forward(const Tensor&) {
  throw Error(str("[Module] ", name(),
                  " does not implement forward(const Tensor&); override it "
                  "or call the module's own forward overload"));
}

Tensor Module::forward_args(const std::vector<Tensor>& args) {
  KILN_CHECK(!args.empty(), "[Module] ", name(), ".forward_args: no input tensor");
  for (size_t i = 1; i < args.size(); ++i)
    KILN_CHECK(!args[i].defined(), "[Module] ", name(), " takes one input tensor, got ",
               args.size(), " (argument ", i, " is defined): override forward_args to accept more");
  return forward(args[0]);
}

std::shared_ptr<Module> Module::clone() const {
  throw Error(str("[Module] ", name(), " does not implement clone()"));
}

void Module::copy_state_from(const Module& src) {
  NoGradGuard ng;
  auto copy_list = [&](std::vector<Entry>& dst, const std::vector<Entry>& from, const char* what) {
    KILN_CHECK(dst.size() == from.size(), "[Module] clone of ", name(), ": ", what,
               " lists differ");
    for (size_t i = 0; i < dst.size(); ++i) {
      const Tensor& s = from[i].value();
      Tensor d = dst[i].value();  // shares the impl
      KILN_CHECK(d.defined() == s.defined() && (!s.defined() || d.shape() == s.shape()),
                 "[Module] clone of ", name(), ": ", what, " \"", from[i].name,
                 "\" differs in shape");
      if (!s.defined()) continue;
      // A source converted with to(dtype) passes its dtype on to the copy.
      if (d.dtype() != s.dtype())
        swap_in(d, s.clone());
      else
        d.copy_(s);
      if (is_floating(d.dtype()) && d.is_leaf()) d.requires_grad_(s.requires_grad());
    }
  };
  copy_list(params_, src.params_, "parameter");
  copy_list(buffers_, src.buffers_, "buffer");
  training_ = src.training_;
  KILN_CHECK(children_.size() == src.children_.size(), "[Module] clone of ", name(),
             ": submodule lists differ");
  for (size_t i = 0; i < children_.size(); ++i)
    children_[i].second->copy_state_from(*src.children_[i].second);
  copy_ties_from(src);
}

void Module::collect_entries(std::vector<const Entry*>& out) const {
  for (const Entry& e : params_) out.push_back(&e);
  for (const Entry& e : buffers_) out.push_back(&e);
  for (const auto& [n, c] : children_) c->collect_entries(out);
}

void Module::copy_ties_from(const Module& src) {
  std::vector<const Entry*> from, to;
  src.collect_entries(from);
  collect_entries(to);
  if (from.size() != to.size()) return;
  std::unordered_map<const TensorImpl*, size_t> first;  // src tensor -> its first entry
  for (size_t i = 0; i < from.size(); ++i) {
    const Tensor& t = from[i]->value();
    if (!t.defined()) continue;
    auto [it, fresh] = first.emplace(t.impl(), i);
    // Entries are this module tree's own: writing through them re-points a slot.
    if (!fresh) const_cast<Entry*>(to[i])->value() = to[it->second]->value();
  }
}

std::string Module::repr() const {
  std::string extra = extra_repr();
  std::vector<std::string> lines;
  size_t n_extra = 0;
  if (!extra.empty()) {
    std::istringstream is(extra);
    for (std::string l; std::getline(is, l);) lines.push_back(l), ++n_extra;
  }
  for (const auto& [n, c] : children_) lines.push_back("(" + n + "): " + add_indent(c->repr(), 2));
  std::string s = name() + "(";
  if (n_extra == 1 && children_.empty()) {
    s += lines[0];
  } else if (!lines.empty()) {
    s += "\n";
    for (const std::string& l : lines) s += "  " + l + "\n";
  }
  return s + ")";
}

std::ostream& operator<<(std::ostream& os, const Module& m) {
  return os << m.repr();
}

}  // namespace kiln::nn
