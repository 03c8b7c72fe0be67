// Weight tying as PyTorch users write it (head->weight = wte->weight): the
// registered parameter follows the member, traversal lists it once, state_dict
// keeps both names on one storage, and save/load round-trips the tie.
#include <gtest/gtest.h>

#include <filesystem>

#include <unistd.h>

#include "nn_test_util.h"

using namespace kiln;
using namespace kiln::nn_test;

namespace {

constexpr int64_t kVocab = 7, kDim = 4;

// A tiny language model whose output head shares the embedding matrix.
struct TiedLM : nn::Module {
  explicit TiedLM(bool tie = true) {
    wte = register_module("wte", std::make_shared<nn::Embedding>(kVocab, kDim));
    head = register_module("head", std::make_shared<nn::Linear>(kDim, kVocab, false));
    if (tie) head->weight = wte->weight;
  }
  Tensor forward(const Tensor& idx) override { return (*head)(tanh((*wte)(idx))); }
  std::shared_ptr<nn::Embedding> wte;
  std::shared_ptr<nn::Linear> head;
};

Tensor tokens() {
  return from_vector<int64_t>({1, 3, 3, 6, 0, 2}, {2, 3});
}
Tensor targets() {
  return from_vector<int64_t>({3, 3, 6, 0, 2, 5}, {6});
}

Tensor loss_of(TiedLM& m) {
  return cross_entropy(reshape(m.forward(tokens()), {6, kVocab}), targets());
}

}  // namespace

TEST(WeightTying, AssignedMemberIsTheParameterAndListedOnce) {
  manual_seed(0);
  TiedLM m;
  auto named = m.named_parameters();
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].first, "wte.weight");
  EXPECT_TRUE(named[0].second.is_same(m.head->weight));
  EXPECT_EQ(m.parameters().size(), 1u);
  // state_dict keeps both names, on the same storage (PyTorch's behaviour).
  StateDict sd = m.state_dict();
  ASSERT_EQ(sd.keys(), (std::vector<std::string>{"wte.weight", "head.weight"}));
  EXPECT_EQ(sd.at("wte.weight").data_ptr(), sd.at("head.weight").data_ptr());
}

TEST(WeightTying, SharedGradientIsTheSumOfBothUsesAndTheOptimizerStepsItOnce) {
  manual_seed(1);
  TiedLM tied;
  // The same computation untied: two parameters holding the same values.
  TiedLM untied(false);
  {
    NoGradGuard ng;
    untied.wte->weight.copy_(tied.wte->weight);
    untied.head->weight.copy_(tied.wte->weight);
  }
  loss_of(untied).backward();
  loss_of(tied).backward();
  expect_close(tied.wte->weight.grad(), untied.wte->weight.grad() + untied.head->weight.grad(),
               1e-6);

  Tensor before = tied.wte->weight.clone();
  optim::SGD opt(tied.parameters(), {.lr = 0.5});
  opt.step();
  expect_close(tied.wte->weight, before - 0.5 * tied.wte->weight.grad(), 1e-6);
  EXPECT_TRUE(tied.head->weight.is_same(tied.wte->weight));

  // It trains: a few steps lower the loss.
  double first = loss_of(tied).item<float>();
  for (int i = 0; i < 20; ++i) {
    opt.zero_grad();
    loss_of(tied).backward();
    opt.step();
  }
  EXPECT_LT(loss_of(tied).item<float>(), first);
}

TEST(WeightTying, SaveLoadRoundTripsTheTie) {
  manual_seed(2);
  TiedLM a;
  auto path = std::filesystem::temp_directory_path() /
              ("kiln_tied_" + std::to_string(::getpid()) + ".safetensors");
  save(path.string(), a.state_dict());
  StateDict loaded = load(path.string());
  std::filesystem::remove(path);
  manual_seed(3);
  TiedLM b;  // other values, tied by construction
  b.load_state_dict(loaded);
  expect_equal(b.wte->weight, a.wte->weight);
  EXPECT_TRUE(b.head->weight.is_same(b.wte->weight));
  EXPECT_EQ(b.parameters().size(), 1u);
  // Into an untied model, both names get the values.
  TiedLM c(false);
  c.load_state_dict(loaded);
  expect_equal(c.head->weight, a.wte->weight);
}

TEST(WeightTying, ReplaceParameterRePointsAHandleRegisteredParameter) {
  struct Net : nn::Module {
    Net() { register_parameter("scale", scale, ones({2})); }
    Tensor scale;
  };
  Net n;
  Tensor shared = full({2}, 3.0).requires_grad_(true);
  n.replace_parameter("scale", shared);
  ASSERT_EQ(n.parameters().size(), 1u);
  EXPECT_TRUE(n.parameters()[0].is_same(shared));
  // A slot-registered member follows replace_parameter too.
  nn::Linear lin(2, 2);
  lin.replace_parameter("bias", shared);
  EXPECT_TRUE(lin.bias.is_same(shared));
  lin.replace_parameter("bias", Tensor());  // an absent bias, like `bias = None`
  EXPECT_FALSE(lin.bias.defined());
  EXPECT_EQ(lin.parameters().size(), 1u);

  expect_error([&] { n.replace_parameter("nope", shared); }, {"no parameter named \"nope\""});
  expect_error([&] { n.replace_parameter("scale", shared * 2.0); },
               {"replace_parameter(\"scale\")", "leaf"});
  expect_error([&] { n.register_parameter("scale", shared); },
               {"already used", "replace_parameter"});
}

TEST(WeightTying, AMemberAssignedAComputedTensorIsAnError) {
  TiedLM m(false);
  m.head->weight = m.wte->weight * 2.0;  // not a parameter: would train nothing
  expect_error([&] { (void)m.parameters(); }, {"\"head.weight\"", "computed by ops"});
}

TEST(WeightTying, ClonesKeepTheTie) {
  manual_seed(4);
  auto wte = std::make_shared<nn::Embedding>(kVocab, kDim);
  auto head = std::make_shared<nn::Linear>(kDim, kVocab, false);
  head->weight = wte->weight;
  nn::Sequential seq{wte, head};
  auto copy = clone_as(seq);
  ASSERT_EQ(copy->parameters().size(), 1u);
  auto cw = copy->at<nn::Embedding>(0);
  auto ch = copy->at<nn::Linear>(1);
  EXPECT_TRUE(ch->weight.is_same(cw->weight));
  EXPECT_FALSE(cw->weight.is_same(wte->weight));  // a deep copy
  expect_equal(cw->weight, wte->weight);
  EXPECT_TRUE(cw->weight.requires_grad());
}
