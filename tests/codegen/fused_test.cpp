// Fused kernels end to end: compiled with fusion (LLVM machine code, vectorized
// reductions) against eager on softmax, log_softmax, layer_norm forward and
// backward, GELU, an Adam step and MLP training steps; fused against unfused;
// and the executor's fused schedule: one launch per group, multi-tensor
// launches, in-place reuse of dying buffers, early output callbacks.
#include <gtest/gtest.h>

#include <cstdlib>

#include "compare.h"
#include "executor/executor.h"
#include "kiln/compile.h"
#include "kiln/ir/text.h"
#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"

namespace kiln {
namespace {

constexpr double kTol = 2e-5;  // f32: vector math within 4 ulp, reassociated sums

void expect_close(const Tensor& eager, const Tensor& compiled, const std::string& what,
                  double tol = kTol) {
  EXPECT_EQ(testing::diff_values(eager, compiled, tol), "") << what;
}

std::shared_ptr<const ir::Graph> parse_shared(const std::string& text) {
  return std::shared_ptr<const ir::Graph>(ir::parse(text));
}

// softmax and log_softmax over the last dim are one kernel each, forward and
// through a compiled differentiable forward's backward.
TEST(Fused, SoftmaxAndLogSoftmaxMatchEager) {
  manual_seed(1);
  for (bool log : {false, true}) {
    auto fn = [log](const Tensor& x) { return log ? log_softmax(x, -1) : softmax(x, -1); };
    auto f = compile(fn, {.warmup = 0});
    for (const Dims& shape : {Dims{64, 100}, Dims{3, 5, 17}, Dims{7, 1}}) {
      Tensor x = randn(shape) * 4.0;
      expect_close(fn(x), f(x), str(log ? "log_softmax " : "softmax ", shape));
      Tensor xe = x.detach().requires_grad_(), xc = x.detach().requires_grad_();
      Tensor w = randn(shape);
      sum(fn(xe) * w).backward();
      sum(f(xc) * w).backward();
      expect_close(xe.grad(), xc.grad(), str("gradient, ", shape));
    }
    EXPECT_EQ(f.stats().fused_kernels, 2) << "forward kernel + backward kernel";
  }
}

// The forward-only compiled softmax is exactly one kernel launch.
TEST(Fused, SoftmaxIsOneLaunch) {
  NoGradGuard ng;
  auto f = compile([](const Tensor& x) { return softmax(x, -1); }, {.warmup = 0});
  Tensor x = randn({32, 48});
  expect_close(softmax(x, -1), f(x), "softmax");
  EXPECT_EQ(f.stats().fused_kernels, 1);
  EXPECT_EQ(f.stats().last_kernel_launches, 1);
}

// layer_norm forward and backward (inside the compiled step) match eager; the
// row-wise part of the backward fuses with the forward.
TEST(Fused, LayerNormForwardAndBackwardMatchEager) {
  manual_seed(2);
  Tensor w0 = randn({40}), b0 = randn({40});
  Tensor we = w0.clone().requires_grad_(), be = b0.clone().requires_grad_();
  Tensor wc = w0.clone().requires_grad_(), bc = b0.clone().requires_grad_();
  auto step = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    Tensor y = layer_norm(x, {40}, w, b, 1e-5);
    Tensor loss = sum(y * y * 0.5 + y);
    loss.backward();
    return y.detach();
  };
  auto f = compile([&](const Tensor& x) { return step(x, wc, bc); }, {.warmup = 0});
  for (int call = 0; call < 3; ++call) {
    Tensor x = randn({24, 40}) * 3.0 + 1.0;
    Tensor xe = x.detach().requires_grad_(), xc = x.detach().requires_grad_();
    for (Tensor* t : {&we, &be, &wc, &bc}) t->set_grad(Tensor());
    Tensor ye = step(xe, we, be);
    Tensor yc = f(xc);
    expect_close(ye, yc, str("y, call ", call));
    expect_close(xe.grad(), xc.grad(), str("x.grad, call ", call), 1e-4);
    expect_close(we.grad(), wc.grad(), str("w.grad, call ", call), 1e-4);
    expect_close(be.grad(), bc.grad(), str("b.grad, call ", call), 1e-4);
  }
  EXPECT_LE(f.stats().fused_kernels, 4) << f.graph_text();
}

// GELU (erf and tanh forms) is one pointwise kernel.
TEST(Fused, GeluMatchesEager) {
  NoGradGuard ng;
  for (const char* approx : {"none", "tanh"}) {
    auto fn = [approx](const Tensor& x) { return gelu(x, approx); };
    auto f = compile(fn, {.warmup = 0});
    Tensor x = randn({1000}) * 3.0;
    expect_close(fn(x), f(x), approx);
    EXPECT_EQ(f.stats().fused_kernels, 1);
  }
}

std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed) {
  manual_seed(seed);
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Linear>(20, 32));
  m->push_back(std::make_shared<nn::GELU>());
  m->push_back(std::make_shared<nn::Linear>(32, 32));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::Linear>(32, 10));
  return m;
}

