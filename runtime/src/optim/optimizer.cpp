// Optimizer base: groups, defaults, zero_grad and the flattened state_dict.
#include "kiln/optim/optimizer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <unordered_set>

#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/functional.h"

namespace kiln::optim {

// ---------------- ParamGroup ----------------
bool ParamGroup::has(const std::string& name) const {
  return std::any_of(options.begin(), options.end(), [&](auto& kv) { return kv.first == name; });
}
double ParamGroup::get(const std::string& name) const {
  for (auto& [k, v] : options)
    if (k == name) return v;
  throw Error(str("[param_group] no hyperparameter named '", name, "'"));
}
void ParamGroup::set(const std::string& name, double value) {
  for (auto& [k, v] : options)
    if (k == name) {
      v = value;
      return;
    }
  options.emplace_back(name, value);
}

// ---------------- helpers for subclasses ----------------
double increment_step(StateDict& state) {
  const Tensor* t = state.find("step");
  if (t == nullptr) {
    state.set("step", scalar_tensor(0.0, DType::f64));
    t = state.find("step");
  }
  Tensor step = *t;
  // The count is a host number (a 0-d f64 CPU tensor, see load_state_dict):
  // written directly, as add_ would (version included), without a dispatch.
  if (step.device().is_cpu() && step.dtype() == DType::f64 && step.numel() == 1 &&
      !step.is_symbolic()) {
    double& v = *step.data<double>();
    v += 1.0;
    ++step.impl()->storage->version;
    return v;
  }
  step.add_(1.0);
  return step.item<double>();
}

double current_step(const StateDict& state) {
  const Tensor* t = state.find("step");
  return t ? t->item<double>() : 0.0;
}

Tensor state_buffer(StateDict& state, const std::string& key, const Tensor& p) {
  if (const Tensor* t = state.find(key)) return *t;
  // Real zeros even while tracing: the state outlives the trace and is
  // captured (read and written back) by the compiled step.
  UntracedGuard untraced;
  Tensor z = zeros_like(p);
  state.set(key, z);
  return z;
}

// ---------------- Optimizer ----------------
std::optional<double> Optimizer::structural_form(const std::string& key, double value) const {
  if (key == "lr") return std::nullopt;
  return value;
}

void Optimizer::guard_hyperparams(size_t gi) const {
  if (!current_recorder()) return;
  struct Entry {
    std::string key;
    double value, form;
  };
  std::vector<Entry> snap;
  for (const auto& [k, v] : groups_[gi].options)
    if (auto form = structural_form(k, v)) snap.push_back({k, v, *form});
  trace_guard([this, gi, snap, n = groups_[gi].params.size()]() -> std::string {
    if (gi >= groups_.size()) return str(name_, " parameter group ", gi, " was removed");
    const ParamGroup& g = groups_[gi];
    if (g.params.size() != n)
      return str(name_, " group ", gi, " parameters changed (", n, " -> ", g.params.size(), ")");
    for (const Entry& e : snap) {
      if (!g.has(e.key))
        return str(name_, " hyperparameter ", e.key, " of group ", gi, " was removed");
      const double now = g.get(e.key);
      const auto form = structural_form(e.key, now);
      if (!form || *form != e.form)
        return str(name_, " hyperparameter ", e.key, " of group ", gi, " changed from ", e.value,
                   " (when traced) to ", now, ", which changes the update's structure");
    }
    return {};
  });
}

Tensor Optimizer::hyper(size_t gi, const std::string& key, double (*f)(double)) const {
  return host_scalar([this, gi, key, f] {
    const double v = groups_[gi].get(key);
    return f ? f(v) : v;
  });
}

std::vector<std::vector<Tensor>> Optimizer::step_classes(size_t gi) {
  std::vector<std::vector<Tensor>> classes;
  std::vector<double> counts;
  for (const Tensor& p : groups_[gi].params) {
    if (!p.grad().defined()) continue;
    const double c = current_step(mutable_state(p));
    const size_t k =
        static_cast<size_t>(std::find(counts.begin(), counts.end(), c) - counts.begin());
    if (k == counts.size()) {
      counts.push_back(c);
      classes.emplace_back();
    }
    classes[k].push_back(p);
  }
  if (current_recorder())
    for (const auto& cls : classes)
      if (cls.size() > 1)
        trace_guard([this, gi, cls]() -> std::string {
          const double first = current_step(state(cls.front()));
          for (size_t i = 1; i < cls.size(); ++i)
            if (const double c = current_step(state(cls[i])); c != first)
              return str(name_, " step counts of group ", gi,
                         "'s parameters, equal when traced, now differ (", first, " and ", c,
                         "): they no longer share one bias correction");
          return {};
        });
  return classes;
}

double Optimizer::advance_steps(const std::vector<Tensor>& params) {
  double first = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const double c = increment_step(mutable_state(params[i]));
    if (i == 0) first = c;
  }
  return first;
}

