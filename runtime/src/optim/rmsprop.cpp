// RMSprop, following torch.optim.RMSprop's single-tensor algorithm.
#include "kiln/optim/rmsprop.h"

#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/functional.h"
#include "optim/fused_step.h"
#include "update_ops.h"

namespace kiln::optim {

namespace {
Hyperparams to_hyperparams(const RMSpropOptions& o) {
  return {{"lr", o.lr},
          {"alpha", o.alpha},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"momentum", o.momentum},
          {"centered", o.centered ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}
RMSpropOptions from_group(const ParamGroup& g) {
  RMSpropOptions o;
  o.lr = g.get("lr");
  o.alpha = g.get("alpha");
  o.eps = g.get("eps");
  o.weight_decay = g.get("weight_decay");
  o.momentum = g.get("momentum");
  o.centered = g.get("centered") != 0;
  o.maximize = g.get("maximize") != 0;
  return o;
}
}  // namespace

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions defaults)
    : RMSprop(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, defaults) {}

RMSprop::RMSprop(std::vector<ParamGroup> groups, RMSpropOptions defaults)
    : Optimizer("RMSprop", to_hyperparams(defaults)), fused_(defaults.fused) {
  init_groups(std::move(groups));
}

RMSpropOptions RMSprop::options(size_t g) const {
  KILN_CHECK(g < param_groups().size(), tag(), "no parameter group ", g, " (there are ",
             param_groups().size(), ")");
  RMSpropOptions o = from_group(param_groups()[g]);
  o.fused = fused_;
  return o;
}

void RMSprop::check_group(const ParamGroup& group) const {
  RMSpropOptions o = from_group(group);
  // Written as !(x >= 0) so that NaN is rejected too.
  KILN_CHECK(o.lr >= 0, tag(), "invalid learning rate lr=", o.lr, " (must be >= 0)");
  KILN_CHECK(o.eps >= 0, tag(), "invalid eps=", o.eps, " (must be >= 0)");
  KILN_CHECK(o.momentum >= 0, tag(), "invalid momentum=", o.momentum, " (must be >= 0)");
  KILN_CHECK(o.weight_decay >= 0, tag(), "invalid weight_decay=", o.weight_decay,
             " (must be >= 0)");
  KILN_CHECK(o.alpha >= 0, tag(), "invalid alpha=", o.alpha, " (must be >= 0)");
}

std::optional<double> RMSprop::structural_form(const std::string& key, double value) const {
  if (key == "eps") return std::nullopt;
  if (key == "alpha") return std::abs(1 - value) < 0.5;  // lerp_'s formula (centered)
  if (key == "weight_decay") return value != 0;
  if (key == "momentum") return value > 0;
  return Optimizer::structural_form(key, value);
}

void RMSprop::step() {
  NoGradGuard ng;
  for (size_t gi = 0; gi < param_groups().size(); ++gi) {
    const RMSpropOptions o = from_group(param_groups()[gi]);
    guard_hyperparams(gi);
    // Numbers are per-call host values (hyper), made once per group;
    // structural_form guards the rest.
    const Tensor wd = o.weight_decay != 0 ? hyper(gi, "weight_decay") : Tensor();
    const Tensor alpha = hyper(gi, "alpha");
    const Tensor one_minus_alpha = hyper(gi, "alpha", [](double a) { return 1 - a; });
    const Tensor alpha_again =
        o.centered ? hyper(gi, "alpha", [](double a) { return 1.0 - (1 - a); }) : Tensor();
    const Tensor eps = hyper(gi, "eps");
    const Tensor momentum = o.momentum > 0 ? hyper(gi, "momentum") : Tensor();
    const Tensor neg_lr = host_scalar([this, gi] { return -param_groups()[gi].get("lr"); });
    // The fused step reads the same host numbers and does the arithmetic in one pass.
    detail::RmspropConfig cfg{.has_decay = o.weight_decay != 0,
                              .centered = o.centered,
                              .small = std::abs(1 - o.alpha) < 0.5,
                              .has_momentum = o.momentum > 0,
                              .maximize = o.maximize};
    std::vector<detail::RmspropJob> jobs;
    // The step counts (kept for state_dict, not read by the update): one host
    // action per call advances all of the group's.
    std::vector<Tensor> stepped;
    for (const Tensor& p : param_groups()[gi].params)
      if (p.grad().defined()) stepped.push_back(p);
    if (!stepped.empty()) host_action([this, stepped] { advance_steps(stepped); });
    for (Tensor& p : param_groups()[gi].params) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      StateDict& st = mutable_state(p);
      Tensor square_avg = state_buffer(st, "square_avg", p);
      Tensor grad_avg = o.centered ? state_buffer(st, "grad_avg", p) : Tensor();
      Tensor buf = o.momentum > 0 ? state_buffer(st, "momentum_buffer", p) : Tensor();
      if (fused_ && detail::fusable(p, {&grad, &square_avg, &grad_avg, &buf})) {
        if (jobs.empty()) {
          cfg.weight_decay = wd.defined() ? wd.item<double>() : 0.0;
          cfg.alpha = alpha.item<double>();
          cfg.one_minus_alpha = one_minus_alpha.item<double>();
          cfg.alpha_again = alpha_again.defined() ? alpha_again.item<double>() : 0.0;
          cfg.eps = eps.item<double>();
          cfg.momentum = momentum.defined() ? momentum.item<double>() : 0.0;
          cfg.neg_lr = neg_lr.item<double>();
        }
        jobs.push_back({p, grad, square_avg, grad_avg, buf});
        continue;
      }
      if (o.maximize) grad = neg(grad);
      if (o.weight_decay != 0) grad = add(grad, mul(p, wd));
      square_avg.mul_(alpha);
      detail::addcmul_(square_avg, grad, grad, one_minus_alpha);
      Tensor avg;
      if (o.centered) {
        detail::lerp_(grad_avg, grad, std::abs(1 - o.alpha) < 0.5, one_minus_alpha, alpha_again);
        avg = sqrt(sub(square_avg, mul(grad_avg, grad_avg)));
      } else {
        avg = sqrt(square_avg);
      }
      avg = add(avg, eps);
      if (o.momentum > 0) {
        buf.mul_(momentum);
        detail::addcdiv_(buf, grad, avg, 1.0);
        p.add_(mul(buf, neg_lr));
      } else {
        p.add_(div(mul(grad, neg_lr), avg));  // addcdiv_ with a host-scalar value
      }
    }
    detail::rmsprop_step(cfg, jobs);
  }
}

}  // namespace kiln::optim