// An Adam step over all parameters is one multi-tensor launch (its updates all
// lower to one kernel), and matches eager.
TEST(Fused, AdamStepIsOneMultiTensorLaunch) {
  auto me = make_mlp(3), mc = make_mlp(3);
  optim::Adam oe(me->parameters(), optim::AdamOptions{.lr = 1e-2});
  optim::Adam oc(mc->parameters(), optim::AdamOptions{.lr = 1e-2});
  auto pe = me->parameters(), pc = mc->parameters();
  auto f = compile([&] { oc.step(); }, {.warmup = 1});
  for (int s = 0; s < 4; ++s) {
    for (size_t i = 0; i < pe.size(); ++i) {
      Tensor g = randn(pe[i].shape());
      pe[i].set_grad(g.clone());
      pc[i].set_grad(g.clone());
    }
    oe.step();
    f();
  }
  for (size_t i = 0; i < pe.size(); ++i) expect_close(pe[i], pc[i], str("parameter ", i));
  EXPECT_EQ(f.stats().compiled_calls, 3);
  EXPECT_GE(f.stats().fused_kernels, static_cast<int>(pe.size()));
  EXPECT_LT(f.stats().last_kernel_launches, static_cast<int64_t>(pe.size()));
  EXPECT_EQ(f.stats().last_kernel_launches, 1);
}

// Cross-entropy's gradient: the one-hot that its gather's backward scatters is
// a select inside the loss gradient's kernel (passes/scatter_to_where), with
// ignored labels too; the gradients equal eager's, and a label out of range is
// still a clear error (the gather's, as in eager).
TEST(Fused, CrossEntropyGradientWithoutAScatter) {
  manual_seed(5);
  Tensor w = randn({12, 10}).requires_grad_();
  auto fn = [&](const Tensor& x, const Tensor& y) {
    Tensor loss = cross_entropy(matmul(x, w), y, {.ignore_index = 3});
    std::vector<Tensor> g = kiln::grad({loss}, {w});
    return std::make_tuple(loss.detach(), g[0]);
  };
  auto f = compile(fn);
  for (int call = 0; call < 3; ++call) {
    Tensor x = randn({16, 12}), y = randint(0, 10, {16});
    auto [lc, gc] = f(x, y);
    auto [le, ge] = fn(x, y);
    expect_close(le, lc, str("loss, call ", call));
    expect_close(ge, gc, str("gradient, call ", call));
  }
  const std::string text = f.graph_text();
  EXPECT_EQ(text.find("scatter_add"), std::string::npos) << text;
  EXPECT_NE(text.find("where"), std::string::npos) << text;
  const Tensor y = randint(0, 10, {16}).masked_fill(arange(16) == 5, 10);
  try {
    (void)f(randn({16, 12}), y);
    ADD_FAILURE() << "a label of 10 for 10 classes ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of bounds"), std::string::npos) << e.what();
  }
}

