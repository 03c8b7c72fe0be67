// CUDA indexing ops never read back to the host at the launch
// (device_errors.h): they can be captured into CUDA graphs, by hand or as a
// compiled training step with embeddings and cross_entropy, and an
// out-of-range index in a replayed graph is still reported, at the host's next
// synchronization. On a GPU when present, else on the emulated device.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "codegen/cuda/cuda_test_util.h"
#include "kernels/cuda/driver.h"
#include "kiln/compile.h"
#include "kiln/cuda.h"
#include "kiln/env.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"

namespace kiln {
namespace {

using testing::error_of;
using testing::expect_equal;

class CudaIndexGraphs : public testing::CudaTest<19> {
 protected:
  void SetUp() override {
    testing::CudaTest<19>::SetUp();
    if (IsSkipped()) return;
    // It synchronizes after every launch: nothing can be captured.
    if (env::get_flag("KILN_CUDA_SYNC", false)) GTEST_SKIP() << "KILN_CUDA_SYNC=1";
  }
  void TearDown() override { unsetenv("KILN_CUDA_GRAPHS"); }
};

// index_select, gather and scatter_add queued on a capturing stream: the
// capture succeeds (no host read or synchronization per op), the graph
// computes what the CPU does, and a bad index written into the index tensor
// before a later launch is reported at the next synchronization.
TEST_F(CudaIndexGraphs, IndexOpsLaunchInsideAStreamCapture) {
  const cuda::Driver& d = cuda::driver();
  cuda::Stream s(0);
  const auto cs = static_cast<CUstream>(s.handle());
  const Tensor xc = randn({6, 4}), src_c = randn({3, 4});
  const Tensor x = xc.cuda(), src = src_c.cuda();
  const Tensor good = from_vector<int64_t>({5, 0, 3}, {3});
  const Tensor good2 = from_vector<int64_t>({3, 3, 0, 1, 2, 0, 1, 3, 1, 2, 2, 0}, {3, 4});
  Tensor idx = good.cuda(), idx2 = good2.cuda();
  auto work = [&] {
    const Tensor a = index_select(x, 0, idx);
    const Tensor g = gather(a, 1, idx2);
    return scatter_add(x, 0, idx.reshape({3, 1}).expand({3, 4}).contiguous(), g + src);
  };
  auto want = [&](const Tensor& i, const Tensor& i2) {
    return scatter_add(xc, 0, i.reshape({3, 1}).expand({3, 4}).contiguous(),
                       gather(index_select(xc, 0, i), 1, i2) + src_c);
  };
  cuda::synchronize();
  {
    // Warm-up on the capturing stream: kernels compiled, and the capture's
    // allocations served from this stream's cached blocks.
    cuda::StreamGuard on(s);
    for (int i = 0; i < 2; ++i) (void)work();
  }
  s.synchronize();
  Tensor out;
  {
    cuda::StreamGuard on(s);
    ASSERT_EQ(d.cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
    out = work();
  }
  CUgraph graph = nullptr;
  ASSERT_EQ(d.cuStreamEndCapture(cs, &graph), CUDA_SUCCESS) << "a host read during the capture";
  CUgraphExec exec = nullptr;
  ASSERT_EQ(d.cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.cuGraphDestroy(graph), CUDA_SUCCESS);
  // Launched on the default stream: ordered after the index uploads.
  ASSERT_EQ(d.cuGraphLaunch(exec, nullptr), CUDA_SUCCESS);
  expect_equal(out, want(good, good2), "first launch");
  const Tensor other = from_vector<int64_t>({1, 2, 2}, {3});
  idx.copy_(other);
  ASSERT_EQ(d.cuGraphLaunch(exec, nullptr), CUDA_SUCCESS);
  expect_equal(out, want(other, good2), "new indices");
  idx.copy_(from_vector<int64_t>({1, 9, 2}, {3}));
  ASSERT_EQ(d.cuGraphLaunch(exec, nullptr), CUDA_SUCCESS);
  const std::string m = error_of([&] { (void)out.cpu(); });
  EXPECT_NE(m.find("[index_select] index 9 is out of bounds for dimension 0 with size 6"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("a copy to the host"), std::string::npos) << m;
  idx.copy_(good);
  ASSERT_EQ(d.cuGraphLaunch(exec, nullptr), CUDA_SUCCESS);
  expect_equal(out, want(good, good2), "after the error");
  EXPECT_EQ(d.cuGraphExecDestroy(exec), CUDA_SUCCESS);
}

// A transformer-like step: token and position embeddings, a vocabulary head,
// cross_entropy, AdamW.
struct Step {
  static constexpr int64_t kVocab = 11, kLen = 5, kBatch = 3, kDim = 8;
  std::shared_ptr<nn::Embedding> tok, pos;
  std::shared_ptr<nn::Linear> head;
  std::unique_ptr<optim::AdamW> opt;
  Tensor positions;
  std::function<Tensor(const Tensor&, const Tensor&)> fn;

  Step() {
    manual_seed(5);
    tok = std::make_shared<nn::Embedding>(kVocab, kDim);
    pos = std::make_shared<nn::Embedding>(kLen, kDim);
    head = std::make_shared<nn::Linear>(kDim, kVocab);
    std::vector<Tensor> params;
    for (nn::Module* m : std::initializer_list<nn::Module*>{tok.get(), pos.get(), head.get()}) {
      m->to(Device::cuda());
      for (const Tensor& p : m->parameters()) params.push_back(p);
    }
    opt = std::make_unique<optim::AdamW>(params, optim::AdamWOptions{.lr = 0.01});
    positions = arange(kLen).cuda();
    auto body = [this](const Tensor& tokens, const Tensor& labels) {
      opt->zero_grad();
      const Tensor h = (*tok)(tokens) + (*pos)(positions);
      Tensor loss = cross_entropy((*head)(h).reshape({kBatch * kLen, kVocab}), labels);
      loss.backward();
      opt->step();
      return loss;
    };
    auto step = std::make_shared<decltype(compile(body))>(compile(body));
    fn = [step](const Tensor& t, const Tensor& l) { return (*step)(t, l); };
  }
  std::vector<float> params() const {
    std::vector<float> v;
    for (const auto* m : {tok.get(), pos.get()})
      for (float f : m->weight.cpu().to_vector<float>()) v.push_back(f);
    for (float f : head->weight.cpu().to_vector<float>()) v.push_back(f);
    return v;
  }
};

// Batches of the same shapes each step (drawn before the model's seed is used).
std::vector<std::pair<Tensor, Tensor>> batches(int n) {
  manual_seed(23);
  std::vector<std::pair<Tensor, Tensor>> b;
  for (int i = 0; i < n; ++i)
    b.emplace_back(randint(0, Step::kVocab, {Step::kBatch, Step::kLen}),
                   randint(0, Step::kVocab, {Step::kBatch * Step::kLen}));
  return b;
}

std::pair<std::vector<float>, std::vector<float>> train(
    const std::vector<std::pair<Tensor, Tensor>>& data) {
  Step s;
  std::vector<float> losses;
  for (const auto& [t, l] : data) losses.push_back(s.fn(t.cuda(), l.cuda()).cpu().item<float>());
  return {losses, s.params()};
}

TEST_F(CudaIndexGraphs, ACompiledEmbeddingStepIsCapturedAndReplaysWithTheSameBits) {
  const auto data = batches(6);
  setenv("KILN_CUDA_GRAPHS", "0", 1);
  const auto plain = train(data);
  unsetenv("KILN_CUDA_GRAPHS");
  const cuda::GraphStats before = cuda::graph_stats();
  const auto graphs = train(data);
  const cuda::GraphStats after = cuda::graph_stats();
  EXPECT_EQ(after.fallbacks, before.fallbacks) << after.last_fallback;
  EXPECT_GE(after.captures, before.captures + 1);
  EXPECT_GE(after.replays, before.replays + 4);
  EXPECT_EQ(graphs.first, plain.first);
  EXPECT_EQ(graphs.second, plain.second);
}

// Bad tokens or labels in a replayed step: the call returns (no host read),
// and the next synchronization (the loss's copy to the host,
// cuda::synchronize) reports the first bad index; good batches go on
// replaying after it.
TEST_F(CudaIndexGraphs, AnOutOfRangeIndexInAReplayedGraphIsReported) {
  const auto data = batches(4);
  Step s;
  for (const auto& [t, l] : data) (void)s.fn(t.cuda(), l.cuda()).cpu();
  const cuda::GraphStats before = cuda::graph_stats();
  Tensor bad_tokens = data[0].first.clone();
  bad_tokens.view({-1}).narrow(0, 4, 1).fill_(int64_t{Step::kVocab + 2});
  Tensor loss;
  EXPECT_EQ(error_of([&] { loss = s.fn(bad_tokens.cuda(), data[0].second.cuda()); }), "");
  std::string m = error_of([&] { (void)loss.cpu(); });
  EXPECT_NE(m.find("[index_select] index 13 is out of bounds for dimension 0 with size 11"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("found at the host's next synchronization with the device: a copy to the host"),
            std::string::npos)
      << m;
  Tensor bad_labels = data[1].second.clone();
  bad_labels.narrow(0, 2, 1).fill_(int64_t{-3});
  loss = s.fn(data[1].first.cuda(), bad_labels.cuda());
  m = error_of([] { cuda::synchronize(); });
  // The first of the step's kernels to meet it (the plan may order the
  // backward's scatter_add of the labels before the forward's gather).
  EXPECT_NE(m.find("] index -3 is out of bounds for dimension 1 with size 11"), std::string::npos)
      << m;
  EXPECT_TRUE(m.starts_with("[gather]") || m.starts_with("[scatter_add]")) << m;
  EXPECT_EQ(error_of([&] { (void)s.fn(data[2].first.cuda(), data[2].second.cuda()).cpu(); }), "");
  const cuda::GraphStats after = cuda::graph_stats();
  EXPECT_GE(after.replays, before.replays + 3);
  EXPECT_EQ(after.fallbacks, before.fallbacks) << after.last_fallback;
}

}  // namespace
}  // namespace kiln
