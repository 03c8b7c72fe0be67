// Learning-rate schedulers, following torch.optim.lr_scheduler: the chainable
// get_lr() drives step(), the closed forms drive step(epoch).
#include "kiln/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "kiln/dispatch.h"
#include "kiln/functional.h"

namespace kiln::optim {

namespace {
constexpr double kPi = std::numbers::pi;

Tensor f64_vector(const std::vector<double>& v) {
  return from_vector<double>(v);
}

std::vector<double> read_f64_vector(const StateDict& sd, const std::string& key, size_t expected,
                                    const std::string& tag) {
  const Tensor& t = sd.at(key);
  KILN_CHECK(t.dim() == 1 && static_cast<size_t>(t.numel()) == expected, tag, "'", key, "' holds ",
             t.numel(), " values, the optimizer has ", expected, " parameter groups");
  std::vector<double> out;
  for (int64_t i = 0; i < t.numel(); ++i) out.push_back(element_as_double(t, i));
  return out;
}

}  // namespace

// ---------------- LRScheduler ----------------
LRScheduler::LRScheduler(Optimizer& opt, std::string name) : opt_(&opt), name_(std::move(name)) {}

void LRScheduler::start(int64_t last_epoch) {
  KILN_CHECK(last_epoch >= -1, tag(), "last_epoch must be >= -1, got ", last_epoch);
  auto& groups = opt_->param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    if (last_epoch == -1) {
      if (!groups[g].has("initial_lr")) groups[g].set("initial_lr", groups[g].lr());
    } else {
      KILN_CHECK(groups[g].has("initial_lr"), tag(), "parameter group ", g,
                 " has no 'initial_lr'; resuming (last_epoch = ", last_epoch,
                 ") needs a group that a scheduler already initialised");
    }
  }
  base_lrs_.clear();
  for (auto& g : groups) base_lrs_.push_back(g.get("initial_lr"));
  last_epoch_ = last_epoch;
  initial_step();
}

void LRScheduler::initial_step() {
  step_count_ = 0;
  is_initial_ = true;
  try {
    step();
  } catch (...) {
    is_initial_ = false;
    throw;
  }
  is_initial_ = false;
}

void LRScheduler::step() {
  if (current_recorder()) {  // compiled: runs at every call (kiln::host_action)
    host_action([this] { step(); });
    return;
  }
  ++step_count_;
  try {
    update_lr(std::nullopt);
  } catch (...) {
    --step_count_;
    throw;
  }
}

void LRScheduler::step(int64_t epoch) {
  if (current_recorder()) {  // compiled: runs at every call (kiln::host_action)
    host_action([this, epoch] { step(epoch); });
    return;
  }
  KILN_CHECK(epoch >= 0, tag(), "step(epoch) needs epoch >= 0, got ", epoch);
  ++step_count_;
  try {
    update_lr(epoch);
  } catch (...) {
    --step_count_;
    throw;
  }
}

void LRScheduler::update_lr(std::optional<int64_t> epoch) {
  const int64_t saved_epoch = last_epoch_;
  std::vector<double> lrs;
  try {
    if (epoch) {
      last_epoch_ = *epoch;
      auto closed = closed_form_lr();
      lrs = closed ? *closed : get_lr();
    } else {
      ++last_epoch_;
      lrs = get_lr();
    }
  } catch (...) {
    last_epoch_ = saved_epoch;
    throw;
  }
  apply(lrs);
}

void LRScheduler::apply(const std::vector<double>& lrs) {
  auto& groups = opt_->param_groups();
  KILN_ASSERT(lrs.size() == groups.size(), "scheduler produced ", lrs.size(), " lrs for ",
              groups.size(), " groups");
  for (size_t g = 0; g < groups.size(); ++g) groups[g].set_lr(lrs[g]);
  last_lr_ = lrs;
}

std::vector<double> LRScheduler::current_lrs() const {
  std::vector<double> lrs;
  for (auto& g : opt_->param_groups()) lrs.push_back(g.lr());
  return lrs;
}

StateDict LRScheduler::state_dict() const {
  StateDict sd;
  sd.set("last_epoch", scalar_tensor(last_epoch_, DType::i64));
  sd.set("step_count", scalar_tensor(step_count_, DType::i64));
  sd.set("base_lrs", f64_vector(base_lrs_));
  sd.set("last_lr", f64_vector(last_lr_));
  return sd;
}

