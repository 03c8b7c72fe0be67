// Tests of the collective ops (runtime/src/ops/collective.cpp): the built-in
// single-process group 0, argument errors, and the calls a backend receives.
#include "kiln/collective.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "kiln/kiln.h"

namespace kiln {
namespace {

// A backend standing in for a 2-rank group whose other rank holds the same
// tensors: sum doubles them, avg leaves them. Records the calls.
class FakeBackend : public CollectiveBackend {
 public:
  int64_t start(int64_t group, int64_t reduce_op, std::span<const Tensor> inputs) override {
    std::lock_guard<std::mutex> lock(mu);
    calls.push_back("start g" + std::to_string(group) + " op" + std::to_string(reduce_op));
    std::vector<Tensor> res;
    for (const Tensor& t : inputs) res.push_back(reduce_op == 0 ? t * 2 : t.clone());
    pending[++next] = std::move(res);
    return next;
  }
  void wait(int64_t key, std::span<Tensor> outputs) override {
    std::lock_guard<std::mutex> lock(mu);
    calls.push_back("wait " + std::to_string(key));
    auto& res = pending.at(key);
    for (size_t i = 0; i < outputs.size(); ++i) outputs[i].copy_(res[i]);
    pending.erase(key);
  }
  std::mutex mu;
  std::vector<std::string> calls;
  std::map<int64_t, std::vector<Tensor>> pending;
  int64_t next = 0;
};

TEST(Collective, LocalGroupReturnsCopiesTakenAtStart) {
  Tensor a = arange(0, 6, 1, DType::f32).reshape({2, 3});
  Tensor b = full({4}, 7, DType::i64);
  Tensor h = collective_start({a, b}, 0, 0);
  EXPECT_EQ(h.dtype(), DType::i64);
  EXPECT_EQ(h.dim(), 0);
  a.add_(100);  // the collective read its inputs at start
  std::vector<Tensor> r = collective_wait(h, {a, b}, 0);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_TRUE(equal(r[0], arange(0, 6, 1, DType::f32).reshape({2, 3})));
  EXPECT_TRUE(equal(r[1], b));
}

TEST(Collective, ErrorsNameTheOpAndValues) {
  Tensor x = ones({3});
  try {
    collective_start({x}, 0, 9);
    FAIL() << "bad reduce_op accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[collective_start] reduce_op 9"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(collective_start({}, 0, 0), Error);
  EXPECT_THROW(collective_start({x}, -1, 0), Error);
  Tensor h = collective_start({x}, 0, 0);
  EXPECT_THROW(collective_wait(h, {ones({4})}, 0), Error);  // shape differs from the start's
  Tensor bogus = full({}, -999999, DType::i64);
  try {
    collective_wait(bogus, {x}, 0);
    FAIL() << "unknown handle accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("handle -999999"), std::string::npos) << e.what();
  }
  EXPECT_THROW(collective_wait(ones({2}), {x}, 0), Error);  // not an i64 scalar
}

TEST(Collective, GroupsAboveZeroNeedABackend) {
  set_collective_backend(nullptr);
  try {
    collective_start({ones({2})}, 3, 0);
    FAIL() << "no backend, yet accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("group 3"), std::string::npos) << e.what();
  }
}

TEST(Collective, BackendReceivesStartsAndWaits) {
  FakeBackend fake;
  set_collective_backend(&fake);
  Tensor x = arange(0, 4, 1, DType::f32);
  Tensor h1 = collective_start({x}, 1, 0);
  Tensor h2 = collective_start({x}, 2, 1);
  std::vector<Tensor> r2 = collective_wait(h2, {x}, 2);
  std::vector<Tensor> r1 = collective_wait(h1, {x}, 1);
  set_collective_backend(nullptr);
  EXPECT_TRUE(equal(r1[0], x * 2));
  EXPECT_TRUE(equal(r2[0], x));
  EXPECT_EQ(fake.calls,
            (std::vector<std::string>{"start g1 op0", "start g2 op1", "wait 2", "wait 1"}));
}

}  // namespace
}  // namespace kiln
