// Collective ops inside compiled code: they are traced as IR nodes, never
// merged or folded, scheduled (start early, wait late) and run by the plan.
#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "kiln/collective.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

// Sum over a pretend 2-rank group whose other rank holds the same tensors.
class DoublingBackend : public CollectiveBackend {
 public:
  int64_t start(int64_t, int64_t, std::span<const Tensor> inputs) override {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<Tensor> res;
    for (const Tensor& t : inputs) res.push_back(t * 2);
    pending[++next] = std::move(res);
    ++starts;
    return next;
  }
  void wait(int64_t key, std::span<Tensor> outputs) override {
    std::lock_guard<std::mutex> lock(mu);
    for (size_t i = 0; i < outputs.size(); ++i) outputs[i].copy_(pending.at(key)[i]);
    pending.erase(key);
    ++waits;
  }
  std::mutex mu;
  std::map<int64_t, std::vector<Tensor>> pending;
  int64_t next = 0;
  int starts = 0, waits = 0;
};

TEST(CollectiveCompiled, MatchesEagerAndKeepsEveryCollective) {
  DoublingBackend fake;
  set_collective_backend(&fake);
  // Two all-reduces of the same value: CSE must not merge them (each is a
  // separate exchange with the other ranks).
  auto f = [](const Tensor& x) {
    Tensor g = exp(x);
    Tensor h1 = collective_start({g}, 1, 0);
    Tensor h2 = collective_start({g}, 1, 0);
    Tensor y = neg(g) * 3;
    Tensor r1 = collective_wait(h1, {g}, 1)[0];
    Tensor r2 = collective_wait(h2, {g}, 1)[0];
    return r1 + r2 + y;
  };
  Tensor x = randn({5, 3});
  Tensor want = f(x);
  auto c = compile(f, {.warmup = 0, .name = "collectives"});
  const int starts0 = fake.starts;
  Tensor got = c(x);
  Tensor got2 = c(x);
  set_collective_backend(nullptr);
  EXPECT_EQ(c.stats().traces, 1);
  EXPECT_EQ(c.stats().compiled_calls, 2);
  EXPECT_EQ(fake.starts - starts0, 4);  // two per call
  EXPECT_EQ(fake.waits, fake.starts);
  EXPECT_TRUE(allclose(got, want, 1e-5, 1e-6));
  EXPECT_TRUE(allclose(got2, want, 1e-5, 1e-6));
}

TEST(CollectiveCompiled, LocalGroupWorksWithoutABackend) {
  set_collective_backend(nullptr);
  auto f = [](const Tensor& x) {
    Tensor h = collective_start({x, x * 2}, 0, 1);
    std::vector<Tensor> r = collective_wait(h, {x, x * 2}, 0);
    return r[0] + r[1];
  };
  Tensor x = randn({7});
  auto c = compile(f, {.warmup = 0, .name = "local_collectives"});
  EXPECT_TRUE(allclose(c(x), x * 3, 1e-6, 1e-6));
  EXPECT_TRUE(allclose(c(x), x * 3, 1e-6, 1e-6));
}

}  // namespace
}  // namespace kiln
