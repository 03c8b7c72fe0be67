// Tensors on a CUDA device: copies both ways, eager elementwise ops, sum/max/
// min, views and in-place writes, each against the same computation on the
// CPU. Without a GPU (CI) only the clear refusal runs.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "codegen/cuda/cuda_test_util.h"
#include "kernels/cuda/device_ops.h"
#include "kiln/cuda.h"
#include "kiln/device_runtime.h"
#include "kiln/dispatch.h"

namespace kiln {
namespace {

using testing::expect_close;
using testing::expect_equal;

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

class CudaTensorGpu : public testing::CudaTest<3> {};

TEST_F(CudaTensorGpu, CopiesRoundTripEveryDtype) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::i32,
                  DType::u8, DType::b8}) {
    const Tensor x = (randn({5, 7}) * 50).to(t);
    expect_equal(x.cuda(), x, dtype_name(t));
    expect_equal(x.t().cuda(), x.t(), "transposed");   // non-contiguous source
    expect_equal(x.cuda().t(), x.t(), "device view");  // view on the device, strided download
    expect_equal(x.cuda().to(DType::f32), x.to(DType::f32), "cast on the device");
  }
}

// A device copy whose inner run is contiguous on both sides, a multiple of
// 16 bytes, at 16-byte aligned addresses moves 16 bytes at a time (the
// attention's heads made contiguous): the same bits for every dtype, NaN
// payloads included; an odd run, a misaligned view and a cast take the
// element copy.
TEST_F(CudaTensorGpu, StridedCopiesMoveSixteenBytesWhereTheyCan) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::i32,
                  DType::u8, DType::b8}) {
    const Tensor x = (randn({3, 5, 4, 32}) * 50).to(t), g = x.cuda();
    auto quads_in = [](const std::function<void()>& f) {
      const int64_t before = cuda::quad_copies();
      f();
      return cuda::quad_copies() - before;
    };
    const std::string what = dtype_name(t);
    EXPECT_EQ(quads_in([&] {
                expect_equal(g.permute({0, 2, 1, 3}).contiguous(), x.permute({0, 2, 1, 3}),
                             what + " heads");
              }),
              1);
    EXPECT_EQ(quads_in([&] {
                expect_equal(g.narrow(3, 0, 16).permute({2, 0, 1, 3}).contiguous(),
                             x.narrow(3, 0, 16).permute({2, 0, 1, 3}), what + " a narrowed run");
              }),
              1);
    EXPECT_EQ(quads_in([&] {
                expect_equal(g.narrow(3, 1, 16).contiguous(), x.narrow(3, 1, 16),
                             what + " misaligned");
              }),
              0);
    EXPECT_EQ(quads_in([&] {
                expect_equal(g.narrow(3, 0, 7).permute({1, 0, 2, 3}).contiguous(),
                             x.narrow(3, 0, 7).permute({1, 0, 2, 3}), what + " odd run");
              }),
              0);
    expect_equal(g.permute({0, 2, 1, 3}).to(DType::f64), x.permute({0, 2, 1, 3}).to(DType::f64),
                 what + " cast");
  }
  // NaN payloads and signed zeros keep their bits.
  const std::vector<uint32_t> bits = {0x7fc00001u, 0xffbadbadu, 0x80000000u, 0x00000001u,
                                      0x7f800000u, 0x3f800000u, 0xff800001u, 0x00000000u};
  std::vector<uint32_t> many;
  for (int i = 0; i < 64; ++i) many.insert(many.end(), bits.begin(), bits.end());
  const Tensor raw = from_blob(many.data(), {4, 2, 64}, DType::f32).clone();
  const Tensor back = raw.cuda().permute({1, 0, 2}).contiguous().cpu().contiguous();
  const Tensor want = raw.permute({1, 0, 2}).contiguous();
  EXPECT_EQ(std::memcmp(back.data_ptr(), want.data_ptr(), many.size() * 4), 0);
}

// `full` on the device: 16-byte quads of the value's bits where the output
// is a whole number of them (every dtype: a float's -0.0 and NaN, f16's
// pattern eight times), else the element broadcast by a copy.
TEST_F(CudaTensorGpu, FullsWriteTheirPatternInQuads) {
  const double nan = std::nan("");
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::i32,
                  DType::u8, DType::b8})
    for (double v : {0.0, -0.0, 1.5, -3.0, nan}) {
      if (!is_floating(t) && (v != std::floor(v) || v < 0 || std::isnan(v))) continue;
      const Scalar s = is_floating(t) ? Scalar(v) : Scalar(static_cast<int64_t>(v));
      const std::string what = str(dtype_name(t), " ", v);
      const int64_t before = cuda::quad_fills();
      const Tensor whole = full({3, 5, 16}, s, t, Device::cuda());
      EXPECT_EQ(cuda::quad_fills(), before + 1) << what;
      const Tensor odd = full({3, 5}, s, t, Device::cuda());  // 15 elements
      const Tensor want = full({3, 5, 16}, s, t).cpu();
      const Tensor got = whole.cpu();
      EXPECT_EQ(std::memcmp(got.data_ptr(), want.data_ptr(), got.numel() * got.element_size()), 0)
          << what;
      expect_equal(odd, full({3, 5}, s, t), what + " odd");
    }
}

