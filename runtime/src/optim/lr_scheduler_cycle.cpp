// OneCycleLR and the composing schedulers (SequentialLR, ChainedScheduler),
// following torch.optim.lr_scheduler.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "kiln/dispatch.h"
#include "kiln/functional.h"
#include "kiln/optim/lr_scheduler.h"

namespace kiln::optim {

namespace {
void check_same_optimizer(const std::vector<std::shared_ptr<LRScheduler>>& schedulers,
                          const Optimizer& opt, const std::string& tag) {
  KILN_CHECK(!schedulers.empty(), tag, "expects at least one scheduler");
  for (size_t i = 0; i < schedulers.size(); ++i) {
    KILN_CHECK(schedulers[i] != nullptr, tag, "scheduler ", i, " is null");
    KILN_CHECK(&schedulers[i]->optimizer() == &opt, tag, "scheduler ", i,
               " drives a different optimizer than the one given");
  }
}
// "schedulers.<i>.<key>" entries of the children, below the composite's own keys.
void add_children(StateDict& sd, const std::vector<std::shared_ptr<LRScheduler>>& schedulers) {
  for (size_t i = 0; i < schedulers.size(); ++i)
    for (auto& [k, v] : schedulers[i]->state_dict()) sd.set(str("schedulers.", i, ".", k), v);
}
void load_children(const StateDict& sd,
                   const std::vector<std::shared_ptr<LRScheduler>>& schedulers) {
  for (size_t i = 0; i < schedulers.size(); ++i) {
    const std::string prefix = str("schedulers.", i, ".");
    StateDict child;
    for (auto& [k, v] : sd)
      if (k.rfind(prefix, 0) == 0) child.set(k.substr(prefix.size()), v);
    schedulers[i]->load_state_dict(child);
  }
}
}  // namespace

// ---------------- OneCycleLR ----------------
OneCycleLR::OneCycleLR(Optimizer& opt, double max_lr, int64_t total_steps, OneCycleOptions o)
    : OneCycleLR(opt, std::vector<double>(opt.param_groups().size(), max_lr), total_steps, o) {}

OneCycleLR::OneCycleLR(Optimizer& opt, std::vector<double> max_lrs, int64_t total_steps,
                       OneCycleOptions o)
    : LRScheduler(opt, "OneCycleLR"), total_steps_(total_steps), o_(o) {
  auto& groups = opt.param_groups();
  KILN_CHECK(total_steps >= 1, tag(), "total_steps must be >= 1, got ", total_steps);
  KILN_CHECK(o.pct_start >= 0 && o.pct_start <= 1, tag(), "pct_start must be in [0, 1], got ",
             o.pct_start);
  KILN_CHECK(o.div_factor > 0 && o.final_div_factor > 0, tag(),
             "div_factor and final_div_factor must be > 0, got ", o.div_factor, " and ",
             o.final_div_factor);
  KILN_CHECK(max_lrs.size() == groups.size(), tag(), "got ", max_lrs.size(), " max_lr values for ",
             groups.size(), " parameter groups");
  for (double m : max_lrs)
    KILN_CHECK(m >= 0 && std::isfinite(m), tag(), "max_lr must be finite and >= 0, got ", m);
  const double n = static_cast<double>(total_steps);
  if (o.three_phase) {
    phases_ = {{o.pct_start * n - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"},
               {2 * o.pct_start * n - 2, "max_lr", "initial_lr", "base_momentum", "max_momentum"},
               {n - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum"}};
  } else {
    phases_ = {{o.pct_start * n - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"},
               {n - 1, "max_lr", "min_lr", "base_momentum", "max_momentum"}};
  }
  if (o.last_epoch == -1) {
    for (size_t g = 0; g < groups.size(); ++g) {
      groups[g].set("initial_lr", max_lrs[g] / o.div_factor);
      groups[g].set("max_lr", max_lrs[g]);
      groups[g].set("min_lr", max_lrs[g] / o.div_factor / o.final_div_factor);
    }
  }
  if (o.cycle_momentum) {
    auto has_default = [&](const char* k) {
      return std::any_of(opt.defaults().begin(), opt.defaults().end(),
                         [&](auto& d) { return d.first == k; });
    };
    KILN_CHECK(has_default("beta1") || has_default("momentum"), tag(), "optimizer ", opt.name(),
               " has neither 'momentum' nor 'beta1'; pass cycle_momentum = false");
    KILN_CHECK(std::isfinite(o.base_momentum) && std::isfinite(o.max_momentum), tag(),
               "base_momentum and max_momentum must be finite, got ", o.base_momentum, " and ",
               o.max_momentum);
    momentum_key_ = has_default("beta1") ? "beta1" : "momentum";
    if (o.last_epoch == -1) {
      for (auto& g : groups) {
        g.set(momentum_key_, o.max_momentum);
        g.set("max_momentum", o.max_momentum);
        g.set("base_momentum", o.base_momentum);
      }
    }
  }
  start(o.last_epoch);
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (o_.anneal_strategy == AnnealStrategy::kLinear) return (end - start) * pct + start;
  const double cos_out = std::cos(std::numbers::pi * pct) + 1;
  return end + (start - end) / 2.0 * cos_out;
}

std::vector<double> OneCycleLR::get_lr() {
  KILN_CHECK(last_epoch_ <= total_steps_, tag(), "tried to step ", last_epoch_,
             " times; the specified number of total steps is ", total_steps_);
  auto& groups = opt_->param_groups();
  const double step_num = static_cast<double>(last_epoch_);
  std::vector<double> lrs, momenta;
  for (auto& g : groups) {
    double start_step = 0;
    for (size_t i = 0; i < phases_.size(); ++i) {
      const Phase& ph = phases_[i];
      if (step_num <= ph.end_step || i + 1 == phases_.size()) {
        KILN_CHECK(ph.end_step != start_step, tag(), "phase ", i,
                   " of the schedule has no steps (pct_start * total_steps = ",
                   o_.pct_start * static_cast<double>(total_steps_), ")");
        const double pct = (step_num - start_step) / (ph.end_step - start_step);
        lrs.push_back(anneal(g.get(ph.start_lr), g.get(ph.end_lr), pct));
        if (o_.cycle_momentum)
          momenta.push_back(anneal(g.get(ph.start_momentum), g.get(ph.end_momentum), pct));
        break;
      }
      start_step = ph.end_step;
    }
  }
  for (size_t g = 0; g < momenta.size(); ++g) groups[g].set(momentum_key_, momenta[g]);
  return lrs;
}

// ---------------- SequentialLR ----------------
SequentialLR::SequentialLR(Optimizer& opt, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones, int64_t last_epoch)
    : LRScheduler(opt, "SequentialLR"),
      schedulers_(std::move(schedulers)),
      milestones_(std::move(milestones)) {
  check_same_optimizer(schedulers_, opt, tag());
  KILN_CHECK(milestones_.size() + 1 == schedulers_.size(), tag(), "expects ",
             schedulers_.size() - 1, " milestones for ", schedulers_.size(), " schedulers, got ",
             milestones_.size());
  KILN_CHECK(std::is_sorted(milestones_.begin(), milestones_.end()), tag(),
             "milestones must be non-decreasing, got ", milestones_);
  last_epoch_ = last_epoch + 1;
  // Undo the initial steps of the children, then replay only the first one's.
  auto& groups = opt.param_groups();
  for (auto& g : groups) {
    g.set_lr(g.get("initial_lr"));
    base_lrs_.push_back(g.lr());
  }
  undo_initial_step();
  schedulers_[0]->initial_step();
  step_count_ = 1;
  last_lr_ = schedulers_[0]->get_last_lr();
}

void SequentialLR::step() {
  if (current_recorder()) {  // compiled: runs at every call (kiln::host_action)
    host_action([this] { step(); });
    return;
  }
  const int64_t epoch = last_epoch_ + 1;
  size_t idx =
      std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin();
  LRScheduler& s = *schedulers_[idx];
  // At its milestone a scheduler restarts from epoch 0 (through its closed form).
  if (idx > 0 && milestones_[idx - 1] == epoch)
    s.update_lr(int64_t{0});
  else
    s.step();
  last_epoch_ = epoch;
  ++step_count_;
  last_lr_ = s.get_last_lr();
}

void SequentialLR::undo_initial_step() {
  for (auto& s : schedulers_) s->undo_initial_step();
}

void SequentialLR::step(int64_t epoch) {
  throw Error(str(tag(), "step(epoch = ", epoch, ") is not supported; call step()"));
}

StateDict SequentialLR::state_dict() const {
  StateDict sd = LRScheduler::state_dict();
  add_children(sd, schedulers_);
  return sd;
}

void SequentialLR::load_state_dict(const StateDict& sd) {
  LRScheduler::load_state_dict(sd);
  load_children(sd, schedulers_);
}

// ---------------- ChainedScheduler ----------------
ChainedScheduler::ChainedScheduler(Optimizer& opt,
                                   std::vector<std::shared_ptr<LRScheduler>> schedulers)
    : LRScheduler(opt, "ChainedScheduler"), schedulers_(std::move(schedulers)) {
  check_same_optimizer(schedulers_, opt, tag());
  base_lrs_ = schedulers_[0]->base_lrs();
  last_epoch_ = 0;
  last_lr_ = current_lrs();
}

void ChainedScheduler::step() {
  if (current_recorder()) {  // compiled: runs at every call (kiln::host_action)
    host_action([this] { step(); });
    return;
  }
  ++last_epoch_;
  ++step_count_;
  for (auto& s : schedulers_) s->step();
  last_lr_ = current_lrs();
}

void ChainedScheduler::undo_initial_step() {
  for (auto& s : schedulers_) s->undo_initial_step();
}

void ChainedScheduler::step(int64_t epoch) {
  if (current_recorder()) {  // compiled: runs at every call (kiln::host_action)
    host_action([this, epoch] { step(epoch); });
    return;
  }
  throw Error(str(tag(), "step(epoch = ", epoch, ") is not supported; call step()"));
}

StateDict ChainedScheduler::state_dict() const {
  StateDict sd = LRScheduler::state_dict();
  add_children(sd, schedulers_);
  return sd;
}

void ChainedScheduler::load_state_dict(const StateDict& sd) {
  LRScheduler::load_state_dict(sd);
  load_children(sd, schedulers_);
}

}  // namespace kiln::optim
