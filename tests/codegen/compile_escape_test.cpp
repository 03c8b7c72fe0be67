// kiln::compile and tensors a traced call stores outside the function: state
// created on the first, traced call (warmup = 0) becomes real and the next call
// traces the steady state; a function that stores new tensors on every call
// runs eagerly after its second trace.
#include <gtest/gtest.h>

#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"
#include "runtime/test_util.h"

namespace kiln {
namespace {

template <typename Opt, typename Options>
void expect_warmup_zero_matches_eager(const Options& opts, bool zero_grad_first, int traces) {
  auto make = [&] {
    manual_seed(11);
    auto m = std::make_shared<nn::Linear>(6, 4);
    auto o = std::make_shared<Opt>(m->parameters(), opts);
    return std::make_pair(m, o);
  };
  auto [me, oe] = make();
  auto [mc, oc] = make();
  Tensor x = randn({5, 6}), y = randn({5, 4});
  auto step = [&](nn::Linear& m, Opt& o) {
    if (zero_grad_first) o.zero_grad();
    Tensor loss = mse_loss(m.forward(x), y);
    loss.backward();
    o.step();
    if (!zero_grad_first) o.zero_grad();
    return loss;
  };
  auto f = compile([&] { return step(*mc, *oc); }, {.warmup = 0});
  for (int i = 0; i < 6; ++i) {
    Tensor le = step(*me, *oe), lc = f();
    EXPECT_TRUE(allclose(le, lc, 1e-5, 1e-6)) << "step " << i;
    for (size_t k = 0; k < 2; ++k)
      EXPECT_TRUE(allclose(me->parameters()[k], mc->parameters()[k], 1e-5, 1e-6))
          << "parameter " << k << " after step " << i;
  }
  EXPECT_EQ(f.stats().traces, traces) << "zero_grad_first " << zero_grad_first;
  EXPECT_EQ(f.stats().eager_calls, 0);
  EXPECT_EQ(f.stats().compiled_calls, 6);
}

// SGD's momentum buffers, created by a traced first step as a copy of the
// gradient, hold real values afterwards: the first call makes them, the second
// traces the steady step, the rest replay it. Training matches eager step for
// step, whichever end of the step zeroes the gradients (zeroing at the end used
// to replay the first-step update forever, silently). Adam's moments start as
// real zeros even while tracing, so one trace serves.
TEST(CompileEscape, WarmupZeroOptimizerStateIsMadeOnce) {
  const optim::SGDOptions sgd{.lr = 0.1, .momentum = 0.9};
  expect_warmup_zero_matches_eager<optim::SGD>(sgd, true, 2);
  expect_warmup_zero_matches_eager<optim::SGD>(sgd, false, 2);
  expect_warmup_zero_matches_eager<optim::Adam>(optim::AdamOptions{.lr = 0.01}, false, 1);
}

// A traced value kept in a member on the first call becomes a real tensor with
// the value eager would have stored; later calls read it as captured state.
TEST(CompileEscape, ValueCachedOnceBecomesState) {
  Tensor cache;
  auto fn = [&](const Tensor& x) {
    if (!cache.defined()) cache = x * 2;
    return x + cache;
  };
  auto f = compile(fn, {.warmup = 0});
  Tensor a = f(full({3}, 1.0));
  ASSERT_TRUE(cache.defined());
  EXPECT_FALSE(cache.is_symbolic());
  EXPECT_TRUE(equal(cache, full({3}, 2.0)));
  EXPECT_TRUE(equal(a, full({3}, 3.0)));
  EXPECT_TRUE(equal(f(full({3}, 5.0)), full({3}, 7.0)));
  EXPECT_TRUE(equal(f(full({3}, 0.0)), full({3}, 2.0)));
  EXPECT_EQ(f.stats().traces, 2);
}

// A function that stores a new tensor on every call cannot be replayed: after
// its second such trace the signature runs eagerly (one warning), and every
// stored tensor holds its real value.
TEST(CompileEscape, NewTensorsEveryCallTurnEager) {
  std::vector<Tensor> history;
  auto fn = [&](const Tensor& x) {
    Tensor y = x * 3;
    history.push_back(y);
    return y + 1;
  };
  auto f = compile(fn, {.warmup = 0, .name = "history"});
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 4; ++i) f(full({2}, static_cast<double>(i)));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("history: every traced call stores new tensors"), std::string::npos) << err;
  EXPECT_EQ(f.stats().traces, 2);
  EXPECT_EQ(f.stats().eager_calls, 2);
  ASSERT_EQ(history.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_FALSE(history[static_cast<size_t>(i)].is_symbolic()) << i;
    EXPECT_TRUE(equal(history[static_cast<size_t>(i)], full({2}, 3.0 * i))) << i;
  }
}

}  // namespace
}  // namespace kiln
