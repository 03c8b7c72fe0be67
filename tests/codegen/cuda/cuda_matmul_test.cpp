// matmul on CUDA tensors (cuBLASLt) against the CPU's matmul: torch.matmul's
// shapes (1-D operands, broadcast batches), transposed and strided operands
// read in place, every float dtype, empty and K = 0 products, gradients, and the
// refusals. Runs only where a GPU exists (the emulated device has no cuBLASLt).
#include <cmath>

#include "kernels/cuda/cublaslt.h"
#include "kernels/cuda/driver.h"
#include "kiln/compile.h"
#include "kiln/cuda.h"
#include "kiln/nn/nn.h"

namespace kiln {
namespace {

class CudaMatmul : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
    if (cuda::driver().emulated) GTEST_SKIP() << "cuBLASLt needs a real GPU";
    if (!cuda::cublaslt_unavailable_reason().empty())
      GTEST_SKIP() << cuda::cublaslt_unavailable_reason();
    manual_seed(11);
  }
};

// |gpu - cpu| <= tol * (|a| @ |b|) elementwise: the bound of any summation order.
void expect_product(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
  const Tensor gpu = matmul(a.cuda(), b.cuda());
  ASSERT_EQ(gpu.device(), Device::cuda()) << what;
  const Tensor cpu = matmul(a.to(DType::f64), b.to(DType::f64));
  const Tensor bound = matmul(abs(a.to(DType::f64)), abs(b.to(DType::f64)));
  ASSERT_EQ(gpu.dtype(), a.dtype()) << what;
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  const auto g = gpu.cpu().to(DType::f64).to_vector<double>();
  const auto c = cpu.to_vector<double>(), m = bound.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_LE(std::abs(g[i] - c[i]), tol * (m[i] + 1e-30))
        << what << " element " << i << ": GPU " << g[i] << ", exact " << c[i];
}

TEST_F(CudaMatmul, ShapesOfTorchMatmul) {
  const double tol = 4e-6;  // f32 accumulation over K = 33, no TF32
  expect_product(randn({17, 33}), randn({33, 9}), tol, "2-D");
  expect_product(randn({33}), randn({33, 9}), tol, "1-D @ 2-D");
  expect_product(randn({17, 33}), randn({33}), tol, "2-D @ 1-D");
  expect_product(randn({33}), randn({33}), tol, "dot");
  expect_product(randn({4, 17, 33}), randn({4, 33, 9}), tol, "batched");
  expect_product(randn({4, 17, 33}), randn({33, 9}), tol, "batch @ matrix (stride 0)");
  expect_product(randn({17, 33}), randn({3, 33, 9}), tol, "matrix @ batch");
  expect_product(randn({2, 1, 5, 7}), randn({3, 7, 4}), tol, "broadcast batch dims");
  expect_product(randn({3, 33}), randn({2, 5, 33, 9}), tol, "2-D @ 4-D");
}

TEST_F(CudaMatmul, StridedOperandsAreReadInPlaceOrCopied) {
  const double tol = 4e-6;
  const Tensor w = randn({9, 33});
  expect_product(randn({17, 33}), w.t(), tol, "x @ w.t() (Linear)");
  expect_product(randn({33, 17}).t(), randn({33, 9}), tol, "transposed a");
  expect_product(randn({4, 33, 17}).transpose(1, 2), randn({4, 9, 33}).transpose(1, 2), tol,
                 "both transposed, batched");
  expect_product(randn({17, 66}).slice(1, 0, 66, 2), randn({33, 9}), tol, "column step 2");
  expect_product(randn({4, 6, 8}).permute({1, 0, 2}), randn({8, 5}), tol, "permuted batch");
}

TEST_F(CudaMatmul, EveryFloatDtype) {
  const Tensor a = randn({3, 20, 48}), b = randn({3, 48, 24});
  expect_product(a.to(DType::f64), b.to(DType::f64), 1e-14, "f64");
  // f16/bf16: operands exact in the dtype, f32 accumulation, one output rounding.
  expect_product(a.to(DType::f16), b.to(DType::f16), 2e-3, "f16");
  expect_product(a.to(DType::bf16), b.to(DType::bf16), 1e-2, "bf16");
}

TEST_F(CudaMatmul, EmptyAndZeroDepthProducts) {
  const Tensor z = matmul(randn({4, 0}).cuda(), randn({0, 5}).cuda());
  EXPECT_EQ(z.shape(), (Dims{4, 5}));
  for (double v : z.cpu().to_vector<float>()) EXPECT_EQ(v, 0.0);
  EXPECT_EQ(matmul(randn({0, 3}).cuda(), randn({3, 5}).cuda()).shape(), (Dims{0, 5}));
  EXPECT_EQ(matmul(randn({2, 0, 3}).cuda(), randn({3, 5}).cuda()).shape(), (Dims{2, 0, 5}));
}