// Trains an MLP for 10 steps eagerly, compiled with fusion and compiled without;
// all three agree.
TEST(Fused, MlpTrainingStepMatchesEagerAndUnfused) {
  auto me = make_mlp(5), mf = make_mlp(5), mu = make_mlp(5);
  optim::Adam oe(me->parameters(), optim::AdamOptions{.lr = 1e-2});
  optim::Adam of(mf->parameters(), optim::AdamOptions{.lr = 1e-2});
  optim::Adam ou(mu->parameters(), optim::AdamOptions{.lr = 1e-2});
  auto step = [](nn::Module& m, optim::Optimizer& opt, const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = cross_entropy(m.forward(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  auto fused = compile([&](const Tensor& x, const Tensor& y) { return step(*mf, of, x, y); });
  auto unfused = compile([&](const Tensor& x, const Tensor& y) { return step(*mu, ou, x, y); },
                         {.fuse = false});
  manual_seed(9);
  for (int s = 0; s < 10; ++s) {
    Tensor x = randn({16, 20});
    Tensor y = randint(0, 10, {16});
    const double le = step(*me, oe, x, y).item<double>();
    const double lf = fused(x, y).item<double>();
    const double lu = unfused(x, y).item<double>();
    EXPECT_NEAR(le, lf, 1e-4 * (1 + std::abs(le))) << "step " << s;
    EXPECT_NEAR(le, lu, 1e-5 * (1 + std::abs(le))) << "step " << s;
  }
  auto pe = me->parameters(), pf = mf->parameters();
  for (size_t i = 0; i < pe.size(); ++i) expect_close(pe[i], pf[i], str("parameter ", i), 1e-4);
  EXPECT_GT(fused.stats().fused_kernels, 0);
  EXPECT_EQ(unfused.stats().fused_kernels, 0);
  // Forward epilogues, cross-entropy, backward and the Adam step: far fewer
  // launches than the graph has nodes.
  EXPECT_LT(fused.stats().last_kernel_launches * 4,
            static_cast<int64_t>(fused.stats().graph_nodes));
}

// A transformer encoder block, forward and backward, compiled: loss and every
// gradient agree with eager. Its four head merges (the attention output, and
// the q/k/v gradients concatenated for the input projection) are written by
// their matmuls straight into the merged buffers.
TEST(Fused, TransformerBlockMatchesEagerWithPlacedHeadMerges) {
  auto make = [] {
    manual_seed(4);
    return std::make_shared<nn::TransformerEncoderLayer>(
        16, 4, nn::TransformerEncoderLayerOptions{.dim_feedforward = 32, .dropout = 0.0});
  };
  auto le = make(), lc = make();
  auto step = [](nn::TransformerEncoderLayer& l, const Tensor& x) {
    l.zero_grad();
    Tensor loss = mean(square(l.forward(x)));
    loss.backward();
    return loss;
  };
  auto compiled = compile([&](const Tensor& x) { return step(*lc, x); });
  manual_seed(5);
  for (int s = 0; s < 3; ++s) {
    Tensor x = randn({3, 8, 16});
    const double e = step(*le, x).item<double>();
    const double c = compiled(x).item<double>();
    EXPECT_NEAR(e, c, 1e-5 * (1 + std::abs(e))) << "step " << s;
    auto pe = le->parameters(), pc = lc->parameters();
    for (size_t i = 0; i < pe.size(); ++i)
      expect_close(pe[i].grad(), pc[i].grad(), str("step ", s, " gradient ", i), 1e-4);
  }
  EXPECT_EQ(compiled.stats().last_placed, 4);
}

// KILN_DISABLE_PASSES=fuse turns fusion off; KILN_CHECK_COMPILED still agrees with fusion on.
TEST(Fused, DisableAndCheckCompiled) {
  auto fn = [](const Tensor& x) { return tanh(x) * 2.0 + softmax(x, -1); };
  setenv("KILN_DISABLE_PASSES", "fuse", 1);
  auto off = compile(fn, {.warmup = 0});
  off(randn({4, 8}));
  unsetenv("KILN_DISABLE_PASSES");
  EXPECT_EQ(off.stats().fused_kernels, 0);
  setenv("KILN_CHECK_COMPILED", "1", 1);
  auto on = compile(fn, {.warmup = 0});
  for (int i = 0; i < 3; ++i) on(randn({4, 8}));
  unsetenv("KILN_CHECK_COMPILED");
  EXPECT_GT(on.stats().fused_kernels, 0);
  EXPECT_EQ(on.stats().check_mismatches, 0) << on.stats().last_check_report;
}

// A dynamic batch dim: the symbolic plan's kernels take every batch size.
TEST(Fused, DynamicBatchReusesKernels) {
  NoGradGuard ng;
  Tensor w = randn({12});
  auto fn = [&](const Tensor& x) { return layer_norm(x, {12}, w, {}, 1e-5) + softmax(x, -1); };
  auto f = compile(fn, {.dynamic = {{0, 0}}, .warmup = 0});
  for (int64_t b : {4, 9, 1, 33}) {
    Tensor x = randn({b, 12});
    expect_close(fn(x), f(x), str("batch ", b));
  }
  EXPECT_EQ(f.stats().generalized, 1);
  EXPECT_EQ(f.stats().traces, 2);
}

// amax over a dynamic dim that is 0 at run time raises eager's error from the fused kernel.
TEST(Fused, EmptyDynamicMaxIsAnError) {
  NoGradGuard ng;
  auto f = compile([](const Tensor& x) { return amax(x, {1}, false) + 1.0; },
                   {.dynamic = {{0, 1}}, .warmup = 0});
  f(randn({3, 4}));
  f(randn({3, 6}));
  ASSERT_EQ(f.stats().generalized, 1);
  try {
    f(randn({3, 0}));
    ADD_FAILURE() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[amax] cannot reduce over a zero-size dimension"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(f.stats().traces, 2);
}

// Strided (transposed) and broadcast inputs of a kernel are read correctly.
TEST(Fused, StridedInputsAreMadeContiguous) {
  NoGradGuard ng;
  auto fn = [](const Tensor& a, const Tensor& b) { return exp(a) * b + 1.0; };
  auto f = compile(fn, {.warmup = 0});
  Tensor a = randn({6, 5}).transpose(0, 1);
  Tensor b = randn({6});
  expect_close(fn(a, b), f(a, b), "transposed");
}

// ---------------- executor ----------------

const char* kEpilogue = R"(graph(%0: f32[64, 32] "x", %1: f32[32, 48] "w", %2: f32[48] "b") {
  %3 = matmul(%0, %1) : f32[64, 48]
  %4 = add(%3, %2) : f32[64, 48]
  %5 = relu(%4) : f32[64, 48]
  %6 = neg(%5) : f32[64, 48]
  return %6 "out0"
})";

RunStats run_graph(const Executor& ex, std::span<const Tensor> in, std::vector<Tensor>* out) {
  RunStats st;
  RunArgs a;
  a.inputs = in;
  a.stats = &st;
  *out = ex.run(a);
  return st;
}

// A matmul epilogue writes its result over the dying matmul output: in place,
// a lower peak, and the same values as unfused.
TEST(FusedExecutor, EpilogueRunsInPlace) {
  auto g = parse_shared(kEpilogue);
  std::vector<Tensor> in{randn({64, 32}), randn({32, 48}), randn({48})};
  std::vector<Tensor> ref, fused, copied;
  const RunStats s0 = run_graph(Executor(g), in, &ref);
  const RunStats s1 = run_graph(Executor(g, {.fuse = true}), in, &fused);
  const RunStats s2 = run_graph(Executor(g, {.fuse = true, .in_place = false}), in, &copied);
  expect_close(ref[0], fused[0], "in place");
  expect_close(ref[0], copied[0], "copied");
  EXPECT_EQ(s1.kernels_run, 1);
  EXPECT_EQ(s1.in_place, 1);
  EXPECT_EQ(s2.in_place, 0);
  EXPECT_LT(s1.peak_bytes, s2.peak_bytes);
  EXPECT_LE(s1.peak_bytes, s0.peak_bytes);
}

// Column sums run inside their producer's kernel (fuse.cpp rule 9): a bias
// gradient summed over a symbolic batch and a second dim, f32 and f64, from a
// pointwise chain and from a row kernel (a softmax then summed over the batch,
// whose exp the row kernel keeps in scratch storage: not in the partials).
// Results match the unfused executor at every size and do not depend on the
// thread count.
TEST(FusedExecutor, ColumnSumsRunInTheirProducersKernel) {
  auto g = parse_shared(R"(graph(%0: f32[s0, 3, 40] "x", %1: f64[s0, 24] "d") syms=1 {
  %2 = tanh(%0) : f32[s0, 3, 40]
  %3 = mul(%2, %2) : f32[s0, 3, 40]
  %4 = sum(%3) {dims=[0, 1], keepdim=false} : f32[40]
  %5 = sum(%2) {dims=[0], keepdim=true} : f32[1, 3, 40]
  %6 = exp(%1) : f64[s0, 24]
  %7 = sum(%6) {dims=[1], keepdim=true} : f64[s0, 1]
  %8 = div(%6, %7) : f64[s0, 24]
  %9 = sum(%8) {dims=[0], keepdim=false} : f64[24]
  return %4 "sq", %5 "keep", %9 "soft", %3 "also_stored"
})");
  const Executor fused(g, {.fuse = true}), plain(g);
  const std::string text = fused.kernels_text();
  size_t accumulates = 0;
  for (size_t at = text.find("accumulate"); at != std::string::npos;
       at = text.find("accumulate", at + 1))
    ++accumulates;
  // %5 keeps two dims of the pointwise space as columns: it stays unfused.
  EXPECT_EQ(accumulates, 2u) << text;
  for (int64_t n : {0, 1, 5, 700}) {
    std::vector<Tensor> in{randn({n, 3, 40}), randn({n, 24}, DType::f64)};
    std::vector<Tensor> want, got, one;
    run_graph(plain, in, &want);
    run_graph(fused, in, &got);
    set_num_threads(1);
    run_graph(fused, in, &one);
    set_num_threads(2);
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].shape(), want[i].shape());
      expect_close(want[i], got[i], str("output ", i, " at batch ", n), 1e-5);
      EXPECT_TRUE(equal(got[i], one[i])) << "output " << i << " depends on the threads";
    }
  }
}

