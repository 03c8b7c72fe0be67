// Runs the GPT example small: it trains (eagerly and compiled, with the same
// losses), keeps its head tied to the token embedding, and samples the same
// text twice under the same RNG state.
#include <gtest/gtest.h>

#include <sstream>
#include <vector>

#include "examples/cpu_and_cuda.h"
#include "gpt.h"
#include "kiln/kiln.h"

namespace {

kiln::examples::GptOptions small() {
  kiln::examples::GptOptions o;
  o.steps = 40;
  o.warmup_steps = 8;
  return o;
}

// A tiny model for the CUDA cases: the emulated device is slow.
kiln::examples::GptOptions tiny() {
  kiln::examples::GptOptions o;
  o.block_size = 8;
  o.n_embd = 16;
  o.n_layer = 1;
  o.batch_size = 4;
  o.steps = 3;
  o.warmup_steps = 1;
  return o;
}

}  // namespace

// The loss falls; the compiled step traces once and gives eager's losses; the
// warm-up + cosine schedule and the tie hold in both runs.
TEST(ExampleGpt, TrainsEagerlyAndCompiledAlike) {
  auto o = small();
  std::ostringstream log_eager, log_compiled;
  auto eager = kiln::examples::train_gpt(o, log_eager);
  o.compile = true;
  auto compiled = kiln::examples::train_gpt(o, log_compiled);
  ASSERT_EQ(eager.losses.size(), 40u);
  ASSERT_EQ(compiled.losses.size(), 40u);
  // From ln(vocab) at the start, the loss falls clearly within 40 steps.
  EXPECT_LT(eager.losses.back(), 0.8 * eager.losses.front()) << log_eager.str();
  for (size_t i = 0; i < eager.losses.size(); ++i)
    EXPECT_NEAR(compiled.losses[i], eager.losses[i], 2e-4 * std::abs(eager.losses[i]))
        << "step " << i + 1;
  EXPECT_EQ(compiled.compile_stats.traces, 1) << compiled.compile_stats.last_miss;
  EXPECT_EQ(compiled.compile_stats.compiled_calls, 39);
  // Warm-up from lr / 100 to the peak, then cosine decay.
  EXPECT_NEAR(eager.lrs.front(), o.lr / 100, 1e-12);
  EXPECT_NEAR(eager.lrs[8], o.lr, 1e-12);
  EXPECT_LT(eager.lrs.back(), 0.2 * o.lr);
  for (auto* r : {&eager, &compiled}) {
    EXPECT_TRUE(r->model->head->weight.is_same(r->model->wte->weight));
    // One tensor under two names: listed once, saved under both.
    int64_t n = 0;
    for (const auto& p : r->model->parameters()) n += p.is_same(r->model->wte->weight);
    EXPECT_EQ(n, 1);
    EXPECT_TRUE(r->model->state_dict().contains("head.weight"));
  }
}

// Sampling with temperature and top-k through multinomial is a function of
// the RNG state: the same state gives the same text.
TEST(ExampleGpt, SamplingIsDeterministicUnderTheRngState) {
  auto o = small();
  o.steps = 10;
  std::ostringstream log;
  auto r = kiln::examples::train_gpt(o, log);
  kiln::manual_seed(7);
  kiln::Tensor state = kiln::get_rng_state();
  const std::string a = kiln::examples::sample_text(*r.model, *r.tokenizer, "The ", 40, 0.8, 5);
  kiln::set_rng_state(state);
  const std::string b = kiln::examples::sample_text(*r.model, *r.tokenizer, "The ", 40, 0.8, 5);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 44u);
  EXPECT_EQ(a.substr(0, 4), "The ");
  std::string c;
  {
    kiln::RngStateGuard keep;  // draws inside do not shift the ones after it
    c = kiln::examples::sample_text(*r.model, *r.tokenizer, "The ", 40, 0.8, 5);
  }
  const std::string d = kiln::examples::sample_text(*r.model, *r.tokenizer, "The ", 40, 0.8, 5);
  EXPECT_EQ(c, d);
  // top_k = 1 is greedy decoding: the same text whatever the state.
  kiln::manual_seed(1);
  const std::string g1 = kiln::examples::sample_text(*r.model, *r.tokenizer, "The ", 20, 1.0, 1);
  kiln::manual_seed(2);
  const std::string g2 = kiln::examples::sample_text(*r.model, *r.tokenizer, "The ", 20, 1.0, 1);
  EXPECT_EQ(g1, g2);
}

// `gpt --device cuda`: the same steps on a CUDA device (a GPU, or the emulated
// device in CI), eagerly and compiled, follow the CPU's losses; greedy
// sampling (top-k 1) writes the CPU's text.
TEST(ExampleGpt, TrainsOnACudaDeviceLikeOnTheCpu) {
  const kiln::examples::GptOptions o = tiny();
  kiln::examples::testing::train_on_cpu_and_cuda(o, kiln::examples::train_gpt, [](const auto& r) {
    kiln::examples::testing::expect_losses_follow(r.gpu.losses, r.cpu.losses, 1e-4, r.mode);
    EXPECT_EQ(r.gpu.lrs, r.cpu.lrs);
    EXPECT_TRUE(r.gpu.model->head->weight.is_same(r.gpu.model->wte->weight))
        << "the tie survives to()";
    EXPECT_EQ(r.gpu.model->wte->weight.device(), kiln::Device::cuda());
    EXPECT_NE(r.gpu_log.find("on cuda:0"), std::string::npos) << r.gpu_log;
    if (r.compiled) {
      EXPECT_EQ(r.gpu.compile_stats.traces, 1) << r.gpu.compile_stats.last_miss;
    }
    const std::string a =
        kiln::examples::sample_text(*r.cpu.model, *r.cpu.tokenizer, "The ", 8, 1.0, 1);
    const std::string b =
        kiln::examples::sample_text(*r.gpu.model, *r.gpu.tokenizer, "The ", 8, 1.0, 1);
    EXPECT_EQ(b, a) << r.mode;
  });
}

// Sampling on a CUDA device (top-k, softmax and multinomial there; only the
// finished token ids come back) writes the CPU's text from the same weights
// and generator state, with and without top-k.
TEST(ExampleGpt, SamplesOnACudaDeviceLikeOnTheCpu) {
  if (!kiln::cuda::is_available())
    GTEST_SKIP() << "no CUDA device: " << kiln::cuda::unavailable_reason();
  const kiln::examples::GptOptions o = tiny();
  std::ostringstream log;
  auto r = kiln::examples::train_gpt(o, log);
  kiln::examples::Gpt gpu(o, r.tokenizer->vocab_size());
  gpu.load_state_dict(r.model->state_dict());
  gpu.to(kiln::Device::cuda());
  for (int64_t top_k : {5, 0}) {
    kiln::manual_seed(7);
    const std::string a =
        kiln::examples::sample_text(*r.model, *r.tokenizer, "The ", 24, 0.8, top_k);
    kiln::manual_seed(7);
    const std::string b = kiln::examples::sample_text(gpu, *r.tokenizer, "The ", 24, 0.8, top_k);
    EXPECT_EQ(b, a) << "top-k " << top_k;
    EXPECT_EQ(a.size(), 28u);
  }
}