TEST_F(CudaMatmul, GradientsMatchTheCpu) {
  const Tensor a = randn({5, 7}), b = randn({7, 3});
  Tensor ac = a.cuda().requires_grad_(), bc = b.cuda().requires_grad_();
  Tensor ah = a.clone().requires_grad_(), bh = b.clone().requires_grad_();
  (matmul(ac, bc) * 2).sum().backward();
  (matmul(ah, bh) * 2).sum().backward();
  const auto g1 = ac.grad().cpu().to_vector<float>(), h1 = ah.grad().to_vector<float>();
  const auto g2 = bc.grad().cpu().to_vector<float>(), h2 = bh.grad().to_vector<float>();
  for (size_t i = 0; i < g1.size(); ++i) EXPECT_NEAR(g1[i], h1[i], 1e-5);
  for (size_t i = 0; i < g2.size(); ++i) EXPECT_NEAR(g2[i], h2[i], 1e-5);
}

TEST_F(CudaMatmul, IntegerAndMismatchedShapesAreRefused) {
  try {
    matmul(ones({2, 3}, DType::i64).cuda(), ones({3, 2}, DType::i64).cuda());
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[matmul]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("i64"), std::string::npos) << e.what();
  }
  EXPECT_THROW(matmul(ones({2, 3}).cuda(), ones({4, 2}).cuda()), Error);
  EXPECT_THROW(matmul(ones({2, 3}).cuda(), ones({3, 2})), Error);  // mixed devices
}

// The emulated device (CI) has no cuBLASLt: matmul of its tensors runs on the
// host and comes back as a device tensor.
TEST(CudaMatmulEmulated, RunsOnTheHost) {
  if (!cuda::is_available() || !cuda::driver().emulated) GTEST_SKIP() << "not the emulated device";
  const Tensor a = randn({3, 4, 5}), b = randn({5, 2});
  const Tensor g = matmul(a.cuda(), b.cuda());
  ASSERT_EQ(g.device(), Device::cuda());
  const auto x = g.cpu().to_vector<float>(), y = matmul(a, b).to_vector<float>();
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(x[i], y[i]);
}

// A batched product whose operands or output no single batch stride
// addresses (the attention's heads viewed out of [B, L, H, D]) runs on
// cuBLASLt's pointer arrays, everything in place; the copying path (the
// switch off) gives the same bits on the emulated device. On a GPU the
// products match the CPU within rounding, and the log says whether cuBLASLt
// ran the arrays or fell back to copies.
TEST(CudaMatmulPointers, HeadViewsAreReadAndWrittenInPlace) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  const bool emulated = cuda::driver().emulated;
  if (!emulated && !cuda::cublaslt_unavailable_reason().empty())
    GTEST_SKIP() << cuda::cublaslt_unavailable_reason();
  manual_seed(12);
  const int64_t B = 2, L = 5, H = 3, D = 64;
  const Tensor x = randn({B, L, 3, H, D});  // a QKV projection's output, viewed per head
  const Tensor xd = x.cuda();
  auto heads = [](const Tensor& t, int64_t i) { return t.select(2, i).permute({0, 2, 1, 3}); };
  const Tensor w = randn({D, 7});
  struct Case {
    const char* what;
    Tensor a, b;      // CUDA operands
    Tensor ca, cb;    // the same on the CPU
    bool merged_out;  // written into [B, L, H, N] through a permuted view
  };
  const std::vector<Case> cases = {
      {"q k^T (scores)", heads(xd, 0), heads(xd, 1).transpose(-2, -1), heads(x, 0),
       heads(x, 1).transpose(-2, -1), false},
      {"p v into the head-merged layout", randn({B, H, L, L}).cuda(), heads(xd, 2), Tensor(),
       heads(x, 2), true},
      {"heads @ a shared matrix (stride 0)", heads(xd, 0), w.cuda(), heads(x, 0), w, false},
  };
  for (const Case& c : cases) {
    const Tensor ca = c.ca.defined() ? c.ca : c.a.cpu();
    const int64_t N = c.b.size(-1);
    auto product = [&] {
      if (!c.merged_out) return matmul(c.a, c.b);
      const Tensor merged = full({B, L, H, N}, -7.0).cuda();  // poisoned
      cuda::device_matmul(c.a, c.b, merged.permute({0, 2, 1, 3}), cuda::GemmEpilogue::kNone);
      return merged.permute({0, 2, 1, 3});
    };
    const int64_t before = cuda::pointer_batches();
    const Tensor in_place = product().cpu();
    const bool ran = cuda::pointer_batches() == before + 1;
    cuda::set_pointer_batches(false);
    const Tensor copied = product().cpu();
    cuda::set_pointer_batches(true);
    EXPECT_EQ(cuda::pointer_batches(), before + (ran ? 1 : 0)) << c.what << ": switched off";
    const Tensor want = matmul(ca.to(DType::f64), c.cb.to(DType::f64));
    const Tensor bound = matmul(abs(ca.to(DType::f64)), abs(c.cb.to(DType::f64)));
    const auto g = in_place.to(DType::f64).contiguous().to_vector<double>();
    const auto cp = copied.to(DType::f64).contiguous().to_vector<double>();
    const auto r = want.contiguous().to_vector<double>(),
               m = bound.contiguous().to_vector<double>();
    ASSERT_EQ(g.size(), r.size()) << c.what;
    for (size_t i = 0; i < g.size(); ++i) {
      ASSERT_LE(std::abs(g[i] - r[i]), 4e-6 * (m[i] + 1e-30)) << c.what << " element " << i;
      if (emulated) {
        ASSERT_EQ(g[i], cp[i]) << c.what << " element " << i << ": copied path";
      }
    }
    if (emulated) {
      EXPECT_TRUE(ran) << c.what;
    } else {
      std::printf("[pointer arrays] %s: %s\n", c.what,
                  ran ? "cuBLASLt ran the arrays" : "fell back to copies");
    }
  }
}

