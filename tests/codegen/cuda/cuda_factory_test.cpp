// Fills and factories on CUDA are made on the device: a fill uploads its one
// value and a device copy broadcasts it, a broadcast host source uploads its
// distinct elements only, and a compiled graph's factory nodes (the zeros a
// scatter_add or an embedding's backward starts from) run on the device
// instead of being built on the host and uploaded at every call. On a GPU when
// present, else on the emulated device.
#include <cstdlib>
#include <memory>
#include <vector>

#include "codegen/cuda/cuda_test_util.h"
#include "kiln/compile.h"
#include "kiln/cuda.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"

namespace kiln {
namespace {

using testing::expect_equal;

class CudaFactories : public testing::CudaTest<23> {
 protected:
  void TearDown() override { unsetenv("KILN_CUDA_GRAPHS"); }
};

int64_t uploaded_since(const cuda::TransferStats& before) {
  return cuda::transfer_stats().upload_bytes - before.upload_bytes;
}

TEST_F(CudaFactories, FillsUploadOneElement) {
  struct Case {
    Scalar value;
    DType dtype;
  };
  const std::vector<Case> cases = {
      {0.0, DType::f32}, {-2.5, DType::f64}, {int64_t{(1LL << 40) + 1}, DType::i64},
      {3, DType::i32},   {1.5, DType::bf16}, {-0.75, DType::f16},
      {true, DType::b8}};
  for (const Case& c : cases) {
    const cuda::TransferStats before = cuda::transfer_stats();
    const Tensor t = full({300, 257}, c.value, c.dtype, Device::cuda());
    EXPECT_LE(uploaded_since(before), 8) << c.dtype;
    expect_equal(t, full({300, 257}, c.value, c.dtype), str(c.dtype));
  }
  Tensor z = randn({64, 33}).cuda();
  const cuda::TransferStats before = cuda::transfer_stats();
  z.zero_();
  EXPECT_LE(uploaded_since(before), 8);
  expect_equal(z, zeros({64, 33}), "zero_");
}

// A row broadcast over many rows (and cast on the way) uploads the row; a
// column broadcast into a strided destination too.
TEST_F(CudaFactories, BroadcastHostSourcesUploadTheirDistinctElements) {
  const Tensor row = randn({1, 37}, DType::f64);
  Tensor dst = make_tensor({500, 37}, DType::f32, Device::cuda());
  cuda::TransferStats before = cuda::transfer_stats();
  dst.copy_(row);
  EXPECT_LE(uploaded_since(before), 37 * 4);
  expect_equal(dst, row.expand({500, 37}).to(DType::f32), "row");

  const Tensor col = randn({41, 1});
  Tensor wide = make_tensor({41, 60}, DType::f32, Device::cuda());
  Tensor view = wide.narrow(1, 10, 20);  // strided: rows of 60, 20 of them written
  before = cuda::transfer_stats();
  view.copy_(col);
  EXPECT_LE(uploaded_since(before), 41 * 4);
  expect_equal(view, col.expand({41, 20}), "column into a strided view");
}

// An embedding, a vocabulary head, cross_entropy and SGD on the device, from
// one seed.
struct TokenModel {
  static constexpr int64_t kVocab = 300, kDim = 16;
  std::shared_ptr<nn::Embedding> emb;
  std::shared_ptr<nn::Linear> head;
  std::unique_ptr<optim::SGD> opt;
  TokenModel() {
    manual_seed(3);
    emb = std::make_shared<nn::Embedding>(kVocab, kDim);
    head = std::make_shared<nn::Linear>(kDim, kVocab);
    emb->to(Device::cuda());
    head->to(Device::cuda());
    std::vector<Tensor> params = emb->parameters();
    for (const Tensor& p : head->parameters()) params.push_back(p);
    opt = std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = 0.1});
  }
  Tensor step(const Tensor& tokens, const Tensor& labels) {
    opt->zero_grad();
    Tensor loss = cross_entropy((*head)((*emb)(tokens)), labels);
    loss.backward();
    opt->step();
    return loss;
  }
};

// The model's compiled step: its zeros (scatter_add's base in cross_entropy's
// and the embedding's backward) were made on the host and uploaded at every
// call.
TEST_F(CudaFactories, CompiledFactoryNodesRunOnTheDevice) {
  constexpr int64_t kTokens = 64;
  for (const char* graphs : {"0", "1"}) {
    setenv("KILN_CUDA_GRAPHS", graphs, 1);
    TokenModel traced, eager;
    auto step = compile([&](const Tensor& t, const Tensor& l) { return traced.step(t, l); });
    const Tensor tokens = randint(0, TokenModel::kVocab, {kTokens}).cuda();
    const Tensor labels = randint(0, TokenModel::kVocab, {kTokens}).cuda();
    for (int call = 0; call < 5; ++call) {
      const cuda::TransferStats before = cuda::transfer_stats();
      const float loss = step(tokens, labels).cpu().item<float>();
      // Past the trace (call 0): a few scalars (the learning rate, ...) at
      // most, never a [64, 300] zeros (76.8 kB) or [300, 16] (19.2 kB).
      if (call > 0) {
        EXPECT_LT(uploaded_since(before), 4096) << "graphs " << graphs << " call " << call;
      }
      EXPECT_NEAR(loss, eager.step(tokens, labels).cpu().item<float>(), 1e-5)
          << "graphs " << graphs << " call " << call;
    }
    EXPECT_TRUE(allclose(traced.emb->weight.cpu(), eager.emb->weight.cpu(), 1e-5, 1e-6)) << graphs;
  }
}

}  // namespace
}  // namespace kiln
