// SGD, following torch.optim.SGD's single-tensor algorithm step by step.
#include "kiln/optim/sgd.h"

#include <cmath>

#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/functional.h"
#include "optim/fused_step.h"

namespace kiln::optim {

namespace {
Hyperparams to_hyperparams(const SGDOptions& o) {
  return {{"lr", o.lr},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}
SGDOptions from_group(const ParamGroup& g) {
  SGDOptions o;
  o.lr = g.get("lr");
  o.momentum = g.get("momentum");
  o.dampening = g.get("dampening");
  o.weight_decay = g.get("weight_decay");
  o.nesterov = g.get("nesterov") != 0;
  o.maximize = g.get("maximize") != 0;
  return o;
}
}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions defaults)
    : SGD(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, defaults) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions defaults)
    : Optimizer("SGD", to_hyperparams(defaults)), fused_(defaults.fused) {
  init_groups(std::move(groups));
}

SGDOptions SGD::options(size_t g) const {
  KILN_CHECK(g < param_groups().size(), tag(), "no parameter group ", g, " (there are ",
             param_groups().size(), ")");
  SGDOptions o = from_group(param_groups()[g]);
  o.fused = fused_;
  return o;
}

void SGD::check_group(const ParamGroup& group) const {
  SGDOptions o = from_group(group);
  // Written as !(x >= 0) so that NaN is rejected too.
  KILN_CHECK(o.lr >= 0, tag(), "invalid learning rate lr=", o.lr, " (must be >= 0)");
  KILN_CHECK(o.momentum >= 0, tag(), "invalid momentum=", o.momentum, " (must be >= 0)");
  KILN_CHECK(o.weight_decay >= 0, tag(), "invalid weight_decay=", o.weight_decay,
             " (must be >= 0)");
  KILN_CHECK(std::isfinite(o.dampening), tag(), "invalid dampening=", o.dampening);
  KILN_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), tag(),
             "Nesterov momentum requires momentum > 0 and dampening == 0, got momentum=",
             o.momentum, " and dampening=", o.dampening);
}

std::optional<double> SGD::structural_form(const std::string& key, double value) const {
  if (key == "weight_decay" || key == "momentum" || key == "dampening") return value != 0;
  return Optimizer::structural_form(key, value);
}

void SGD::step() {
  NoGradGuard ng;
  for (size_t gi = 0; gi < param_groups().size(); ++gi) {
    const SGDOptions o = from_group(param_groups()[gi]);
    guard_hyperparams(gi);
    // Numbers are per-call host values (hyper), so a scheduler may change
    // them; what is zero or set decides the ops (structural_form).
    const Tensor wd = o.weight_decay != 0 ? hyper(gi, "weight_decay") : Tensor();
    const Tensor momentum = o.momentum != 0 ? hyper(gi, "momentum") : Tensor();
    const Tensor keep =
        o.dampening != 0 ? hyper(gi, "dampening", [](double v) { return 1 - v; }) : Tensor();
    const Tensor neg_lr = host_scalar([this, gi] { return -param_groups()[gi].get("lr"); });
    // The fused step reads the same host numbers and does the arithmetic in one pass.
    detail::SgdConfig cfg{.has_decay = o.weight_decay != 0,
                          .has_momentum = o.momentum != 0,
                          .nesterov = o.nesterov,
                          .maximize = o.maximize};
    std::vector<detail::SgdJob> jobs;
    for (Tensor& p : param_groups()[gi].params) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (fused_) {
        const Tensor* b = o.momentum != 0 ? mutable_state(p).find("momentum_buffer") : nullptr;
        Tensor buf = b ? *b : Tensor();
        if (detail::fusable(p, {&grad, &buf})) {
          if (jobs.empty()) {
            cfg.weight_decay = wd.defined() ? wd.item<double>() : 0.0;
            cfg.momentum = momentum.defined() ? momentum.item<double>() : 0.0;
            cfg.keep = keep.defined() ? keep.item<double>() : 1.0;
            cfg.neg_lr = neg_lr.item<double>();
          }
          const bool first = o.momentum != 0 && !b;
          if (first) {
            buf = empty_like(p);
            mutable_state(p).set("momentum_buffer", buf);
          }
          jobs.push_back({p, grad, buf, first});
          continue;
        }
      }
      Tensor d = o.maximize ? neg(grad) : grad;
      if (o.weight_decay != 0) d = add(d, mul(p, wd));
      if (o.momentum != 0) {
        StateDict& st = mutable_state(p);
        Tensor buf;
        if (const Tensor* b = st.find("momentum_buffer")) {
          buf = *b;
          buf.mul_(momentum);
          if (o.dampening == 0)
            buf.add_(d);
          else
            buf.add_(mul(d, keep));
        } else {
          buf = d.clone();  // the first step takes the gradient as is (no dampening)
          st.set("momentum_buffer", buf);
        }
        d = o.nesterov ? add(d, mul(buf, momentum)) : buf;
      }
      p.add_(mul(d, neg_lr));
    }
    detail::sgd_step(cfg, jobs);
  }
}

}  // namespace kiln::optim
