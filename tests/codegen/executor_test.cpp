// The interpreter executor: results, buffer freeing and peak memory, output-ready
// callbacks, random-offset rebasing, symbolic graphs and input checks.
#include "kiln/executor.h"

#include <gtest/gtest.h>

#include "kiln/ir/text.h"
#include "kiln/kiln.h"
#include "runtime/test_util.h"

namespace kiln {
namespace {

std::shared_ptr<const ir::Graph> parse_shared(const std::string& text) {
  return std::shared_ptr<const ir::Graph>(ir::parse(text));
}

// A chain of 8 exps over 1 MiB keeps at most two intermediate buffers alive.
TEST(Executor, FreesEachBufferAfterItsLastUse) {
  std::string text = "graph(%0: f32[262144] \"arg0\") {\n";
  for (int i = 1; i <= 8; ++i) text += str("  %", i, " = exp(%", i - 1, ") : f32[262144]\n");
  text += "  return %8 \"out0\"\n}\n";
  Executor ex(parse_shared(text));
  Tensor x = full({262144}, -30.0);
  RunStats st;
  std::vector<Tensor> in{x};
  RunArgs a;
  a.inputs = in;
  a.stats = &st;
  auto out = ex.run(a);
  EXPECT_EQ(st.nodes_run, 8);
  EXPECT_LE(st.peak_bytes, 2 * 262144 * 4) << "buffers are not freed at their last use";
  EXPECT_GE(st.peak_bytes, 262144 * 4);
  Tensor want = x;
  for (int i = 0; i < 8; ++i) want = exp(want);
  EXPECT_TRUE(equal(out[0], want));
}

// The callback sees each output once, as soon as it exists: out0 before the
// nodes that produce out1 run.
TEST(Executor, OutputReadyCallbacksFireInProductionOrder) {
  auto g = parse_shared(R"(graph(%0: f32[4] "arg0") {
  %1 = neg(%0) : f32[4]
  %2 = exp(%1) : f32[4]
  %3 = tanh(%2) : f32[4]
  return %3 "late", %1 "early", %0 "input"
})");
  Executor ex(g);
  std::vector<size_t> order;
  OutputReadyFn cb = [&](size_t i, const Tensor& t) {
    order.push_back(i);
    EXPECT_TRUE(t.defined());
  };
  std::vector<Tensor> in{ones({4})};
  RunArgs a;
  a.inputs = in;
  a.on_ready = &cb;
  ex.run(a);
  EXPECT_EQ(order, (std::vector<size_t>{2, 1, 0}));
  EXPECT_EQ(ex.producer_of_output(1), 0);
  EXPECT_EQ(ex.producer_of_output(0), 2);
}

// Random nodes draw at the run's (seed, base + relative offset): a different
// base gives different numbers, the same base the same numbers as eager.
TEST(Executor, RandomNodesAreRebased) {
  auto g = parse_shared(R"(graph() rng_advance=8 {
  %0 = rand_uniform() {shape=[8], dtype=f32, seed=0, offset=0} : f32[8]
  return %0 "out0"
})");
  Executor ex(g);
  RunArgs a;
  a.rng_seed = 42;
  a.rng_base = 0;
  Tensor r0 = ex.run(a)[0];
  a.rng_base = 8;
  Tensor r8 = ex.run(a)[0];
  EXPECT_FALSE(equal(r0, r8));
  manual_seed(42);
  Tensor e0 = rand({8});
  Tensor e8 = rand({8});
  EXPECT_TRUE(equal(r0, e0));
  EXPECT_TRUE(equal(r8, e8));
}

// A symbolic graph runs at any size of its symbol, including size-dependent attributes.
TEST(Executor, SymbolicGraphRunsAtEverySize) {
  auto g = parse_shared(R"(graph(%0: f32[s0, 3] "arg0") syms=1 {
  %1 = reshape(%0) {shape=[3*s0]} : f32[3*s0]
  %2 = sum(%1) {dims=[], keepdim=false} : f32[]
  %3 = constant wrapped f64[] 3.0 {value=3*s0}
  %4 = div(%2, %3) : f32[]
  return %4 "mean", %1 "flat"
})");
  Executor ex(g);
  for (int64_t n : {1, 2, 7}) {
    Tensor x = arange(0, 3 * n, 1, DType::f32).reshape({n, 3});
    std::vector<Tensor> in{x};
    RunArgs a;
    a.inputs = in;
    auto out = ex.run(a);
    EXPECT_EQ(out[1].shape(), (Dims{3 * n}));
    EXPECT_FLOAT_EQ(out[0].item<float>(), static_cast<float>(3 * n - 1) / 2.0f) << n;
  }
}

// Inputs that do not match the graph's dtypes or shapes raise kiln::Error naming the input.
TEST(Executor, MismatchedInputsAreErrors) {
  auto g = parse_shared(R"(graph(%0: f32[2] "arg0") {
  %1 = neg(%0) : f32[2]
  return %1 "out0"
})");
  Executor ex(g);
  std::vector<Tensor> wrong{ones({3})};
  RunArgs a;
  a.inputs = wrong;
  testing::expect_error([&] { ex.run(a); }, {"[executor] input 0", "arg0", "[3]", "[2]"});
  std::vector<Tensor> none;
  a.inputs = none;
  testing::expect_error([&] { ex.run(a); }, "takes 1 inputs, got 0");
}

}  // namespace
}  // namespace kiln
