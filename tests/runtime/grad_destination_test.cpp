// Gradient destinations (kiln/grad_destination.h): backward computes a leaf's
// first gradient into a given buffer (a matmul/conv weight gradient written
// there by its kernel, anything else copied there once), later backwards
// accumulate into it in place, and every result is bit-identical to plain
// autograd's. Also the errors for destinations and hooks that do not fit.
#include "kiln/grad_destination.h"

#include <gtest/gtest.h>

#include <cstring>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "runtime/test_util.h"

namespace kiln {
namespace {

using autograd::clear_grad_destination;
using autograd::grad_destination_stats;
using autograd::set_grad_destination;
using testing::expect_error;

void expect_bits_equal(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_TRUE(a.defined() && b.defined()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  auto x = a.to_vector<float>(), y = b.to_vector<float>();
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(std::memcmp(&x[i], &y[i], sizeof(float)), 0) << what << " element " << i;
}

// A flat buffer holding the gradients of `ps` back to back, like a DDP bucket;
// each parameter's slice becomes its destination.
struct Bucket {
  Tensor flat;
  std::vector<Tensor> views;
  explicit Bucket(const std::vector<Tensor>& ps) {
    int64_t n = 0;
    for (const Tensor& p : ps) n += p.numel();
    flat = full({n + 3}, 7.0f);  // stale contents, and room past the last slice
    int64_t off = 1;
    for (const Tensor& p : ps) {
      views.push_back(flat.narrow(0, off, p.numel()).view(p.shape()));
      set_grad_destination(p, views.back());
      off += p.numel();
    }
  }
};

bool same_memory(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.data_ptr() == b.data_ptr() &&
         a.impl()->storage == b.impl()->storage;
}

Tensor linear_loss(nn::Linear& l, const Tensor& x) {
  return sum(relu(l.forward(x)) * 0.5);
}

// A Linear's weight gradient is written into its destination by the GEMM; the
// bias gradient (a reduction) is copied there. Same bits as without.
TEST(GradDestination, LinearWeightIsComputedInTheDestination) {
  manual_seed(1);
  nn::Linear lin(6, 4), ref(6, 4);
  ref.weight.detach().copy_(lin.weight);
  ref.bias.detach().copy_(lin.bias);
  Tensor x = randn({5, 6});
  Bucket bucket({lin.weight, lin.bias});
  const auto before = grad_destination_stats();
  linear_loss(lin, x).backward();
  linear_loss(ref, x).backward();
  const auto after = grad_destination_stats();
  EXPECT_EQ(after.computed_in_place - before.computed_in_place, 1);  // the weight
  EXPECT_EQ(after.copied - before.copied, 1);                        // the bias
  EXPECT_TRUE(same_memory(lin.weight.grad(), bucket.views[0]));
  EXPECT_TRUE(same_memory(lin.bias.grad(), bucket.views[1]));
  expect_bits_equal(lin.weight.grad(), ref.weight.grad(), "weight");
  expect_bits_equal(lin.bias.grad(), ref.bias.grad(), "bias");
  EXPECT_EQ(bucket.flat.to_vector<float>()[0], 7.0f);  // nothing outside the slices
  EXPECT_EQ(bucket.flat.to_vector<float>().back(), 7.0f);
  clear_grad_destination(lin.weight);
  clear_grad_destination(lin.bias);
  EXPECT_FALSE(autograd::grad_destination(lin.weight).defined());
}

// Backward again without zero_grad: the gradient accumulates into the view
// (it stays the .grad); zero_grad(set_to_none) then backward returns to it.
TEST(GradDestination, AccumulationKeepsTheViewAndSetToNoneReturnsToIt) {
  manual_seed(2);
  nn::Linear lin(8, 3), ref(8, 3);
  ref.weight.detach().copy_(lin.weight);
  ref.bias.detach().copy_(lin.bias);
  Tensor x = randn({4, 8});
  Bucket bucket({lin.weight, lin.bias});
  for (int i = 0; i < 3; ++i) {
    linear_loss(lin, x).backward();
    linear_loss(ref, x).backward();
    EXPECT_TRUE(same_memory(lin.weight.grad(), bucket.views[0])) << i;
    expect_bits_equal(lin.weight.grad(), ref.weight.grad(), str("weight, backward ", i));
    expect_bits_equal(lin.bias.grad(), ref.bias.grad(), str("bias, backward ", i));
  }
  lin.zero_grad(/*set_to_none=*/true);
  ref.zero_grad(true);
  EXPECT_FALSE(lin.weight.grad().defined());
  linear_loss(lin, x).backward();
  linear_loss(ref, x).backward();
  EXPECT_TRUE(same_memory(lin.weight.grad(), bucket.views[0]));
  expect_bits_equal(lin.weight.grad(), ref.weight.grad(), "weight after set_to_none");
  lin.zero_grad(/*set_to_none=*/false);
  EXPECT_TRUE(same_memory(lin.weight.grad(), bucket.views[0]));
  linear_loss(lin, x).backward();
  expect_bits_equal(lin.weight.grad(), ref.weight.grad(), "weight after zero_grad(false)");
}

// x is [out, in] like the weight: the input gradient's GEMM (computed first)
// has the weight gradient's size but may not take its destination (matmul's
// rule says which input each GEMM is for); the weight's GEMM writes there.
// With two uses of the layer nothing is offered. Both gradients stay exact.
TEST(GradDestination, TheInputGradientNeverTakesTheWeightsDestination) {
  manual_seed(3);
  nn::Linear lin(5, 4, /*bias=*/false);
  Tensor w_ref = lin.weight.detach().clone().requires_grad_(true);
  Tensor x = randn({4, 5}).requires_grad_(true);
  Tensor x_ref = x.detach().clone().requires_grad_(true);
  Bucket bucket({lin.weight});
  sum(lin.forward(x) * lin.forward(x)).backward();
  sum(linear(x_ref, w_ref) * linear(x_ref, w_ref)).backward();
  expect_bits_equal(lin.weight.grad(), w_ref.grad(), "weight");
  expect_bits_equal(x.grad(), x_ref.grad(), "input");
  EXPECT_TRUE(same_memory(lin.weight.grad(), bucket.views[0]));
  EXPECT_NE(x.grad().impl()->storage, bucket.flat.impl()->storage);
  // One layer use, x as [out, in] again: the same with a single path.
  lin.zero_grad();
  x.set_grad(Tensor());
  x_ref.set_grad(Tensor());
  w_ref.set_grad(Tensor());
  const auto before = grad_destination_stats();
  sum(lin.forward(x)).backward();
  EXPECT_EQ(grad_destination_stats().copied, before.copied);
  EXPECT_EQ(grad_destination_stats().computed_in_place - before.computed_in_place, 1);
  EXPECT_TRUE(same_memory(lin.weight.grad(), bucket.views[0]));
  sum(linear(x_ref, w_ref)).backward();
  expect_bits_equal(lin.weight.grad(), w_ref.grad(), "weight, one use");
  expect_bits_equal(x.grad(), x_ref.grad(), "input, one use");
  EXPECT_NE(x.grad().impl()->storage, bucket.flat.impl()->storage);
}

// A convolution's weight gradient is written by its kernel; checkpointed
// layers (a recomputed forward inside backward) and create_graph stay exact.
TEST(GradDestination, ConvCheckpointAndCreateGraph) {
  manual_seed(4);
  nn::Conv2d conv(3, 4, 3), conv_ref(3, 4, 3);
  conv_ref.weight.detach().copy_(conv.weight);
  conv_ref.bias.detach().copy_(conv.bias);
  Tensor x = randn({2, 3, 6, 6});
  Bucket bucket({conv.weight, conv.bias});
  sum(conv.forward(x)).backward();
  sum(conv_ref.forward(x)).backward();
  EXPECT_TRUE(same_memory(conv.weight.grad(), bucket.views[0]));
  expect_bits_equal(conv.weight.grad(), conv_ref.weight.grad(), "conv weight");
  expect_bits_equal(conv.bias.grad(), conv_ref.bias.grad(), "conv bias");

  nn::Linear lin(6, 6), ref(6, 6);
  ref.weight.detach().copy_(lin.weight);
  ref.bias.detach().copy_(lin.bias);
  Bucket lb({lin.weight, lin.bias});
  Tensor h = randn({6, 6});
  auto twice = [](nn::Linear& l) {
    return [&l](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{l.forward(relu(l.forward(in[0])))};
    };
  };
  sum(checkpoint(twice(lin), {h})[0]).backward();
  sum(checkpoint(twice(ref), {h})[0]).backward();
  EXPECT_TRUE(same_memory(lin.weight.grad(), lb.views[0]));
  expect_bits_equal(lin.weight.grad(), ref.weight.grad(), "checkpointed weight");
  expect_bits_equal(lin.bias.grad(), ref.bias.grad(), "checkpointed bias");

  // create_graph: the gradient has a history, so it is not the buffer.
  lin.zero_grad();
  linear_loss(lin, h).backward({}, /*retain_graph=*/false, /*create_graph=*/true);
  EXPECT_TRUE(lin.weight.grad().defined());
  EXPECT_NE(lin.weight.grad().impl()->storage, lb.flat.impl()->storage);
}

TEST(GradDestination, DestinationsThatDoNotFitAreErrors) {
  nn::Linear lin(4, 3);
  expect_error(
      [&] {
        set_grad_destination(lin.weight, zeros({4, 3}));
      },
      {"[set_grad_destination]", "[4, 3]", "[3, 4]"});
  expect_error(
      [&] {
        set_grad_destination(lin.weight, zeros({3, 4}, DType::f64));
      },
      {"[set_grad_destination]", "f64"});
  expect_error(
      [&] {
        set_grad_destination(lin.weight, zeros({4, 3}).transpose(0, 1));
      },
      {"[set_grad_destination]", "contiguous"});
  expect_error(
      [&] {
        set_grad_destination(lin.weight * 2.0, zeros({3, 4}));
      },
      {"[set_grad_destination]", "leaf"});
  expect_error(
      [&] {
        set_grad_destination(zeros({3, 4}), zeros({3, 4}));
      },
      {"[set_grad_destination]", "leaf"});
  expect_error([&] { set_grad_destination(lin.weight, lin.weight.detach()); },
               {"[set_grad_destination]", "memory"});
}

// A tensor hook must not change the gradient's shape or dtype (it used to be
// accepted and became a wrongly shaped .grad).
TEST(GradDestination, HookChangingShapeOrDtypeIsAnError) {
  Tensor w = randn({3, 2}).requires_grad_(true);
  w.register_hook([](const Tensor& g) { return sum(g, {0}); });
  expect_error([&] { sum(w * 2.0).backward(); }, {"[backward] tensor hook 0", "[3, 2]", "[2]"});
  Tensor v = randn({3}).requires_grad_(true);
  v.register_hook([](const Tensor& g) { return cast(g, DType::f64); });
  expect_error([&] { sum(v * 2.0).backward(); }, {"[backward] tensor hook 0", "f64"});
  // A hook that keeps shape and dtype still replaces the value.
  Tensor u = randn({2}).requires_grad_(true);
  u.register_hook([](const Tensor& g) { return g * 3.0; });
  sum(u).backward();
  EXPECT_EQ(u.grad().to_vector<float>(), (std::vector<float>{3.0f, 3.0f}));
}

}  // namespace
}  // namespace kiln