// Independent instances of one kernel (here four exp+mul updates of different
// sizes) launch once; the results are those of separate launches.
TEST(FusedExecutor, IdenticalKernelsLaunchTogether) {
  std::string text = "graph(";
  for (int i = 0; i < 4; ++i)
    text += str(i ? ", " : "", "%", i, ": f32[", 100 * (i + 1), "] \"a", i, "\"");
  text += ") {\n";
  for (int i = 0; i < 4; ++i) {
    text += str("  %e", i, " = exp(%", i, ") : f32[", 100 * (i + 1), "]\n");
    text += str("  %m", i, " = mul(%e", i, ", %", i, ") : f32[", 100 * (i + 1), "]\n");
  }
  text += "  return %m0 \"o0\", %m1 \"o1\", %m2 \"o2\", %m3 \"o3\"\n}\n";
  auto g = parse_shared(text);
  std::vector<Tensor> in;
  for (int i = 0; i < 4; ++i) in.push_back(randn({100 * (i + 1)}));
  std::vector<Tensor> one, many;
  const RunStats s1 = run_graph(Executor(g, {.fuse = true}), in, &one);
  const RunStats s2 = run_graph(Executor(g, {.fuse = true, .horizontal = false}), in, &many);
  EXPECT_EQ(s1.kernels_run, 4);
  EXPECT_EQ(s1.kernel_launches, 1);
  EXPECT_EQ(s2.kernel_launches, 4);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(equal(one[i], many[i])) << "output " << i;
    expect_close(exp(in[i]) * in[i], one[i], str("output ", i));
  }
}

