// Tensors on a CUDA device: copies both ways, eager elementwise ops, sum/max/
// min, views and in-place writes, each against the same computation on the
// CPU. Without a GPU (CI) only the clear refusal runs.
#include <cmath>

#include "kiln/cuda.h"
#include "kiln/dispatch.h"

namespace kiln {
namespace {

TEST(CudaTensor, WithoutAGpuTheRefusalIsClear) {
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is present";
  try {
    ones({2}).cuda();
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cuda:0"), std::string::npos) << m;
    EXPECT_NE(m.find(cuda::unavailable_reason()), std::string::npos) << m;
  }
  EXPECT_THROW(make_tensor({3}, DType::f32, Device::cuda()), Error);
  EXPECT_EQ(ones({2}).to(Device::cpu()).device(), Device::cpu());  // the CPU keeps working
}

class CudaTensorGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
    manual_seed(3);
  }
};

// Same values and dtype (NaN equal to NaN); `tol` relative for float math.
void expect_same(const Tensor& gpu, const Tensor& cpu, double tol = 0,
                 const std::string& what = "") {
  ASSERT_EQ(gpu.device(), Device::cuda());
  const Tensor g = gpu.cpu();
  ASSERT_EQ(g.dtype(), cpu.dtype()) << what;
  ASSERT_EQ(g.shape(), cpu.shape()) << what;
  const auto a = g.to(DType::f64).to_vector<double>(), b = cpu.to(DType::f64).to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    ASSERT_LE(std::abs(a[i] - b[i]), tol * (1 + std::abs(b[i])))
        << what << " element " << i << ": GPU " << a[i] << ", CPU " << b[i];
  }
}

TEST_F(CudaTensorGpu, CopiesRoundTripEveryDtype) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::i32,
                  DType::u8, DType::b8}) {
    const Tensor x = (randn({5, 7}) * 50).to(t);
    expect_same(x.cuda(), x, 0, dtype_name(t));
    expect_same(x.t().cuda(), x.t(), 0, "transposed");   // non-contiguous source
    expect_same(x.cuda().t(), x.t(), 0, "device view");  // view on the device, strided download
    expect_same(x.cuda().to(DType::f32), x.to(DType::f32), 0, "cast on the device");
  }
}

TEST_F(CudaTensorGpu, ElementwiseOpsMatchTheCpu) {
  const Tensor a = randn({4, 1, 5}), b = randn({3, 5}), p = rand({4, 3, 5}) + 0.1;
  const Tensor ga = a.cuda(), gb = b.cuda(), gp = p.cuda();
  expect_same(ga + gb, a + b, 0, "add");
  expect_same(ga - gb * 2.5, a - b * 2.5, 0, "sub/mul scalar");
  expect_same(ga / gb, a / b, 0, "div");
  expect_same(maximum(ga, gb), maximum(a, b), 0, "maximum");
  expect_same(gt(ga, gb), gt(a, b), 0, "gt");
  expect_same(where(gt(ga, 0), ga, gb), where(gt(a, 0), a, b), 0, "where");
  expect_same(relu(ga), relu(a), 0, "relu");
  expect_same(neg(abs(ga)), neg(abs(a)), 0, "neg abs");
  for (auto [name, f] :
       std::vector<std::pair<const char*, Tensor (*)(const Tensor&)>>{{"exp", exp},
                                                                      {"log", log},
                                                                      {"tanh", tanh},
                                                                      {"sigmoid", sigmoid},
                                                                      {"sqrt", sqrt},
                                                                      {"sin", sin},
                                                                      {"erf", erf},
                                                                      {"log1p", log1p},
                                                                      {"rsqrt", rsqrt}})
    expect_same(f(gp), f(p), 1e-6, name);
  expect_same(pow(gp, ga), pow(p, a), 1e-6, "pow");
  const Tensor i = randint(-20, 20, {6}, DType::i64), j = randint(1, 7, {6}, DType::i64);
  expect_same(i.cuda() + j.cuda(), i + j, 0, "i64 add");
  expect_same(i.cuda() / j.cuda(), i / j, 0, "i64 true division");
  expect_same(a.to(DType::f16).cuda() * 3, a.to(DType::f16) * 3, 0, "f16");
  expect_same(a.to(DType::bf16).cuda() + gb.to(DType::bf16).cpu().cuda(),
              a.to(DType::bf16) + b.to(DType::bf16), 0, "bf16");
}

