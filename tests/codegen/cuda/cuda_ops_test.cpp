// More eager ops on CUDA tensors against the CPU: argmax/argmin (first
// occurrence, NaN as the extreme) and random draws (rand_like, dropout: the
// same Philox numbers as on the CPU). Runs on a GPU or the emulated device.
#include <cmath>
#include <limits>

#include "kiln/cuda.h"

namespace kiln {
namespace {

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
    manual_seed(9);
  }
};

void expect_equal(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  ASSERT_EQ(gpu.device(), Device::cuda()) << what;
  ASSERT_EQ(gpu.dtype(), cpu.dtype()) << what;
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  const auto a = gpu.to_vector<double>(), b = cpu.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    ASSERT_EQ(a[i], b[i]) << what << " element " << i;
  }
}

TEST_F(CudaOps, ArgmaxAndArgminMatchTheCpu) {
  Tensor x = (randn({4, 6, 5}) * 2).to(DType::i32).to(DType::f32);  // ties
  {
    NoGradGuard ng;
    x.select(0, 1).select(0, 2).fill_(std::numeric_limits<double>::quiet_NaN());
  }
  const Tensor xc = x.cuda();
  for (int64_t d : {0, 1, 2, -1})
    for (bool keep : {false, true}) {
      expect_equal(argmax(xc, d, keep), argmax(x, d, keep), str("argmax dim ", d, " ", keep));
      expect_equal(argmin(xc, d, keep), argmin(x, d, keep), str("argmin dim ", d, " ", keep));
    }
  expect_equal(argmax(xc), argmax(x), "flat");
  expect_equal(argmin(xc.transpose(0, 2), 1), argmin(x.transpose(0, 2), 1), "strided");
  const Tensor xi = (randn({3, 7}) * 5).to(DType::i32);
  expect_equal(argmax(xi.cuda(), 1), argmax(xi, 1), "i32");
  EXPECT_THROW((void)argmax(zeros({2, 0}).cuda(), 1), Error);
}

TEST_F(CudaOps, RandomDrawsEqualTheCpusAndDropoutWorks) {
  const Tensor x = randn({64, 33});
  manual_seed(3);
  const Tensor a = rand_like(x);
  manual_seed(3);
  const Tensor b = rand_like(x.cuda());
  expect_equal(b, a, "rand_like");
  manual_seed(4);
  const Tensor da = dropout(x, 0.3, true);
  manual_seed(4);
  const Tensor db = dropout(x.cuda(), 0.3, true);
  expect_equal(db, da, "dropout");
}

// to(device) is differentiable, as in PyTorch: the gradient goes back to the
// source device, through both directions and twice (double backward).
TEST_F(CudaOps, MovingBetweenDevicesIsDifferentiable) {
  const Tensor w = randn({3, 4}).requires_grad_();
  ((w.cuda() * w.cuda()).sum() * 2).backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().device(), Device::cpu());
  EXPECT_TRUE(allclose(w.grad(), w.detach() * 4, 1e-6, 1e-6));

  const Tensor v = randn({5}).cuda().requires_grad_();
  (v.cpu().exp().sum()).backward();
  ASSERT_TRUE(v.grad().defined());
  EXPECT_EQ(v.grad().device(), Device::cuda());
  const auto g = v.grad().to_vector<double>(), e = v.detach().cpu().exp().to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], e[i], 1e-5);

  const Tensor x = randn({4}).requires_grad_();
  const Tensor y = (x.cuda() * x.cuda() * x.cuda()).sum();
  const Tensor dx = grad({y}, {x}, {}, {.create_graph = true})[0];
  const Tensor ddx = grad({dx.sum()}, {x})[0];  // d/dx sum(3x^2) = 6x
  EXPECT_EQ(ddx.device(), Device::cpu());
  EXPECT_TRUE(allclose(ddx, x.detach() * 6, 1e-5, 1e-5));
}

}  // namespace
}  // namespace kiln