// Updates that become ready at different times (after their own matmul) but
// only write graph outputs wait for each other and launch once.
TEST(FusedExecutor, SinkUpdatesWaitAndLaunchOnce) {
  auto g = parse_shared(R"(graph(%0: f32[8, 8] "x", %1: f32[8, 8] "cap0", %2: f32[8, 4] "cap1") {
  %3 = matmul(%0, %1) : f32[8, 8]
  %4 = mul(%3, %1) : f32[8, 8]
  %5 = sub(%1, %4) : f32[8, 8]
  %6 = matmul(%3, %2) : f32[8, 4]
  %7 = mul(%6, %2) : f32[8, 4]
  %8 = sub(%2, %7) : f32[8, 4]
  return %5 "write:cap0", %8 "write:cap1", %6 "out0"
})");
  std::vector<Tensor> in{randn({8, 8}), randn({8, 8}), randn({8, 4})};
  std::vector<Tensor> batched, separate;
  const RunStats s1 = run_graph(Executor(g, {.fuse = true}), in, &batched);
  const RunStats s2 = run_graph(Executor(g, {.fuse = true, .horizontal = false}), in, &separate);
  EXPECT_EQ(s1.kernels_run, 2);
  EXPECT_EQ(s1.kernel_launches, 1);
  EXPECT_EQ(s2.kernel_launches, 2);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(equal(batched[i], separate[i])) << "output " << i;
}

// An output made by a kernel fires its callback right after that kernel, before
// the later steps run.
TEST(FusedExecutor, KernelOutputsFireEarly) {
  auto g = parse_shared(R"(graph(%0: f32[8, 8] "x", %1: f32[8, 8] "w") {
  %2 = exp(%0) : f32[8, 8]
  %3 = neg(%2) : f32[8, 8]
  %4 = matmul(%3, %1) : f32[8, 8]
  %5 = matmul(%4, %1) : f32[8, 8]
  %6 = tanh(%5) : f32[8, 8]
  return %6 "late", %3 "early"
})");
  Executor ex(g, {.fuse = true});
  EXPECT_EQ(ex.num_kernels(), 2u);
  std::vector<size_t> order;
  OutputReadyFn cb = [&](size_t i, const Tensor& t) {
    order.push_back(i);
    EXPECT_TRUE(t.defined());
  };
  std::vector<Tensor> in{randn({8, 8}), randn({8, 8})};
  RunArgs a;
  a.inputs = in;
  a.on_ready = &cb;
  ex.run(a);
  EXPECT_EQ(order, (std::vector<size_t>{1, 0}));
}

