// Adam and AdamW, following torch.optim.Adam's single-tensor algorithm
// (non-capturable: step counts and bias corrections are host numbers).
#include "kiln/optim/adam.h"

#include <cmath>
#include <unordered_map>

#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/functional.h"
#include "optim/fused_step.h"
#include "update_ops.h"

namespace kiln::optim {

namespace {
template <typename Options>
Hyperparams to_hyperparams(const Options& o) {
  return {{"lr", o.lr},
          {"beta1", o.betas.first},
          {"beta2", o.betas.second},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"amsgrad", o.amsgrad ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}
template <typename Options>
Options from_group(const ParamGroup& g) {
  Options o;
  o.lr = g.get("lr");
  o.betas = {g.get("beta1"), g.get("beta2")};
  o.eps = g.get("eps");
  o.weight_decay = g.get("weight_decay");
  o.amsgrad = g.get("amsgrad") != 0;
  o.maximize = g.get("maximize") != 0;
  return o;
}
}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions defaults)
    : Adam(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, defaults) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions defaults)
    : Adam("Adam", to_hyperparams(defaults), false, defaults.fused) {
  init_groups(std::move(groups));
}

Adam::Adam(std::string name, Hyperparams defaults, bool decoupled, bool fused)
    : Optimizer(std::move(name), std::move(defaults)), decoupled_(decoupled), fused_(fused) {}

AdamOptions Adam::options(size_t g) const {
  KILN_CHECK(g < param_groups().size(), tag(), "no parameter group ", g, " (there are ",
             param_groups().size(), ")");
  AdamOptions o = from_group<AdamOptions>(param_groups()[g]);
  o.fused = fused_;
  return o;
}

void Adam::check_group(const ParamGroup& group) const {
  AdamOptions o = from_group<AdamOptions>(group);
  // Written as !(x >= 0) so that NaN is rejected too.
  KILN_CHECK(o.lr >= 0, tag(), "invalid learning rate lr=", o.lr, " (must be >= 0)");
  KILN_CHECK(o.eps >= 0, tag(), "invalid eps=", o.eps, " (must be >= 0)");
  KILN_CHECK(o.betas.first >= 0 && o.betas.first < 1, tag(), "invalid beta1=", o.betas.first,
             " (betas must be in [0, 1))");
  KILN_CHECK(o.betas.second >= 0 && o.betas.second < 1, tag(), "invalid beta2=", o.betas.second,
             " (betas must be in [0, 1))");
  KILN_CHECK(o.weight_decay >= 0, tag(), "invalid weight_decay=", o.weight_decay,
             " (must be >= 0)");
}

std::optional<double> Adam::structural_form(const std::string& key, double value) const {
  if (key == "beta2" || key == "eps") return std::nullopt;
  if (key == "beta1") return std::abs(1 - value) < 0.5;  // lerp_'s formula
  if (key == "weight_decay") return value != 0;
  return Optimizer::structural_form(key, value);
}

