// CUDA graphs: the driver table's capture entry points (recorded and replayed
// in order on the emulated device, capture-time errors), and compiled plans
// replayed from a graph captured on their second run (same bits as the plain
// path, new input data seen, shape changes re-planned, what cannot be
// captured left plain with its reason). On a GPU when present, else on the
// emulated device.
#include <cmath>
#include <cstdlib>
#include <optional>

#include "codegen/cuda/cuda_test_util.h"
#include "kernels/cuda/driver.h"
#include "kernels/cuda/stream.h"
#include "kiln/compile.h"
#include "kiln/cuda.h"
#include "kiln/env.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"

namespace kiln {
namespace {

class CudaGraphs : public testing::CudaTest<3> {
 protected:
  void SetUp() override {
    testing::CudaTest<3>::SetUp();
    if (env::get_flag("KILN_CUDA_SYNC", false))
      GTEST_SKIP() << "KILN_CUDA_SYNC=1 synchronizes after every launch: nothing is captured";
  }
  void TearDown() override { unsetenv("KILN_CUDA_GRAPHS"); }
};

CUstream handle(const cuda::Stream& s) {
  return static_cast<CUstream>(s.handle());
}

std::vector<float> values(const Tensor& t) {
  return t.cpu().to_vector<float>();
}

// Launches and copies queued on a capturing stream run only when the graph
// is launched, each launch reading the memory as it is then.
TEST_F(CudaGraphs, CapturedWorkRunsAtEachLaunch) {
  const cuda::Driver& d = cuda::driver();
  cuda::Stream s(0);
  Tensor x = from_vector<float>({1, 2, 3, 4}, {4}).cuda();
  Tensor y = zeros({4}, DType::f32, Device::cuda());
  {
    // Warm-up on the capturing stream (as CUDA's capture guide asks): in-place
    // ops compute into a temporary, which must then come from this stream's
    // cached blocks, since an allocation during a capture is an error. Without
    // it the test depended on what earlier tests left in the allocator.
    cuda::StreamGuard on(s);
    y.add_(x);
    y.mul_(y);
    y.zero_();
  }
  cuda::synchronize();
  {
    cuda::StreamGuard on(s);
    ASSERT_EQ(d.cuStreamBeginCapture(handle(s), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
    CUstreamCaptureStatus status{};
    ASSERT_EQ(d.cuStreamIsCapturing(handle(s), &status), CUDA_SUCCESS);
    EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    y.copy_(x);  // no host data (a scalar operand would be an upload): device work only
    y.add_(x);
    y.mul_(y);
  }
  CUgraph graph = nullptr;
  ASSERT_EQ(d.cuStreamEndCapture(handle(s), &graph), CUDA_SUCCESS);
  EXPECT_EQ(values(y), std::vector<float>({0, 0, 0, 0}));  // nothing ran yet
  CUgraphExec exec = nullptr;
  ASSERT_EQ(d.cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.cuGraphDestroy(graph), CUDA_SUCCESS);
  ASSERT_EQ(d.cuGraphLaunch(exec, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(values(y), std::vector<float>({4, 16, 36, 64}));
  x.copy_(from_vector<float>({-1, 0, 1, 2}, {4}));
  ASSERT_EQ(d.cuGraphLaunch(exec, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(values(y), std::vector<float>({4, 0, 4, 16}));
  EXPECT_EQ(d.cuGraphExecDestroy(exec), CUDA_SUCCESS);
}

// A host read or a synchronization during a capture is a clear error, and
// the capture ends invalidated, as with the real driver.
TEST_F(CudaGraphs, HostReadsAndSynchronizationsDuringACaptureAreClearErrors) {
  const cuda::Driver& d = cuda::driver();
  cuda::Stream s(0);
  Tensor x = from_vector<float>({1, 2}, {2}).cuda();
  cuda::synchronize();
  for (int what = 0; what < 2; ++what) {
    ASSERT_EQ(d.cuStreamBeginCapture(handle(s), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
    try {
      cuda::StreamGuard on(s);
      if (what == 0)
        (void)x.cpu();  // a host read of device memory
      else
        cuda::synchronize();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"), std::string::npos) << m;
      // The call that failed: the emulated driver's own, or the synchronization
      // a real driver refuses first (kiln synchronizes before a host read).
      EXPECT_TRUE(m.find(what == 0 ? "host read" : "cuCtxSynchronize") != std::string::npos ||
                  (!cuda::driver().emulated && m.find("Synchronize") != std::string::npos))
          << m;
      EXPECT_NE(m.find("CUDA graph"), std::string::npos) << m;
    }
    CUgraph graph = nullptr;
    EXPECT_EQ(d.cuStreamEndCapture(handle(s), &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    EXPECT_EQ(graph, nullptr);
  }
  // The legacy default stream cannot be captured.
  EXPECT_EQ(d.cuStreamBeginCapture(nullptr, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
}

// A small MLP trained with Adam (learning rate and bias corrections as host
// scalars), a new batch every step: through replayed graphs the losses and
// parameters are the same bits as on the plain launch path.
std::pair<std::vector<float>, std::vector<float>> train(int steps) {
  manual_seed(11);
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(6, 16));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::Linear>(16, 3));
  model->to(Device::cuda());
  optim::Adam opt(model->parameters(), {.lr = 0.01});
  nn::MSELoss criterion;
  auto step = compile([&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = criterion(model->forward(x), y);
    loss.backward();
    opt.step();
    return loss;
  });
  std::vector<float> losses;
  for (int i = 0; i < steps; ++i) {
    const Tensor x = randn({8, 6}).cuda(), y = randn({8, 3}).cuda();
    losses.push_back(step(x, y).cpu().item<float>());
  }
  std::vector<float> params;
  for (const Tensor& p : model->parameters())
    for (float v : values(p)) params.push_back(v);
  return {losses, params};
}

TEST_F(CudaGraphs, ATrainingStepReplaysWithTheSameBits) {
  setenv("KILN_CUDA_GRAPHS", "0", 1);
  const cuda::GraphStats before = cuda::graph_stats();
  const auto plain = train(8);
  EXPECT_EQ(cuda::graph_stats().replays, before.replays);
  unsetenv("KILN_CUDA_GRAPHS");
  const auto graphs = train(8);
  const cuda::GraphStats after = cuda::graph_stats();
  EXPECT_EQ(after.fallbacks, before.fallbacks) << after.last_fallback;
  EXPECT_GE(after.captures, before.captures + 1);
  // Calls 1 eager (warm-up), 2 plain, 3 captured (and replayed), 4-8 replayed:
  // forward and backward executors each.
  EXPECT_GE(after.replays, before.replays + 6);
  EXPECT_EQ(graphs.first, plain.first);  // the same bits, every step
  EXPECT_EQ(graphs.second, plain.second);
  EXPECT_LT(graphs.first.back(), graphs.first.front());
}

// Inputs read where they are (captured state mutated between calls) and
// inputs copied into the graph's pool (a new tensor each call) are both seen.
TEST_F(CudaGraphs, NewInputDataIsSeen) {
  Tensor w = from_vector<float>({1, 2, 3}, {3}).cuda();
  auto f = compile([&](const Tensor& x) { return exp(x) * w + 1; }, {.warmup = 0});
  const cuda::GraphStats before = cuda::graph_stats();
  cuda::Stream side(0);
  for (int i = 0; i < 7; ++i) {
    const Tensor x = randn({4, 3});
    if (i == 4) w.mul_(2);  // in place: the graph reads w where it is
    std::optional<cuda::StreamGuard> on_side;
    if (i >= 5) on_side.emplace(side);  // replays on another stream than before
    const auto got = values(f(x.cuda())), want = (exp(x) * w.cpu() + 1).to_vector<float>();
    for (size_t j = 0; j < want.size(); ++j)
      EXPECT_NEAR(got[j], want[j], 1e-5 * std::abs(want[j])) << "call " << i;  // two libms
  }
  EXPECT_EQ(cuda::graph_stats().replays, before.replays + 6);
}

// A new shape re-plans (a new plan, plain first, then its own graph); results
// stay right throughout.
TEST_F(CudaGraphs, AShapeChangeReplans) {
  auto f = compile([](const Tensor& x) { return tanh(x) * 2 - x; }, {.warmup = 0});
  for (int64_t rows : {4, 4, 4, 7, 7, 7, 4}) {
    const Tensor x = randn({rows, 5});
    const Tensor got = f(x.cuda());
    const auto g = values(got), w = (tanh(x) * 2 - x).to_vector<float>();
    ASSERT_EQ(g.size(), w.size());
    for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], w[i], 1e-5) << rows;
  }
  EXPECT_GE(f.stats().traces, 2);
}

// What cannot be captured runs plainly, with its reason: random draws.
// Indexing is captured (its bad indices are reported at the next
// synchronization, device_errors.h): it was the host read that made plans
// with index_select fall back.
TEST_F(CudaGraphs, WhatCannotBeCapturedRunsPlainWithItsReason) {
  const Tensor idx = from_vector<int64_t>({2, 0}, {2}).cuda();
  auto g = compile([&](const Tensor& x) { return index_select(x, 0, idx) * 2; }, {.warmup = 0});
  const cuda::GraphStats before = cuda::graph_stats();
  for (int i = 0; i < 4; ++i) {
    const Tensor x = randn({3, 2});
    EXPECT_EQ(values(g(x.cuda())), (index_select(x, 0, idx.cpu()) * 2).to_vector<float>());
  }
  std::string why = cuda::graph_stats().last_fallback;
  EXPECT_EQ(cuda::graph_stats().fallbacks, before.fallbacks) << why;
  EXPECT_EQ(cuda::graph_stats().replays, before.replays + 3);

  auto r = compile([](const Tensor& x) { return dropout(x, 0.5, true); }, {.warmup = 0});
  std::vector<float> first;
  for (int i = 0; i < 4; ++i) {
    const std::vector<float> v = values(r(ones({64}, DType::f32, Device::cuda())));
    if (i == 0) {
      first = v;
    } else {
      EXPECT_NE(v, first) << "call " << i << " repeated the first draw";
    }
  }
  why = cuda::graph_stats().last_fallback;
  EXPECT_NE(why.find("random"), std::string::npos) << why;
}

// A replay returns its outputs where the graph wrote them (no copy); a result
// the caller still holds at the next replay keeps its values (and its views
// theirs): it is moved out first, and only then.
TEST_F(CudaGraphs, HeldOutputsKeepTheirValuesAndDroppedOnesCostNoCopy) {
  Tensor a = from_vector<float>({1, 2, 3, 4}, {4}).cuda();
  auto f = compile([](const Tensor& x) { return x * 2 + 1; }, {.warmup = 0});
  (void)f(a);  // plain
  const cuda::GraphStats before = cuda::graph_stats();
  Tensor y1 = f(a);  // captured, replayed
  const Tensor y1_tail = y1.narrow(0, 2, 2);
  a.copy_(from_vector<float>({10, 20, 30, 40}, {4}).cuda());
  const Tensor y2 = f(a);
  EXPECT_EQ(values(y1), std::vector<float>({3, 5, 7, 9}));
  EXPECT_EQ(values(y1_tail), std::vector<float>({7, 9}));
  EXPECT_EQ(values(y2), std::vector<float>({21, 41, 61, 81}));
  EXPECT_EQ(cuda::graph_stats().outputs_moved, before.outputs_moved + 1);  // y1
  EXPECT_NE(y1.data_ptr(), y2.data_ptr());
  for (int i = 0; i < 3; ++i) (void)f(a);  // dropped results: nothing to move
  EXPECT_EQ(cuda::graph_stats().outputs_moved, before.outputs_moved + 2);  // y2, once
  EXPECT_EQ(cuda::graph_stats().replays, before.replays + 5);
}

// Another plan's graph that reads such an output in place sees the moved
// values, not what the first graph wrote at the old address since.
TEST_F(CudaGraphs, AGraphReadingAMovedOutputCapturesAgain) {
  Tensor x = from_vector<float>({1, 2}, {2}).cuda();
  auto g = compile([](const Tensor& t) { return t * 3; }, {.warmup = 0});
  auto h = compile([](const Tensor& t) { return t + 1; }, {.warmup = 0});
  (void)g(x);
  const Tensor a = g(x);  // in g's graph memory
  for (int i = 0; i < 3; ++i) EXPECT_EQ(values(h(a)), std::vector<float>({4, 7}));
  x.copy_(from_vector<float>({5, 6}, {2}).cuda());
  const Tensor b = g(x);  // moves `a` out of g's memory, writes b there
  EXPECT_EQ(values(b), std::vector<float>({15, 18}));
  EXPECT_EQ(values(h(a)), std::vector<float>({4, 7}));
  EXPECT_EQ(values(h(b)), std::vector<float>({16, 19}));
}

}  // namespace
}  // namespace kiln
