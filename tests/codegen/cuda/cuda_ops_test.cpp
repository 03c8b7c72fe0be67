// More eager ops on CUDA tensors against the CPU: argmax/argmin (first
// occurrence, NaN as the extreme) and random draws (rand_like, dropout: the
// same Philox numbers as on the CPU). Runs on a GPU or the emulated device.
#include <cmath>
#include <limits>

#include "codegen/cuda/cuda_test_util.h"
#include "kernels/cuda/device_ops.h"
#include "kernels/cuda/gpu_printer.h"
#include "kiln/cuda.h"

namespace kiln {
namespace {

using testing::expect_bits;
using testing::expect_equal;

class CudaOps : public testing::CudaTest<9> {};

// An eager op finds its compiled kernel by the kernel IR's text, not by
// printing the kernel again (0.09-0.9 ms of host time per op before); a
// change of the one run-time printer input (the 32-bit index limit) prints
// anew.
TEST_F(CudaOps, EagerOpsPrintTheirKernelOnce) {
  const Tensor x = randn({40, 3}).cuda(), b = randn({3}).cuda();
  auto step = [&] { return tanh(x * 0.5) + b; };
  const Tensor first = step();
  const int64_t printed = cuda::printed_kernel_sources();
  for (int i = 0; i < 3; ++i) expect_bits(step(), first, "again");
  EXPECT_EQ(cuda::printed_kernel_sources(), printed) << "printed again";
  cuda::set_narrow_index_limit(7);  // 120 elements: the broadcast add's 64-bit loop
  expect_bits(step(), first, "64-bit loop");
  cuda::set_narrow_index_limit(2147483647);
  EXPECT_GT(cuda::printed_kernel_sources(), printed) << "a new limit prints anew";
}

// Likewise indexing (both scatter_add forms), scans, sorts, draws and
// multinomial: their kernels are printed at their first call only.
TEST_F(CudaOps, IndexScanSortAndRandomKernelsArePrintedOnce) {
  const Tensor x = randn({40, 3}).cuda(), tokens = randint(0, 5, {100}).cuda();
  const Tensor probs = rand({4, 6}).cuda(), many = randint(0, 5000, {4000}).cuda();
  const Tensor src = randn({100, 3}).cuda(), wide = randn({4000, 1}).cuda();
  auto ops = [&] {
    std::vector<Tensor> r = {
        index_select(x, 0, tokens),
        scatter_add(zeros({5, 3}).cuda(), 0, tokens.reshape({100, 1}).expand({100, 3}), src),
        scatter_add(zeros({5000, 1}).cuda(), 0, many.reshape({4000, 1}), wide),
        cumsum(x, 0),
        argsort(x.reshape({120}), 0),
        rand_like(x),
        multinomial(probs, 3, true),
        multinomial(probs, 3, false)};
    return r;
  };
  (void)ops();
  const int64_t printed = cuda::printed_kernel_sources();
  (void)ops();
  EXPECT_EQ(cuda::printed_kernel_sources(), printed) << "printed again";
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

// The device's Philox kernel (the CPU's rule printed, random_rule.h) draws
// the CPU's numbers: uniform ones bit for bit in every float dtype and at odd
// sizes (partial Philox blocks), normal ones within the libms' ulps; the
// generator advances as on the CPU, and nothing is drawn on the host.
TEST_F(CudaOps, DeviceDrawsEqualTheCpusDraws) {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16})
    for (int64_t n : {1000, 1, 7, 4099}) {
      manual_seed(5);
      (void)rand({3}, dt);
      const Tensor a = rand({n}, dt);
      manual_seed(5);
      (void)rand({3}, dt, Device::cuda());
      const Tensor b = rand({n}, dt, Device::cuda());
      expect_bits(b, a, str("rand ", dt, " ", n));
      manual_seed(6);
      const auto x = randn({n}, dt).to_vector<double>();
      manual_seed(6);
      const auto y = randn({n}, dt, Device::cuda()).to_vector<double>();
      const double tol = dt == DType::bf16 ? 0x1p-7 : dt == DType::f16 ? 0x1p-10 : 1e-6;
      for (size_t i = 0; i < x.size(); ++i)
        ASSERT_NEAR(y[i], x[i], tol * std::max(1.0, std::abs(x[i])))
            << "randn " << dt << " " << n << " element " << i;
    }
  manual_seed(7);
  (void)rand({5, 3});
  const Tensor after = rand({2});
  manual_seed(7);
  (void)rand({5, 3}, DType::f32, Device::cuda());
  EXPECT_EQ(rand({2}).to_vector<float>(), after.to_vector<float>()) << "the generator advanced";
  const int64_t before = cpu_allocator().stats().num_allocs;
  const Tensor big = rand({1 << 16}, DType::f32, Device::cuda());
  EXPECT_EQ(cpu_allocator().stats().num_allocs, before) << "drawn on the host";
  EXPECT_THROW((void)rand({2}, DType::i32, Device::cuda()), Error);
  EXPECT_EQ(rand({0}, DType::f32, Device::cuda()).numel(), 0);
}

TEST_F(CudaOps, DeviceDropoutAndBernoulliEqualTheCpus) {
  const Tensor x = randn({33, 65});
  for (double p : {0.1, 0.5}) {
    manual_seed(11);
    const Tensor da = dropout(x, p, true);
    manual_seed(11);
    expect_bits(dropout(x.cuda(), p, true), da, str("dropout ", p));
  }
  const Tensor probs = rand({40, 9});
  manual_seed(12);
  const Tensor ba = bernoulli(probs);
  manual_seed(12);
  expect_bits(bernoulli(probs.cuda()), ba, "bernoulli");
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

// triu/tril and MultiheadAttention's masks on device tensors: the masks they
// build live on their input's device (they were built on the CPU, so a causal
// CUDA attention failed in `where` with "expected all tensors on one device").
TEST_F(CudaOps, TriangularMasksAndMaskedAttentionRunOnTheDevice) {
  const Tensor x = randn({2, 4, 5});
  expect_equal(triu(x.cuda(), 1), triu(x, 1), "triu");
  expect_equal(tril(x.cuda(), -1), tril(x, -1), "tril");
  manual_seed(13);
  nn::MultiheadAttention attn(8, 2, {.batch_first = true});
  const Tensor q = randn({2, 4, 8});
  const Tensor causal = triu(ones({4, 4}, DType::b8), 1);
  const auto [want, w_want] = attn.forward(q, q, q, causal);
  const auto [want_causal, w2] = attn.forward(q, q, q, {}, {}, false, true, true);
  attn.to(Device::cuda());
  const Tensor qc = q.cuda();
  const auto [got, w_got] = attn.forward(qc, qc, qc, causal.cuda());
  const auto [got_causal, w3] = attn.forward(qc, qc, qc, {}, {}, false, true, true);
  EXPECT_TRUE(allclose(got.cpu(), want, 1e-5, 1e-5));
  EXPECT_TRUE(allclose(got_causal.cpu(), want_causal, 1e-5, 1e-5));
  EXPECT_TRUE(allclose(got_causal.cpu(), want, 1e-5, 1e-5));
}

}  // namespace
}  // namespace kiln
