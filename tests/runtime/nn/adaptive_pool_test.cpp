// AdaptiveAvgPool2d / F::adaptive_avg_pool2d against a naive loop over
// PyTorch's cell bounds, with gradchecks, printing and errors.
#include <gtest/gtest.h>

#include "nn_test_util.h"

using namespace kiln;
using namespace kiln::nn_test;
namespace F = kiln::nn::functional;

namespace {

// Cell (i, j) averages rows [floor(i*H/oh), ceil((i+1)*H/oh)) and the same for columns.
Tensor naive_adaptive(const Tensor& x, int64_t oh, int64_t ow) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const V xv = vals(x);
  V out;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          const int64_t r0 = i * H / oh, r1 = ((i + 1) * H + oh - 1) / oh;
          const int64_t c0 = j * W / ow, c1 = ((j + 1) * W + ow - 1) / ow;
          double s = 0;
          for (int64_t r = r0; r < r1; ++r)
            for (int64_t q = c0; q < c1; ++q)
              s += xv[static_cast<size_t>(((n * C + c) * H + r) * W + q)];
          out.push_back(s / static_cast<double>((r1 - r0) * (c1 - c0)));
        }
  return from_vector(out, {N, C, oh, ow});
}

}  // namespace

// Divisible, non-divisible, global (1) and upsampling-free identity sizes.
TEST(AdaptiveAvgPool2d, MatchesTheNaiveCells) {
  manual_seed(4);
  Tensor x = randn({2, 3, 7, 5}, DType::f64);
  for (auto [oh, ow] :
       std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {7, 5}, {3, 2}, {4, 3}, {2, 5}, {7, 1}})
    expect_close(F::adaptive_avg_pool2d(x, {oh, ow}), naive_adaptive(x, oh, ow), 1e-12);
  nn::AdaptiveAvgPool2d gap(1);
  EXPECT_EQ(gap(x).shape(), (Dims{2, 3, 1, 1}));
  expect_close(gap(x), x.mean({2, 3}, true), 1e-12);
  // Unbatched [C, H, W].
  EXPECT_EQ(F::adaptive_avg_pool2d(x[0], {3, 2}).shape(), (Dims{3, 3, 2}));
  expect_close(F::adaptive_avg_pool2d(x[0], {3, 2}), naive_adaptive(x, 3, 2)[0], 1e-12);
}

TEST(AdaptiveAvgPool2d, Gradcheck) {
  manual_seed(5);
  Tensor x = randn({1, 2, 5, 4}, DType::f64).requires_grad_();
  auto f = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{F::adaptive_avg_pool2d(in[0], {3, 3}),
                               F::adaptive_avg_pool2d(in[0], 1),
                               F::adaptive_avg_pool2d(in[0], {5, 2})};
  };
  EXPECT_EQ(gradcheck(f, {x}), "");
}

TEST(AdaptiveAvgPool2d, PrintsAndChecks) {
  EXPECT_EQ(nn::AdaptiveAvgPool2d(1).repr(), "AdaptiveAvgPool2d(output_size=1)");
  EXPECT_EQ(nn::AdaptiveAvgPool2d({5, 7}).repr(), "AdaptiveAvgPool2d(output_size=(5, 7))");
  auto c = nn::clone_as(nn::AdaptiveAvgPool2d({2, 3}));
  EXPECT_EQ(c->repr(), "AdaptiveAvgPool2d(output_size=(2, 3))");
  expect_error(
      [] {
        F::adaptive_avg_pool2d(zeros({2, 3}), 1);
      },
      {"[adaptive_avg_pool2d]", "[2, 3]"});
  expect_error(
      [] {
        F::adaptive_avg_pool2d(zeros({1, 2, 3}), {0, 1});
      },
      {"[adaptive_avg_pool2d]", "positive"});
  expect_error(
      [] {
        F::adaptive_avg_pool2d(zeros({1, 2, 3}, DType::i64), 1);
      },
      {"[adaptive_avg_pool2d]", "floating"});
}

// The functional names a PyTorch user reaches through F:: are all there.
TEST(AdaptiveAvgPool2d, FunctionalNamespaceHasTheCommonHelpers) {
  Tensor x = randn({2, 4}, DType::f64);
  expect_close(F::normalize(x, 2.0, 1), kiln::normalize(x, 2.0, 1));
  expect_close(F::cosine_similarity(x, x * 2.0), kiln::cosine_similarity(x, x * 2.0));
  EXPECT_EQ(F::one_hot(from_vector<int64_t>({1, 0}), 3).shape(), (Dims{2, 3}));
}