// Runs g fused with `dests` (one per output) and returns the outputs.
std::vector<Tensor> run_with_dests(const std::shared_ptr<const ir::Graph>& g,
                                   std::span<const Tensor> in, std::span<const Tensor> dests,
                                   RunStats* st) {
  RunArgs a;
  a.inputs = in;
  a.dests = dests;
  a.stats = st;
  return Executor(g, {.fuse = true}).run(a);
}

// State a pointwise update rewrites (an SGD-momentum step: buf = 0.9 buf + g,
// w = w - 0.1 buf) is written straight into its destination, which is also the
// input the kernel reads last: no new buffer, same values.
TEST(FusedExecutor, StateUpdatesWriteIntoTheirDestinations) {
  auto g = parse_shared(R"(graph(%0: f32[64] "w", %1: f32[64] "buf", %2: f32[64] "g") {
  %3 = constant wrapped f64[] 0.9
  %4 = mul(%1, %3) : f32[64]
  %5 = add(%4, %2) : f32[64]
  %6 = constant wrapped f64[] 0.1
  %7 = mul(%5, %6) : f32[64]
  %8 = sub(%0, %7) : f32[64]
  return %8 "write:w", %5 "write:buf"
})");
  Tensor w = randn({64}), buf = randn({64}), gr = randn({64});
  const Tensor want_buf = buf * 0.9 + gr, want_w = w - want_buf * 0.1;
  const void* wp = w.data_ptr();
  const void* bp = buf.data_ptr();
  std::vector<Tensor> in{w, buf, gr}, dests{w, buf};
  RunStats st;
  std::vector<Tensor> out = run_with_dests(g, in, dests, &st);
  EXPECT_EQ(st.in_place, 2);
  EXPECT_EQ(out[0].data_ptr(), wp);
  EXPECT_EQ(out[1].data_ptr(), bp);
  expect_close(want_w, w, "w updated in place");
  expect_close(want_buf, buf, "buf updated in place");
}

// A destination whose old value is still needed is not overwritten: read by a
// later step, returned as another output, aliased by an unfused view that is
// returned too, or shared with another input.
TEST(FusedExecutor, DestinationsStillNeededAreNotOverwritten) {
  const char* later_read = R"(graph(%0: f32[16, 16] "w", %1: f32[16, 16] "x") {
  %2 = neg(%0) : f32[16, 16]
  %3 = matmul(%1, %0) : f32[16, 16]
  return %2 "write:w", %3 "out0"
})";
  const char* also_output = R"(graph(%0: f32[16, 16] "w", %1: f32[16, 16] "x") {
  %2 = neg(%0) : f32[16, 16]
  return %2 "write:w", %0 "out0"
})";
  const char* viewed = R"(graph(%0: f32[16, 16] "w", %1: f32[16, 16] "x") {
  %2 = permute(%0) {dims=[1, 0]} : f32[16, 16]
  %3 = neg(%0) : f32[16, 16]
  return %3 "write:w", %2 "out0"
})";
  for (const char* text : {later_read, also_output, viewed}) {
    auto g = parse_shared(text);
    Tensor w = randn({16, 16}), x = randn({16, 16});
    const Tensor w0 = w.clone();
    std::vector<Tensor> in{w, x}, dests{w, Tensor()};
    RunStats st;
    std::vector<Tensor> out = run_with_dests(g, in, dests, &st);
    EXPECT_EQ(st.in_place, 0) << text;
    EXPECT_TRUE(equal(w, w0)) << "the destination is written after the run, not during it";
    expect_close(neg(w0), out[0], text);
  }
  // Two inputs sharing the destination's storage.
  auto g = parse_shared(R"(graph(%0: f32[16] "w", %1: f32[16] "alias") {
  %2 = neg(%0) : f32[16]
  %3 = exp(%1) : f32[16]
  return %2 "write:w", %3 "out0"
})");
  Tensor w = randn({16});
  const Tensor w0 = w.clone();
  std::vector<Tensor> in{w, w.reshape({16})}, dests{w, Tensor()};
  RunStats st;
  std::vector<Tensor> out = run_with_dests(g, in, dests, &st);
  EXPECT_EQ(st.in_place, 0);
  expect_close(exp(w0), out[1], "alias read its old value");
}