TEST_F(CudaTensorGpu, ElementwiseOpsMatchTheCpu) {
  const Tensor a = randn({4, 1, 5}), b = randn({3, 5}), p = rand({4, 3, 5}) + 0.1;
  const Tensor ga = a.cuda(), gb = b.cuda(), gp = p.cuda();
  expect_equal(ga + gb, a + b, "add");
  expect_equal(ga - gb * 2.5, a - b * 2.5, "sub/mul scalar");
  expect_equal(ga / gb, a / b, "div");
  expect_equal(maximum(ga, gb), maximum(a, b), "maximum");
  expect_equal(gt(ga, gb), gt(a, b), "gt");
  expect_equal(where(gt(ga, 0), ga, gb), where(gt(a, 0), a, b), "where");
  expect_equal(relu(ga), relu(a), "relu");
  expect_equal(neg(abs(ga)), neg(abs(a)), "neg abs");
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
    expect_close(f(gp), f(p), 1e-6, name);
  expect_close(pow(gp, ga), pow(p, a), 1e-6, "pow");
  const Tensor i = randint(-20, 20, {6}, DType::i64), j = randint(1, 7, {6}, DType::i64);
  expect_equal(i.cuda() + j.cuda(), i + j, "i64 add");
  expect_equal(i.cuda() / j.cuda(), i / j, "i64 true division");
  expect_equal(a.to(DType::f16).cuda() * 3, a.to(DType::f16) * 3, "f16");
  expect_equal(a.to(DType::bf16).cuda() + gb.to(DType::bf16).cpu().cuda(),
               a.to(DType::bf16) + b.to(DType::bf16), "bf16");
}

TEST_F(CudaTensorGpu, ReductionsAndCompositesMatchTheCpu) {
  const Tensor x = randn({6, 7, 9});
  const Tensor g = x.cuda();
  expect_close(sum(g, {1}), sum(x, {1}), 1e-5, "sum dim 1");
  expect_close(sum(g, {0, 2}, true), sum(x, {0, 2}, true), 1e-5, "sum keepdim");
  expect_close(sum(g), sum(x), 1e-5, "sum all");
  expect_equal(amax(g, {2}), amax(x, {2}), "amax");
  expect_equal(amin(g, {0}), amin(x, {0}), "amin");
  expect_close(mean(g, {1}), mean(x, {1}), 1e-5, "mean");
  expect_close(softmax(g, -1), softmax(x, -1), 1e-5, "softmax");
  expect_close(log_softmax(g, 1), log_softmax(x, 1), 1e-5, "log_softmax");
  const Tensor w = randn({9}), bias = randn({9});
  expect_close(layer_norm(g, {9}, w.cuda(), bias.cuda()), layer_norm(x, {9}, w, bias), 1e-4,
               "layer_norm");
  const Tensor i = randint(-5, 5, {4, 8}, DType::i32);
  expect_equal(sum(i.cuda(), {1}), sum(i, {1}), "i32 sum is i64");
  EXPECT_FLOAT_EQ(sum(g).item<float>(), sum(x).item<float>());
}

TEST_F(CudaTensorGpu, ViewsAndInPlaceWrites) {
  const Tensor x = randn({4, 6});
  Tensor g = x.cuda();
  expect_equal(g.t().reshape({24}), x.t().reshape({24}), "reshape of a transpose (copies)");
  expect_equal(g.narrow(1, 2, 3) * 2, x.narrow(1, 2, 3) * 2, "narrow");
  Tensor h = g.clone();
  h.add_(1);
  expect_equal(h, x + 1, "add_");
  Tensor part = h.narrow(0, 1, 2);
  part.copy_(zeros({2, 6}));  // host -> a device view
  Tensor want = x + 1;
  want.narrow(0, 1, 2).copy_(zeros({2, 6}));
  expect_equal(h, want, "copy_ into a view");
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
  expect_close(gw.grad(), w.grad(), 1e-5, "w.grad");
  expect_close(gb.grad(), b.grad(), 1e-5, "b.grad");
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

TEST_F(CudaTensorGpu, MixedDevicesAreClearErrors) {
  const Tensor g = ones({3}).cuda();
  try {
    (void)(g + ones({3}));
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln
