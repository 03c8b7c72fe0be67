// The optimizers' fused eager steps (runtime/src/optim/fused_step.cpp) against
// the per-op form (fused = false): the same parameters and state bit for bit
// over several steps, for every option that changes the update, f32 and f64,
// parameters that fall back (non-contiguous, half precision) in the same group,
// and the version counters of what they write.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/optim/optim.h"

using namespace kiln;

namespace {

// Parameters of several sizes (one larger than a parallel task, one tiny), a
// transposed one (falls back to the per-op form) and one without a gradient.
std::vector<Tensor> make_params(DType dt, uint64_t seed) {
  manual_seed(seed);
  std::vector<Tensor> ps;
  for (Dims s : {Dims{70000}, Dims{3}, Dims{17, 5}}) ps.push_back(cast(randn(s), dt));
  ps.push_back(cast(randn({6, 4}), dt).transpose(0, 1));
  ps.push_back(cast(randn({5}), dt));  // no gradient: skipped
  for (Tensor& p : ps) p.requires_grad_(true);
  return ps;
}

void set_grads(std::vector<Tensor>& ps, int step, uint64_t seed) {
  manual_seed(seed * 100 + static_cast<uint64_t>(step));
  for (size_t i = 0; i + 1 < ps.size(); ++i)
    ps[i].set_grad(cast(randn(ps[i].shape()), ps[i].dtype()));
}

using Make = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>, bool fused)>;

// Runs 4 steps fused and unfused from the same start; parameters and every
// state tensor must be equal.
void expect_same(const Make& make, DType dt, const std::string& what) {
  auto a = make_params(dt, 1), b = make_params(dt, 1);
  auto fa = make(a, true), fb = make(b, false);
  for (int step = 0; step < 4; ++step) {
    set_grads(a, step, 2);
    set_grads(b, step, 2);
    const uint32_t v0 = a[0].version();
    fa->step();
    fb->step();
    EXPECT_GT(a[0].version(), v0) << what << ": the fused step must bump the version";
  }
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(equal(a[i].detach(), b[i].detach())) << what << ": parameter " << i;
  StateDict sa = fa->state_dict(), sb = fb->state_dict();
  ASSERT_EQ(sa.size(), sb.size()) << what;
  for (const auto& [name, t] : sa) {
    const Tensor* u = sb.find(name);
    ASSERT_NE(u, nullptr) << what << ": " << name;
    EXPECT_TRUE(equal(t, *u)) << what << ": state " << name;
  }
}

TEST(FusedStep, AdamMatchesThePerOpFormBitForBit) {
  struct Variant {
    std::string name;
    optim::AdamOptions o;
  };
  std::vector<Variant> vs = {
      {"default", {.lr = 1e-2}},
      {"weight_decay", {.lr = 1e-2, .weight_decay = 0.1}},
      {"amsgrad", {.lr = 1e-2, .amsgrad = true}},
      {"maximize", {.lr = 1e-2, .maximize = true}},
      {"beta1 above 0.5 uses lerp's other formula", {.lr = 1e-2, .betas = {0.3, 0.9}}},
  };
  for (DType dt : {DType::f32, DType::f64})
    for (const Variant& v : vs)
      expect_same(
          [&](std::vector<Tensor> ps, bool fused) {
            optim::AdamOptions o = v.o;
            o.fused = fused;
            return std::make_unique<optim::Adam>(std::move(ps), o);
          },
          dt, "Adam " + v.name);
}

TEST(FusedStep, AdamWMatchesThePerOpFormBitForBit) {
  for (DType dt : {DType::f32, DType::f64})
    for (bool ams : {false, true})
      expect_same(
          [&](std::vector<Tensor> ps, bool fused) {
            return std::make_unique<optim::AdamW>(
                std::move(ps), optim::AdamWOptions{.lr = 1e-2, .amsgrad = ams, .fused = fused});
          },
          dt, "AdamW");
}

TEST(FusedStep, SgdMatchesThePerOpFormBitForBit) {
  std::vector<optim::SGDOptions> vs = {
      {.lr = 0.1},
      {.lr = 0.1, .momentum = 0.9},
      {.lr = 0.1, .momentum = 0.9, .dampening = 0.2},
      {.lr = 0.1, .momentum = 0.9, .nesterov = true},
      {.lr = 0.1, .momentum = 0.5, .weight_decay = 0.01, .maximize = true},
  };
  for (DType dt : {DType::f32, DType::f64})
    for (size_t i = 0; i < vs.size(); ++i)
      expect_same(
          [&](std::vector<Tensor> ps, bool fused) {
            optim::SGDOptions o = vs[i];
            o.fused = fused;
            return std::make_unique<optim::SGD>(std::move(ps), o);
          },
          dt, "SGD variant " + std::to_string(i));
}

TEST(FusedStep, RmspropMatchesThePerOpFormBitForBit) {
  std::vector<optim::RMSpropOptions> vs = {
      {.lr = 1e-2},
      {.lr = 1e-2, .centered = true},
      {.lr = 1e-2, .alpha = 0.3, .centered = true},  // lerp's other formula
      {.lr = 1e-2, .weight_decay = 0.1, .momentum = 0.9},
      {.lr = 1e-2, .momentum = 0.5, .centered = true, .maximize = true},
  };
  for (DType dt : {DType::f32, DType::f64})
    for (size_t i = 0; i < vs.size(); ++i)
      expect_same(
          [&](std::vector<Tensor> ps, bool fused) {
            optim::RMSpropOptions o = vs[i];
            o.fused = fused;
            return std::make_unique<optim::RMSprop>(std::move(ps), o);
          },
          dt, "RMSprop variant " + std::to_string(i));
}

TEST(FusedStep, OptionsReportTheFlag) {
  Tensor p = randn({3}).requires_grad_();
  EXPECT_TRUE(optim::Adam({p}).options(0).fused);
  EXPECT_FALSE(optim::Adam({p}, {.fused = false}).options(0).fused);
  EXPECT_FALSE(optim::AdamW({p}, {.fused = false}).options(0).fused);
  EXPECT_FALSE(optim::SGD({p}, {.fused = false}).options(0).fused);
  EXPECT_FALSE(optim::RMSprop({p}, {.fused = false}).options(0).fused);
}

TEST(FusedStep, HalfPrecisionParametersTakeThePerOpForm) {
  Tensor p = cast(randn({8}), DType::bf16).requires_grad_();
  Tensor q = p.detach().clone().requires_grad_();
  optim::Adam a({p}), b({q}, {.fused = false});
  for (int i = 0; i < 3; ++i) {
    p.set_grad(cast(full({8}, 0.5 * (i + 1)), DType::bf16));
    q.set_grad(cast(full({8}, 0.5 * (i + 1)), DType::bf16));
    a.step();
    b.step();
  }
  EXPECT_TRUE(equal(p.detach(), q.detach()));
}

}  // namespace