// A view of the destination is harmless once its last reader has run (a
// Linear weight read as w^T by the forward matmul, then updated): the update
// writes in place. A view read after the update (through a view of a view
// here) keeps its old value: no write in place.
TEST(FusedExecutor, DestinationsViewedOnlyEarlierAreWrittenInPlace) {
  auto g = parse_shared(R"(graph(%0: f32[16, 16] "w", %1: f32[16, 16] "x") {
  %2 = permute(%0) {dims=[1, 0]} : f32[16, 16]
  %3 = matmul(%1, %2) : f32[16, 16]
  %4 = sub(%0, %3) : f32[16, 16]
  return %4 "write:w", %3 "out0"
})");
  Tensor w = randn({16, 16}), x = randn({16, 16});
  const Tensor w0 = w.clone();
  const void* wp = w.data_ptr();
  std::vector<Tensor> in{w, x}, dests{w, Tensor()};
  RunStats st;
  std::vector<Tensor> out = run_with_dests(g, in, dests, &st);
  EXPECT_EQ(st.in_place, 1);
  EXPECT_EQ(out[0].data_ptr(), wp);
  expect_close(matmul(x, w0.t()), out[1], "matmul read the old w");
  expect_close(w0 - matmul(x, w0.t()), w, "w updated in place");

  auto late = parse_shared(R"(graph(%0: f32[16, 16] "w", %1: f32[16, 16] "x") {
  %2 = permute(%0) {dims=[1, 0]} : f32[16, 16]
  %3 = reshape(%2) {shape=[16, 16]} : f32[16, 16]
  %4 = neg(%0) : f32[16, 16]
  %5 = matmul(%4, %3) : f32[16, 16]
  return %4 "write:w", %5 "out0"
})");
  Tensor w2 = randn({16, 16});
  const Tensor w20 = w2.clone();
  std::vector<Tensor> in2{w2, x}, dests2{w2, Tensor()};
  RunStats st2;
  out = run_with_dests(late, in2, dests2, &st2);
  EXPECT_EQ(st2.in_place, 0);
  expect_close(matmul(neg(w20), w20.t()), out[1], "the view read the old w");
}

// An output whose destination no input shares (a .grad the graph does not
// read) is computed straight into it, by a BLAS node or a fused kernel; a
// destination shared with an input or overlapping another is left alone.
TEST(FusedExecutor, FreeDestinationsReceiveTheirOutputs) {
  auto g = parse_shared(R"(graph(%0: f32[8, 6] "x", %1: f32[6, 4] "w") {
  %2 = matmul(%0, %1) : f32[8, 4]
  %3 = exp(%0) : f32[8, 6]
  %4 = neg(%3) : f32[8, 6]
  return %2 "grad:a" gradient, %4 "grad:b" gradient
})");
  Tensor x = randn({8, 6}), w = randn({6, 4});
  std::vector<Tensor> in{x, w};
  {
    Tensor da = empty({8, 4}), db = empty({8, 6});
    std::vector<Tensor> dests{da, db};
    RunStats st;
    std::vector<Tensor> out = run_with_dests(g, in, dests, &st);
    EXPECT_EQ(st.in_place, 2);
    EXPECT_EQ(out[0].data_ptr(), da.data_ptr());
    EXPECT_EQ(out[1].data_ptr(), db.data_ptr());
    expect_close(matmul(x, w), da, "matmul into its destination");
    expect_close(neg(exp(x)), db, "kernel into its destination");
  }
  {
    // Two views of one buffer: disjoint ones are used, overlapping ones not.
    Tensor buf = empty({32 + 48});
    Tensor da = buf.slice(0, 0, 32).reshape({8, 4}), db = buf.slice(0, 32, 80).reshape({8, 6});
    std::vector<Tensor> dests{da, db};
    RunStats st;
    run_with_dests(g, in, dests, &st);
    EXPECT_EQ(st.in_place, 2);
    expect_close(matmul(x, w), da, "disjoint view a");
    expect_close(neg(exp(x)), db, "disjoint view b");
    Tensor ob = buf.slice(0, 16, 64).reshape({8, 6});
    std::vector<Tensor> overlapping{da, ob};
    run_with_dests(g, in, overlapping, &st);
    EXPECT_EQ(st.in_place, 0);
  }
  {
    Tensor shared = x.reshape({8, 6});  // shares x's storage
    Tensor da = empty({8, 4});
    std::vector<Tensor> dests{da, shared};
    RunStats st;
    std::vector<Tensor> out = run_with_dests(g, in, dests, &st);
    EXPECT_EQ(st.in_place, 1);
    EXPECT_NE(out[1].data_ptr(), shared.data_ptr());
    expect_close(neg(exp(x)), out[1], "not written over its own input");
  }
}