void Adam::step() {
  NoGradGuard ng;
  for (size_t gi = 0; gi < param_groups().size(); ++gi) {
    const AdamOptions o = from_group<AdamOptions>(param_groups()[gi]);
    guard_hyperparams(gi);
    // Host numbers go through host_scalar: a compiled step re-reads lr and
    // advances the step count at every call instead of baking them in. So do
    // betas, eps and weight decay (OneCycleLR cycles beta1): only what decides
    // the ops is guarded (structural_form). Group-wide ones are made once.
    auto get = [this, gi](const char* key) { return param_groups()[gi].get(key); };
    const bool small = std::abs(1 - o.betas.first) < 0.5;  // lerp_'s formula
    const Tensor one_minus_beta1 = hyper(gi, "beta1", [](double b) { return 1 - b; });
    const Tensor beta1_again = hyper(gi, "beta1", [](double b) { return 1.0 - (1 - b); });
    const Tensor beta2 = hyper(gi, "beta2");
    const Tensor one_minus_beta2 = hyper(gi, "beta2", [](double b) { return 1 - b; });
    const Tensor eps = hyper(gi, "eps");
    Tensor decay;  // decoupled: p *= 1 - lr * wd; else grad += wd * p
    if (o.weight_decay != 0)
      decay = decoupled_ ? host_scalar([get] { return 1 - get("lr") * get("weight_decay"); })
                         : hyper(gi, "weight_decay");
    // The fused step takes the same host numbers (so KILN_CHECK_COMPILED's
    // replay and the step counts advance alike) and does the arithmetic in one pass.
    detail::AdamConfig cfg{.small = small,
                           .decoupled = decoupled_,
                           .has_decay = o.weight_decay != 0,
                           .amsgrad = o.amsgrad,
                           .maximize = o.maximize};
    std::vector<detail::AdamJob> jobs;
    bool config_read = false;
    // Parameters of equal step count share their bias corrections: one host
    // computation per class advances the counts and makes both numbers.
    std::unordered_map<const TensorImpl*, std::pair<Tensor, Tensor>> corrections;
    for (const std::vector<Tensor>& cls : step_classes(gi)) {
      const Tensor neg_step_size = host_scalar([this, cls, get] {
        const double step = advance_steps(cls);
        return -(get("lr") / (1 - std::pow(get("beta1"), step)));
      });
      const Tensor bias_correction2_sqrt = host_scalar([this, p = cls.front(), get] {
        return std::sqrt(1 - std::pow(get("beta2"), current_step(state(p))));
      });
      for (const Tensor& p : cls)
        corrections.emplace(p.impl(), std::pair{neg_step_size, bias_correction2_sqrt});
    }
    for (Tensor& p : param_groups()[gi].params) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      StateDict& st = mutable_state(p);
      const auto& [neg_step_size, bias_correction2_sqrt] = corrections.at(p.impl());
      Tensor exp_avg = state_buffer(st, "exp_avg", p);
      Tensor exp_avg_sq = state_buffer(st, "exp_avg_sq", p);
      Tensor max_sq = o.amsgrad ? state_buffer(st, "max_exp_avg_sq", p) : Tensor();
      if (fused_ && detail::fusable(p, {&grad, &exp_avg, &exp_avg_sq, &max_sq})) {
        if (!config_read) {
          cfg.one_minus_beta1 = one_minus_beta1.item<double>();
          cfg.beta1_again = beta1_again.item<double>();
          cfg.beta2 = beta2.item<double>();
          cfg.one_minus_beta2 = one_minus_beta2.item<double>();
          cfg.eps = eps.item<double>();
          cfg.decay = decay.defined() ? decay.item<double>() : 0.0;
          config_read = true;
        }
        jobs.push_back({p, grad, exp_avg, exp_avg_sq, max_sq, neg_step_size.item<double>(),
                        bias_correction2_sqrt.item<double>()});
        continue;
      }
      if (o.maximize) grad = neg(grad);
      if (o.weight_decay != 0) {
        if (decoupled_)
          p.mul_(decay);
        else
          grad = add(grad, mul(p, decay));
      }
      detail::lerp_(exp_avg, grad, small, one_minus_beta1, beta1_again);
      exp_avg_sq.mul_(beta2);
      detail::addcmul_(exp_avg_sq, grad, grad, one_minus_beta2);

      Tensor second = exp_avg_sq;
      if (o.amsgrad) {
        max_sq.copy_(maximum(max_sq, exp_avg_sq));
        second = max_sq;
      }
      Tensor denom = add(div(sqrt(second), bias_correction2_sqrt), eps);
      p.add_(div(mul(exp_avg, neg_step_size), denom));
    }
    detail::adam_step(cfg, jobs);
  }
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions defaults)
    : AdamW(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, defaults) {}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions defaults)
    : Adam("AdamW", to_hyperparams(defaults), true, defaults.fused) {
  init_groups(std::move(groups));
}

AdamWOptions AdamW::options(size_t g) const {
  KILN_CHECK(g < param_groups().size(), tag(), "no parameter group ", g, " (there are ",
             param_groups().size(), ")");
  AdamWOptions o = from_group<AdamWOptions>(param_groups()[g]);
  o.fused = fused();
  return o;
}

}  // namespace kiln::optim