TEST_F(CudaTensorGpu, ReductionsAndCompositesMatchTheCpu) {
  const Tensor x = randn({6, 7, 9});
  const Tensor g = x.cuda();
  expect_same(sum(g, {1}), sum(x, {1}), 1e-5, "sum dim 1");
  expect_same(sum(g, {0, 2}, true), sum(x, {0, 2}, true), 1e-5, "sum keepdim");
  expect_same(sum(g), sum(x), 1e-5, "sum all");
  expect_same(amax(g, {2}), amax(x, {2}), 0, "amax");
  expect_same(amin(g, {0}), amin(x, {0}), 0, "amin");
  expect_same(mean(g, {1}), mean(x, {1}), 1e-5, "mean");
  expect_same(softmax(g, -1), softmax(x, -1), 1e-5, "softmax");
  expect_same(log_softmax(g, 1), log_softmax(x, 1), 1e-5, "log_softmax");
  const Tensor w = randn({9}), bias = randn({9});
  expect_same(layer_norm(g, {9}, w.cuda(), bias.cuda()), layer_norm(x, {9}, w, bias), 1e-4,
              "layer_norm");
  const Tensor i = randint(-5, 5, {4, 8}, DType::i32);
  expect_same(sum(i.cuda(), {1}), sum(i, {1}), 0, "i32 sum is i64");
  EXPECT_FLOAT_EQ(sum(g).item<float>(), sum(x).item<float>());
}

TEST_F(CudaTensorGpu, ViewsAndInPlaceWrites) {
  const Tensor x = randn({4, 6});
  Tensor g = x.cuda();
  expect_same(g.t().reshape({24}), x.t().reshape({24}), 0, "reshape of a transpose (copies)");
  expect_same(g.narrow(1, 2, 3) * 2, x.narrow(1, 2, 3) * 2, 0, "narrow");
  Tensor h = g.clone();
  h.add_(1);
  expect_same(h, x + 1, 0, "add_");
  Tensor part = h.narrow(0, 1, 2);
  part.copy_(zeros({2, 6}));  // host -> a device view
  Tensor want = x + 1;
  want.narrow(0, 1, 2).copy_(zeros({2, 6}));
  expect_same(h, want, 0, "copy_ into a view");
  std::ostringstream os;
  os << g.narrow(0, 0, 1);
  EXPECT_NE(os.str().find("device='cuda:0'"), std::string::npos) << os.str();
}

// Backward through elementwise ops, broadcasting and reductions on the device:
// the seed and the gradients live on the GPU and equal the CPU's.
TEST_F(CudaTensorGpu, BackwardMatchesTheCpu) {
  const Tensor x = randn({5, 8}), w0 = randn({8}), b0 = randn({1});
  Tensor w = w0.clone(), b = b0.clone();
  w.requires_grad_(true);
  b.requires_grad_(true);
  Tensor gw = w0.cuda(), gb = b0.cuda();
  gw.requires_grad_(true);
  gb.requires_grad_(true);
  auto loss = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    return sum(log_softmax(tanh(x * w + b), 1) * sigmoid(x));
  };
  loss(x, w, b).backward();
  loss(x.cuda(), gw, gb).backward();
  ASSERT_TRUE(gw.grad().defined());
  expect_same(gw.grad(), w.grad(), 1e-5, "w.grad");
  expect_same(gb.grad(), b.grad(), 1e-5, "b.grad");
}

// Copies of 0 elements launch nothing (a grid of 0 blocks is a launch error):
// a device clone, both transfers, a strided destination, a cast. Found by a
// folded empty constant placed on the device in a compiled layer norm.
TEST_F(CudaTensorGpu, ZeroElementCopiesAreNoOps) {
  const Tensor e = zeros({0, 3}).cuda();
  EXPECT_EQ(e.clone().shape(), (Dims{0, 3}));
  EXPECT_EQ(e.cpu().shape(), (Dims{0, 3}));
  EXPECT_EQ(e.to(DType::f64).dtype(), DType::f64);
  Tensor t = zeros({3, 0}).cuda().transpose(0, 1);
  t.copy_(e);
  EXPECT_EQ(t.contiguous().shape(), (Dims{0, 3}));
}

TEST_F(CudaTensorGpu, MixedDevicesAndMissingKernelsAreClearErrors) {
  const Tensor g = ones({3}).cuda();
  try {
    (void)(g + ones({3}));
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  try {  // an op with no CUDA kernel yet (its primitive: kiln::multinomial draws on the CPU)
    const Attrs at = Attrs().set("num_samples", int64_t{1}).set("replacement", true);
    const std::vector<Tensor> in = {ones({4}).cuda(), full({1}, 0.5, DType::f64).cuda()};
    (void)dispatch(OpId::multinomial, in, at);
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[multinomial] is not implemented for CUDA tensors"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kiln