void LRScheduler::load_state_dict(const StateDict& sd) {
  const std::string t = tag() + "load_state_dict: ";
  size_t n = opt_->param_groups().size();
  auto base = read_f64_vector(sd, "base_lrs", n, t);
  auto last = read_f64_vector(sd, "last_lr", n, t);
  for (const char* k : {"last_epoch", "step_count"}) {
    const Tensor& v = sd.at(k);
    KILN_CHECK(v.numel() == 1 && is_integral(v.dtype()), t, "'", k,
               "' must be a one-element integer tensor, got shape ", v.shape(), " and dtype ",
               v.dtype());
  }
  last_epoch_ = sd.at("last_epoch").to(DType::i64).item<int64_t>();
  step_count_ = sd.at("step_count").to(DType::i64).item<int64_t>();
  base_lrs_ = std::move(base);
  last_lr_ = std::move(last);
}

// ---------------- StepLR ----------------
StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma, int64_t last_epoch)
    : LRScheduler(opt, "StepLR"), step_size_(step_size), gamma_(gamma) {
  KILN_CHECK(step_size >= 1, tag(), "step_size must be >= 1, got ", step_size);
  KILN_CHECK(gamma >= 0 && std::isfinite(gamma), tag(), "gamma must be finite and >= 0, got ",
             gamma);
  start(last_epoch);
}

std::vector<double> StepLR::get_lr() {
  std::vector<double> lrs = current_lrs();
  if (last_epoch_ == 0 || last_epoch_ % step_size_ != 0) return lrs;
  for (double& lr : lrs) lr *= gamma_;
  return lrs;
}

std::optional<std::vector<double>> StepLR::closed_form_lr() const {
  std::vector<double> lrs;
  for (double b : base_lrs_)
    lrs.push_back(b * std::pow(gamma_, static_cast<double>(last_epoch_ / step_size_)));
  return lrs;
}

// ---------------- MultiStepLR ----------------
MultiStepLR::MultiStepLR(Optimizer& opt, std::vector<int64_t> milestones, double gamma,
                         int64_t last_epoch)
    : LRScheduler(opt, "MultiStepLR"), milestones_(std::move(milestones)), gamma_(gamma) {
  KILN_CHECK(gamma >= 0 && std::isfinite(gamma), tag(), "gamma must be finite and >= 0, got ",
             gamma);
  std::sort(milestones_.begin(), milestones_.end());
  start(last_epoch);
}

std::vector<double> MultiStepLR::get_lr() {
  std::vector<double> lrs = current_lrs();
  auto count = std::count(milestones_.begin(), milestones_.end(), last_epoch_);
  if (count == 0) return lrs;
  for (double& lr : lrs) lr *= std::pow(gamma_, static_cast<double>(count));
  return lrs;
}

std::optional<std::vector<double>> MultiStepLR::closed_form_lr() const {
  // bisect_right: milestones <= last_epoch.
  auto passed =
      std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin();
  std::vector<double> lrs;
  for (double b : base_lrs_) lrs.push_back(b * std::pow(gamma_, static_cast<double>(passed)));
  return lrs;
}

// ---------------- ExponentialLR ----------------
ExponentialLR::ExponentialLR(Optimizer& opt, double gamma, int64_t last_epoch)
    : LRScheduler(opt, "ExponentialLR"), gamma_(gamma) {
  KILN_CHECK(gamma >= 0 && std::isfinite(gamma), tag(), "gamma must be finite and >= 0, got ",
             gamma);
  start(last_epoch);
}

std::vector<double> ExponentialLR::get_lr() {
  std::vector<double> lrs = current_lrs();
  if (is_initial_) return lrs;  // resuming: the restored lr is already right
  for (double& lr : lrs) lr *= gamma_;
  return lrs;
}

std::optional<std::vector<double>> ExponentialLR::closed_form_lr() const {
  std::vector<double> lrs;
  for (double b : base_lrs_) lrs.push_back(b * std::pow(gamma_, static_cast<double>(last_epoch_)));
  return lrs;
}

