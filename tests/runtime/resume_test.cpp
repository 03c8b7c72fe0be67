// Verifies resuming training from a safetensors checkpoint: N steps, save,
// load into fresh objects, M more steps == N+M uninterrupted steps, bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include <unistd.h>

#include "kiln/kiln.h"

using namespace kiln;

namespace {

struct Trainer {
  std::shared_ptr<nn::Sequential> model = std::make_shared<nn::Sequential>();
  std::unique_ptr<optim::Adam> opt;
  std::unique_ptr<optim::StepLR> sched;
  Tensor data, target;

  explicit Trainer(uint64_t seed) {
    manual_seed(seed);
    model->push_back(std::make_shared<nn::Linear>(6, 16));
    model->push_back(std::make_shared<nn::ReLU>());
    model->push_back(std::make_shared<nn::Dropout>(0.3));  // uses the RNG: it must resume too
    model->push_back(std::make_shared<nn::Linear>(16, 3));
    opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 1e-2});
    sched = std::make_unique<optim::StepLR>(*opt, 3, 0.5);
    manual_seed(99);  // the data is the same for every trainer
    data = randn({40, 6});
    target = randint(0, 3, {40});
  }
  void step(int k) {
    Tensor x = data.narrow(0, (k * 8) % 40, 8), y = target.narrow(0, (k * 8) % 40, 8);
    Tensor loss = cross_entropy((*model)(x), y);
    opt->zero_grad();
    loss.backward();
    opt->step();
    sched->step();
  }
  StateDict checkpoint() const {
    StateDict sd;
    for (auto& [k, v] : model->state_dict()) sd.set("model." + k, v);
    for (auto& [k, v] : opt->state_dict()) sd.set("optim." + k, v);
    for (auto& [k, v] : sched->state_dict()) sd.set("sched." + k, v);
    sd.set("rng", default_generator().get_state());
    return sd;
  }
  void restore(const StateDict& sd) {
    auto sub = [&](const std::string& prefix) {
      StateDict out;
      for (auto& [k, v] : sd)
        if (k.rfind(prefix, 0) == 0) out.set(k.substr(prefix.size()), v);
      return out;
    };
    model->load_state_dict(sub("model."));
    opt->load_state_dict(sub("optim."));
    sched->load_state_dict(sub("sched."));
    default_generator().set_state(sd.at("rng"));
  }
};

}  // namespace

TEST(Resume, SaveLoadContinueIsBitIdentical) {
  const int n = 5, m = 7;
  Trainer straight(1);
  manual_seed(123);
  for (int k = 0; k < n + m; ++k) straight.step(k);

  Trainer first(1);
  manual_seed(123);
  for (int k = 0; k < n; ++k) first.step(k);
  auto path = std::filesystem::temp_directory_path() /
              ("kiln_resume_" + std::to_string(::getpid()) + ".safetensors");
  save(path.string(), first.checkpoint());

  Trainer second(2);  // different initial weights: everything must come from the file
  manual_seed(555);
  second.restore(load(path.string()));
  for (int k = n; k < n + m; ++k) second.step(k);
  std::filesystem::remove(path);

  auto a = straight.model->state_dict(), b = second.model->state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (auto& [k, v] : a) {
    auto x = v.to_vector<float>(), y = b.at(k).to_vector<float>();
    ASSERT_EQ(x.size(), y.size()) << k;
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0) << k;
  }
  EXPECT_EQ(straight.opt->param_groups()[0].lr(), second.opt->param_groups()[0].lr());
}

// The RNG state travels in the checkpoint: after resuming, dropout draws the
// masks the uninterrupted run draws, and without it (fresh seed) it would not.
TEST(Resume, ResumedRunDrawsTheSameDropoutMasks) {
  const int n = 4;
  auto masks = [](int count) {
    std::vector<std::vector<float>> out;
    for (int i = 0; i < count; ++i)
      out.push_back(dropout(ones({64}), 0.5, /*train=*/true).to_vector<float>());
    return out;
  };
  Trainer straight(1);
  manual_seed(123);
  for (int k = 0; k < n; ++k) straight.step(k);
  auto want = masks(3);

  Trainer first(1);
  manual_seed(123);
  for (int k = 0; k < n; ++k) first.step(k);
  auto path = std::filesystem::temp_directory_path() /
              ("kiln_resume_rng_" + std::to_string(::getpid()) + ".safetensors");
  save(path.string(), first.checkpoint());
  StateDict sd = load(path.string());
  std::filesystem::remove(path);
  EXPECT_EQ(sd.at("rng").dtype(), DType::u8);

  Trainer second(2);
  manual_seed(555);
  (void)randn({7});  // the resumed process has drawn other numbers meanwhile
  auto unrestored = masks(1);
  second.restore(sd);
  EXPECT_EQ(masks(3), want);
  EXPECT_NE(unrestored[0], want[0]);
}