// Through compile: gradients land in the existing .grad tensors (their
// storage is kept from step to step), with eager's values.
TEST(Fused, GradientsAreComputedIntoExistingGrads) {
  auto make = [] {
    manual_seed(6);
    return std::make_shared<nn::Linear>(10, 7);
  };
  auto me = make(), mc = make();
  Tensor x = randn({5, 10});
  auto step = [&x](nn::Linear& m) {
    m.zero_grad();
    Tensor loss = sum(square(m.forward(x)));
    loss.backward();
    return loss;
  };
  auto f = compile([&] { return step(*mc); });
  f();  // warm-up (eager) call: creates the .grad tensors
  f();  // traced
  std::vector<const void*> ptrs;
  for (const Tensor& p : mc->parameters()) ptrs.push_back(p.grad().data_ptr());
  for (int i = 0; i < 3; ++i) {
    step(*me);
    f();
  }
  EXPECT_GE(f.stats().last_in_place, 1);
  for (size_t i = 0; i < ptrs.size(); ++i) {
    EXPECT_EQ(mc->parameters()[i].grad().data_ptr(), ptrs[i]) << "parameter " << i;
    expect_close(me->parameters()[i].grad(), mc->parameters()[i].grad(), str("grad ", i));
  }
}

// A step that zeroes the .grad tensors in place (zero_(), not set to none) and
// then runs backward traces and runs: backward accumulated into the same .grad
// tensors, so only the accumulation (not a changed .grad) says it ran; the
// compiled region must not trace a second backward of its returned loss.
TEST(Fused, InPlaceZeroedGradsThenBackward) {
  auto make = [] {
    manual_seed(7);
    return std::make_shared<nn::Linear>(6, 3);
  };
  auto me = make(), mc = make();
  Tensor x = randn({4, 6});
  auto step = [&x](nn::Linear& m) {
    for (Tensor p : m.parameters())
      if (p.grad().defined()) p.grad().zero_();
    Tensor loss = sum(square(m.forward(x)));
    loss.backward();
    return loss;
  };
  auto f = compile([&] { return step(*mc); });
  for (int i = 0; i < 3; ++i) {
    const double le = step(*me).item<double>();
    const double lc = f().item<double>();
    EXPECT_NEAR(le, lc, 1e-4 * (1 + std::abs(le))) << "call " << i;
  }
  EXPECT_EQ(f.stats().traces, 1);
  for (size_t i = 0; i < 2; ++i)
    expect_close(me->parameters()[i].grad(), mc->parameters()[i].grad(), str("grad ", i));
}

// Through compile: an SGD-momentum training step updates the parameters and
// momentum buffers in their own storage, with eager's values.
TEST(Fused, OptimizerStepUpdatesParametersInPlace) {
  auto make = [] {
    manual_seed(5);
    auto m = std::make_shared<nn::Linear>(12, 6);
    auto o = std::make_shared<optim::SGD>(m->parameters(),
                                          optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    return std::make_pair(m, o);
  };
  auto [me, oe] = make();
  auto [mc, oc] = make();
  Tensor x = randn({8, 12});
  auto step = [&x](nn::Linear& m, optim::SGD& o) {
    o.zero_grad();
    Tensor loss = sum(square(m.forward(x)));
    loss.backward();
    o.step();
    return loss;
  };
  // The default warmup call runs eagerly and creates the momentum buffers.
  auto f = compile([&] { return step(*mc, *oc); });
  std::vector<const void*> ptrs;
  for (const Tensor& p : mc->parameters()) ptrs.push_back(p.data_ptr());
  for (int i = 0; i < 3; ++i) {
    step(*me, *oe);
    f();
  }
  EXPECT_GE(f.stats().last_in_place, 4) << "2 parameters + 2 momentum buffers";
  for (size_t i = 0; i < ptrs.size(); ++i) {
    EXPECT_EQ(mc->parameters()[i].data_ptr(), ptrs[i]);
    expect_close(me->parameters()[i], mc->parameters()[i], str("parameter ", i));
  }
}

}  // namespace
}  // namespace kiln