// ---------------- CosineAnnealingLR ----------------
CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t T_max, double eta_min,
                                     int64_t last_epoch)
    : LRScheduler(opt, "CosineAnnealingLR"), t_max_(T_max), eta_min_(eta_min) {
  KILN_CHECK(T_max >= 1, tag(), "T_max must be >= 1, got ", T_max);
  KILN_CHECK(std::isfinite(eta_min), tag(), "eta_min must be finite, got ", eta_min);
  start(last_epoch);
}

std::vector<double> CosineAnnealingLR::get_lr() {
  std::vector<double> lrs = current_lrs();
  const double e = static_cast<double>(last_epoch_), T = static_cast<double>(t_max_);
  if (is_initial_) return lrs;
  if (step_count_ == 1 && last_epoch_ > 0) {  // first step after a closed-form jump
    for (size_t i = 0; i < lrs.size(); ++i)
      lrs[i] = eta_min_ + (base_lrs_[i] - eta_min_) * (1 + std::cos(e * kPi / T)) / 2;
    return lrs;
  }
  if ((last_epoch_ - 1 - t_max_) % (2 * t_max_) == 0) {  // restart of the cosine's period
    for (size_t i = 0; i < lrs.size(); ++i)
      lrs[i] = lrs[i] + (base_lrs_[i] - eta_min_) * (1 - std::cos(kPi / T)) / 2;
    return lrs;
  }
  for (double& lr : lrs)
    lr = (1 + std::cos(kPi * e / T)) / (1 + std::cos(kPi * (e - 1) / T)) * (lr - eta_min_) +
         eta_min_;
  return lrs;
}

std::optional<std::vector<double>> CosineAnnealingLR::closed_form_lr() const {
  const double e = static_cast<double>(last_epoch_), T = static_cast<double>(t_max_);
  std::vector<double> lrs;
  for (double b : base_lrs_)
    lrs.push_back(eta_min_ + (b - eta_min_) * (1 + std::cos(kPi * e / T)) / 2);
  return lrs;
}

// ---------------- LinearLR ----------------
LinearLR::LinearLR(Optimizer& opt, double start_factor, double end_factor, int64_t total_iters,
                   int64_t last_epoch)
    : LRScheduler(opt, "LinearLR"),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_iters_(total_iters) {
  KILN_CHECK(start_factor > 0 && start_factor <= 1, tag(), "start_factor must be in (0, 1], got ",
             start_factor);
  KILN_CHECK(end_factor >= 0 && end_factor <= 1, tag(), "end_factor must be in [0, 1], got ",
             end_factor);
  KILN_CHECK(total_iters >= 1, tag(), "total_iters must be >= 1, got ", total_iters);
  start(last_epoch);
}

std::vector<double> LinearLR::get_lr() {
  std::vector<double> lrs = current_lrs();
  if (last_epoch_ == 0) {
    for (double& lr : lrs) lr *= start_factor_;
    return lrs;
  }
  if (is_initial_ || last_epoch_ > total_iters_) return lrs;
  const double delta = end_factor_ - start_factor_;
  const double factor = 1.0 + delta / (static_cast<double>(total_iters_) * start_factor_ +
                                       static_cast<double>(last_epoch_ - 1) * delta);
  for (double& lr : lrs) lr *= factor;
  return lrs;
}

std::optional<std::vector<double>> LinearLR::closed_form_lr() const {
  const double done = static_cast<double>(std::min(total_iters_, last_epoch_));
  std::vector<double> lrs;
  for (double b : base_lrs_)
    lrs.push_back(b * (start_factor_ +
                       (end_factor_ - start_factor_) * done / static_cast<double>(total_iters_)));
  return lrs;
}

// ---------------- LambdaLR ----------------
LambdaLR::LambdaLR(Optimizer& opt, std::function<double(int64_t)> lr_lambda, int64_t last_epoch)
    : LRScheduler(opt, "LambdaLR"), lr_lambda_(std::move(lr_lambda)) {
  KILN_CHECK(static_cast<bool>(lr_lambda_), tag(), "lr_lambda is empty");
  start(last_epoch);
}

std::vector<double> LambdaLR::get_lr() {
  std::vector<double> lrs;
  for (double b : base_lrs_) lrs.push_back(b * lr_lambda_(last_epoch_));
  return lrs;
}

}  // namespace kiln::optim
