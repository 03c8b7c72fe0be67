// RMSprop, following torch.optim.RMSprop's single-tensor algorithm.
#include "kiln/optim/rmsprop.h"

#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/functional.h"
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
    : Optimizer("RMSprop", to_hyperparams(defaults)) {
  init_groups(std::move(groups));
}

RMSpropOptions RMSprop::options(size_t g) const {
  KILN_CHECK(g < param_groups().size(), tag(), "no parameter group ", g, " (there are ",
             param_groups().size(), ")");
  return from_group(param_groups()[g]);
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

void RMSprop::step() {
  NoGradGuard ng;
  for (size_t gi = 0; gi < param_groups().size(); ++gi) {
    const RMSpropOptions o = from_group(param_groups()[gi]);
    guard_hyperparams(gi);
    for (Tensor& p : param_groups()[gi].params) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (o.maximize) grad = neg(grad);
      StateDict& st = mutable_state(p);
      host_scalar([this, p] { return increment_step(mutable_state(p)); });
      Tensor square_avg = state_buffer(st, "square_avg", p);
      if (o.weight_decay != 0) grad = add(grad, mul(p, o.weight_decay));
      square_avg.mul_(o.alpha);
      detail::addcmul_(square_avg, grad, grad, 1 - o.alpha);
      Tensor avg;
      if (o.centered) {
        Tensor grad_avg = state_buffer(st, "grad_avg", p);
        detail::lerp_(grad_avg, grad, 1 - o.alpha);
        avg = sqrt(sub(square_avg, mul(grad_avg, grad_avg)));
      } else {
        avg = sqrt(square_avg);
      }
      avg = add(avg, o.eps);
      const Tensor neg_lr = host_scalar([this, gi] { return -param_groups()[gi].get("lr"); });
      if (o.momentum > 0) {
        Tensor buf = state_buffer(st, "momentum_buffer", p);
        buf.mul_(o.momentum);
        detail::addcdiv_(buf, grad, avg, 1.0);
        p.add_(mul(buf, neg_lr));
      } else {
        p.add_(div(mul(grad, neg_lr), avg));  // addcdiv_ with a host-scalar value
      }
    }
  }
}

}  // namespace kiln::optim
