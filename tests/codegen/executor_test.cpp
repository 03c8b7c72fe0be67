// The interpreter executor: results, buffer freeing and peak memory, output-ready
// callbacks, random-offset rebasing, symbolic graphs and input checks.
#include "executor/executor.h"

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

// Runs g on `in` with in-place planning on (placements) and off; the results
// must agree. Returns the run with placements and its stats.
std::vector<Tensor> run_placed(const std::shared_ptr<const ir::Graph>& g, std::vector<Tensor> in,
                               RunStats& st) {
  RunArgs a;
  a.inputs = in;
  const auto plain = Executor(g, {.in_place = false}).run(a);
  a.stats = &st;
  auto out = Executor(g).run(a);
  EXPECT_EQ(out.size(), plain.size());
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i].shape(), plain[i].shape()) << "output " << i;
    EXPECT_TRUE(allclose(out[i], plain[i], 1e-5, 1e-6)) << "output " << i;
  }
  return out;
}

// Attention's head merge: the product is written straight in the merged
// layout, so both reshapes of the permuted heads are views of one buffer
// (a symbolic batch checks the layouts follow the run's sizes).
TEST(Executor, MatmulWritesIntoTheReshapeThatMergesHeads) {
  auto g = parse_shared(
      R"(graph(%0: f32[s0, 3, 4, 5] "a", %1: f32[s0, 3, 5, 6] "b", %2: f32[18, 7] "w") syms=1 {
  %3 = matmul(%0, %1) : f32[s0, 3, 4, 6]
  %4 = permute(%3) {dims=[0, 2, 1, 3]} : f32[s0, 4, 3, 6]
  %5 = reshape(%4) {shape=[s0, 4, 18]} : f32[s0, 4, 18]
  %6 = matmul(%5, %2) : f32[s0, 4, 7]
  %7 = reshape(%4) {shape=[4*s0, 18]} : f32[4*s0, 18]
  return %6 "proj", %7 "merged"
})");
  for (int64_t n : {1, 3}) {
    RunStats st;
    auto out = run_placed(g, {randn({n, 3, 4, 5}), randn({n, 3, 5, 6}), randn({18, 7})}, st);
    EXPECT_EQ(st.placed, 1) << n;
    EXPECT_TRUE(out[1].is_contiguous()) << n;
  }
}

// Three products (one written transposed per item) land in their parts of a
// cat; its fourth input, a graph input, is copied in as usual.
TEST(Executor, MatmulsWriteIntoTheirPartsOfACat) {
  auto g = parse_shared(
      R"(graph(%0: f32[2, 3, 4, 5] "a", %1: f32[2, 3, 5, 4] "b", %2: f32[2, 4, 7] "c") {
  %3 = matmul(%0, %1) : f32[2, 3, 4, 4]
  %4 = permute(%3) {dims=[0, 2, 1, 3]} : f32[2, 4, 3, 4]
  %5 = reshape(%4) {shape=[2, 4, 12]} : f32[2, 4, 12]
  %6 = permute(%1) {dims=[0, 1, 3, 2]} : f32[2, 3, 4, 5]
  %7 = permute(%0) {dims=[0, 1, 3, 2]} : f32[2, 3, 5, 4]
  %8 = neg(%7) : f32[2, 3, 5, 4]
  %9 = matmul(%6, %8) : f32[2, 3, 4, 4]
  %10 = permute(%9) {dims=[0, 3, 1, 2]} : f32[2, 4, 3, 4]
  %11 = reshape(%10) {shape=[2, 4, 12]} : f32[2, 4, 12]
  %12 = matmul(%0, %1) : f32[2, 3, 4, 4]
  %13 = permute(%12) {dims=[0, 2, 1, 3]} : f32[2, 4, 3, 4]
  %14 = reshape(%13) {shape=[2, 4, 12]} : f32[2, 4, 12]
  %15 = cat(%5, %2, %11, %14) {dim=2} : f32[2, 4, 43]
  return %15 "cat"
})");
  RunStats st;
  auto out = run_placed(g, {randn({2, 3, 4, 5}), randn({2, 3, 5, 4}), randn({2, 4, 7})}, st);
  EXPECT_EQ(st.placed, 3);
  EXPECT_TRUE(out[0].is_contiguous());
}

// Values a caller receives are never parts of a shared buffer: a product that
// is also a graph output is computed on its own.
TEST(Executor, GraphOutputsAreNotPlaced) {
  auto g = parse_shared(R"(graph(%0: f32[2, 4, 5] "a", %1: f32[2, 5, 3] "b") {
  %2 = matmul(%0, %1) : f32[2, 4, 3]
  %3 = permute(%2) {dims=[1, 0, 2]} : f32[4, 2, 3]
  %4 = reshape(%3) {shape=[4, 6]} : f32[4, 6]
  return %4 "merged", %2 "product"
})");
  RunStats st;
  auto out = run_placed(g, {randn({2, 4, 5}), randn({2, 5, 3})}, st);
  EXPECT_EQ(st.placed, 0);
  EXPECT_TRUE(out[1].is_contiguous());
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

// Every graph an Executor is given is verified first, in every build type: its
// declared shapes and attributes are what the kernels trust.
TEST(Executor, VerifiesTheGraphItIsGiven) {
  auto make = [](const std::string& stmt) {
    Executor(parse_shared("graph(%0: f32[4] \"x\") {\n" + stmt + "\n  return %1 \"y\"\n}\n"));
  };
  testing::expect_error([&] { make("  %1 = exp(%0) : f32[1024]"); },
                        {"[executor] the graph is invalid", "line 2, column 8",
                         "has shape [1024] but the op's rule gives [4]"});
  testing::expect_error([&] { make("  %1 = permute(%0) : f32[4]"); },
                        {"line 2, column 8", "missing attribute 'dims'"});
  testing::expect_error([&] { make("  %1 = sum(%0) {dims=[0], keepdim=1} : f32[]"); },
                        {"line 2, column 8", "attribute 'keepdim' is an integer, expected a bool"});
}

// A graph input declared wrapped (a C++ number, which promotes differently)
// takes only a wrapped number, and an ordinary input only an ordinary tensor.
TEST(Executor, WrappedInputsTakeOnlyWrappedNumbers) {
  auto g = parse_shared(R"(graph(%0: i64[3] "arg0", %1: wrapped f64[] "host0") {
  %2 = mul(%0, %1) : f32[3]
  return %2 "out0"
})");
  Executor ex(g);
  std::vector<Tensor> plain{full({3}, 2, DType::i64), full({}, 0.5, DType::f64)};
  RunArgs a;
  a.inputs = plain;
  testing::expect_error([&] { ex.run(a); }, {"[executor] input 1 (host0) is not a wrapped number",
                                             "declares it wrapped"});
  std::vector<Tensor> good{full({3}, 2, DType::i64), scalar_tensor(0.5)};
  a.inputs = good;
  const Tensor out = ex.run(a)[0];
  EXPECT_EQ(out.dtype(), DType::f32);
  EXPECT_EQ(out.to_vector<float>(), std::vector<float>(3, 1.f));
  std::vector<Tensor> swapped{full({3}, 2, DType::i64), scalar_tensor(0.5)};
  swapped[0].impl()->wrapped_number = true;  // as no public API makes it: a wrapped vector
  a.inputs = swapped;
  testing::expect_error([&] { ex.run(a); }, "input 0 (arg0) is a wrapped number");
}

}  // namespace
}  // namespace kiln