Optimizer::Optimizer(std::string name, Hyperparams defaults)
    : name_(std::move(name)), defaults_(std::move(defaults)) {}

void Optimizer::init_groups(std::vector<ParamGroup> groups) {
  KILN_CHECK(!groups.empty(), tag(), "got an empty list of parameter groups");
  for (auto& g : groups) add_param_group(std::move(g));
}

void Optimizer::add_param_group(ParamGroup group) {
  KILN_CHECK(!group.params.empty(), tag(), "parameter group ", groups_.size(),
             " has an empty parameter list");
  std::unordered_set<const TensorImpl*> seen;
  for (auto& g : groups_)
    for (auto& p : g.params) seen.insert(p.impl());
  for (size_t i = 0; i < group.params.size(); ++i) {
    const Tensor& p = group.params[i];
    KILN_CHECK(p.defined(), tag(), "parameter ", i, " of group ", groups_.size(),
               " is an undefined tensor");
    KILN_CHECK(is_floating(p.dtype()), tag(), "parameter ", i, " of group ", groups_.size(),
               " has dtype ", p.dtype(), "; only floating tensors can be optimized");
    KILN_CHECK(p.is_leaf(), tag(), "parameter ", i, " of group ", groups_.size(),
               " is not a leaf tensor (it has a grad_fn); optimize the leaf instead");
    KILN_CHECK(seen.insert(p.impl()).second, tag(), "parameter ", i, " of group ", groups_.size(),
               " appears more than once in the parameter groups");
  }
  for (auto& [k, v] : group.options) {
    bool known =
        std::any_of(defaults_.begin(), defaults_.end(), [&](auto& d) { return d.first == k; });
    KILN_CHECK(known, tag(), "unknown hyperparameter '", k, "' in parameter group ",
               groups_.size());
  }
  // Defaults first (in their order), then the group's values override them.
  ParamGroup full{std::move(group.params), defaults_};
  for (auto& [k, v] : group.options) full.set(k, v);
  check_group(full);
  groups_.push_back(std::move(full));
}

const StateDict& Optimizer::state(const Tensor& p) const {
  static const StateDict kEmpty;
  auto it = state_.find(p.impl());
  return it == state_.end() ? kEmpty : it->second;
}

Tensor Optimizer::step(const std::function<Tensor()>& closure) {
  Tensor loss;
  {
    GradModeGuard g(true);
    loss = closure();
  }
  step();
  return loss;
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard ng;
  for (auto& g : groups_)
    for (auto& p : g.params) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (set_to_none) {
        p.set_grad(Tensor());
      } else {
        // A grad built with create_graph has history; keep only its storage.
        if (grad.grad_fn()) {
          grad = grad.detach();
          p.set_grad(grad);
        }
        grad.zero_();
      }
    }
}

StateDict Optimizer::state_dict() const {
  NoGradGuard ng;
  StateDict sd;
  int64_t index = 0;
  for (auto& g : groups_)
    for (auto& p : g.params) {
      auto it = state_.find(p.impl());
      if (it != state_.end())
        for (auto& [k, v] : it->second) sd.set(str("state.", index, ".", k), v.clone());
      ++index;
    }
  index = 0;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const ParamGroup& g = groups_[gi];
    for (auto& [k, v] : g.options)
      sd.set(str("param_groups.", gi, ".", k), scalar_tensor(v, DType::f64));
    std::vector<int64_t> ids;
    for (size_t i = 0; i < g.params.size(); ++i) ids.push_back(index++);
    sd.set(str("param_groups.", gi, ".params"), from_vector<int64_t>(ids));
  }
  return sd;
}

namespace {
// Parses a non-negative decimal at the start of s; returns the length read (0 if none).
size_t parse_index(std::string_view s, int64_t& out) {
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc() || out < 0) return 0;
  return static_cast<size_t>(ptr - s.data());
}
// Splits "<prefix><n>.<rest>" into n and rest; false when the key has another form.
bool split_key(const std::string& key, std::string_view prefix, int64_t& n, std::string& rest) {
  if (key.rfind(prefix, 0) != 0) return false;
  std::string_view tail = std::string_view(key).substr(prefix.size());
  size_t len = parse_index(tail, n);
  if (len == 0 || len + 1 >= tail.size() || tail[len] != '.') return false;
  rest = std::string(tail.substr(len + 1));
  return true;
}
}  // namespace