// A compiled self-attention step (forward and backward) reads the heads in
// place: its six batched products per call (scores, weighted values, and the
// four gradients) run on pointer arrays, the head-merged output and the q/k/v
// gradients written into their hosts' buffers; the parameters' gradients equal
// eager's on the device, and on the emulated device the copying path's bits.
TEST(CudaMatmulPointers, CompiledAttentionStepReadsTheHeadsInPlace) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  const bool emulated = cuda::driver().emulated;
  if (!emulated && !cuda::cublaslt_unavailable_reason().empty())
    GTEST_SKIP() << cuda::cublaslt_unavailable_reason();
  manual_seed(14);
  nn::MultiheadAttention attn(32, 2, {.batch_first = true});
  attn.to(Device::cuda());
  const Tensor x = randn({3, 8, 32}).cuda();
  auto grads = [&] {
    attn.zero_grad();
    sum(square(attn.forward(x))).backward();
    std::vector<Tensor> g;
    for (const Tensor& p : attn.parameters()) g.push_back(p.grad().detach().clone());
    return g;
  };
  auto step = compile([&] { return grads(); });
  const std::vector<Tensor> eager = grads();
  (void)step();  // the eager warm-up, then the plan's first run
  (void)step();
  const int64_t before = cuda::pointer_batches();
  const std::vector<Tensor> compiled = step();
  const int64_t per_step = cuda::pointer_batches() - before;
  cuda::set_pointer_batches(false);
  const std::vector<Tensor> copied = step();
  cuda::set_pointer_batches(true);
  if (emulated) {
    EXPECT_GE(per_step, 6);
  } else {
    std::printf("[pointer arrays] compiled attention step: %lld products on the arrays\n",
                static_cast<long long>(per_step));
  }
  ASSERT_EQ(compiled.size(), eager.size());
  for (size_t i = 0; i < eager.size(); ++i) {
    EXPECT_TRUE(allclose(compiled[i].cpu(), eager[i].cpu(), 1e-5, 1e-5)) << "gradient " << i;
    if (emulated) {
      EXPECT_TRUE(equal(compiled[i].cpu(), copied[i].cpu())) << "gradient " << i << ": copied";
    }
  }
}

TEST_F(CudaMatmul, Tf32IsOptIn) {
  EXPECT_FALSE(cuda::matmul_allow_tf32());
  cuda::set_matmul_allow_tf32(true);
  const Tensor a = randn({64, 128}), b = randn({128, 32});
  // TF32 keeps 10 mantissa bits of each operand: within 2^-10 of |a| @ |b|.
  expect_product(a, b, 2e-3, "TF32");
  cuda::set_matmul_allow_tf32(false);
  expect_product(a, b, 1e-5, "f32 again");
}

}  // namespace
}  // namespace kiln
