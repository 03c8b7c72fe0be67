// The conv family on CUDA tensors against the CPU kernels: conv2d forward and
// both gradients (through autograd, so conv2d_grad_input and
// conv2d_grad_weight run on the device too) over strides, padding, dilation,
// groups, 1x1 and whole-image kernels; max_pool2d (values and indices equal,
// ties, NaN, integer extremes) and avg_pool2d with their gradients. Runs on a
// GPU or on the emulated device.
#include <cmath>
#include <limits>

#include "codegen/cuda/cuda_test_util.h"
#include "kiln/cuda.h"

namespace kiln {
namespace {

using testing::expect_close;
using testing::expect_equal;

class CudaConv : public testing::CudaTest<11> {};

struct Case {
  Dims x, w;
  Conv2dFuncOptions o;
  const char* name;
};

TEST_F(CudaConv, ForwardAndGradientsMatchTheCpu) {
  const std::vector<Case> cases = {
      {{2, 3, 9, 8}, {4, 3, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, "3x3 same padding"},
      {{2, 3, 11, 10}, {5, 3, 3, 2}, {{2, 1}, {0, 2}, {1, 1}, 1}, "asymmetric stride/padding"},
      {{1, 2, 12, 12}, {3, 2, 3, 3}, {{2, 2}, {1, 1}, {2, 2}, 1}, "dilation 2, stride 2"},
      {{2, 4, 7, 7}, {6, 2, 3, 3}, {{1, 1}, {0, 0}, {1, 1}, 2}, "groups 2"},
      {{3, 5, 6, 4}, {7, 5, 1, 1}, {{1, 1}, {0, 0}, {1, 1}, 1}, "1x1"},
      {{2, 3, 5, 5}, {4, 3, 5, 5}, {{1, 1}, {0, 0}, {1, 1}, 1}, "kernel = image"},
  };
  for (DType dt : {DType::f32, DType::f64}) {
    const double tol = dt == DType::f32 ? 2e-5 : 1e-12;
    for (const Case& c : cases) {
      const std::string what = str(c.name, " ", dt);
      const Tensor x = randn(c.x).to(dt), w = randn(c.w).to(dt), b = randn({c.w[0]}).to(dt);
      Tensor xc = x.detach(), wc = w.detach(), xg = x.cuda(), wg = w.cuda();
      for (Tensor* t : {&xc, &wc, &xg, &wg}) t->requires_grad_();
      const Tensor yc = conv2d(xc, wc, b, c.o), yg = conv2d(xg, wg, b.cuda(), c.o);
      expect_close(yg, yc, tol, what + " forward");
      const Tensor r = randn(yc.shape()).to(dt);
      sum(yc * r).backward();
      sum(yg * r.cuda()).backward();
      expect_close(xg.grad(), xc.grad(), tol, what + " input gradient");
      expect_close(wg.grad(), wc.grad(), tol, what + " weight gradient");
    }
  }
}

// nn::Conv2d moved with Module::to gives the CPU module's output and
// gradients (groups and stride included).
TEST_F(CudaConv, Conv2dModuleOnTheDevice) {
  nn::Conv2d conv(4, 6, 3, {.stride = 2, .padding = 1, .groups = 2});
  const Tensor x = randn({3, 4, 9, 9});
  const Tensor yc = conv.forward(x);
  sum(yc * yc).backward();
  std::vector<Tensor> grads;
  for (const Tensor& p : conv.parameters()) grads.push_back(p.grad().detach());
  conv.zero_grad();
  conv.to(Device::cuda());
  const Tensor yg = conv.forward(x.cuda());
  expect_close(yg, yc, 2e-5, "forward");
  sum(yg * yg).backward();
  const auto params = conv.parameters();
  ASSERT_EQ(params.size(), grads.size());
  for (size_t i = 0; i < params.size(); ++i)
    expect_close(params[i].grad(), grads[i], 1e-4, str("gradient ", i));
}

std::vector<Pool2dOptions> pool_cases() {
  return {{{2, 2}, {}, {0, 0}, {1, 1}, true},
          {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true},
          {{3, 2}, {1, 2}, {1, 0}, {2, 1}, true},
          {{3, 3}, {2, 2}, {1, 1}, {1, 1}, false},
          {{4, 4}, {3, 3}, {2, 2}, {1, 1}, false}};
}

// Values and indices equal the CPU's exactly (the first maximum of a window,
// the first NaN, never the padding), in float and integer dtypes; gradients
// through the indices.
TEST_F(CudaConv, MaxPoolMatchesTheCpu) {
  Tensor x = randn({2, 3, 9, 10});
  x = where(gt(x, 1.5), std::nan(""), x);  // some NaN windows
  const Tensor ties = (randn({2, 3, 9, 10}) * 2.0).to(DType::i32).to(DType::f32);  // many ties
  const Tensor low = full({1, 2, 6, 6}, double(std::numeric_limits<int64_t>::lowest()), DType::i64);
  for (const Pool2dOptions& o : pool_cases()) {
    const std::string what = str("kernel ", o.kernel_size, " stride ", o.stride, " padding ",
                                 o.padding, " dilation ", o.dilation);
    for (const Tensor& t : {x, ties, ties.to(DType::i32), low, x[0]}) {
      auto [vc, ic] = max_pool2d_with_indices(t, o);
      auto [vg, ig] = max_pool2d_with_indices(t.cuda(), o);
      expect_equal(vg, vc, what + str(" values ", t.dtype()));
      expect_equal(ig, ic, what + str(" indices ", t.dtype()));
    }
    Tensor xc = x.detach(), xg = x.cuda();
    xc.requires_grad_();
    xg.requires_grad_();
    const Tensor r = randn(max_pool2d(x, o).shape());
    sum(nan_to_num(max_pool2d(xc, o)) * r).backward();
    sum(nan_to_num(max_pool2d(xg, o)) * r.cuda()).backward();
    expect_close(xg.grad(), xc.grad(), 1e-6, what + " gradient");
  }
}

TEST_F(CudaConv, AvgPoolMatchesTheCpu) {
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor x = randn({2, 3, 9, 10}).to(dt);
    for (Pool2dOptions o : pool_cases()) {
      o.dilation = {1, 1};  // avg_pool2d has none
      const std::string what = str("kernel ", o.kernel_size, " stride ", o.stride, " padding ",
                                   o.padding, " count_include_pad ", o.count_include_pad, " ", dt);
      Tensor xc = x.detach(), xg = x.cuda();
      xc.requires_grad_();
      xg.requires_grad_();
      const Tensor yc = avg_pool2d(xc, o), yg = avg_pool2d(xg, o);
      expect_close(yg, yc, 1e-5, what);
      const Tensor r = randn(yc.shape()).to(dt);
      sum(yc * r).backward();
      sum(yg * r.cuda()).backward();
      expect_close(xg.grad(), xc.grad(), 1e-5, what + " gradient");
    }
  }
}

}  // namespace
}  // namespace kiln