void Optimizer::load_state_dict(const StateDict& sd) {
  NoGradGuard ng;
  const std::string where = tag() + "load_state_dict: ";
  // Sort the entries into groups and per-parameter state first; commit only at the end.
  std::map<int64_t, Hyperparams> hypers;
  std::map<int64_t, Tensor> group_params;
  std::map<int64_t, std::vector<std::pair<std::string, Tensor>>> saved_state;
  for (auto& [key, t] : sd) {
    int64_t n = 0;
    std::string rest;
    KILN_CHECK(t.defined(), where, "entry '", key, "' is an undefined tensor");
    if (split_key(key, "state.", n, rest)) {
      saved_state[n].emplace_back(rest, t);
    } else if (split_key(key, "param_groups.", n, rest)) {
      if (rest == "params") {
        KILN_CHECK(t.dim() == 1 && !is_floating(t.dtype()) && t.dtype() != DType::b8, where, "'",
                   key, "' must be a 1-D integer tensor, got shape ", t.shape(), " and dtype ",
                   t.dtype());
        group_params[n] = t;
      } else {
        KILN_CHECK(t.numel() == 1, where, "hyperparameter '", key,
                   "' must hold one value, got shape ", t.shape());
        hypers[n].emplace_back(rest, element_as_double(t, 0));
      }
    } else {
      throw Error(str(where, "unexpected entry '", key,
                      "' (expected 'state.<i>.<key>' or 'param_groups.<g>.<key>')"));
    }
  }
  const int64_t num_groups = static_cast<int64_t>(groups_.size());
  int64_t saved_groups = group_params.empty() ? 0 : group_params.rbegin()->first + 1;
  for (auto& [g, _] : hypers) saved_groups = std::max(saved_groups, g + 1);
  KILN_CHECK(saved_groups == num_groups, where, "the state dict has ", saved_groups,
             " parameter groups, the optimizer has ", num_groups);

  // Saved parameter index -> current parameter, pairing the groups' lists in order.
  std::map<int64_t, Tensor> id_map;
  std::vector<ParamGroup> new_groups;
  for (int64_t g = 0; g < num_groups; ++g) {
    const ParamGroup& cur = groups_[g];
    auto it = group_params.find(g);
    KILN_CHECK(it != group_params.end(), where, "missing 'param_groups.", g, ".params'");
    std::vector<int64_t> ids = it->second.to(DType::i64).to_vector<int64_t>();
    KILN_CHECK(ids.size() == cur.params.size(), where, "parameter group ", g, " has ", ids.size(),
               " parameters in the state dict, ", cur.params.size(), " in the optimizer");
    for (size_t i = 0; i < ids.size(); ++i) {
      KILN_CHECK(id_map.emplace(ids[i], cur.params[i]).second, where, "parameter index ", ids[i],
                 " appears twice in the state dict's parameter groups");
    }
    ParamGroup ng{cur.params, {}};
    for (auto& [k, v] : defaults_) {
      bool found = false;
      for (auto& [hk, hv] : hypers[g])
        if (hk == k) found = true;
      KILN_CHECK(found, where, "missing hyperparameter 'param_groups.", g, ".", k, "'");
    }
    // Defaults' order first, then the extra keys (initial_lr, max_lr ... of schedulers).
    for (auto& [k, v] : defaults_) ng.set(k, 0.0);
    for (auto& [k, v] : hypers[g]) ng.set(k, v);
    check_group(ng);
    new_groups.push_back(std::move(ng));
  }

  std::unordered_map<const TensorImpl*, StateDict> new_state;
  const std::vector<std::string> nonneg = nonnegative_state();
  for (auto& [id, entries] : saved_state) {
    auto it = id_map.find(id);
    KILN_CHECK(it != id_map.end(), where, "state of parameter ", id,
               " but no parameter group lists index ", id);
    const Tensor& p = it->second;
    StateDict& st = new_state[p.impl()];
    for (auto& [k, t] : entries) {
      Tensor v;
      if (k == "step") {
        KILN_CHECK(t.numel() == 1, where, "'state.", id, ".step' must hold one value, got shape ",
                   t.shape());
        const double step = element_as_double(t, 0);
        KILN_CHECK(step >= 0 && step == std::trunc(step) && step < 0x1p53, where, "'state.", id,
                   ".step' must be a whole number of steps >= 0, got ", step);
        v = scalar_tensor(step, DType::f64);
      } else {
        KILN_CHECK(t.shape() == p.shape(), where, "'state.", id, ".", k, "' has shape ", t.shape(),
                   " but parameter ", id, " has shape ", p.shape());
        KILN_CHECK(is_floating(t.dtype()), where, "'state.", id, ".", k, "' has dtype ", t.dtype(),
                   "; expected a floating tensor");
        // A private copy in the parameter's dtype (PyTorch casts state to the param too).
        v = t.dtype() == p.dtype() ? t.clone() : t.to(p.dtype()).contiguous();
        if (std::ranges::find(nonneg, k) != nonneg.end()) {
          const double lo = v.numel() ? amin(v).item<double>() : 0.0;
          KILN_CHECK(lo >= 0, where, "'state.", id, ".", k, "' is an average of squares but holds ",
                     std::isnan(lo) ? "NaN" : str(lo), "; it must be >= 0");
        }
      }
      st.set(k, v);
    }
  }
  for (size_t g = 0; g < new_groups.size(); ++g) groups_[g].options = new_groups[g].options;
  state_ = std::move(new_state);
}

}  // namespace kiln::optim
