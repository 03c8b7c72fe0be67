// Issue 22's module and RNG state under kiln::compile: a tied-embedding LM
// trains compiled as it does eagerly, the RNG state set between compiled calls
// replays their dropout masks, and masks reach a module through forward_args.
#include <gtest/gtest.h>

#include "codegen/compare.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "runtime/test_util.h"

namespace kiln {
namespace {

struct TiedLM : nn::Module {
  TiedLM() {
    wte = register_module("wte", std::make_shared<nn::Embedding>(9, 6));
    head = register_module("head", std::make_shared<nn::Linear>(6, 9, false));
    head->weight = wte->weight;  // tied
  }
  Tensor forward(const Tensor& idx) override {
    return (*head)(dropout(tanh((*wte)(idx)), 0.2, is_training()));
  }
  std::shared_ptr<nn::Embedding> wte;
  std::shared_ptr<nn::Linear> head;
};

TEST(NnStateCompiled, TiedLanguageModelTrainsCompiledLikeEager) {
  auto run = [](bool compiled) {
    manual_seed(4);
    auto m = std::make_shared<TiedLM>();
    optim::AdamW opt(m->parameters(), {.lr = 1e-2});
    auto body = [&](const Tensor& idx, const Tensor& tgt) {
      opt.zero_grad();
      Tensor loss = cross_entropy(reshape((*m)(idx), {-1, 9}), reshape(tgt, {-1}));
      loss.backward();
      opt.step();
      return loss;
    };
    auto step = compile(body, {.enabled = compiled});
    Tensor idx = randint(0, 9, {2, 5}), tgt = randint(0, 9, {2, 5});
    std::vector<Tensor> losses;
    for (int i = 0; i < 4; ++i) losses.push_back(step(idx, tgt));
    EXPECT_TRUE(m->head->weight.is_same(m->wte->weight));
    return std::make_pair(losses, m->wte->weight.clone());
  };
  auto [eager_losses, eager_w] = run(false);
  auto [comp_losses, comp_w] = run(true);
  for (size_t i = 0; i < eager_losses.size(); ++i)
    EXPECT_EQ(testing::diff_values(eager_losses[i], comp_losses[i], 1e-5), "") << "step " << i;
  EXPECT_EQ(testing::diff_values(eager_w, comp_w, 1e-5), "");
}

TEST(NnStateCompiled, SetRngStateReplaysCompiledDropout) {
  auto f = compile([](const Tensor& x) { return dropout(x, 0.5, true); });
  Tensor x = ones({64});
  manual_seed(11);
  for (int i = 0; i < 3; ++i) (void)f(x);  // warm-up and trace
  Tensor state = get_rng_state();
  auto a = f(x).to_vector<float>(), b = f(x).to_vector<float>();
  EXPECT_NE(a, b);
  set_rng_state(state);
  EXPECT_EQ(f(x).to_vector<float>(), a);
  {
    RngStateGuard fork;
    (void)f(x);
  }
  EXPECT_EQ(f(x).to_vector<float>(), b);
}

// Reading or setting the state inside a traced call would fix it at trace time.
TEST(NnStateCompiled, RngStateInsideACompiledFunctionIsAnError) {
  Tensor state = get_rng_state();
  auto get = compile([](const Tensor& x) { return x + cast(get_rng_state(), DType::f32).sum(); },
                     {.warmup = 0});
  testing::expect_error([&] { get(ones({1})); }, {"get_state", "not traceable"});
  auto set = compile(
      [&](const Tensor& x) {
        set_rng_state(state);
        return dropout(x, 0.5, true);
      },
      {.warmup = 0});
  testing::expect_error([&] { set(ones({4})); }, {"set_state", "not traceable"});
  auto fork = compile(
      [](const Tensor& x) {
        RngStateGuard g;
        return dropout(x, 0.5, true);
      },
      {.warmup = 0});
  testing::expect_error([&] { fork(ones({4})); }, {"RngStateGuard", "not traceable"});
}

TEST(NnStateCompiled, MasksReachAModuleThroughForwardArgs) {
  manual_seed(5);
  auto enc = std::make_shared<nn::TransformerEncoder>(
      std::make_shared<nn::TransformerEncoderLayer>(
          8, 2, nn::TransformerEncoderLayerOptions{.dim_feedforward = 16, .dropout = 0.0}),
      2);
  std::shared_ptr<nn::Module> any = enc;
  Tensor x = randn({2, 4, 8}), mask = triu(ones({4, 4}, DType::b8), 1);
  auto f = compile([&](const Tensor& a, const Tensor& m) { return (*any)(a, m); });
  Tensor want = enc->forward(x, mask);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(testing::diff_values(want, f(x, mask), 1e-5), "");
}

}  // namespace
}  // namespace kiln
